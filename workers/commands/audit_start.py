"""Where `audit` starts each input partition, and with what state (core/checkpoint_format.py).

A partition whose input still starts at offset 0 is replayed from there with empty state, as it
always was. A partition whose oldest records are gone (retention, `delete_records`) is replayed
from its *oldest* checkpoint at or after the retained start (the most input that can still be
checked), with the session state the checkpoint holds. Its entries then fall in two parts:
- those a session had before the checkpoint (seq below the checkpoint's `next_seq` for it):
  their input is gone, so they are checked for what can be checked without it (`older`): each
  seq 1..next_seq-1 of every session in the checkpoint is present (`missing` otherwise), none is
  rewritten, seqs are contiguous (`order`). A session erased before the checkpoint (its head has
  `erased_at`) is checked against its session-erasure/1 record in transcript.erasures: seqs
  1..through_seq were tombstoned by the erasure and must hold no live value (`unexpected`
  otherwise), seqs through_seq+1..next_seq-1 were written after it and must be present, as any
  other session's; without that record its entries cannot be told apart (`erasures_missing`);
- every later one is replayed and compared, exactly as from the start.
Diagnostics are compared from the checkpoint's `diagnostics_offset`, dead letters from its input
offset on. No checkpoint at or after the retained start: the audit cannot run (exit 2).

Anyone who may write the checkpoints topic can put anything there. Each record read that the
worker does not write (a key of no checkpoint's form, a manifest of the wrong shape or naming
another partition, a chunk or a state record that does not decode) is a `malformed` finding,
and a checkpoint it spoils is not used: the next usable one is. A partition left with no usable
checkpoint because of such records is `unaudited` (a finding: exit 1, the other partitions are
audited), not a reason to stop.
"""

from __future__ import annotations

import json
from collections.abc import Container, Iterator, Mapping, Sequence
from datetime import datetime
from typing import Protocol

from workers.core import MemoryState, Seen, SessionHead, UnreadableState, decode_v1
from workers.core.checkpoint_format import (
    BOOKKEEPING,
    CHECKPOINTS,
    Checkpoint,
    Malformed,
    decode,
    manifest_key,
    parse_key,
    read_chunk,
    read_manifest,
)
from workers.core.errors import OwnerError
from workers.core.outputs import entry_key

__all__ = ["Findings", "NoCheckpoint", "before", "entry_key", "entry_position", "erased_before",
           "older", "starts", "state_of"]


class NoCheckpoint(OwnerError):
    """A partition's input no longer starts at 0 and no checkpoint covers what is left."""


class Findings(Protocol):
    """Where `starts` reports (the audit's report)."""

    def malformed(self, topic: str, partition: int, offset: int, what: str) -> None: ...

    def find(self, kind: str, what: str) -> None: ...


def log_starts(ks, topic: str, partitions: list[int]) -> dict[int, int]:  # noqa: ANN001
    from kafka import TopicPartition

    from workers.kafka_io import consumer

    c = consumer(ks)
    try:
        tps = [TopicPartition(topic, p) for p in partitions]
        return {tp.partition: off for tp, off in c.beginning_offsets(tps).items()}
    finally:
        c.close()


def starts(ks, input_topic: str, ends: dict[int, int],  # noqa: ANN001
           findings: Findings) -> dict[int, Checkpoint | None]:
    """Per input partition, the checkpoint to start from (None: from offset 0, empty state); a
    partition left out is `unaudited` (no usable checkpoint, malformed records among them)."""
    from workers.kafka_io import end_offsets

    first = log_starts(ks, input_topic, sorted(ends))
    out: dict[int, Checkpoint | None] = {p: None for p in ends}
    truncated = sorted(p for p, start in first.items() if start > 0)
    if not truncated:
        return out
    topic = ks.topic(CHECKPOINTS)
    have = end_offsets(ks, topic)
    for p in truncated:
        records = _Records(ks, topic, p, findings)
        # the manifests first, then the state of one checkpoint: one copy in memory
        found = [c for c in (decode(records.read(), manifests_only=True) if p in have else [])
                 if c.partition == p]
        for c in found:
            if c.input_offset > ends[p]:  # of no checkpoint of this input
                records.malformed(records.manifests[manifest_key(p, c.slot)],
                                  f"input_offset {c.input_offset} is past the end of input "
                                  f"partition {p} ({ends[p]})")
        for candidate in (c for c in found if first[p] <= c.input_offset <= ends[p]):
            at = records.manifests[manifest_key(p, candidate.slot)]
            full = [c for c in decode(records.read(candidate.slot), slot=candidate.slot)
                    if c.id == candidate.id and c.partition == p]
            if not full:
                continue  # incomplete (its slot being copied again), or a chunk malformed
            try:
                state_of(full[0])
            except Malformed as exc:
                records.malformed(at, f"checkpoint {candidate.id}: {exc}")
                continue
            out[p] = full[0]
            break
        else:
            if not records.bad:
                raise NoCheckpoint(
                    f"partition {p} of {input_topic} starts at offset {first[p]} (older records "
                    f"deleted) and {topic} holds no checkpoint of it at or after that offset "
                    f"({len(found)} checkpoints of it, none usable); it cannot be replayed "
                    "exactly")
            findings.find("unaudited", f"{input_topic} partition {p}: starts at offset "
                          f"{first[p]} and no checkpoint of it in {topic} is usable "
                          f"({records.bad} malformed records): not audited")
            del out[p]
    return out


class _Records:
    """Partition p of the checkpoints topic, read for `decode`; each record the worker does not
    write is reported (`malformed`) and counted."""

    def __init__(self, ks, topic: str, partition: int, findings: Findings) -> None:  # noqa: ANN001
        self.ks, self.topic, self.partition, self.findings = ks, topic, partition, findings
        self.manifests: dict[bytes, int] = {}  # manifest key -> the offset of its latest record
        self.bad = 0

    def read(self, chunks_of: int | None = None) -> Iterator[tuple[bytes | None, bytes | None]]:
        """Its records; checked: the keys and manifests, or (`chunks_of`) only the chunks of
        that slot (a chunk is read only when its checkpoint is; keys were checked before)."""
        from workers.kafka_io import read

        for r in read(self.ks, self.topic, partitions=[self.partition]):
            what = _problem(r.key, r.value, self.partition, chunks_of)
            if what is not None:
                self.malformed(r.offset, what)
            elif chunks_of is None and r.key.startswith(b"m/"):
                self.manifests[r.key] = r.offset
            yield r.key, r.value

    def malformed(self, offset: int, what: str) -> None:
        self.findings.malformed(self.topic, self.partition, offset, what)
        self.bad += 1


def _problem(key: bytes | None, value: bytes | None, partition: int,
             chunks_of: int | None) -> str | None:
    """What is wrong with a record of `partition` of the checkpoints topic, or None."""
    try:
        if chunks_of is None:
            kind, p, _, _ = parse_key(key)
            if p != partition:
                raise Malformed(f"a key of partition {p}")
            if kind == "m" and value is not None:
                read_manifest(value, p)
            return None
        try:
            kind, p, slot, _ = parse_key(key)
        except Malformed:
            return None  # reported by the first reading
        if kind == "c" and p == partition and slot == chunks_of and value is not None:
            read_chunk(value)
    except Malformed as exc:
        return str(exc)
    return None


def state_of(checkpoint: Checkpoint) -> MemoryState:
    """The session state a checkpoint holds, as the audit's store; Malformed when one of its
    state records is not one the worker writes (it says which, by position)."""
    state = MemoryState()
    for i, (key, value) in enumerate(checkpoint.items):
        if key.startswith(BOOKKEEPING):
            continue
        try:
            if key.startswith(b'["h",'):
                _, session = _state_key(key, 2)
                state.heads[session] = SessionHead.from_bytes(value)
            elif key.startswith(b'["s",'):
                _, session, send_id = _state_key(key, 3)
                state.seens[(session, send_id)] = Seen.from_bytes(value)
            elif not key.startswith(b"["):  # format 1 (before 0.2), not yet migrated
                session = key.decode()
                head, seens = decode_v1(value)
                state.heads.setdefault(session, head)
                for send_id, seen in seens:
                    state.seens.setdefault((session, send_id), seen)
        except UnreadableState as exc:
            raise Malformed(f"state record {i + 1} of {len(checkpoint.items)}: {exc}") from None
        except (Malformed, UnicodeDecodeError):
            raise Malformed(f"state record {i + 1} of {len(checkpoint.items)}: a key of no "
                            "state record's form") from None
    return state


def _state_key(key: bytes, n: int) -> list[str]:
    """A head's or a seen record's key: a JSON array of `n` strings of Unicode text."""
    try:
        doc = json.loads(key)
        if type(doc) is list and len(doc) == n and all(type(x) is str for x in doc):
            for x in doc:
                x.encode("utf-8")
            return doc
    except (ValueError, RecursionError):  # UnicodeError among them
        pass
    raise Malformed("a key of no state record's form")


def before(state: MemoryState) -> dict[str, int]:
    """Per session of a checkpoint, its next seq there: its entries below it are older."""
    return {session: head.next_seq for session, head in state.heads.items()}


def entry_position(key: bytes) -> tuple[str, int] | None:
    """(session, seq) of an entry key `<session>#<seq>`."""
    try:
        session, seq = key.decode().rsplit("#", 1)
        return session, int(seq)
    except ValueError:
        return None


def erased_before(state: MemoryState, erasures: Mapping[str, Sequence[dict]]
                  ) -> dict[str, int | None]:
    """Per session a checkpoint holds as erased (its head has `erased_at`): the `through_seq` of
    that erasure, from its session-erasure/1 record among `erasures` (session key -> its
    records in transcript.erasures, oldest first): the latest one with the head's `erased_at`,
    an epoch the head has reached and a `through_seq` below the head's next seq. None when
    there is no such record (compacted away behind a later erasure, or never written)."""
    out: dict[str, int | None] = {}
    for session, head in state.heads.items():
        if head.erased_at is None:
            continue
        through = None
        for record in erasures.get(session, ()):
            try:
                at = datetime.fromisoformat(record["erased_at"])
                if at == head.erased_at and record["epoch"] <= head.epoch \
                        and record["through_seq"] < head.next_seq:
                    through = int(record["through_seq"])
            except (KeyError, TypeError, ValueError):
                continue  # not an erasure record the worker writes: it explains nothing
        out[session] = through
    return out


def older(next_seqs: Mapping[str, int], erased: Mapping[str, int | None],
          tombstoned: Container[bytes], live: Container[bytes], erased_again: Container[str]
          ) -> Iterator[tuple[str, bytes]]:
    """Findings about the entries a checkpoint's sessions had before it, whose input is gone
    (kind, entry key or session key). `next_seqs`: each session's next seq at the checkpoint
    (`before`); `erased`: the through_seq of the sessions erased before it (`erased_before`);
    `tombstoned`: entry keys an erasure after it tombstones (the replay's); `live`: the entry
    keys that hold a value now; `erased_again`: sessions erased after the checkpoint.

    A seq an erasure covers (at most its through_seq, or tombstoned after the checkpoint) must
    hold no value (`unexpected`); every other seq below the next seq must hold one
    (`missing`). A session erased before the checkpoint whose erasure record is not found,
    and not erased again after it (which tombstones all of it), cannot be checked:
    `erasures_missing`."""
    for session, next_seq in sorted(next_seqs.items()):
        through = 0
        if session in erased:
            found = erased[session]
            if found is None and session not in erased_again:
                yield "erasures_missing", session.encode()
                continue
            through = found or 0
        for seq in range(1, next_seq):
            key = entry_key(session, seq)
            if seq <= through or key in tombstoned:
                if key in live:
                    yield "unexpected", key
            elif key not in live:
                yield "missing", key
