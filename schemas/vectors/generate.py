"""Write schemas/vectors/session_keys.json: the session-key parity vectors both languages run.

    python schemas/vectors/generate.py           # rewrite the file (make vectors)
    python schemas/vectors/generate.py --check   # exit 1 if it is stale

A tool, not part of the contract package: it runs the worker's canonicaliser (workers.core)
and partitioner, which `schemas` itself never imports (so schemas/vectors/ is no package).

What the file holds, every expectation computed by the Python implementation (the contract):
- `canonical`: canonical_session_key(raw, agent_id) -> key, or the error (class, message).
  The hand-written edges of schemas/vectors/session_key_edges.py come first, with hand-written
  expectations: the generator refuses to write when Python disagrees with one. Then a
  deterministic generated grid (seeded) of realistic and hostile spellings.
- `route`: session_key_for_route(agent_id, route, dm_scope) -> key or error, likewise.
- every key's partition for several partition counts (workers/stream/partitioning.partition_for,
  the Java client's murmur2), and `partition` for extra raw keys (murmur2's tail lengths,
  multi-byte UTF-8).
- `timestamps`: whether the worker accepts a timestamp (transcript_connector.parse), and whether the
  TypeScript builder must (it may be stricter, never looser).
- `unicode_digests`: SHA-256 digests of the pinned lower() and strip()
  (transcript_connector.unicode_text: Unicode `unicode`, whatever Python runs this), the
  final-sigma context, and Python's repr() over every code point, so the TypeScript port is
  checked on all 1,114,112 of them, not only on the vectors' characters.

The output is stable (sorted keys, ASCII, one vector per line), so a diff shows what changed.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
for _path in (str(HERE.parents[1]), str(HERE)):  # the repository root; the edges beside this
    if _path not in sys.path:
        sys.path.append(_path)

from session_key_edges import CANONICAL, ROUTES, TIMESTAMPS, AgentErr, Err, ScopeErr  # noqa: E402
from transcript_connector.parse import Invalid, parse_input  # noqa: E402
from transcript_connector.partitioning import partition_for  # noqa: E402
from transcript_connector.session_keys import canonical_session_key, session_key_for_route  # noqa: E402
from transcript_connector.unicode_text import UNICODE_VERSION, py_lower, py_strip  # noqa: E402

OUT = HERE / "session_keys.json"
PARTITION_COUNTS = (1, 3, 8, 12, 64)


class _Route:
    """A RouteLike from a dict (schemas.Route would refuse the out-of-schema cases)."""

    def __init__(self, d: dict[str, Any]) -> None:
        self.channel = d["channel"]
        self.account_id = d.get("account_id")
        self.peer_kind = d["peer_kind"]
        self.peer_id = d["peer_id"]
        self.thread_id = d.get("thread_id")


def partitions(key: str) -> dict[str, int] | None:
    """partition_for at each count; None for a key that is not UTF-8 (a lone surrogate)."""
    try:
        return {str(n): partition_for(key, n) for n in PARTITION_COUNTS}
    except UnicodeEncodeError:
        return None


def _outcome(call) -> dict[str, Any]:
    """{"expect": key, "partitions": …} or {"error": {python, typescript, message}}."""
    try:
        key = call()
    except ValueError as exc:
        ts = ("UnknownDmScopeError" if str(exc).startswith("unknown DM scope")
              else "InvalidSessionKeyError")
        return {"error": {"python": type(exc).__name__, "typescript": ts, "message": str(exc)}}
    return {"expect": key, "partitions": partitions(key)}


def canonical_vector(id_: str, tags: list[str], raw: str, agent: str) -> dict[str, Any]:
    return {"id": id_, "tags": tags, "raw": raw, "agent_id": agent,
            **_outcome(lambda: canonical_session_key(raw, agent))}


def route_vector(id_: str, tags: list[str], agent: str, route: dict, scope: str) -> dict[str, Any]:
    return {"id": id_, "tags": tags, "agent_id": agent, "route": route, "dm_scope": scope,
            **_outcome(lambda: session_key_for_route(agent, _Route(route), scope))}  # type: ignore[arg-type]


def _hand_expectation(expected: object) -> dict[str, Any]:
    if isinstance(expected, Err | ScopeErr | AgentErr):
        return {"error": expected.message}
    return {"expect": expected}


def _check_hand(vector: dict[str, Any], expected: object, problems: list[str]) -> None:
    want = _hand_expectation(expected)
    got = ({"error": vector["error"]["message"]} if "error" in vector
           else {"expect": vector["expect"]})
    if got != want:
        problems.append(f"{vector['id']}: hand-written {want!r}, Python gives {got!r}")


# --- the generated grid --------------------------------------------------------------------

_PREFIXES = ["", "", "agent:ops:", "Agent:OPS:", " agent : ops : ", "AGENT:Other-1:", "agent:a_b:",
             "\x1fagent:ops:", "\u3000AGENT:\u212aops:"]
_CHANNELS = ["telegram", "Telegram", " TELEGRAM ", "slack", "SLACK", "signal", "Signal", "matrix",
             "MATRIX", "discord", "whatsapp", "x", "wéchat", "ΦΣ", "\ufefftelegram"]
_KINDS = ["direct", "Direct", "dm", "DM", "group", "GROUP", "channel", "Channel", " dm "]
_ACCOUNTS = ["bot1", "T0WORK", "", " Acct ", "ÄCCT", "default"]
_PEERS = ["U07AB", "u07ab", "12345", "-100123", "!AbC:Matrix.org", "!AbC:ex.org:8448",
          "@Alice:Ex.org", "AbC+/dE=", "ΟΔΟΣ", "İx", "\ufeffP", "\x1fP\x1f", " P ", "ÄÖ", "a:B",
          "\u1c89Q", "\u01c4", "ΑΣ:Β", "!ΣΑ:x.org", "dm", "thread", "\x85Z", "P\u200b"]
_THREADS = [None, None, ("thread", "1700.1"), ("Thread", "AbC"), ("topic", "42"),
            ("TOPIC", "X:Y"), ("thread", ""), (" thread ", "Σ")]
_SOURCES = ["cron", "CRON", "subagent", "hook", "acp", "main", "Main", "agent", "run"]
_JUNK_TOKENS = ["agent", "AGENT", "ops", "dm", "DM", "direct", "group", "channel", "thread",
                "topic", "telegram", "signal", "matrix", "main", "cron", "", " ", "!R", "Σ", "ς",
                "İ", "\u212a", "\ufeff", "\x1f", "\x85", "\xa0", "\u2028", "\u0295Σ", "ΑΣ", "x",
                "Ab", "a" * 64, "-x", "_"]


def _grid(rng: random.Random, n: int) -> Iterator[tuple[list[str], str, str]]:
    for _ in range(n):
        prefix = rng.choice(_PREFIXES)
        agent = rng.choice(["ops", "ops", "a-1", "kate"])
        shape = rng.random()
        if shape < 0.55:
            channel, kind, peer = rng.choice(_CHANNELS), rng.choice(_KINDS), rng.choice(_PEERS)
            if rng.random() < 0.3 and kind.strip().lower() in ("direct", "dm"):
                body = f"{channel}:{rng.choice(_ACCOUNTS)}:{kind}:{peer}"
            elif rng.random() < 0.15:
                body = f"{kind}:{peer}"  # per-peer: no channel
            else:
                body = f"{channel}:{kind}:{peer}"
            thread = rng.choice(_THREADS)
            if thread:
                body += f":{thread[0]}:{thread[1]}"
            yield ["generated", "peer"], prefix + body, agent
        elif shape < 0.75:
            segs = [rng.choice(_SOURCES)] + [
                rng.choice(["Job-1", "R-9", "X", "ΟΣ", "dm", "direct", "İ", "\x1fA\x1f"])
                for _ in range(rng.randint(0, 3))]
            yield ["generated", "source"], prefix + ":".join(segs), agent
        else:
            segs = [rng.choice(_JUNK_TOKENS) for _ in range(rng.randint(1, 7))]
            yield ["generated", "junk"], ":".join(segs), agent


def _route_grid(rng: random.Random, n: int) -> Iterator[tuple[list[str], str, dict, str]]:
    scopes = ["main", "per-peer", "per-channel-peer", "per-account-channel-peer"]
    for _ in range(n):
        route = {"channel": rng.choice(_CHANNELS), "peer_kind": rng.choice(
            ["direct", "direct", "group", "channel"]), "peer_id": rng.choice(_PEERS)}
        if rng.random() < 0.6:
            route["account_id"] = rng.choice(_ACCOUNTS + [None])
        thread = rng.choice(_THREADS)
        if thread:
            route["thread_id"] = thread[1]
        yield ["generated"], rng.choice(["ops", "a-1", "kate"]), route, rng.choice(scopes)


_RAW_PARTITION_KEYS = ["", "a", "ab", "abc", "abcd", "abcde", "abcdef", "abcdefg", "é", "日本語",
                       "😀", "agent:ops:main", "agent:ops:" + "x" * 997,
                       "agent:ops:telegram:direct:ue2e1", "\x00", "\uffff", "\U0010ffff"]


# --- Unicode digests -----------------------------------------------------------------------


def _digest(strings: Iterable[str]) -> str:
    return hashlib.sha256("\n".join(strings).encode("utf-16-le", "surrogatepass")).hexdigest()


def unicode_digests() -> dict[str, str]:
    """Over every code point c (surrogates included), joined by newlines, UTF-16LE. Case and
    whitespace are the pinned ones the keys use; repr() is the running Python's (error messages).
    """
    chars = [chr(cp) for cp in range(0x110000)]
    return {
        "lower": _digest(py_lower(c) for c in chars),
        "sigma_before": _digest(py_lower("A" + c + "\u03a3") for c in chars),
        "sigma_after": _digest(py_lower("A\u03a3" + c) for c in chars),
        "strip": _digest(py_strip(c + "x" + c) for c in chars),
        "repr": _digest(repr(c) for c in chars),
    }


# --- the file ------------------------------------------------------------------------------


def build() -> tuple[dict[str, Any], list[str]]:
    problems: list[str] = []
    canonical_session_key.cache_clear()
    canonical: list[dict[str, Any]] = []
    seen: set[tuple[str, str]] = set()
    for id_, tags, raw, agent, expected in CANONICAL:
        v = canonical_vector(id_, ["edge", *tags], raw, agent)
        _check_hand(v, expected, problems)
        canonical.append(v)
        seen.add((raw, agent))
    rng = random.Random(16)
    for tags, raw, agent in _grid(rng, 520):
        if (raw, agent) not in seen:
            seen.add((raw, agent))
            canonical.append(canonical_vector(f"gen-{len(canonical):04d}", tags, raw, agent))
    routes: list[dict[str, Any]] = []
    for id_, tags, agent, route, scope, expected in ROUTES:
        v = route_vector(id_, ["edge", *tags], agent, route, scope)
        _check_hand(v, expected, problems)
        routes.append(v)
    for tags, agent, route, scope in _route_grid(rng, 160):
        routes.append(route_vector(f"gen-route-{len(routes):04d}", tags, agent, route, scope))
    timestamps = []
    for text, ts_override in TIMESTAMPS:
        reset = {"schema": "session-reset/1", "session_key": "agent:ops:main", "reset_at": text}
        parsed = parse_input(json.dumps(reset).encode())
        python = ("invalid: " + parsed.reason) if isinstance(parsed, Invalid) else "valid"
        if ts_override is not None and python != "valid":
            problems.append(f"timestamp {text!r}: Python already rejects it, no override needed")
        timestamps.append({"text": text, "python": python,
                           "typescript": ts_override or python.split(":")[0]})
    ids = [v["id"] for v in canonical + routes]
    if len(ids) != len(set(ids)):
        problems.append("duplicate vector ids")
    data = {
        "about": "Session-key parity vectors: computed by the Python implementation "
                 "(transcript_connector/session_keys.py); run by tests/unit/test_vectors.py and "
                 "connectors/typescript/test/unit/parity.test.ts. Regenerate with `make vectors`.",
        "generated_by": "python schemas/vectors/generate.py",
        "python": sys.version.split()[0],
        "unicode": UNICODE_VERSION,
        "partition_counts": list(PARTITION_COUNTS),
        "canonical": canonical,
        "route": routes,
        "partition": [{"key": k, "partitions": partitions(k)} for k in _RAW_PARTITION_KEYS],
        "timestamps": timestamps,
        "unicode_digests": unicode_digests(),
    }
    return data, problems


def render(data: dict[str, Any]) -> str:
    def dump(v: object) -> str:
        return json.dumps(v, ensure_ascii=True, sort_keys=True)

    lines = ["{"]
    items = list(data.items())
    for i, (k, v) in enumerate(items):
        comma = "," if i < len(items) - 1 else ""
        if isinstance(v, list) and v and isinstance(v[0], dict):
            lines.append(f"  {dump(k)}: [")
            lines += [f"    {dump(x)}{',' if j < len(v) - 1 else ''}" for j, x in enumerate(v)]
            lines.append(f"  ]{comma}")
        else:
            lines.append(f"  {dump(k)}: {dump(v)}{comma}")
    lines.append("}")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python schemas/vectors/generate.py",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the file is stale")
    args = parser.parse_args(argv)
    data, problems = build()
    if problems:
        for p in problems:
            print(f"error: {p}", file=sys.stderr)
        return 2
    text = render(data)
    if args.check:
        if not OUT.is_file() or OUT.read_text("utf-8") != text:
            print(f"stale: {OUT} (run `make vectors`)", file=sys.stderr)
            return 1
        return 0
    OUT.write_text(text, "utf-8")
    print(f"{OUT}: {len(data['canonical'])} canonical, {len(data['route'])} route, "
          f"{len(data['timestamps'])} timestamp vectors")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
