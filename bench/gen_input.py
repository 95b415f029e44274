"""Realistic synthetic input for `replay`, benchmarks and the load generator (seeded).

    python bench/gen_input.py -n 1000000 --sessions 2000 --seed 1 -o /tmp/in.jsonl

One JSON line per record: delivery confirmations from every origin kind over ~N sessions
(Telegram topics, Slack channels/threads/DMs, Discord, Signal groups, Matrix rooms,
WhatsApp, X), keyed with the core's own key builder. Mixed in, at roughly these rates:
retries and redeliveries of earlier sends (~5%, byte-identical or with a new receipt and
time; a few with changed content: conflicts), same-turn replies, both Rule 1 exceptions,
in-chat jobs delivering elsewhere, non-canonical sender keys, media with tokened URLs,
resets (~0.2%) and invalid records (~0.5%: not JSON, naive time, bad agent id, unknown
schema, missing field, and a few oversize ones). Time moves forward over ~30 days, so the
7-day dedupe window prunes. `generate()` yields the lines for other tools to reuse.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from schemas import Route
from workers.core import DM_SCOPES, session_key_for_route

START = datetime(2025, 3, 1, tzinfo=UTC)
SPAN = timedelta(days=30)
WORDS = (
    "the build is green again deploy finished ticket closed on call handoff notes for today "
    "reminder stand-up in ten minutes weekly digest three new issues merged pull request "
    "backup completed storage at 71% invoice sent to the client calendar moved to Thursday "
    "café résumé naïve 東京 größe 👍 ✅"
).split()


@dataclass(frozen=True, slots=True)
class Chat:
    """One destination session: the agent, its route, and the key inbound would use."""

    agent: str
    route: dict[str, Any]
    key: str


def _chats(rng: random.Random, sessions: int) -> list[Chat]:
    agents = [f"agent-{i:02d}" for i in range(max(2, sessions // 100))]
    scope = {a: rng.choice(DM_SCOPES) for a in agents}
    chats: list[Chat] = []
    for i in range(sessions):
        agent = rng.choice(agents)
        route = _route(rng, i)
        key = session_key_for_route(agent, Route.model_validate(route), scope[agent])
        chats.append(Chat(agent, route, key))
    return chats


def _route(rng: random.Random, i: int) -> dict[str, Any]:
    pick = rng.random()
    if pick < 0.25:
        route = {
            "channel": "telegram",
            "peer_kind": "group",
            "peer_id": f"-100{rng.randrange(10**9)}",
        }
        if rng.random() < 0.5:
            route["thread_id"] = str(rng.randrange(1, 500))
    elif pick < 0.45:
        route = {
            "channel": "slack",
            "account_id": "T0WORK",
            "peer_kind": "channel",
            "peer_id": f"C{rng.randrange(16**8):08X}",
        }
        if rng.random() < 0.4:
            route["thread_id"] = f"{1740000000 + i}.{rng.randrange(10**6):06d}"
    elif pick < 0.60:
        route = {
            "channel": rng.choice(["slack", "telegram", "discord", "whatsapp"]),
            "account_id": rng.choice([None, "default", "Personal"]),
            "peer_kind": "direct",
            "peer_id": f"U{rng.randrange(16**8):08X}",
        }
    elif pick < 0.70:
        route = {
            "channel": "discord",
            "peer_kind": "channel",
            "peer_id": str(rng.randrange(10**18)),
        }
    elif pick < 0.78:
        gid = "".join(rng.choice("ABCDEFGHabcdefgh0123456789+/") for _ in range(43)) + "="
        route = {"channel": "signal", "peer_kind": "group", "peer_id": gid}
    elif pick < 0.86:
        room = "!" + "".join(rng.choice("ABCDEFGHabcdefgh") for _ in range(18)) + ":matrix.org"
        route = {"channel": "matrix", "peer_kind": "group", "peer_id": room}
    elif pick < 0.94:
        route = {
            "channel": "whatsapp",
            "peer_kind": "group",
            "peer_id": f"{rng.randrange(10**12)}@g.us",
        }
    else:
        route = {"channel": "x", "peer_kind": "direct", "peer_id": f"{rng.randrange(10**18)}"}
    return {k: v for k, v in route.items() if v is not None}


def _text(rng: random.Random) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 60)))


def _sender_key(rng: random.Random, chat: Chat) -> str:
    """Mostly the canonical key; ~3% a spelling the canonicaliser repairs."""
    r = rng.random()
    if r < 0.01:
        return (
            chat.key.upper() if "signal" not in chat.key and "matrix" not in chat.key else chat.key
        )
    if r < 0.02:
        return chat.key.split(":", 2)[2]  # bare: no agent prefix
    if r < 0.03:
        return "  " + chat.key.replace(":direct:", ":dm:") + " "
    return chat.key


def _confirmation(
    rng: random.Random, n: int, at: datetime, chat: Chat, chats: list[Chat]
) -> dict[str, Any]:
    """A confirmation to `chat`; `chats` are the sending agent's other chats."""
    kind_pick = rng.random()
    origin: dict[str, Any]
    if kind_pick < 0.40:
        same = rng.random() < 0.5
        turn_key = chat.key if same else rng.choice(chats).key
        origin = {"kind": "turn_reply", "turn": {"session_key": turn_key, "turn_id": f"turn-{n}"}}
    elif kind_pick < 0.55:
        origin = {
            "kind": "message_tool",
            "turn": {"session_key": rng.choice(chats).key, "turn_id": f"turn-{n}"},
        }
    elif kind_pick < 0.80:
        in_chat = rng.random() < 0.2
        job = {
            "id": f"job-{rng.randrange(500)}",
            "name": "daily digest",
            "run_id": f"run-{n}",
            "mode": "in_chat" if in_chat else "background",
        }
        if in_chat:  # usually its own chat; ~5% deliver elsewhere (Rule 2 violation)
            job["session_key"] = chat.key if rng.random() < 0.95 else rng.choice(chats).key
        origin = {"kind": "automation_result", "job": job}
    elif kind_pick < 0.88:
        origin = {
            "kind": "failure_alert",
            "job": {"id": f"job-{rng.randrange(500)}", "mode": "background", "run_id": f"run-{n}"},
        }
    else:
        origin = {
            "kind": "subagent_announcement",
            "subagent": {"run_id": f"sub-{n}", "agent_id": chat.agent, "label": "researcher"},
        }
    payload: dict[str, Any] = {"text": _text(rng)}
    p = rng.random()
    if p < 0.01:  # native-only (a Discord embed)
        payload = {"native": [{"kind": "embed", "title": "Build #42", "color": 3066993}]}
    elif p < 0.11:
        payload["media"] = [
            {
                "kind": "image",
                "name": f"chart-{n}.png",
                "mime": "image/png",
                "url": f"https://cdn.example.com/{n}.png?token=s3cr3t{n}",
            }
        ]
        if rng.random() < 0.3:
            del payload["text"]  # media-only
    record: dict[str, Any] = {
        "schema": "delivery-confirmation/1",
        "send_id": f"outbound-delivery:{n:08d}:0",
        "confirmed_at": at.isoformat().replace("+00:00", "Z"),
        "agent_id": chat.agent,
        "session_key": _sender_key(rng, chat),
        "route": chat.route,
        "origin": origin,
        "payload": payload,
        "receipt": {
            "platform_message_ids": [str(rng.randrange(10**12))],
            "sent_at": at.isoformat().replace("+00:00", "Z"),
        },
    }
    if rng.random() < 0.01:  # destination bound to another agent
        record["destination_agent_id"] = "agent-other"
    return record


def _invalid(rng: random.Random, good: dict[str, Any]) -> bytes:
    r = rng.random()
    if r < 0.002:
        return b'{"schema":"delivery-confirmation/1","pad":"' + b"x" * (1 << 20) + b'"}'
    if r < 0.2:
        return b'{"schema": "delivery-confirmation/1", "send_id": '  # truncated JSON
    bad = json.loads(json.dumps(good))
    if r < 0.4:
        bad["confirmed_at"] = bad["confirmed_at"].rstrip("Z")  # naive
    elif r < 0.6:
        bad["agent_id"] = "Not An Id"
    elif r < 0.8:
        bad["schema"] = "delivery-confirmation/2"
    else:
        del bad["receipt"]
    return json.dumps(bad, ensure_ascii=False).encode()


def generate(n: int, *, seed: int = 1, sessions: int = 2000) -> Iterator[bytes]:
    """`n` input lines (JSON bytes, no newline), deterministic for a given seed."""
    rng = random.Random(seed)
    chats = _chats(rng, sessions)
    hot = chats[: max(1, sessions // 20)]  # a few busy chats get a third of the traffic
    by_agent: dict[str, list[Chat]] = {}
    for chat in chats:
        by_agent.setdefault(chat.agent, []).append(chat)
    recent: deque[dict[str, Any]] = deque(maxlen=5000)
    step = SPAN / max(n, 1)
    for i in range(n):
        at = START + step * i
        r = rng.random()
        if r < 0.05 and recent:  # retry or redelivery of an earlier send
            old = rng.choice(recent)
            again = json.loads(json.dumps(old))
            q = rng.random()
            if q < 0.5:
                pass  # byte-identical redelivery
            elif q < 0.97:  # connector retry: new receipt and time, same content
                again["confirmed_at"] = at.isoformat().replace("+00:00", "Z")
                again["receipt"] = {"platform_message_ids": [str(rng.randrange(10**12))]}
            else:  # the same send_id with other content: a conflict
                again["payload"] = {"text": _text(rng)}
            yield json.dumps(again, ensure_ascii=False).encode()
            continue
        chat = rng.choice(hot) if rng.random() < 0.33 else rng.choice(chats)
        if r < 0.052:
            reset_at = (
                (at - timedelta(seconds=rng.randrange(60))).isoformat().replace("+00:00", "Z")
            )
            yield json.dumps(
                {
                    "schema": "session-reset/1",
                    "session_key": chat.key,
                    "reset_at": reset_at,
                    "reason": "/new",
                }
            ).encode()
            continue
        record = _confirmation(rng, i, at, chat, by_agent[chat.agent])
        if r < 0.057:
            yield _invalid(rng, record)
            continue
        recent.append(record)
        yield json.dumps(record, ensure_ascii=False).encode()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=1_000_000, help="records (default 1,000,000)")
    parser.add_argument("--sessions", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("-o", "--output", default="-", help="file, or - for stdout")
    args = parser.parse_args(argv)
    out = sys.stdout.buffer if args.output == "-" else open(args.output, "wb")
    with out:
        batch: list[bytes] = []
        for line in generate(args.n, seed=args.seed, sessions=args.sessions):
            batch.append(line)
            if len(batch) >= 4096:
                out.write(b"\n".join(batch) + b"\n")
                batch.clear()
        if batch:
            out.write(b"\n".join(batch) + b"\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
