"""A Quix Streams baseline for issue 15: the worker's per-session work, as far as Quix expresses it.

Run as its own process by bench/run.py, in the bench virtualenv (var/venv-bench: quixstreams,
confluent-kafka, orjson; kept apart because quixstreams pins an older pydantic than the worker's):

    var/venv-bench/bin/python bench/quix_baseline.py --input T --entries T --diagnostics T \
        --dlq T --group G --state-dir D [--guarantee exactly-once|at-least-once]
        [--commit-interval 1.0]

It runs until SIGTERM (Quix's own graceful stop); bench/run.py measures it from outside exactly
as it measures the worker (first output -> the group's committed lag 0, and from process start).
Imports nothing from workers/ or bench/ (it runs in another interpreter): the pipeline below
is self-contained.

One `StreamingDataFrame`: the input read as bytes, one stateful `apply` (metadata, expand) that
decides each record over Quix's RocksDB state (with its changelog topic) and returns the
records to write, and one `to_topic` that routes each to its topic. Per record:

- Rule 1, shallow: oversize, not JSON (orjson), unknown `schema`, the required fields present
  with the right JSON types, `agent_id` pattern, `send_id` length, timestamps parsed with an
  offset and in range, `origin.kind` known and `turn_reply` with its turn; else the original
  bytes go to the dead-letter topic (no `error`/`source.*` headers).
- The session key canonicalised as the worker does (a port of transcript_connector/session_keys.py,
  cached); a record whose Kafka key is not the canonical key is produced back to the input
  topic under the canonical key (murmur2, the contract's partitioner), as the worker re-keys,
  and decided when it arrives there. Quix state is per Kafka key, so this is what keeps one
  session in one state.
- Per-session state (Quix `State`, prefixed by the key): a head [epoch, next_seq, clock,
  last_reset] and one value per send_id [first_seen, fingerprint]; the fingerprint is sha256
  of the canonical content, as the worker's; the 7-day window on the session clock.
- Rules 2-7 in the worker's order: reset (epoch + 1; redelivered reset), duplicate / conflict
  (error diagnostic), other agent (warn), native-only (warn), same-turn skip, write (entry
  JSON with the next seq; in_chat_job_delivered_elsewhere, session_key_mismatch, clock_skew).

What it does NOT do that the worker does: deep validation (pydantic models of every nested
field: route, media items, job and subagent shapes, extra-field rules), the reason of a dead
letter and its headers, dead letters of failed handling, expiry sweep and tombstones of old
send_ids, state migration, entries partitioned by their session key (Quix's `to_topic` picks
the partition from the entry's own key), the worker's fencing per partition, metrics, health
endpoints. Outputs are serialised once with orjson.
"""

from __future__ import annotations

import argparse
import hashlib
import logging
import re
from datetime import UTC, datetime
from functools import lru_cache

import orjson
from quixstreams import Application
from quixstreams.models.serializers import Serializer

MAX_RECORD_BYTES = 1 << 20
WINDOW_US = 7 * 86400 * 1_000_000
SKEW_US = 5 * 60 * 1_000_000
MIN_US, MAX_US = 0, int(datetime(2999, 12, 31, 23, 59, 59, tzinfo=UTC).timestamp() * 1e6)
ENTRY_NS = bytes.fromhex("5f0c3a528f3e4d5e9b8a6c1d2e7f4a90")  # the worker's ENTRY_ID_NAMESPACE
ORIGIN_KINDS = frozenset({"turn_reply", "message_tool", "automation_result", "failure_alert",
                          "subagent_announcement"})
AGENT_ID = re.compile(r"[a-z0-9][a-z0-9_-]{0,63}")
_agent_ok = AGENT_ID.fullmatch

# output routing: the first item of each record the decision returns
OUT_ENTRY, OUT_DIAG, OUT_DLQ, OUT_INPUT = 0, 1, 2, 3


# --- canonical session keys (a port of transcript_connector/session_keys.py) ---------------------

_PEER_KINDS = frozenset({"direct", "dm", "group", "channel"})
_DIRECT_KINDS = frozenset({"direct", "dm"})
_SUFFIX_MARKERS = frozenset({"thread", "topic"})
_SOURCES = frozenset({"main", "cron", "subagent", "hook", "acp", "agent"})


@lru_cache(maxsize=1 << 14)
def canonical(raw: str, agent_id: str) -> str | None:
    """The canonical key, or None when an `agent:` key names no valid agent id."""
    parts = [p.strip() for p in raw.split(":")]
    if len(parts) >= 2 and parts[0].lower() == "agent":
        agent = parts[1].lower()
        if not _agent_ok(agent):
            return None
        rest = parts[2:]
    else:
        agent, rest = agent_id, parts
    if not rest or (len(rest) == 1 and rest[0].lower() in ("", "main")):
        return f"agent:{agent}:main"
    lower = [p.lower() for p in rest]
    n = len(lower)
    if n >= 2 and lower[0] in _DIRECT_KINDS:
        kind_at = 0
    elif lower[0] in _SOURCES:
        kind_at = None
    elif n >= 3 and lower[1] in _PEER_KINDS:
        kind_at = 1
    elif n >= 4 and lower[2] in _DIRECT_KINDS:
        kind_at = 2
    else:
        kind_at = None
    if kind_at is None:
        return f"agent:{agent}:{':'.join(lower)}"
    channel = lower[0] if kind_at > 0 else ""
    kind = "direct" if lower[kind_at] == "dm" else lower[kind_at]
    suffix_at = n
    for j in range(n - 2, kind_at + 1, -1):
        if lower[j] in _SUFFIX_MARKERS:
            suffix_at = j
            break
    peer = ":".join(rest[kind_at + 1:suffix_at])
    keeps_case = (kind == "group") if channel == "signal" else \
        (peer.startswith("!") if channel == "matrix" else False)
    if not keeps_case:
        peer = peer.lower()
    out = lower[:kind_at] + [kind, peer]
    if suffix_at < n:
        out += ["topic" if channel == "telegram" else lower[suffix_at],
                ":".join(lower[suffix_at + 1:])]
    return f"agent:{agent}:{':'.join(out)}"


# --- the decision ---------------------------------------------------------------------------

def _us(ts: object) -> int | None:
    """RFC 3339 with an offset -> µs since 1970 UTC; None if not that or out of range."""
    if type(ts) is not str:
        return None
    try:
        dt = datetime.fromisoformat(ts)
    except ValueError:
        return None
    if dt.tzinfo is None:
        return None
    us = int(dt.timestamp() * 1_000_000)
    return us if MIN_US <= us <= MAX_US else None


def _iso(us: int) -> str:
    return datetime.fromtimestamp(us / 1_000_000, UTC).isoformat().replace("+00:00", "Z")


def entry_id(send_id: str) -> str:
    d = bytearray(hashlib.sha1(ENTRY_NS + send_id.encode()).digest()[:16])
    d[6] = (d[6] & 0x0F) | 0x50
    d[8] = (d[8] & 0x3F) | 0x80
    x = d.hex()
    return f"{x[:8]}-{x[8:12]}-{x[12:16]}-{x[16:20]}-{x[20:]}"


def _diag(level: str, code: str, key: str, send_id: str | None, detail: str, at: str) -> tuple:
    return (OUT_DIAG, key.encode(), orjson.dumps({
        "schema": "diagnostic/1", "level": level, "code": code, "session_key": key,
        "send_id": send_id, "detail": detail, "at": at}))


def _valid_confirmation(r: dict) -> bool:
    """Rule 1, shallow: the fields the rules read are there with the right JSON types."""
    sid, agent, sk = r.get("send_id"), r.get("agent_id"), r.get("session_key")
    route, origin, payload, receipt = r.get("route"), r.get("origin"), r.get("payload"), \
        r.get("receipt")
    if not (type(sid) is str and 0 < len(sid) <= 512 and type(agent) is str and _agent_ok(agent)
            and type(sk) is str and type(route) is dict and type(origin) is dict
            and type(payload) is dict and type(receipt) is dict
            and type(receipt.get("platform_message_ids")) is list):
        return False
    kind = origin.get("kind")
    if kind not in ORIGIN_KINDS:
        return False
    turn = origin.get("turn")
    if kind == "turn_reply" and type(turn) is not dict:
        return False
    if turn is not None and (type(turn) is not dict or type(turn.get("session_key")) is not str):
        return False
    job = origin.get("job")
    if job is not None and (type(job) is not dict or type(job.get("id")) is not str
                            or job.get("mode") not in ("in_chat", "background")):
        return False
    text, media = payload.get("text"), payload.get("media")
    if text is not None and type(text) is not str:
        return False
    if media is not None and (type(media) is not list
                              or any(type(m) is not dict or type(m.get("kind")) is not str
                                     or type(m.get("name")) is not str for m in media)):
        return False
    dest = r.get("destination_agent_id")
    return dest is None or type(dest) is str


def decide(value: bytes, key: bytes | None, timestamp: int, _headers, state) -> list[tuple]:
    """One input record -> the records to write: (OUT_*, key bytes, value bytes)."""
    if len(value) > MAX_RECORD_BYTES:
        return [(OUT_DLQ, key, value)]
    try:
        r = orjson.loads(value)
    except orjson.JSONDecodeError:
        return [(OUT_DLQ, key, value)]
    if type(r) is not dict:
        return [(OUT_DLQ, key, value)]
    schema = r.get("schema")
    now = timestamp * 1000  # the broker's append time (LogAppendTime), µs
    if schema == "delivery-confirmation/1":
        if not _valid_confirmation(r) or (at := _us(r.get("confirmed_at"))) is None:
            return [(OUT_DLQ, key, value)]
        agent = r["agent_id"]
        skey = canonical(r["session_key"], agent)
    elif schema == "session-reset/1":
        sk = r.get("session_key")
        if type(sk) is not str or (at := _us(r.get("reset_at"))) is None:
            return [(OUT_DLQ, key, value)]
        head_, sep, _ = sk.partition(":")
        skey = canonical(sk, "") if sep and head_.strip().lower() == "agent" else None
        agent = None
    else:
        return [(OUT_DLQ, key, value)]
    if skey is None:
        return [(OUT_DLQ, key, value)]
    if key is None or key.decode("utf-8", "replace") != skey:
        return [(OUT_INPUT, skey.encode(), value)]  # re-key; decided in its own partition

    head = state.get("h") or [0, 1, None, None]  # epoch, next_seq, clock, last_reset (µs)
    epoch, next_seq, clock, last_reset = head
    if agent is None:  # Rule 2: reset
        out = []
        if at - now > SKEW_US:
            out.append(_diag("warn", "clock_skew", skey, None, "reset dated ahead", r["reset_at"]))
            at = now
        if last_reset is not None and at <= last_reset:
            return []
        state.set("h", [epoch + 1, next_seq, clock, at])
        return out

    send_id, origin, payload = r["send_id"], r["origin"], r["payload"]
    at_s = r["confirmed_at"]
    turn, job, sub = origin.get("turn"), origin.get("job"), origin.get("subagent")
    turn_key = job_key = None
    if turn is not None:
        turn_key = canonical(turn["session_key"], agent)
        if turn_key is None:
            if origin["kind"] == "turn_reply":
                return [(OUT_DLQ, key, value)]
            turn_key = turn["session_key"]
    if job is not None and type(job.get("session_key")) is str:
        job_key = canonical(job["session_key"], agent)
        if job_key is None:
            if job["mode"] == "in_chat":
                return [(OUT_DLQ, key, value)]
            job_key = job["session_key"]

    # Rule 3: dedupe on the session clock
    ahead = at - now > SKEW_US
    effective = now if ahead else at
    if clock is not None and clock - now > SKEW_US:
        clock = now
    if clock is None or effective > clock:
        clock = effective
    dest = r.get("destination_agent_id")
    text = payload.get("text")
    media = payload.get("media") or ()
    content = (agent, skey, None if dest == agent else dest, text or "",
               [(m["kind"], m["name"]) for m in media], origin["kind"],
               None if turn is None else (turn_key, turn.get("turn_id")),
               None if job is None else (job["id"], job.get("name"), job.get("run_id"),
                                         job["mode"], job_key),
               None if sub is None else (sub.get("run_id"), sub.get("agent_id"),
                                         sub.get("label")))
    fp = hashlib.sha256(orjson.dumps(content)).hexdigest()[:32]
    sid_key = "s:" + send_id
    prior = state.get(sid_key)
    if prior is not None and clock - prior[0] <= WINDOW_US:
        if clock != head[2]:
            state.set("h", [epoch, next_seq, clock, last_reset])
        if prior[1] == fp:
            return []
        detail = (f"send_id was first seen at {_iso(prior[0])} (session clock) with different "
                  f"content (fingerprint {prior[1]}, now {fp}); nothing written")
        return [_diag("error", "conflicting_duplicate", skey, send_id, detail, at_s)]
    state.set(sid_key, [clock, fp])

    # Rule 4: another agent's chat
    owner = skey.split(":", 2)[1]
    if (dest is not None and dest != agent) or owner != agent:
        if clock != head[2]:
            state.set("h", [epoch, next_seq, clock, last_reset])
        bound = dest if dest is not None and dest != agent else owner
        detail = (f"destination chat is bound to agent {bound}, not the sender {agent}; "
                  "the message was sent and is written to no agent's transcript")
        return [_diag("warn", "destination_bound_to_other_agent", skey, send_id, detail, at_s)]
    # Rule 5: native-only payload
    if not media and not (text and not text.isspace()):
        if clock != head[2]:
            state.set("h", [epoch, next_seq, clock, last_reset])
        native = payload.get("native") or ()
        detail = (f"payload has no text and no media ({len(native)} channel-native item"
                  f"{'s' if len(native) != 1 else ''}); the message was sent and nothing is "
                  "written")
        return [_diag("warn", "native_only_payload", skey, send_id, detail, at_s)]
    # Rule 6: the reply of a turn in this very chat
    if origin["kind"] == "turn_reply" and turn_key == skey:
        if clock != head[2]:
            state.set("h", [epoch, next_seq, clock, last_reset])
        return []
    # Rule 7: write
    state.set("h", [epoch, next_seq + 1, clock, last_reset])
    if job is not None:
        posted = {"kind": "job", "id": job["id"], "name": job.get("name"),
                  "run_id": job.get("run_id")}
    elif sub is not None:
        posted = {"kind": "subagent", "id": sub.get("agent_id"), "name": sub.get("label"),
                  "run_id": sub.get("run_id")}
    else:
        posted = {"kind": "agent", "id": agent}
    entry = {
        "schema": "transcript-entry/1", "session_key": skey, "epoch": epoch, "seq": next_seq,
        "entry_id": entry_id(send_id), "send_id": send_id, "role": "assistant",
        "agent_id": agent, "text": text or "",
        "media": [{"kind": m["kind"], "name": m["name"]} for m in media],
        "source": origin["kind"], "posted_by": posted, "delivered_at": at_s,
        "written_at": _iso(now), "platform_message_ids": r["receipt"]["platform_message_ids"],
    }
    out = [(OUT_ENTRY, f"{skey}#{next_seq:010d}".encode(), orjson.dumps(entry))]
    if job is not None and job["mode"] == "in_chat" and job_key is not None and job_key != skey:
        out.append(_diag("warn", "in_chat_job_delivered_elsewhere", skey, send_id,
                         f"in-chat job {job['id']} delivered to {skey}, outside its chat "
                         f"{job_key}; run `transcript-owner doctor`", at_s))
    if r["session_key"] != skey:
        out.append(_diag("info", "session_key_mismatch", skey, send_id,
                         f"sender's session key {r['session_key']!r} is not canonical; "
                         f"canonical: {skey!r}", at_s))
    if ahead:
        out.append(_diag("warn", "clock_skew", skey, send_id,
                         f"the record's time is {(at - now) // 1_000_000} s ahead", at_s))
    return out


class _Payload(Serializer):
    """The value of a routed output: its third item, already bytes."""

    def __call__(self, value, ctx=None) -> bytes:  # noqa: ANN001
        return value[2]


def build(args: argparse.Namespace) -> Application:
    app = Application(
        broker_address=args.bootstrap, consumer_group=args.group, auto_offset_reset="earliest",
        processing_guarantee=args.guarantee, commit_interval=args.commit_interval,
        state_dir=args.state_dir, use_changelog_topics=True, loglevel=args.loglevel,
    )
    kw = {"key_deserializer": "bytes", "value_deserializer": "bytes",
          "key_serializer": "bytes", "value_serializer": _Payload()}
    inp = app.topic(args.input, **kw)
    routes = {OUT_ENTRY: app.topic(args.entries, **kw), OUT_DIAG: app.topic(args.diagnostics, **kw),
              OUT_DLQ: app.topic(args.dlq, **kw), OUT_INPUT: inp}
    sdf = app.dataframe(inp)
    sdf = sdf.apply(decide, stateful=True, metadata=True, expand=True)
    sdf.to_topic(lambda value, _key, _ts, _headers: routes[value[0]], key=lambda value: value[1])
    return app


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--bootstrap", default="127.0.0.1:9092")
    p.add_argument("--input", required=True)
    p.add_argument("--entries", required=True)
    p.add_argument("--diagnostics", required=True)
    p.add_argument("--dlq", required=True)
    p.add_argument("--group", required=True)
    p.add_argument("--state-dir", required=True)
    p.add_argument("--guarantee", choices=("exactly-once", "at-least-once"),
                   default="exactly-once")
    p.add_argument("--commit-interval", type=float, default=1.0,
                   help="seconds between Quix checkpoints (offset commit; a transaction "
                        "exactly-once); Quix's default is 5")
    p.add_argument("--loglevel", default="WARNING")
    args = p.parse_args(argv)
    logging.getLogger("quixstreams").setLevel(args.loglevel)
    build(args).run()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
