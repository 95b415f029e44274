"""`replay FILE`: run JSON-lines input through the core offline and print one outcome per line.

No Kafka: the worker's own step (`Owner.handle`: parse, decide, the same dead letters), over a
file or stdin, with the session state in memory. A file has no partitions, so nothing is
re-keyed; the worker's clock for every line is --written-at. Output lines, in input order:

    {"line": N, "outcome": O, "session_key": K|null, "send_id": S|null,
     "entry": {...}          (when written),
     "chain": "<64 hex>"     (when written: its `chain` header, DESIGN 1.2),
     "diagnostics": [...]    (when any),
     "error": "..."          (dead letters),
     "erasure": {...}        (a session-erase: what it tombstoned; session-erasure/1)}

Blank lines are skipped (line numbers still count them). A bad line is a dead letter,
never a stop. Counts per outcome go to stderr at the end. Exit 0.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from typing import BinaryIO

from pydantic import TypeAdapter
from pydantic_core import to_json

from schemas import Diagnostic
from workers.core import OUTCOME_KINDS, MemoryState, Outcome
from workers.core.outputs import Source
from workers.core.owner import Owner, apply

_DIAGNOSTICS: TypeAdapter[tuple[Diagnostic, ...]] = TypeAdapter(tuple[Diagnostic, ...])
_FLUSH_EVERY = 2048  # output lines per write
_MAX_WINDOW_DAYS = 3650  # as TRANSCRIPT_DEDUPE_WINDOW_DAYS (workers.settings)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", metavar="FILE", help="JSON lines of input records; - reads stdin")
    parser.add_argument(
        "--dedupe-window-days",
        type=_window_days,
        default=7.0,
        metavar="DAYS",
        help="how long a send_id is remembered, on the session's event-time clock (default 7)",
    )
    parser.add_argument(
        "--written-at",
        type=_aware_timestamp,
        default=None,
        metavar="TIMESTAMP",
        help="fixed written_at for every entry (RFC 3339 with offset), for byte-identical "
        "output; default: now",
    )


def run(args: argparse.Namespace) -> int:
    written_at: datetime = args.written_at or datetime.now(UTC)
    window = timedelta(days=args.dedupe_window_days)
    try:
        source: BinaryIO = sys.stdin.buffer if args.file == "-" else open(args.file, "rb")
    except OSError as exc:
        print(f"replay: cannot read {args.file}: {exc.strerror}", file=sys.stderr)
        return 2
    with source:
        counts = replay(source, sys.stdout.buffer, written_at=written_at, dedupe_window=window)
    summary = {"lines": sum(counts.values()), "outcomes": {k: counts[k] for k in OUTCOME_KINDS}}
    print(json.dumps(summary), file=sys.stderr)
    return 0


def replay(
    lines: Iterable[bytes], out: BinaryIO, *, written_at: datetime, dedupe_window: timedelta
) -> Counter[str]:
    """Decide every non-blank line, write one outcome line each; return counts per outcome."""
    state = MemoryState()
    owner = Owner(None, dedupe_window, lambda: written_at)
    counts: Counter[str] = Counter()
    pending: list[bytes] = []
    for number, line in enumerate(lines, 1):
        raw = line.rstrip(b"\r\n")
        if not raw.strip():
            continue
        step = owner.handle(Source("replay", 0, number, None, raw), state)
        apply(state, step)
        outcome = step.decided
        assert outcome is not None  # nothing is re-keyed without partitions
        counts[outcome.kind] += 1
        pending.append(render(number, outcome))
        if len(pending) >= _FLUSH_EVERY:
            out.write(b"".join(pending))
            pending.clear()
    out.write(b"".join(pending))
    out.flush()
    return counts


def render(line: int, outcome: Outcome) -> bytes:
    """One output line (with its newline), keys in a fixed order."""
    parts = [
        b'{"line":%d,"outcome":"%s","session_key":%s,"send_id":%s'
        % (line, outcome.kind.encode(), _json(outcome.session_key), _json(outcome.send_id))
    ]
    if outcome.entry_json is not None:
        parts += (b',"entry":', outcome.entry_json)
    if outcome.chain is not None:
        parts += (b',"chain":"', outcome.chain.hex().encode(), b'"')
    if outcome.diagnostics:
        parts += (b',"diagnostics":', _DIAGNOSTICS.dump_json(outcome.diagnostics))
    if outcome.error is not None:
        parts += (b',"error":', _json(outcome.error))
    if outcome.erasure is not None:
        parts += (b',"erasure":', outcome.erasure.__pydantic_serializer__.to_json(
            outcome.erasure, by_alias=True))
    parts.append(b"}\n")
    return b"".join(parts)


def _json(value: str | None) -> bytes:
    return b"null" if value is None else to_json(value)


def _window_days(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError("not a number") from None
    if not 0 < value <= _MAX_WINDOW_DAYS:  # also false for nan; inf is above the bound
        raise argparse.ArgumentTypeError(f"must be > 0 and <= {_MAX_WINDOW_DAYS}")
    return value


def _aware_timestamp(text: str) -> datetime:
    try:
        value = datetime.fromisoformat(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not an RFC 3339 timestamp: {exc}") from exc
    if value.tzinfo is None:
        raise argparse.ArgumentTypeError("timestamp needs a UTC offset")
    return value
