"""Per-session state the decision function folds over, and its bytes for the state store.

One SessionState per canonical session key. It is all the decision needs to remember:
the reset count, the next sequence number, the dedupe memory and its clock.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from workers.core.seen import EMPTY_SEEN, Seen, SeenMap, micros

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)
_FORMAT = 1  # bump when the byte layout changes; from_bytes refuses what it does not know


@dataclass(frozen=True, slots=True)
class SessionState:
    """What one session remembers between records.

    `clock` is the latest `confirmed_at` seen in the session: the dedupe window is measured
    on it (event time, not wall time), so a replay decides exactly as the live worker did.
    `seen` maps send_id -> Seen; an immutable SeenMap (a plain mapping given here is
    converted).
    """

    epoch: int = 0
    next_seq: int = 1
    clock: datetime | None = None
    last_reset_at: datetime | None = None
    seen: Mapping[str, Seen] = EMPTY_SEEN

    def __post_init__(self) -> None:
        if not isinstance(self.seen, SeenMap):
            object.__setattr__(self, "seen", SeenMap(self.seen.items()))

    @property
    def seen_map(self) -> SeenMap:
        """`seen` as the SeenMap it always is (for its persistent-update methods)."""
        return self.seen  # type: ignore[return-value]  # converted in __post_init__

    def to_bytes(self) -> bytes:
        """Compact JSON for the state store; times as integer microseconds since 1970 UTC.

        The bytes of json.dumps(doc, separators=(",", ":"), ensure_ascii=False) for
        {"v", "epoch", "next_seq", "clock", "last_reset_at", "seen": [[send_id, us, fp], …]},
        written by hand around the entries' memoized bytes (SeenMap.json_items).
        """
        head = b'{"v":%d,"epoch":%d,"next_seq":%d,"clock":%b,"last_reset_at":%b,"seen":[' % (
            _FORMAT,
            self.epoch,
            self.next_seq,
            _json_micros(self.clock),
            _json_micros(self.last_reset_at),
        )
        return self.seen_map.json_items(head, b"]}")

    @classmethod
    def from_bytes(cls, data: bytes) -> SessionState:
        """Inverse of to_bytes (times come back in UTC; they compare equal as instants)."""
        doc = json.loads(data)
        if doc.get("v") != _FORMAT:
            raise ValueError(f"unknown SessionState format {doc.get('v')!r}")
        # tuple.__new__: Seen(...) would run NamedTuple's __new__, in Python, for every entry.
        new, epoch, us = tuple.__new__, _EPOCH, _MICROSECOND
        return cls(
            epoch=doc["epoch"],
            next_seq=doc["next_seq"],
            clock=_from_micros(doc["clock"]),
            last_reset_at=_from_micros(doc["last_reset_at"]),
            seen=SeenMap([(k, new(Seen, (epoch + t * us, fp))) for k, t, fp in doc["seen"]]),
        )


def _json_micros(at: datetime | None) -> bytes:
    return b"null" if at is None else b"%d" % micros(at)


def _from_micros(us: int | None) -> datetime | None:
    return None if us is None else _EPOCH + us * _MICROSECOND


EMPTY_STATE = SessionState()

__all__ = ["EMPTY_STATE", "SessionState"]
