"""Where `audit` starts each input partition, and with what state (workers/stream/checkpoints.py).

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
"""

from __future__ import annotations

from collections.abc import Container, Iterator, Mapping, Sequence
from datetime import datetime

from workers.core import MemoryState, Seen, SessionHead, decode_v1
from workers.stream.checkpoints import CHECKPOINTS, FAUST_KEYS, Checkpoint, decode
from workers.stream.outputs import entry_key

__all__ = ["NoCheckpoint", "before", "entry_key", "entry_position", "erased_before", "older",
           "starts", "state_of"]


class NoCheckpoint(Exception):
    """A partition's input no longer starts at 0 and no checkpoint covers what is left."""


def log_starts(ks, topic: str, partitions: list[int]) -> dict[int, int]:  # noqa: ANN001
    from kafka import TopicPartition

    from workers.kafka_io import consumer

    c = consumer(ks)
    try:
        tps = [TopicPartition(topic, p) for p in partitions]
        return {tp.partition: off for tp, off in c.beginning_offsets(tps).items()}
    finally:
        c.close()


def starts(ks, input_topic: str, ends: dict[int, int]) -> dict[int, Checkpoint | None]:  # noqa: ANN001
    """Per input partition, the checkpoint to start from (None: from offset 0, empty state)."""
    from workers.kafka_io import end_offsets, read

    first = log_starts(ks, input_topic, sorted(ends))
    out: dict[int, Checkpoint | None] = {p: None for p in ends}
    truncated = sorted(p for p, start in first.items() if start > 0)
    if not truncated:
        return out
    topic = ks.topic(CHECKPOINTS)
    have = end_offsets(ks, topic)
    for p in truncated:
        def records(p: int = p):  # noqa: ANN202
            return ((r.key, r.value) for r in read(ks, topic, partitions=[p]))

        # the manifests first, then the state of one checkpoint: one copy in memory
        found = decode(records(), manifests_only=True) if p in have else []
        for candidate in (c for c in found if first[p] <= c.input_offset <= ends[p]):
            full = [c for c in decode(records(), slot=candidate.slot) if c.id == candidate.id]
            if full:
                out[p] = full[0]
                break
        else:
            raise NoCheckpoint(
                f"partition {p} of {input_topic} starts at offset {first[p]} (older records "
                f"deleted) and {topic} holds no checkpoint of it at or after that offset "
                f"({len(found)} checkpoints of it, none usable); it cannot be replayed exactly")
    return out


def state_of(checkpoint: Checkpoint) -> MemoryState:
    """The session state a checkpoint holds, as the audit's store."""
    state = MemoryState()
    for key, value in checkpoint.items:
        if key.startswith(FAUST_KEYS):
            continue
        if key.startswith(b'["h",'):
            import json

            state.heads[json.loads(key)[1]] = SessionHead.from_bytes(value)
        elif key.startswith(b'["s",'):
            import json

            _, session, send_id = json.loads(key)
            state.seens[(session, send_id)] = Seen.from_bytes(value)
        elif not key.startswith(b"["):  # format 1 (before 0.2), not yet migrated
            session = key.decode()
            head, seens = decode_v1(value)
            state.heads.setdefault(session, head)
            for send_id, seen in seens:
                state.seens.setdefault((session, send_id), seen)
    return state


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
