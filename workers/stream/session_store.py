"""The worker's session state: the local RocksDB partition stores behind the core's StateView.

Layout (workers/core/state.py): a small head per session and one record per remembered
send_id. During a batch, writes wait in `pending` (read before the store, so a batch sees its
own writes); the processor sends them to the changelog and then applies them locally.

Two kinds of upkeep ride on the batches, a bounded slice each (`sweep`):
- expiry: a send_id the session clock has left more than the dedupe window behind is
  tombstoned (the decision already treats it as absent, so this only frees space);
- migration of format 1 (one value per session holding every send_id): each such record
  becomes a head and its send_ids, and its key is tombstoned. A session is also migrated
  the moment a record of it is decided, so the sweep's pace never matters for correctness.
A stored value that cannot be decoded is never guessed around: the records of that session
(or that send_id) are dead-lettered with the reason, and the value is left for an operator.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

from workers.core import (
    EMPTY_HEAD,
    Seen,
    SessionHead,
    StoreFailure,
    UnreadableState,
    decode_v1,
    head_key,
    parse_seen_key,
    seen_key,
)
from workers.core.control import with_ticket
from workers.core.state import CUTOVER_KEY, SEEN_KEYS_FROM, micros, ticket_key
from workers.stream.local_state import OWN_KEYS  # a store's own bookkeeping: not sessions

log = logging.getLogger("transcript_owner.state")
_MICROSECOND = timedelta(microseconds=1)

Write = tuple[int, bytes, bytes | None]  # (partition, key, value or None for a tombstone)


class SessionStore:
    """StateView over the partition stores, with the batch's pending writes and a head cache.

    `db_for(partition)` returns that partition's store: `get(key) -> bytes | None` and
    `items(from_key=...)` in key order (a rocksdict Rdict, or a test's stand-in).
    Set `partition` before each record: a session's state lives in its input partition.
    """

    def __init__(self, db_for: Callable[[int], Any], dedupe_window: timedelta,
                 cache_size: int = 200_000) -> None:
        self.db_for, self.window, self.cache_size = db_for, dedupe_window, cache_size
        self.partition = 0
        self.pending: dict[tuple[int, bytes], bytes | None] = {}
        self._heads: dict[str, SessionHead] = {}
        self._seen: dict[tuple[str, str], Seen] = {}  # this batch's, decoded
        self._cursors: dict[int, bytes] = {}
        self._turn = -1
        self.expired = self.migrated = 0  # totals, for the log

    # --- StateView ------------------------------------------------------------------------

    def head(self, key: str) -> SessionHead:
        head = self._heads.get(key)
        if head is not None:
            return head
        raw = self._get(head_key(key))
        if raw is not None:
            head = SessionHead.from_bytes(raw)
        else:
            old = self._get(key.encode())
            head = EMPTY_HEAD if old is None else self._migrate(self.partition, key, old)
        self._heads[key] = head
        return head

    def seen(self, key: str, send_id: str) -> Seen | None:
        seen = self._seen.get((key, send_id))
        if seen is not None:
            return seen
        raw = self._get(seen_key(key, send_id))
        return None if raw is None else Seen.from_bytes(raw)

    def ticket(self, key: str, control_offset: int) -> str | None:
        raw = self._get(ticket_key(key, control_offset))
        return None if raw is None else raw.decode("ascii", "replace")

    def cutover(self) -> int | None:
        raw = self._get(CUTOVER_KEY)
        if raw is None:
            return None
        try:
            return int(raw)
        except ValueError:
            raise UnreadableState("the partition's erase cut-over is not an offset") from None

    # --- writes ---------------------------------------------------------------------------

    def hold(self, key: str, control_offset: int, digest: str, keep: bool) -> None:
        """Keep a forwarded erase's ticket, or spend it (workers/core/control.py), in
        `pending` like every write."""
        held = with_ticket(self.ticket(key, control_offset), digest, keep)
        self.pending[(self.partition, ticket_key(key, control_offset))] = \
            None if held is None else held.encode("ascii")

    def set_cutover(self, partition: int, offset: int) -> None:
        """The partition's erase cut-over, written once, with the first batch that reads it."""
        self.pending[(partition, CUTOVER_KEY)] = str(offset).encode("ascii")

    def remember(self, key: str, head: SessionHead | None, seen: tuple[str, Seen] | None) -> None:
        """Store a step's changes (in `pending` until the batch is written)."""
        p = self.partition
        if head is not None:
            self._heads[key] = head
            self.pending[(p, head_key(key))] = head.to_bytes()
        if seen is not None:
            send_id, value = seen
            self._seen[(key, send_id)] = value
            self.pending[(p, seen_key(key, send_id))] = value.to_bytes()

    def erase(self, key: str) -> None:
        """Tombstone the session's stored state (`forget`): its head and every remembered
        send_id — those in the store, found by a prefix scan of the partition's store (seen
        keys of one session sort together, as the sweep relies on), and this batch's pending
        ones. The step then stores the head the erasure leaves (`remember`)."""
        p = self.partition
        self._heads.pop(key, None)
        self.pending[(p, head_key(key))] = None
        for seen in [seen for seen in self._seen if seen[0] == key]:
            del self._seen[seen]
        prefix = seen_key(key, "")[:-3]  # ["s",<session>,   (the JSON of "" and "]" cut)
        for (q, k) in list(self.pending):
            if q == p and k.startswith(prefix):
                self.pending[(q, k)] = None
        for k, _ in self._items(p, prefix):
            if not k.startswith(prefix):
                break
            self.pending[(p, k)] = None
        if self._get(key.encode()) is not None:  # a format-1 record not migrated yet
            self.pending[(p, key.encode())] = None

    def take_writes(self) -> list[Write]:
        """The batch's writes, in the order made; the batch's own seen cache is dropped."""
        writes = [(p, k, v) for (p, k), v in self.pending.items()]
        self.pending.clear()
        self._seen.clear()
        if len(self._heads) > self.cache_size:
            for key in list(self._heads)[: len(self._heads) // 2]:
                del self._heads[key]
        return writes

    def forget_cache(self) -> None:
        """After a rebalance: another worker may have owned these sessions meanwhile."""
        self._heads.clear()
        self._seen.clear()
        self.pending.clear()
        self._cursors.clear()

    # --- upkeep ---------------------------------------------------------------------------

    def sweep(self, partitions: list[int], budget: int) -> None:
        """Look at up to `budget` stored keys, in the next of `partitions` (round robin), from
        where the last sweep of it stopped: tombstone expired send_ids, migrate format-1
        records (into `pending`). The worker sweeps a quarter as many keys as it decides
        records, so a pass over a partition takes about four windows of its input however
        large the store, and a batch pays a bounded, small share for it."""
        if not partitions or budget <= 0:
            return
        self._turn = (self._turn + 1) % len(partitions)
        p = self.partition = partitions[self._turn]
        cursor = self._cursors.get(p, SEEN_KEYS_FROM)
        window_us = self.window // _MICROSECOND
        n, last = 0, None
        prefix: bytes | None = None  # the session of the previous seen key ...
        clock_us: int | None = None  # ... and its clock
        for key, value in self._items(p, cursor):
            if n >= budget:
                break
            n += 1
            last = key
            if (p, key) in self.pending or key.startswith(OWN_KEYS):
                continue
            if key.startswith(SEEN_KEYS_FROM):
                if prefix is None or not key.startswith(prefix):  # sorted: once per session
                    prefix, clock_us = self._session_of(key)
                if clock_us is not None and clock_us - _first_seen_us(value) > window_us \
                        and _readable(value):
                    self.pending[(p, key)] = None
                    self.expired += 1
            elif not key.startswith(b"["):
                self._migrate_found(p, key, value)
        # wrapped round: start again at the first seen key next time
        self._cursors[p] = SEEN_KEYS_FROM if n < budget or last is None else last + b"\0"

    def _session_of(self, key: bytes) -> tuple[bytes, int | None]:
        """The key prefix every seen key of `key`'s session starts with, and that session's
        clock in µs (None: no clock, unreadable head, or not a seen key: expire nothing)."""
        parts = parse_seen_key(key)
        if parts is None:
            return key, None  # matches only itself
        session, _ = parts
        prefix = seen_key(session, "")[:-3]  # ["s",<session>,   (the JSON of "" and "]" cut)
        try:
            clock = self.head(session).clock
        except UnreadableState:
            return prefix, None  # left for an operator; its records say why they are dead letters
        return prefix, None if clock is None else micros(clock)

    def _migrate_found(self, p: int, key: bytes, value: bytes) -> None:
        try:
            session = key.decode()
        except UnicodeDecodeError:
            return
        if session in self._heads or self._get(head_key(session)) is not None:
            # a newer head exists (a format-1 worker ran beside this one): it wins
            log.warning("partition %d: a format-1 state record stands beside a newer head; "
                        "dropping the format-1 record", p)
            self.pending[(p, key)] = None
            return
        try:
            self._heads[session] = self._migrate(p, session, value)
        except UnreadableState as exc:
            log.warning("partition %d: a format-1 state record cannot be migrated (%s); its "
                        "session's records are dead-lettered until it is repaired", p, exc)

    def _migrate(self, p: int, session: str, value: bytes) -> SessionHead:
        """A format-1 value as pending format-2 writes; raises UnreadableState."""
        head, seens = decode_v1(value)
        self.pending[(p, head_key(session))] = head.to_bytes()
        for send_id, seen in seens:
            self._seen[(session, send_id)] = seen
            self.pending[(p, seen_key(session, send_id))] = seen.to_bytes()
        self.pending[(p, session.encode())] = None
        self.migrated += 1
        return head

    # --- the store ------------------------------------------------------------------------

    def _get(self, key: bytes) -> bytes | None:
        p = self.partition
        if (p, key) in self.pending:
            return self.pending[(p, key)]
        try:
            return self.db_for(p).get(key)
        except Exception as exc:  # noqa: BLE001  (the local store failed: infrastructure)
            raise StoreFailure(f"partition {p} store: {type(exc).__name__}: {exc}") from exc

    def _items(self, p: int, cursor: bytes) -> Iterator[tuple[bytes, bytes]]:
        try:
            yield from self.db_for(p).items(from_key=cursor)
        except Exception as exc:  # noqa: BLE001
            raise StoreFailure(f"partition {p} store: {type(exc).__name__}: {exc}") from exc


def _first_seen_us(value: bytes) -> int:
    """first_seen of a stored Seen (`[us,"fp"]`) without decoding it all; far in the future
    if unreadable (never expired: left for an operator, as every unreadable value is)."""
    try:
        return int(value[1 : value.index(b",")])
    except ValueError:
        return 1 << 62


def _readable(value: bytes) -> bool:
    """An unreadable value is left for an operator, never tombstoned."""
    try:
        Seen.from_bytes(value)
    except UnreadableState:
        return False
    return True
