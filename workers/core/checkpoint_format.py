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

    c/<partition>/<slot>/<chunk, 6 digits>  {"schema": "checkpoint-chunk/1", "id", "copy",
                                             "chunk", "items": [[state key, state value], ...]}
    m/<partition>/<slot>                    {"schema": "checkpoint/1", "partition", "id",
                                             "copy", "input_offset", "diagnostics_offset",
                                             "chunks", "keys", "taken_at"}

The manifest (`m/…`) is written after its chunks, in the transaction of its last chunk: a
checkpoint of more than `KEYS_PER_BATCH` state keys is spread over several batches, so over
several transactions of its partition, and is one only once its manifest commits. A chunk
belongs to a manifest when its `id` and `copy` (a token per copy: two copies of one slot in one
bucket share the id) match; a slot's chunks beyond the newest manifest's count are left from
an older, larger checkpoint, and chunks no manifest names from a copy that was interrupted
(kill, SIGTERM, rebalance): both ignored, and overwritten when the slot is used again.
State keys and values are the changelog's bytes as text (UTF-8; any other byte escaped as a
lone surrogate, so they round-trip). `diagnostics_offset`: the offset of
`transcript.diagnostics` partition p at X (every diagnostic of a record before X is below it,
every later one at or above; null when the worker could not tell).

Cost (docs/audit-and-erasure.md): a checkpoint copies the partition's state (a head per session
and a record per send_id remembered in the dedupe window) once per interval: with the default
of a day, one copy per partition per day, and `keep` copies (9: the 7 days of input retention, plus
margin) on disk. Between checkpoints a batch pays one comparison of the clock. A batch carries
at most `KEYS_PER_BATCH` state keys of checkpoints (about 14 MB, built in about 0.1 s), so no
transaction grows with a partition's state. Starting a copy overwrites its slot's chunks, so
while a copy is in progress (or after it was interrupted, until the slot's next copy) the
slot holds no checkpoint: the others still cover the input's retention.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime

from workers.core.errors import OwnerError

CHECKPOINTS = "transcript.checkpoints"
CHUNK_BYTES = 256 * 1024  # a chunk's items, about (the topic's max.message.bytes is 2 MiB)
KEYS_PER_BATCH = 100_000  # state keys of checkpoints a batch (so a transaction) holds at most
# the state store's own bookkeeping (faust's offset key, workers/stream/adapter.py): never state,
# as no state key starts so (they are JSON arrays, or format-1 session keys `agent:…`)
BOOKKEEPING = b"__"
OFFSET_MAX = 2**63 - 1  # a Kafka offset is an INT64
PARTITION_MAX = 2**31 - 1  # and a partition an INT32
MAX_CHUNKS = 999_999  # a chunk's number has 6 digits in its key


def manifest_key(partition: int, slot: int) -> bytes:
    return b"m/%d/%d" % (partition, slot)


def chunk_key(partition: int, slot: int, chunk: int) -> bytes:
    return b"c/%d/%d/%06d" % (partition, slot, chunk)


def _text(raw: bytes) -> str:
    return raw.decode("utf-8", "surrogateescape")


def _raw(text: str) -> bytes:
    return text.encode("utf-8", "surrogateescape")


def _chunk(partition: int, slot: int, ckpt_id: int, copy: str, n: int,
           items: list) -> tuple[bytes, bytes]:
    return chunk_key(partition, slot, n), json.dumps(
        {"schema": "checkpoint-chunk/1", "id": ckpt_id, "copy": copy, "chunk": n,
         "items": items}, separators=(",", ":")).encode()


@dataclass
class Copy:
    """One checkpoint being written: its records come out a bounded part at a time (`step`),
    from an iterator over the state at its input offset (the worker's: a RocksDB snapshot), so
    a partition's state of any size is spread over as many transactions as it needs. The
    manifest comes last, with the last chunk: until it commits, the chunks committed before are
    no checkpoint (a reader ignores a chunk no manifest names)."""

    partition: int
    slot: int
    id: int
    input_offset: int
    diagnostics_offset: int | None
    taken_at: datetime
    items: Iterator[tuple[bytes, bytes]]
    chunks: int = 0
    keys: int = 0
    size: int = 0  # bytes of its records so far
    seconds: float = 0.0  # spent building its records so far
    done: bool = False
    source: object = None  # what `items` reads (a snapshot): held while the copy lasts
    # this copy's token, in each of its chunks and its manifest: two copies of one slot in one
    # bucket (one abandoned, or taken by the partition's next owner) have the same id, and
    # a manifest must never be read with another copy's chunks
    token: str = ""  # drawn by the shell (a random hex string)

    def step(self, budget: float) -> tuple[list[tuple[bytes, bytes]], int]:
        """Its next records, holding at most `budget` (>= 1) state keys, and how many they hold;
        the manifest with the last of them (then `done`)."""
        out: list[tuple[bytes, bytes]] = []
        chunk: list[list[str]] = []
        size = copied = 0

        def flush() -> None:
            nonlocal chunk, size
            out.append(_chunk(self.partition, self.slot, self.id, self.token, self.chunks,
                              chunk))
            self.chunks += 1
            chunk, size = [], 0

        finished = True
        for key, value in self.items:  # resumes where the last step stopped
            if key.startswith(BOOKKEEPING):
                continue
            chunk.append([_text(key), _text(value)])
            size += len(key) + len(value) + 8
            copied += 1
            if size >= CHUNK_BYTES or copied >= budget:
                flush()
                if copied >= budget:
                    finished = False
                    break
        if chunk:
            flush()
        self.keys += copied
        if finished:
            manifest = {"schema": "checkpoint/1", "partition": self.partition, "id": self.id,
                        "copy": self.token, "input_offset": self.input_offset,
                        "diagnostics_offset": self.diagnostics_offset, "chunks": self.chunks,
                        "keys": self.keys, "taken_at": self.taken_at.isoformat()}
            out.append((manifest_key(self.partition, self.slot),
                        json.dumps(manifest, separators=(",", ":")).encode()))
            self.done, self.items, self.source = True, iter(()), None
        self.size += sum(len(k) + len(v) for k, v in out)
        return out, copied


def encode(partition: int, slot: int, ckpt_id: int, input_offset: int,
           diagnostics_offset: int | None, items: Iterable[tuple[bytes, bytes]],
           taken_at: datetime, token: str = "0") -> list[tuple[bytes, bytes]]:
    """A checkpoint as (key, value) records: its chunks, then its manifest."""
    copy = Copy(partition, slot, ckpt_id, input_offset, diagnostics_offset, taken_at, iter(items),
                token=token)
    return copy.step(float("inf"))[0]


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
    (so a reader holds one copy of the state, not `keep`). A record the worker does not write
    (`parse_key`, `read_manifest`, `read_chunk`) is no part of any checkpoint: a slot whose
    newest manifest or one of whose chunks is such a record holds none."""
    latest: dict[bytes, bytes] = {}
    for key, value in records:
        if key is None:
            continue
        try:
            kind, _, key_slot, _ = parse_key(key)
        except Malformed:
            continue  # not the worker's (the audit reports it)
        if kind == "c" and (manifests_only or (slot is not None and key_slot != slot)):
            continue
        if value is None:
            latest.pop(key, None)
        else:
            latest[key] = value
    found: list[Checkpoint] = []
    for key, value in latest.items():
        kind, p, key_slot, _ = parse_key(key)
        if kind != "m" or (slot is not None and key_slot != slot):
            continue
        try:
            m = read_manifest(value, p)
            ckpt = Checkpoint(p, key_slot, m["id"], m["input_offset"],
                              m.get("diagnostics_offset"), m.get("taken_at") or "")
            for i in range(0 if manifests_only else m["chunks"]):
                chunk = read_chunk(latest[chunk_key(p, key_slot, i)])
                if chunk["id"] != ckpt.id or chunk["chunk"] != i \
                        or chunk.get("copy") != m.get("copy"):
                    raise KeyError(i)
                ckpt.items.extend(chunk["items"])
        except (Malformed, KeyError):
            continue  # incomplete (a chunk overwritten by a newer copy into the slot), or not
        found.append(ckpt)  # the worker's
    return sorted(found, key=lambda c: (c.input_offset, c.id))


# --- reading what the worker wrote, trusting none of it ---------------------------------------
# Whoever may write a worker-owned topic (an ACL too wide, an admin tool) can put anything
# there. These read a record strictly, for `decode` here and for `audit` (its other topics).


class Malformed(OwnerError, ValueError):
    """A record of a worker-owned topic that is not one the worker writes. The message says what
    is wrong and never what the record holds (it may hold anything, message text too)."""


# numbers as the worker writes them (%d: no leading zero), so one slot has one key
_MANIFEST_KEY = re.compile(rb"m/(0|[1-9][0-9]{0,9})/(0|[1-9][0-9]{0,9})")
_CHUNK_KEY = re.compile(rb"c/(0|[1-9][0-9]{0,9})/(0|[1-9][0-9]{0,9})/([0-9]{6})")


def parse_key(key: bytes | None) -> tuple[str, int, int, int | None]:
    """("m", partition, slot, None) of a manifest's key, ("c", partition, slot, chunk) of a
    chunk's; Malformed for any other key."""
    if key is None:
        raise Malformed("no key")
    if m := _MANIFEST_KEY.fullmatch(key):
        return "m", int(m[1]), int(m[2]), None
    if m := _CHUNK_KEY.fullmatch(key):
        return "c", int(m[1]), int(m[2]), int(m[3])
    raise Malformed("a key that is neither m/<partition>/<slot> nor "
                    "c/<partition>/<slot>/<chunk, 6 digits>")


def read_manifest(value: bytes | None, partition: int) -> dict:
    """A checkpoint/1 manifest whose key names `partition`, its members checked: one that names
    another partition is not this partition's checkpoint."""
    m = json_object(value)
    if m.get("schema") != "checkpoint/1":
        raise Malformed("not a checkpoint/1 manifest")
    named = whole_member(m, "partition", 0, PARTITION_MAX)
    if named != partition:
        raise Malformed(f"a manifest of partition {named} under a key of partition {partition}")
    whole_member(m, "id", 0, OFFSET_MAX)
    whole_member(m, "input_offset", 0, OFFSET_MAX)
    whole_member(m, "diagnostics_offset", 0, OFFSET_MAX, null=True)
    whole_member(m, "chunks", 0, MAX_CHUNKS)
    text_member(m, "copy", null=True, absent=True)
    text_member(m, "taken_at", absent=True)
    return m


def read_chunk(value: bytes | None) -> dict:
    """A checkpoint-chunk/1, its members checked, its items as (state key, state value)
    bytes: each was written as a [key, value] pair of strings (`_text`)."""
    c = json_object(value)
    if c.get("schema") != "checkpoint-chunk/1":
        raise Malformed("not a checkpoint-chunk/1 chunk")
    whole_member(c, "id", 0, OFFSET_MAX)
    whole_member(c, "chunk", 0, MAX_CHUNKS)
    text_member(c, "copy", null=True, absent=True)
    items = c.get("items")
    try:
        if type(items) is not list or not all(type(i) is list and len(i) == 2 for i in items):
            raise TypeError
        c["items"] = [(_raw(k), _raw(v)) for k, v in items]
    except (TypeError, AttributeError, UnicodeError):  # not str, or a surrogate _text never
        raise Malformed("items: not a list of [key, value] strings") from None  # writes
    return c


def json_object(raw: bytes | None) -> dict:
    """The JSON object a worker-owned record holds, read strictly: UTF-8, no NaN or Infinity, no
    member named twice (DESIGN 1.2: two parsers would read it two ways); Malformed otherwise."""
    if raw is None:
        raise Malformed("no value")
    try:
        doc = json.loads(raw.decode("utf-8"), object_pairs_hook=_members,
                         parse_constant=_no_constant)
    except Malformed:
        raise
    except UnicodeDecodeError:
        raise Malformed("not UTF-8") from None
    except RecursionError:
        raise Malformed("not JSON: nested too deeply") from None
    except ValueError:
        raise Malformed("not JSON") from None
    if not isinstance(doc, dict):
        what = {list: "an array", str: "a string", bool: "true or false", type(None): "null"}
        raise Malformed(f"JSON {what.get(type(doc), 'a number')}, not an object")
    return doc


def whole_member(doc: dict, name: str, lowest: int, highest: int, *,
                 null: bool = False) -> int | None:
    """Member `name`, a whole number from `lowest` to `highest` (None with `null`)."""
    if name not in doc:
        raise Malformed(f"{name}: missing")
    value = doc[name]
    if value is None and null:
        return None
    if type(value) is not int or not lowest <= value <= highest:
        raise Malformed(f"{name}: not a whole number from {lowest} to {highest}")
    return value


def text_member(doc: dict, name: str, *, null: bool = False, absent: bool = False
                ) -> str | None:
    """Member `name`, a string of Unicode text (one a UTF-8 key can hold), or None when it may
    be null or absent."""
    if name not in doc and absent:
        return None
    if name not in doc:
        raise Malformed(f"{name}: missing")
    value = doc[name]
    if value is None and null:
        return None
    if type(value) is not str:
        raise Malformed(f"{name}: not a string")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise Malformed(f"{name}: not Unicode text (a lone surrogate)") from None
    return value


def _members(pairs: list[tuple[str, object]]) -> dict:
    doc = dict(pairs)
    if len(doc) != len(pairs):
        raise Malformed("an object names a member twice")
    return doc


def _no_constant(name: str) -> object:
    raise Malformed("not JSON: NaN/Infinity are not JSON")
