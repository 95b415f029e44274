"""Realistic synthetic delivery confirmations: the input of loadgen, benchmarks and fault tests.

Deterministic for a seed. The mix follows what gateways send: mostly turn replies and job
results, with connector retries, both Rule 1 exceptions, same-turn replies, resets, legacy keys
and a few invalid records.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

AGENTS = ("ops", "sales", "support", "home")
CHANNELS = ("telegram", "slack", "discord", "whatsapp", "signal", "matrix")
WORDS = ("report", "deploy", "ticket", "invoice", "meeting", "backup", "alert", "summary",
         "reminder", "weather", "build", "release", "status", "queue", "latency")


@dataclass(frozen=True, slots=True)
class Session:
    agent: str
    key: str  # canonical
    route: dict


def sessions(rng: random.Random, n: int) -> list[Session]:
    out = []
    for i in range(n):
        agent = AGENTS[i % len(AGENTS)]
        channel = CHANNELS[rng.randrange(len(CHANNELS))]
        if rng.random() < 0.6:
            peer = f"u{i}"
            key = f"agent:{agent}:{channel}:direct:{peer}"
            route = {"channel": channel, "peer_kind": "direct", "peer_id": peer}
        else:
            kind = "group" if channel != "slack" else "channel"
            peer = f"g{i}"
            key = f"agent:{agent}:{channel}:{kind}:{peer}"
            route = {"channel": channel, "peer_kind": kind, "peer_id": peer}
            if channel == "telegram" and rng.random() < 0.3:
                key += f":topic:{i % 7}"
                route["thread_id"] = str(i % 7)
        out.append(Session(agent, key, route))
    return out


def generate(count: int, *, sessions_n: int = 2000, seed: int = 1,
             start: datetime | None = None,
             legacy_rate: float = 0.01) -> Iterator[tuple[bytes | None, bytes]]:
    """`count` (Kafka key, value) pairs; keys are canonical except for the legacy-key cases."""
    rng = random.Random(seed)
    pool = sessions(rng, sessions_n)
    at = start or datetime(2026, 1, 1, tzinfo=UTC)
    recent: list[tuple[bytes | None, bytes]] = []  # for retries
    resets: dict[str, int] = {}
    for i in range(count):
        t = at + timedelta(milliseconds=10 * i)
        s = pool[rng.randrange(len(pool))]
        roll = rng.random()
        if roll < 0.05 and recent:  # connector retry: the same record again
            pair = recent[rng.randrange(len(recent))]
        elif roll < 0.055:
            pair = (s.key.encode(), _invalid(rng, i, t))
        elif roll < 0.06:
            resets[s.key] = resets.get(s.key, 0) + 1
            pair = (s.key.encode(), json.dumps({
                "schema": "session-reset/1", "session_key": s.key, "reset_at": t.isoformat(),
                "reason": "/new"}).encode())
        else:
            record = _confirmation(rng, i, t, s, pool)
            key = s.key.encode()
            if rng.random() < legacy_rate:  # a legacy sender: mixed case, `dm`, stray spaces
                legacy = " " + s.key.replace(":direct:", ":dm:").upper() + " "
                record["session_key"] = legacy
                key = legacy.encode()
            pair = (key, json.dumps(record).encode())
            if rng.random() < 0.002 and recent:  # same send_id, different content
                old = json.loads(recent[-1][1])
                if old.get("schema") == "delivery-confirmation/1":
                    record = dict(record, send_id=old["send_id"], session_key=old["session_key"])
                    pair = (recent[-1][0], json.dumps(record).encode())
            recent.append(pair)
            if len(recent) > 200:
                recent.pop(0)
        yield pair


def _confirmation(rng: random.Random, i: int, t: datetime, s: Session, pool: list[Session]) -> dict:
    roll = rng.random()
    origin: dict
    if roll < 0.35:
        same = rng.random() < 0.7
        other = pool[rng.randrange(len(pool))]
        turn_key = s.key if same or other.agent != s.agent else other.key
        origin = {"kind": "turn_reply", "turn": {"session_key": turn_key, "turn_id": f"t{i}"}}
    elif roll < 0.6:
        origin = {"kind": "automation_result", "job": {
            "id": f"job-{i % 97}", "name": f"{WORDS[i % len(WORDS)]} job", "run_id": f"r{i}",
            "mode": "in_chat" if rng.random() < 0.1 else "background",
            "session_key": pool[rng.randrange(len(pool))].key if rng.random() < 0.1 else s.key}}
    elif roll < 0.8:
        origin = {"kind": "message_tool"}
    elif roll < 0.86:
        origin = {"kind": "failure_alert", "job": {"id": f"job-{i % 97}", "mode": "background"}}
    else:
        origin = {"kind": "subagent_announcement", "subagent": {
            "run_id": f"sa{i}", "agent_id": "researcher", "label": "research"}}
    payload: dict = {"text": " ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 40)))}
    kind = rng.random()
    if kind < 0.02:
        payload = {"native": [{"kind": "discord_embed", "title": "status"}]}
    elif kind < 0.07:
        payload["media"] = [{"kind": "image", "name": f"img{i}.png",
                             "url": f"https://cdn.example/img{i}.png?token=t{i}"}]
    record = {
        "schema": "delivery-confirmation/1",
        "send_id": f"outbound-delivery:{i}:0",
        "confirmed_at": t.isoformat(),
        "agent_id": s.agent,
        "session_key": s.key,
        "route": s.route,
        "origin": origin,
        "payload": payload,
        "receipt": {"platform_message_ids": [str(1_000_000 + i)]},
    }
    if rng.random() < 0.02:
        record["destination_agent_id"] = AGENTS[(AGENTS.index(s.agent) + 1) % len(AGENTS)]
    return record


def _invalid(rng: random.Random, i: int, t: datetime) -> bytes:
    roll = rng.random()
    if roll < 0.4:
        return b'{"schema": "delivery-confirmation/1", "send_id": '  # truncated JSON
    if roll < 0.7:
        return json.dumps({"schema": "delivery-confirmation/1", "send_id": f"bad-{i}",
                           "confirmed_at": t.isoformat()}).encode()  # required fields missing
    if roll < 0.9:
        return json.dumps({"schema": "delivery-confirmation/9", "send_id": f"bad-{i}"}).encode()
    return json.dumps({"schema": "delivery-confirmation/1", "send_id": f"bad-{i}",
                       "confirmed_at": t.replace(tzinfo=None).isoformat(), "agent_id": "ops",
                       "session_key": "main", "route": {"channel": "x", "peer_kind": "direct",
                                                        "peer_id": "1"},
                       "origin": {"kind": "message_tool"}, "payload": {"text": "x"},
                       "receipt": {"platform_message_ids": []}}).encode()  # naive timestamp
