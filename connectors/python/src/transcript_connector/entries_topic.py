"""What one record of `transcript.entries` is to a reader (DESIGN 1.2, "Reading one session";
1.3, "Reading at a position"), decided in one place for every reader: the sink, `show`,
`forget`, `audit`, `repartition` and a gateway's `SessionReader`.

A record is
  an entry       key `<session_key>#<seq, 10 digits>`, a valid `transcript-entry/1` of that
                 session and seq (`Upsert`); a session is its exact keys, never a key prefix;
  an erasure     a tombstone of an entry key (`Delete`);
  a position     key `position/<p>`, a valid `input-position/1` of partition p, read from
                 partition p (`Positioned`): every input record of partition p below its
                 `input_offset` has its outcome before it in the partition;
  or skipped     anything else (`Skip`, with a reason that names the field, never the content).
Nothing here does I/O: the readers are shells around `classify`.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any, NamedTuple

from pydantic import ValidationError

from transcript_connector.chain import CHAIN_HEADER, header_text
from transcript_connector.parse import duplicate_member
from transcript_connector.records import InputPosition, TranscriptEntry

POSITION_SCHEMA = "input-position/1"
POSITION_PREFIX = b"position/"
MAX_REASON = 300
_CHAIN_HEADER_BYTES = CHAIN_HEADER.encode()  # a header name as bytes: a client that gives them
_ENTRY_KEY = re.compile(rb"(.+)#([0-9]{10})", re.DOTALL)
_POSITION_KEY = re.compile(rb"position/(0|[1-9][0-9]{0,9})")


def entry_key(session_key: str, seq: int) -> bytes:
    return f"{session_key}#{seq:010d}".encode()


def parse_entry_key(key: bytes | None) -> tuple[str, int] | None:
    """(session_key, seq) of an entry key `<session_key>#<seq, 10 digits>`, or None. A session
    key may hold `#`, so a reader selects a session by this, never by a key prefix: the keys
    of session `K#1` start with `K#` too (DESIGN 1.2). A position key has no `#`: never an
    entry's."""
    m = _ENTRY_KEY.fullmatch(key) if key is not None else None
    if m is None:
        return None
    try:
        return m[1].decode("utf-8"), int(m[2])
    except UnicodeDecodeError:
        return None


def position_key(partition: int) -> bytes:
    return POSITION_PREFIX + str(partition).encode()


def parse_position_key(key: bytes | None) -> int | None:
    """p of a position key `position/<p>` (decimal, no leading zero), or None."""
    m = _POSITION_KEY.fullmatch(key) if key is not None else None
    return None if m is None else int(m[1])


class Position(NamedTuple):
    """Where a reader stands in one partition: every input record of `partition` below
    `input_offset` (of transcript.control below `control_offset`) has its outcome in what it
    read. `at`: the worker's clock when it wrote the position (None: no position record read,
    which claims nothing: offsets 0). `offset`: the entries offset it was read at, if known."""

    partition: int
    input_offset: int = 0
    control_offset: int = 0
    at: datetime | None = None
    offset: int | None = None

    def age_s(self, now: datetime | None = None) -> float | None:
        """Seconds since the worker wrote this position (None: it wrote none)."""
        if self.at is None:
            return None
        return max(0.0, ((now or datetime.now(UTC)) - self.at).total_seconds())



def furthest(current: Position, read: Position) -> Position:
    """The position after reading `read` at `current`: it never moves back. (The worker's never
    do; a record that would is kept by compaction only until the next one, and what the
    further one claimed stays true: the entries before it stay where they were.)"""
    if current.at is None:
        return read
    return Position(read.partition, max(read.input_offset, current.input_offset),
                    max(read.control_offset, current.control_offset),
                    max(current.at, read.at) if read.at is not None else current.at,
                    read.offset if read.offset is not None else current.offset)


def position_value(partition: int, input_offset: int, control_offset: int,
                   at: datetime) -> bytes:
    """An `input-position/1` value as the worker writes it (compact JSON, UTF-8)."""
    stamp = at.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    return (f'{{"schema":"{POSITION_SCHEMA}","partition":{partition},'
            f'"input_offset":{input_offset},"control_offset":{control_offset},'
            f'"at":"{stamp}"}}').encode()


class Upsert(NamedTuple):
    session_key: str
    epoch: int
    seq: int
    entry_id: str
    send_id: str
    entry_json: str
    chain: str | None  # the record's `chain` header (chain_header)


class Delete(NamedTuple):
    session_key: str
    seq: int


class Positioned(NamedTuple):
    position: Position


class Skip(NamedTuple):
    reason: str


def parse_key(key: bytes | None) -> tuple[str, int] | Skip:
    """`<session_key>#<seq, 10 digits>` -> (session_key, seq)."""
    if key is None:
        return Skip("key: missing")
    try:
        key.decode("utf-8")
    except UnicodeDecodeError:
        return Skip("key: not UTF-8")
    return parse_entry_key(key) or Skip("key: not <session_key>#<seq, 10 digits> "
                                        "nor position/<partition>")


def chain_header(headers: Any) -> str | None:
    """The text of a record's `chain` header (DESIGN 1.2, "Tamper evidence"), by the one rule
    of `transcript_connector.chain.header_text`: None when the record has none; "" when it has
    more than one, or one whose value is null or not ASCII (never a chain: verification reports
    it); else its text (what it should hold is checked by verification). `headers` as the Kafka
    client gives them, (name, value) pairs; anything else is no header (never raises)."""
    try:
        found = [v for k, v in headers or () if k in (CHAIN_HEADER, _CHAIN_HEADER_BYTES)]
    except Exception:  # noqa: BLE001  (not pairs: a record must never stop a reader)
        return None
    return header_text(found)


def decode_position(p: int, value: bytes | None, partition: int | None = None,
                    offset: int | None = None) -> Position | Skip:
    """The position record of key `position/<p>` read from `partition` (None: not known), or
    why it is none. A position names its own partition, in its key, its value and where it
    is: anything else is skipped (a forged or misplaced record claims nothing)."""
    if value is None:
        return Skip("position: a tombstone (the worker writes none)")
    try:
        pos = InputPosition.model_validate_json(value)
    except ValidationError as exc:
        return Skip(_validation_reason("invalid position", exc))
    except Exception as exc:  # noqa: BLE001  (a record must never stop a reader)
        return Skip(f"position: {type(exc).__name__}")
    if (duplicate := duplicate_member(value)) is not None:  # read two ways: never guessed
        return Skip(f"invalid position: {duplicate}"[:MAX_REASON])
    if pos.partition != p or (partition is not None and p != partition):
        where = "" if partition is None else f", read from partition {partition}"
        return Skip(f"position: key names partition {p}, value {pos.partition}{where}")
    return Position(p, pos.input_offset, pos.control_offset, pos.at.astimezone(UTC), offset)


def classify(key: bytes | None, value: bytes | None, headers: Any = (),
             partition: int | None = None, offset: int | None = None
             ) -> Upsert | Delete | Positioned | Skip:
    """What one record of `transcript.entries` read from `partition` (at `offset`) is (never
    raises). `headers` only give an entry its chain: whatever they hold, the entry is stored
    (chain_header)."""
    p = parse_position_key(key)
    if p is not None:
        found = decode_position(p, value, partition, offset)
        return found if isinstance(found, Skip) else Positioned(found)
    parsed = parse_key(key)
    if isinstance(parsed, Skip):
        return parsed
    session_key, seq = parsed
    if value is None:
        return Delete(session_key, seq)
    try:
        entry = TranscriptEntry.model_validate_json(value)
    except ValidationError as exc:
        return Skip(_validation_reason("invalid entry", exc))
    except Exception as exc:  # noqa: BLE001  (a record must never stop a reader)
        return Skip(f"value: {type(exc).__name__}")
    if entry.session_key != session_key or entry.seq != seq:
        return Skip("key: does not match the entry's session_key and seq")
    try:
        entry_json = value.decode("utf-8")
    except UnicodeDecodeError:  # pydantic accepted it, so this cannot happen; still no crash
        return Skip("value: not UTF-8")
    return Upsert(session_key, entry.epoch, seq, entry.entry_id, entry.send_id, entry_json,
                  chain_header(headers))


def _validation_reason(what: str, exc: ValidationError) -> str:
    """Field and problem type of each error, never the input (it can be message text)."""
    parts = []
    for e in exc.errors(include_input=False, include_url=False):
        loc = ".".join(str(p) for p in e["loc"]) or "value"
        parts.append(f"{loc}: {e['type']}")
    reason = "; ".join(parts[:5]) + (f"; +{len(parts) - 5} more" if len(parts) > 5 else "")
    return (f"{what}: " + reason)[:MAX_REASON]


__all__ = [
    "POSITION_PREFIX",
    "POSITION_SCHEMA",
    "Delete",
    "Position",
    "Positioned",
    "Skip",
    "Upsert",
    "chain_header",
    "classify",
    "decode_position",
    "entry_key",
    "furthest",
    "parse_entry_key",
    "parse_key",
    "parse_position_key",
    "position_key",
    "position_value",
]
