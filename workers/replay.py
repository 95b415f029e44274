"""`replay FILE`: run JSON-lines input through the core offline and print one outcome per line.

No Kafka: the same parse and decision code as the worker, over a file or stdin, with the
per-session state in a dict. Output lines, in input order:

    {"line": N, "outcome": O, "session_key": K|null, "send_id": S|null,
     "entry": {...}          (when written),
     "diagnostics": [...]    (when any),
     "error": "..."          (dead letters)}

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

from schemas import Diagnostic, parse_input
from workers.core import OUTCOME_KINDS, Outcome, SessionState, step

_DIAGNOSTICS: TypeAdapter[tuple[Diagnostic, ...]] = TypeAdapter(tuple[Diagnostic, ...])
_FLUSH_EVERY = 2048  # output lines per write


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", metavar="FILE", help="JSON lines of input records; - reads stdin")
    parser.add_argument(
        "--dedupe-window-days",
        type=_positive_float,
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
    states: dict[str, SessionState] = {}
    counts: Counter[str] = Counter()
    pending: list[bytes] = []
    for number, line in enumerate(lines, 1):
        raw = line.rstrip(b"\r\n")
        if not raw.strip():
            continue
        outcome = step(states, parse_input(raw), written_at=written_at, dedupe_window=dedupe_window)
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
    if outcome.entry is not None:
        parts += (b',"entry":', outcome.entry.__pydantic_serializer__.to_json(outcome.entry))
    if outcome.diagnostics:
        parts += (b',"diagnostics":', _DIAGNOSTICS.dump_json(outcome.diagnostics))
    if outcome.error is not None:
        parts += (b',"error":', _json(outcome.error))
    parts.append(b"}\n")
    return b"".join(parts)


def _json(value: str | None) -> bytes:
    return b"null" if value is None else to_json(value)


def _positive_float(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError("must be > 0")
    return value


def _aware_timestamp(text: str) -> datetime:
    try:
        value = datetime.fromisoformat(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not an RFC 3339 timestamp: {exc}") from exc
    if value.tzinfo is None:
        raise argparse.ArgumentTypeError("timestamp needs a UTC offset")
    return value
