"""Checkpoints: the session state of an input partition at an input offset, for `audit`.

The input topic keeps 7 days; entries are kept forever. An audit that replays the input from its
start with empty state is exact only while nothing was deleted from the input. So the worker
writes, per input partition, every `interval` seconds, a *checkpoint*: the partition's whole
session state at an input offset X (the state after every record before X, before any at or
after X), in the same Kafka transaction as the partition's batch that starts at X. `audit`
replays a partition whose input no longer starts at offset 0 from its oldest checkpoint at or
after the retained start, with that state.

Why a copy of the state, not a pointer into the changelog: the changelog is compacted. Reading
it up to the offset C it had at X gives, per key, the newest value at or before C *only if no
newer value of that key exists after C*; compaction removes a value once a newer one exists
anywhere later in the log (a session head is rewritten by every entry; a remembered send_id
is tombstoned when it expires). So "changelog up to C" is not the state at X, and nothing but a
copy taken at X is.

Topic `transcript.checkpoints` (compacted, co-partitioned with the input: partition p holds the
checkpoints of input partition p). A checkpoint goes to one of `keep` *slots*, its id being the
time bucket it was taken in (`floor(unix time / interval)`) and its slot `id mod keep`, so the
topic holds at most `keep` checkpoints per partition (a ring: compaction drops the one a slot
held before) without the worker reading the topic. Keys and values (JSON, UTF-8):

    c/<partition>/<slot>/<chunk, 6 digits>  {"schema": "checkpoint-chunk/1", "id", "chunk",
                                             "items": [[state key, state value], ...]}
    m/<partition>/<slot>                    {"schema": "checkpoint/1", "partition", "id",
                                             "input_offset", "diagnostics_offset", "chunks",
                                             "keys", "taken_at"}

The manifest (`m/…`) is written after its chunks in the same transaction; a chunk belongs to a
manifest when its `id` matches (a slot's chunks beyond the newest manifest's count are left
from an older, larger checkpoint: ignored, and overwritten when the slot is used again).
State keys and values are the changelog's bytes as text (UTF-8; any other byte escaped as a
lone surrogate, so they round-trip). `diagnostics_offset`: the offset of
`transcript.diagnostics` partition p at X (every diagnostic of a record before X is below it,
every later one at or above; null when the worker could not tell).

Cost (README, "Audit"): a checkpoint copies the partition's state (a head per session and a
record per send_id remembered in the dedupe window) once per interval: with the default of a
day, one copy per partition per day, and `keep` copies (9: the 7 days of input retention, plus
margin) on disk. Between checkpoints a batch pays one comparison of the clock.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime

CHECKPOINTS = "transcript.checkpoints"
CHUNK_BYTES = 256 * 1024  # a chunk's items, about (the topic's max.message.bytes is 2 MiB)
KEYS_PER_BATCH = 100_000  # state keys a batch copies at most (one partition more, at least)
FAUST_KEYS = b"__faust"  # faust's own bookkeeping in the partition stores: not state


def manifest_key(partition: int, slot: int) -> bytes:
    return b"m/%d/%d" % (partition, slot)


def chunk_key(partition: int, slot: int, chunk: int) -> bytes:
    return b"c/%d/%d/%06d" % (partition, slot, chunk)


def _text(raw: bytes) -> str:
    return raw.decode("utf-8", "surrogateescape")


def _raw(text: str) -> bytes:
    return text.encode("utf-8", "surrogateescape")


def encode(partition: int, slot: int, ckpt_id: int, input_offset: int,
           diagnostics_offset: int | None, items: Iterable[tuple[bytes, bytes]],
           taken_at: datetime) -> list[tuple[bytes, bytes]]:
    """A checkpoint as (key, value) records: its chunks, then its manifest."""
    out: list[tuple[bytes, bytes]] = []
    chunk: list[list[str]] = []
    size = keys = 0

    def flush() -> None:
        nonlocal chunk, size
        value = json.dumps({"schema": "checkpoint-chunk/1", "id": ckpt_id, "chunk": len(out),
                            "items": chunk}, separators=(",", ":")).encode()
        out.append((chunk_key(partition, slot, len(out)), value))
        chunk, size = [], 0

    for key, value in items:
        if key.startswith(FAUST_KEYS):
            continue
        chunk.append([_text(key), _text(value)])
        size += len(key) + len(value) + 8
        keys += 1
        if size >= CHUNK_BYTES:
            flush()
    if chunk:
        flush()
    manifest = {"schema": "checkpoint/1", "partition": partition, "id": ckpt_id,
                "input_offset": input_offset, "diagnostics_offset": diagnostics_offset,
                "chunks": len(out), "keys": keys, "taken_at": taken_at.isoformat()}
    out.append((manifest_key(partition, slot),
                json.dumps(manifest, separators=(",", ":")).encode()))
    return out


@dataclass
class Checkpoint:
    """One complete checkpoint, as `audit` reads it back."""

    partition: int
    slot: int
    id: int
    input_offset: int
    diagnostics_offset: int | None
    taken_at: str
    items: list[tuple[bytes, bytes]] = field(default_factory=list)


def decode(records: Iterable[tuple[bytes | None, bytes | None]], *, slot: int | None = None,
           manifests_only: bool = False) -> list[Checkpoint]:
    """The complete checkpoints among the records of one partition of the checkpoints topic
    (read in offset order, read_committed), oldest input offset first. `manifests_only`: their
    manifests, without reading the state (unchecked); `slot`: only the checkpoint of that slot
    (so a reader holds one copy of the state, not `keep`)."""
    latest: dict[bytes, bytes] = {}
    for key, value in records:
        if key is None:
            continue
        if key.startswith(b"c/") and (
                manifests_only or (slot is not None and int(key.split(b"/")[2]) != slot)):
            continue
        if value is None:
            latest.pop(key, None)
        else:
            latest[key] = value
    found: list[Checkpoint] = []
    for key, value in latest.items():
        if not key.startswith(b"m/"):
            continue
        try:
            m = json.loads(value)
            _, p, slot_text = key.decode().split("/")
            if slot is not None and int(slot_text) != slot:
                continue
            ckpt = Checkpoint(m["partition"], int(slot_text), m["id"], m["input_offset"],
                              m.get("diagnostics_offset"), m.get("taken_at", ""))
            for i in range(0 if manifests_only else m["chunks"]):
                chunk = json.loads(latest[chunk_key(int(p), int(slot_text), i)])
                if chunk["id"] != ckpt.id or chunk["chunk"] != i:
                    raise KeyError(i)
                ckpt.items.extend((_raw(k), _raw(v)) for k, v in chunk["items"])
        except (ValueError, KeyError, TypeError):
            continue  # incomplete (a chunk overwritten by a newer checkpoint of the slot)
        found.append(ckpt)
    return sorted(found, key=lambda c: (c.input_offset, c.id))


class Checkpointer:
    """The worker's side: when a checkpoint is due, and the records that make it.

    `due(now)` once per batch (one division); when a new time bucket has begun, every partition
    of the generation whose position moved since its last checkpoint gets one, spread over the
    next batches: `take` copies partitions until it has copied `KEYS_PER_BATCH` state keys (at
    least one partition), so no batch stalls for the whole state of a worker.
    The first bucket of a process is not checkpointed at once (a restart does not copy the
    state again); the next bucket boundary is."""

    def __init__(self, topic: str, interval_s: float, keep: int) -> None:
        self.topic, self.interval_s, self.keep = topic, interval_s, keep
        self._bucket: int | None = None
        self._fresh = False  # a new bucket began: every partition is due
        self._pending: set[int] = set()  # partitions still due in this bucket
        self._at: dict[int, int] = {}  # partition -> input offset of its last checkpoint
        self.diagnostics_next: dict[int, int | None] = {}  # partition -> diagnostics end
        self.taken = 0  # checkpoints written (for the log and the bench)
        self.seconds = 0.0  # time spent building them
        self.last = (0, 0, 0.0)  # the last take's state keys, bytes and seconds

    def due(self, wall_s: float) -> bool:
        bucket = int(wall_s // self.interval_s)
        if self._bucket is None:
            self._bucket = bucket
            return False
        if bucket != self._bucket:
            self._bucket, self._fresh = bucket, True
            return True
        return bool(self._pending)

    def take(self, wall_s: float, positions: dict[int, int], db_for) -> dict[int, list]:  # noqa: ANN001
        """The checkpoint records of each partition at `positions` (input offset X: the state
        in the partition's store is the state at X), as the processor's Records."""
        import time

        began = time.monotonic()
        bucket = self._bucket
        if self._fresh:
            self._pending, self._fresh = set(positions), False
        taken_at = datetime.fromtimestamp(wall_s, UTC)
        out: dict[int, list] = {}
        keys = size = 0
        for p in sorted(self._pending):
            if keys >= KEYS_PER_BATCH:
                break
            self._pending.discard(p)
            x = positions.get(p)
            if x is None or self._at.get(p) == x:
                continue  # not ours now, or nothing processed since its last checkpoint
            records = encode(p, bucket % self.keep, bucket, x, self.diagnostics_next.get(p),
                             _items(db_for(p)), taken_at)
            out[p] = [(self.topic, p, k, v, ()) for k, v in records]
            keys += json.loads(records[-1][1])["keys"]
            size += sum(len(k) + len(v) for k, v in records)
            self._at[p] = x
            self.taken += 1
        spent = time.monotonic() - began
        self.seconds += spent
        self.last = (keys, size, spent)
        return out

    def note_sent(self, partition: int, diagnostics_topic: str,
                  records: list, offsets: list[int]) -> None:
        """After a partition's transaction committed: where its diagnostics partition ends."""
        for i in range(len(records) - 1, -1, -1):
            r = records[i]
            if r[0] == diagnostics_topic and r[1] == partition:
                self.diagnostics_next[partition] = offsets[i] + 1
                return

    def forget(self) -> None:
        """A new generation: positions and diagnostics ends are read again."""
        self._at.clear()
        self.diagnostics_next.clear()


def _items(db) -> Iterator[tuple[bytes, bytes]]:  # noqa: ANN001
    yield from db.items()
