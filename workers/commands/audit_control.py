"""What `audit` needs to replay erasures as the worker decided them (workers/core/control.py).

- **The cut-over** of each input partition: the offset from which erases on the input are
  obeyed only as forwarded copies of transcript.control. The worker keeps it in its state
  (key `["cutover"]` of the partition's changelog); audit reads it from there.
- **The tickets**: every record of the partition of transcript.control, through the same step
  as the worker's (`Owner.handle`). Each valid erase leaves its ticket in the replay's state,
  so that its forwarded copy, read later on the input, erases there and spends it; each
  invalid one is a dead letter the DLQ must hold (source topic transcript.control).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from typing import Any

from workers.core import MemoryState
from workers.core.outputs import DLQ, Source
from workers.core.owner import Owner, apply, record_clock
from workers.core.state import CUTOVER_KEY
from workers.settings import KafkaSettings


def changelog_records(ks: KafkaSettings, changelog: str, keys: Callable[[bytes], bool]
                      ) -> list[tuple[int, int, bytes, bytes | None]] | None:
    """The records of the state changelog whose key `keys` accepts, (partition, offset, key,
    value) in offset order per partition; None when the changelog does not exist."""
    from workers.kafka_io import end_offsets, read

    if not end_offsets(ks, changelog):
        return None
    return [(r.partition, r.offset, r.key, r.value) for r in read(ks, changelog)
            if r.key is not None and keys(r.key)]


def cutovers(changelog: str, records: Iterable[tuple[int, int, bytes, bytes | None]] | None
             ) -> dict[int, int | str]:
    """Per input partition, its erase cut-over (absent: not known); for a value that is not
    an offset, the `malformed` finding to report (the partition is then audited without one)."""
    out: dict[int, int | str] = {}
    for partition, offset, key, value in records or ():
        if key != CUTOVER_KEY:
            continue
        if value is None:
            out.pop(partition, None)
        elif value.isdigit() and len(value) <= 19:
            out[partition] = int(value)
        else:
            out[partition] = (f"{changelog} partition {partition} offset {offset}: the "
                              "erase cut-over is not an offset")
    return out


def replay_control(ks: KafkaSettings, owner: Owner, partition: int, state: MemoryState,
                   start: int | None = None, end: int | None = None
                   ) -> tuple[int, set[tuple[int, int]], Any]:
    """Replay partition `partition` of transcript.control (offsets `start` to `end`, None: its
    first or last) into `state` (its tickets): the records read, the offsets that must be dead
    letters, and the outcomes."""
    from collections import Counter

    from workers.kafka_io import end_offsets, read

    topic = owner.control
    dead: set[tuple[int, int]] = set()
    outcomes: Counter = Counter()
    if topic is None or not end_offsets(ks, topic):
        return 0, dead, outcomes
    wall = datetime.now(UTC)
    wall_s = wall.timestamp()
    n = 0
    for r in read(ks, topic, partitions=[partition],
                  start=None if start is None else {partition: start}):
        if end is not None and r.offset >= end:
            continue
        n += 1
        step = owner.handle(Source(topic, partition, r.offset, r.key, r.value or b"",
                                   tuple(r.headers or ())), state,
                            record_clock(r.timestamp / 1000, wall, wall_s))
        outcomes[step.outcome] += 1
        apply(state, step)
        if any(out.topic == DLQ for out in step.sends):
            dead.add((partition, r.offset))
    return n, dead, outcomes
