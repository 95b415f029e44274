"""Per-session state the decision function folds over, and its bytes for the state store.

The layout is that of Kafka Streams' windowed stores: no record grows with a session's
history, and a write costs O(1).

- the **head** of a session (`SessionHead`): the reset count, the next sequence number, the
  dedupe clock and the last reset. One small record per session, key `["h",<session_key>]`.
- a **ticket** per erase forwarded from transcript.control and not yet applied, key
  `["e",<session_key>,<control offset>]`, and the partition's erase cut-over, key
  `["cutover"]` (workers/core/control.py);
- one **seen** record per remembered send_id (`Seen`: when it was first seen on the session
  clock, and its content fingerprint), key `["s",<session_key>,<send_id>]`. It expires when
  the session clock has moved more than the dedupe window past it: the decision then treats
  it as absent, and the worker's sweep tombstones it.

Keys are compact JSON arrays (unambiguous whatever a key holds, readable in the changelog);
values are compact JSON with times as integer microseconds since 1970 UTC.

Format 1 (before 0.2) kept the whole dedupe memory in one value under the bare session key,
re-encoded on every write; a busy chat outgrew the changelog's message limit. `decode_v1`
reads it for the migration. Bare keys sort after every `[` key, so a store can find its
format-1 records with one seek.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from json.encoder import encode_basestring  # what json.dumps(ensure_ascii=False) uses for str
from typing import NamedTuple

from transcript_connector.chain import parse_chain

from workers.core.errors import OwnerError

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)
_HEAD_FORMAT = 2
_V1_FORMAT = 1
# Stored times are checked on the way back in: a value outside this range is corrupt.
_MIN_US, _MAX_US = 0, 32_503_680_000 * 1_000_000  # 1970-01-01 .. 3000-01-01
V1_KEYS_FROM = b"\\"  # the first byte after "[": format-1 (bare) keys sort from here
UNKNOWN_FINGERPRINT = ""  # a send_id migrated from format 1: its content is not comparable


class UnreadableState(OwnerError, ValueError):
    """A stored state record that cannot be decoded (corrupt, or from an unknown format)."""


class SessionHead(NamedTuple):
    """What one session remembers besides its send_ids.

    `clock` is the dedupe window's clock: the latest `confirmed_at` seen in the session,
    moved only by records no more than the skew allowance ahead of the worker's clock, so
    no connector can push it (DESIGN rule 3).
    """

    epoch: int = 0
    next_seq: int = 1
    clock: datetime | None = None
    last_reset_at: datetime | None = None
    # when the session was last erased (`forget`): a confirmation confirmed at or before it is
    # a send of the erased history, and is not written again (its send_id was forgotten)
    erased_at: datetime | None = None
    # the last entry's chain (32 bytes, DESIGN 1.2 "Tamper evidence"); None: the next entry
    # starts a chain at the root of its epoch (a new session, an erased one, or one whose
    # entries were written before the chain: it has none until its next entry)
    chain: bytes | None = None
    # the seq the session's chain starts at: set by the entry that starts it, and by an
    # erasure (the seq the next chain starts at); an entry at or after it without a chain is
    # a finding. None: not known (a head written before heads recorded it, or no chain yet)
    chain_from: int | None = None
    # the lowest seq that may be live: every seq below it was erased (an entry there is a
    # finding), and one from here to `chain_from` without a chain was written before the
    # chain. 1 for a session never erased; None: not known (erased before heads recorded it)
    live_from: int | None = None

    def to_bytes(self) -> bytes:
        # `erased_at`, `chain`, `chain_from` and `live_from` only when set: a head written
        # before any of them keeps its bytes
        erased = b"" if self.erased_at is None else b',"erased_at":%d' % micros(self.erased_at)
        chain = b"" if self.chain is None else b',"chain":"%b"' % self.chain.hex().encode()
        start = b"" if self.chain_from is None else b',"chain_from":%d' % self.chain_from
        live = b"" if self.live_from is None else b',"live_from":%d' % self.live_from
        return b'{"v":%d,"epoch":%d,"next_seq":%d,"clock":%b,"last_reset_at":%b%b%b%b%b}' % (
            _HEAD_FORMAT,
            self.epoch,
            self.next_seq,
            _json_micros(self.clock),
            _json_micros(self.last_reset_at),
            erased,
            chain,
            start,
            live,
        )

    @classmethod
    def from_bytes(cls, data: bytes) -> SessionHead:
        doc = _loads(data)
        if not isinstance(doc, dict) or doc.get("v") != _HEAD_FORMAT:
            raise UnreadableState(f"not a session head of format {_HEAD_FORMAT}")
        return cls(
            epoch=_count(doc.get("epoch"), 0, "epoch"),
            next_seq=_count(doc.get("next_seq"), 1, "next_seq"),
            clock=_time(doc.get("clock"), "clock"),
            last_reset_at=_time(doc.get("last_reset_at"), "last_reset_at"),
            erased_at=_time(doc.get("erased_at"), "erased_at"),
            chain=_chain(doc.get("chain")),
            chain_from=_seq(doc.get("chain_from"), "chain_from"),
            live_from=_seq(doc.get("live_from"), "live_from"),
        )


EMPTY_HEAD = SessionHead()


class Seen(NamedTuple):
    """When a send_id was first seen (session clock) and the fingerprint of its content."""

    first_seen: datetime
    fingerprint: str

    def to_bytes(self) -> bytes:
        return b"[%d,%s]" % (micros(self.first_seen), encode_basestring(self.fingerprint).encode())

    @classmethod
    def from_bytes(cls, data: bytes) -> Seen:
        doc = _loads(data)
        if not (isinstance(doc, list) and len(doc) == 2 and isinstance(doc[1], str)):
            raise UnreadableState("not a seen record")
        first = _time(doc[0], "first_seen")
        if first is None:
            raise UnreadableState("seen record without first_seen")
        return cls(first, doc[1])


def micros(at: datetime) -> int:
    """`at` as integer microseconds since 1970 UTC, the state store's time format."""
    return (at - _EPOCH) // _MICROSECOND


# --- keys ---------------------------------------------------------------------------------


def head_key(session_key: str) -> bytes:
    return b'["h",%s]' % encode_basestring(session_key).encode()


def seen_key(session_key: str, send_id: str) -> bytes:
    return b'["s",%s,%s]' % (
        encode_basestring(session_key).encode(),
        encode_basestring(send_id).encode(),
    )


SEEN_KEYS_FROM = b'["s",'  # every seen key starts so, and sorts after every head key


def ticket_key(session_key: str, control_offset: int) -> bytes:
    """A forwarded erase the session waits for (workers/core/control.py): value, its digest.
    Sorts before every head and seen key, so the sweep never visits it."""
    return b'["e",%s,%d]' % (encode_basestring(session_key).encode(), control_offset)


# the partition's erase cut-over (workers/core/control.py): value, the input offset in ASCII
CUTOVER_KEY = b'["cutover"]'


def parse_seen_key(key: bytes) -> tuple[str, str] | None:
    """(session_key, send_id) of a seen key; None for any other key."""
    if not key.startswith(SEEN_KEYS_FROM):
        return None
    try:
        doc = json.loads(key)
    except ValueError:
        return None
    if len(doc) != 3 or not all(isinstance(part, str) for part in doc):
        return None
    return doc[1], doc[2]


# --- format 1 -----------------------------------------------------------------------------


def decode_v1(data: bytes) -> tuple[SessionHead, list[tuple[str, Seen]]]:
    """A format-1 value as a head and its send_ids. Fingerprints are not carried over: the
    fingerprint's definition changed with format 2 (DESIGN rule 3, "content"), so a retry of
    a send seen before the migration is a duplicate whatever it holds."""
    doc = _loads(data)
    if not isinstance(doc, dict) or doc.get("v") != _V1_FORMAT:
        raise UnreadableState(f"not a session state of format {_V1_FORMAT}")
    head = SessionHead(
        epoch=_count(doc.get("epoch"), 0, "epoch"),
        next_seq=_count(doc.get("next_seq"), 1, "next_seq"),
        clock=_time(doc.get("clock"), "clock"),
        last_reset_at=_time(doc.get("last_reset_at"), "last_reset_at"),
    )
    seen = doc.get("seen")
    if not isinstance(seen, list):
        raise UnreadableState("seen: not a list")
    out: list[tuple[str, Seen]] = []
    for item in seen:
        if not (isinstance(item, list) and len(item) == 3 and isinstance(item[0], str)):
            raise UnreadableState("seen: not [send_id, first_seen, fingerprint]")
        first = _time(item[1], "seen.first_seen")
        if first is None:
            raise UnreadableState("seen: first_seen missing")
        out.append((item[0], Seen(first, UNKNOWN_FINGERPRINT)))
    return head, out


# --- helpers ------------------------------------------------------------------------------


def _loads(data: bytes) -> object:
    try:
        return json.loads(data)
    except (ValueError, RecursionError) as exc:
        raise UnreadableState(f"not JSON ({type(exc).__name__})") from None


def _count(value: object, least: int, field: str) -> int:
    if type(value) is not int or value < least:
        raise UnreadableState(f"{field}: not an integer >= {least}")
    return value


def _seq(value: object, field: str) -> int | None:
    """A seq the head may hold (absent: None, not known)."""
    return None if value is None else _count(value, 1, field)


def _time(value: object, field: str) -> datetime | None:
    if value is None:
        return None
    if type(value) is not int or not _MIN_US <= value < _MAX_US:
        raise UnreadableState(f"{field}: not a time in 1970..2999")
    return _EPOCH + value * _MICROSECOND


def _chain(value: object) -> bytes | None:
    if value is None:
        return None
    chain = parse_chain(value) if type(value) is str else None
    if chain is None:
        raise UnreadableState("chain: not 64 lowercase hex digits")
    return chain


def _json_micros(at: datetime | None) -> bytes:
    return b"null" if at is None else b"%d" % micros(at)


__all__ = [
    "CUTOVER_KEY",
    "EMPTY_HEAD",
    "SEEN_KEYS_FROM",
    "UNKNOWN_FINGERPRINT",
    "V1_KEYS_FROM",
    "Seen",
    "SessionHead",
    "UnreadableState",
    "decode_v1",
    "head_key",
    "micros",
    "parse_seen_key",
    "seen_key",
    "ticket_key",
]
