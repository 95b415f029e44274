"""Step 3 of `repartition` (workers/commands/repartition.py), the move: each old partition's
state and entries copied to their sessions' new partitions, `--parallel` partitions at a time.

An old partition p is one task, run in a process of its own (a pool of `--parallel`):
1. its transactional producer, `<group>-repartition-<p>`, starts: InitProducerId fences any
   producer of that id (a run a kill -9 ended, or another run) and aborts its open
   transaction, so nothing a dead run copied for p is visible or can still commit;
2. transcript.layout is read again: p's marker `move/P-N/p` there (another run committed it
   since this one began) means p is done;
3. p's changelog is read (read_committed) and its live state keys that move are split by new
   partition; p's entries are read for the last record of each key below p's end;
4. one transaction: each moving key copied to its new partition and tombstoned in p; every
   live entry record copied, in offset order, to its session's partition (p's included);
   once those are acked, the marker, then the commit. The marker goes last so that
   transcript.layout, which every task reads, is inside an open transaction for only as long
   as the commit takes.
Before the tasks start, `fence` ends every transaction a dead run left open (each old
partition's id, and `<group>-repartition` of the runs before issue 44, which moved one
partition at a time), and only then is the layout read for what is done: a read_committed
reader stops at the first open transaction, so a dead run's marker-in-flight would hide the
markers committed after it. Before each task the command checks that the workers are still
stopped (`check`), as it did before each partition when they went one at a time.

Why processes, aiokafka and `--parallel 3`: measured on this project's 2-core machine with the
broker on it, 1,000,000 sessions, 8 -> 16 (docs/operating.md, "Growth: repartition"):
- Where the time went: the old partitions went one at a time through one kafka-python
  producer, 149 s of command (139 s of its CPU, 14 s of the broker's) for about 10 million
  records read or written: kafka-python's producer and fetcher cost 10-20 µs of Python a
  record (cProfile: send 58%, the fetcher 32%, the split 5%).
- aiokafka decodes record batches in C and its batch API (`create_batch`/`send_batch`, as
  workers.stream.batch_send) builds them in C: about 2.5 µs a record read, 1.5 µs written,
  with the same keywords and TLS context as every other client, and already a dependency.
  confluent-kafka (librdkafka) read at 1.6 µs a record and wrote at 1.7 µs, but the move
  with it took no less (6.1 s against 6.2 s at 200,000 sessions; 28.4 s against 23.8 s at a
  million with a delivery callback a record; 410 MB a process against 240 MB): not worth a
  second client library and a second way to configure TLS.
- Python is left for each record (the changelog's latest value per key, a session's
  partition, an entry's key), so threads share one core under the GIL (three at once at
  200,000 sessions: 7.5-12.8 s in threads, 6.0-6.6 s in processes): processes, each its own
  interpreter, spawned (the command's client threads are never forked).
- At 200,000 sessions the move took 13.3 s one at a time, 7.7 s two at once, 6.6 s three and
  7.6 s four: a task waits on the broker part of its time (its fetches, its acks, InitProducerId
  and the commit), which a third process fills; a fourth only contends for the two cores.
  The default is that measurement; on a larger machine, about one more than its cores.
- The entries a task reads for the last offset of each key are kept for the copy while they
  fit in BUFFER_BYTES (a sixth less CPU at a million sessions than reading them twice).
Each process holds one old partition's live state keys, its entries' last offsets and, within
BUFFER_BYTES, its entries: memory grows with a partition's size, not with the deployment's
(about 350 MB a process at a million sessions on 8 partitions).
"""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
import time
from collections.abc import AsyncIterator, Callable, Iterable
from concurrent.futures import FIRST_COMPLETED, Future, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from typing import Any

from workers import child_processes
from workers.core.errors import OwnerError
from workers.core.layout import (
    Homes,
    decode_layout,
    encode_moved,
    entry_home,
    moved_key,
    split_state,
)
from workers.core.outputs import parse_entry_key
from workers.settings import KafkaSettings

TRANSACTION_TIMEOUT_MS = 600_000  # one old partition's copy; the broker's maximum is 15 min
BATCH_BYTES = 1024 * 1024  # a producer batch: the broker appends few large ones cheaply
# a task keeps the entries it read for the last offset of each key, and copies them without a
# second read, while their values come to at most this (about 150,000 entries of a million
# sessions on 8 partitions take 120 MB); a larger partition is read twice
BUFFER_BYTES = 256 * 1024 * 1024
FETCH_WAIT_MS = 50  # the last offsets before an end are often markers a fetch passes silently
PARALLEL = 3  # the default of --parallel: the module's docstring says why
FENCES_AT_ONCE = 16  # producers started at once to fence the dead run's transactions
_NO_HEADERS: list[tuple[str, bytes]] = []  # read only, by aiokafka's batch builder


class MoveFailed(OwnerError):
    """A partition's move did not commit (exit 2): nothing of that partition is moved, what
    other partitions committed stays, and a rerun goes on from there."""


class _TaskError(Exception):
    """What went wrong in a task's process, as text: it crosses back to the command."""


@dataclass(frozen=True)
class Task:
    """One old partition's move, as its process receives it."""

    ks: KafkaSettings
    group: str
    changelog: str
    entries: str
    layout: str
    old: int
    new: int
    partition: int


@dataclass(frozen=True)
class Moved:
    """What a task did: `end` is p's entries end offset in its marker; `found` says another
    run had moved p already (then nothing was written)."""

    partition: int
    end: int
    state_keys: int
    entries: int
    seconds: float
    found: bool = False


def transactional_id(group: str, partition: int) -> str:
    return f"{group}-repartition-{partition}"


def legacy_transactional_id(group: str) -> str:
    """The one id of the runs before issue 44: a dead run of theirs may have left it open."""
    return f"{group}-repartition"


# --- the command's side ----------------------------------------------------------------------


def fence(ks: KafkaSettings, ids: Iterable[str]) -> None:
    """End every transaction these ids left open: a producer of each starts (InitProducerId
    aborts what the id's last producer left open, and fences that producer) and stops."""
    from aiokafka.errors import KafkaError

    logging.getLogger("aiokafka").setLevel(logging.CRITICAL)  # a failure says why, once
    try:
        asyncio.run(_fence(ks, list(ids)))
    except (KafkaError, OSError, TimeoutError) as exc:
        raise MoveFailed(f"ending the transactions a last run left open: {_reason(exc)} "
                         "(nothing is lost: run the command again)") from None


async def _fence(ks: KafkaSettings, ids: list[str]) -> None:
    from aiokafka import AIOKafkaProducer

    gate = asyncio.Semaphore(FENCES_AT_ONCE)

    async def one(tid: str) -> None:
        async with gate:
            producer = AIOKafkaProducer(**ks.kafka_python_kwargs(), transactional_id=tid,
                                        enable_idempotence=True, acks="all",
                                        transaction_timeout_ms=TRANSACTION_TIMEOUT_MS)
            try:
                await producer.start()
            finally:
                await producer.stop()

    await asyncio.gather(*(one(tid) for tid in ids))


def move_partitions(tasks: list[Task], parallel: int, check: Callable[[], None],
                    say: Callable[[str], None]) -> dict[int, int]:
    """Run `tasks`, at most `parallel` at once, `check()` before each starts (it raises to stop
    the move); print each partition as it commits. Returns each partition's entries end. A
    task that fails stops the move: the ones running are let finish (each commits or not, as
    a whole), then MoveFailed says which partition and why. Ctrl-C ends the running ones at
    once (their transactions stay open until a rerun fences them)."""
    ends: dict[int, int] = {}
    todo = list(tasks)
    failure: BaseException | None = None
    # each task's process ends with the command: a kill -9 of the command leaves its tasks'
    # transactions open until the rerun fences them, none commits behind the rerun
    with child_processes.pool(min(parallel, len(todo))) as pool:
        running: dict[Future[Moved], int] = {}
        try:
            while todo or running:
                while todo and len(running) < parallel and failure is None:
                    try:
                        check()
                    except BaseException as exc:  # the workers are not stopped: no more tasks
                        failure = exc
                        break
                    task = todo.pop(0)
                    running[pool.submit(run_task, task)] = task.partition
                if not running:
                    break
                done, _ = wait(running, return_when=FIRST_COMPLETED)
                for future in done:
                    p = running.pop(future)
                    moved, why = _outcome(future, p)
                    if moved is None:
                        failure = failure or why
                        continue
                    ends[p] = moved.end
                    say(f"move: partition {p}: moved already by another run" if moved.found
                        else f"move: partition {p}: {moved.state_keys} state keys, "
                             f"{moved.entries} entries ({moved.seconds:.1f} s)")
        except KeyboardInterrupt:
            for child in multiprocessing.active_children():
                child.kill()
            raise
    if failure is not None:
        raise failure
    return ends


def _outcome(future: Future[Moved], p: int) -> tuple[Moved | None, MoveFailed | None]:
    """A finished task: what it moved, or why it did not."""
    try:
        return future.result(), None
    except BrokenProcessPool:
        return None, MoveFailed(f"partition {p}: its process died before it committed (out of "
                                "memory, or killed); nothing of it is moved: run the command "
                                "again")
    except _TaskError as exc:
        return None, MoveFailed(f"partition {p}: {exc} (nothing of it is moved: run the "
                                "command again)")


# --- a task, in its process -------------------------------------------------------------------


def run_task(task: Task) -> Moved:
    """Move one old partition (the entry point of a task's process)."""
    from aiokafka.errors import KafkaError

    try:
        return asyncio.run(_move(task))
    except (KafkaError, OSError, TimeoutError) as exc:
        raise _TaskError(_reason(exc)) from None
    except OwnerError as exc:
        raise _TaskError(str(exc)) from None


def _reason(exc: BaseException) -> str:
    """`<class>: <message>`, once (aiokafka's messages start with their class already)."""
    text, kind = " ".join(str(exc).split()), type(exc).__name__
    return text if text.startswith(kind) else f"{kind}: {text}" if text else kind


async def _move(task: Task) -> Moved:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

    began = time.monotonic()
    p = task.partition
    producer = AIOKafkaProducer(
        **task.ks.kafka_python_kwargs(), transactional_id=transactional_id(task.group, p),
        enable_idempotence=True, acks="all", transaction_timeout_ms=TRANSACTION_TIMEOUT_MS,
        max_batch_size=BATCH_BYTES, max_request_size=4 * 1024 * 1024, linger_ms=20,
        client_id=f"transcript-owner-repartition-{p}")
    consumer = AIOKafkaConsumer(
        **task.ks.kafka_python_kwargs(), group_id=None, isolation_level="read_committed",
        enable_auto_commit=False, auto_offset_reset="earliest", fetch_max_wait_ms=FETCH_WAIT_MS,
        fetch_max_bytes=64 * 1024 * 1024, max_partition_fetch_bytes=16 * 1024 * 1024,
        client_id=f"transcript-owner-repartition-{p}")
    try:
        await producer.start()  # InitProducerId: fences a dead run's producer of p, aborts its copy
        await consumer.start()
        done = await _marked(consumer, task)
        if done is not None:
            return Moved(p, done, 0, 0, time.monotonic() - began, found=True)
        return await _copy(consumer, producer, task, began)
    finally:
        await consumer.stop()
        await producer.stop()


async def _end(consumer: Any, topic: str, partition: int) -> int:
    """The partition's end offset now: its last stable offset (read_committed)."""
    from aiokafka import TopicPartition

    tp = TopicPartition(topic, partition)
    return int((await consumer.end_offsets([tp]))[tp])


async def _read(consumer: Any, topic: str, partition: int, end: int) -> AsyncIterator[list]:
    """The records of `topic`'s `partition` from its start to `end`, a fetch at a time."""
    from aiokafka import TopicPartition

    tp = TopicPartition(topic, partition)
    consumer.assign([tp])
    await consumer.seek_to_beginning(tp)
    while await consumer.position(tp) < end:
        got = (await consumer.getmany(tp, timeout_ms=FETCH_WAIT_MS, max_records=20_000)).get(tp)
        if got and got[-1].offset >= end:  # only the last fetch can reach past `end`
            got = [r for r in got if r.offset < end]
        if got:
            yield got


async def _marked(consumer: Any, task: Task) -> int | None:
    """p's entries end in its marker, if a run committed one for this move; else None."""
    records: list[tuple[bytes | None, bytes | None]] = []
    async for batch in _read(consumer, task.layout, 0, await _end(consumer, task.layout, 0)):
        records.extend((r.key, r.value) for r in batch)
    layout = decode_layout(records)
    if isinstance(layout, str):
        raise OwnerError(f"{task.layout}: {layout}")
    for move in layout.moves:
        if (move.old, move.new) == (task.old, task.new) and task.partition in move.moved:
            return move.entries_ends[task.partition]
    return None


async def _copy(consumer: Any, producer: Any, task: Task, began: float) -> Moved:
    p, new, changelog, entries = task.partition, task.new, task.changelog, task.entries
    latest: dict[bytes, bytes] = {}
    async for batch in _read(consumer, changelog, p, await _end(consumer, changelog, p)):
        for r in batch:
            if r.key is None:
                continue
            if r.value is None:
                latest.pop(r.key, None)
            else:
                latest[r.key] = r.value
    homes = Homes(new)
    moving = split_state(latest, p, new, homes)
    del latest
    last: dict[bytes | None, int] = {}  # the last record of each key: what compaction keeps
    end = await _end(consumer, entries, p)
    kept: list[list[Any]] | None = []  # the records read, while they fit in BUFFER_BYTES
    held = 0
    async for batch in _read(consumer, entries, p, end):
        for r in batch:
            last[r.key] = r.offset
        if kept is not None:
            held += sum(r.serialized_value_size for r in batch) + 200 * len(batch)
            kept.append(batch)
            if held > BUFFER_BYTES:
                kept = None  # too large to hold: read again for the copy
    await producer.begin_transaction()
    out = _Batches(producer)
    add, keys = out.add, 0  # add: no coroutine a record; only a full batch is awaited
    for q, state in sorted(moving.items()):
        for key, value in state.items():
            if not add(changelog, q, key, value):
                await out.spill(changelog, q, key, value)
            if not add(changelog, p, key, None):
                await out.spill(changelog, p, key, None)
            keys += 1
    del moving
    copied = 0
    async for batch in _again(kept, consumer, entries, p, end):
        for r in batch:
            if last.get(r.key) != r.offset:
                continue
            q, headers = entry_home(r.key, p, new, homes), list(r.headers)
            if not add(entries, q, r.key, r.value, headers):
                await out.spill(entries, q, r.key, r.value, headers)
            # p's position record (DESIGN 1.3) is copied too, in p, after the entries it
            # covers, so the trim leaves p a position. Entries are counted by their exact key
            # (a record moved elsewhere had one: entry_home found its session)
            copied += q != p or parse_entry_key(r.key) is not None
    await out.flush()
    marker = encode_moved(task.old, new, p, end, copied, keys)
    await (await producer.send(task.layout, marker, key=moved_key(task.old, new, p),
                               partition=0))
    await producer.commit_transaction()
    return Moved(p, end, keys, copied, time.monotonic() - began)


async def _again(kept: list[list[Any]] | None, consumer: Any, topic: str, partition: int,
                 end: int) -> AsyncIterator[list[Any]]:
    """The records read before, if they were kept; else read again."""
    if kept is not None:
        for batch in kept:
            yield batch
        return
    async for batch in _read(consumer, topic, partition, end):
        yield batch


class _Batches:
    """One producer batch per partition being filled (aiokafka's batch API: built in C), sent
    when full; `flush` sends the rest and waits until every one is acked. A partition's
    batches are queued in order and the producer is idempotent, so the records keep their
    order."""

    def __init__(self, producer: Any) -> None:
        self.producer = producer
        self.filling: dict[tuple[str, int], list[Any]] = {}  # [batch, its record count]
        self.sent: list[Any] = []

    def add(self, topic: str, partition: int, key: bytes | None, value: bytes | None,
            headers: list[tuple[str, bytes]] = _NO_HEADERS) -> bool:
        """Append to the partition's batch; False when it is full (then `spill`)."""
        slot = self.filling.get((topic, partition))
        if slot is None:
            slot = self.filling[(topic, partition)] = [self.producer.create_batch(), 0]
        if slot[0].append(key=key, value=value, timestamp=None, headers=headers) is None:
            return False
        slot[1] += 1
        return True

    async def spill(self, topic: str, partition: int, key: bytes | None, value: bytes | None,
                    headers: list[tuple[str, bytes]] = _NO_HEADERS) -> None:
        """Send the partition's full batch and start the next with this record; a record
        larger than a batch may be goes on its own."""
        slot = self.filling.pop((topic, partition), None)
        if slot is not None and slot[1]:
            self.sent.append(await self.producer.send_batch(slot[0], topic,
                                                            partition=partition))
            if self.add(topic, partition, key, value, headers):
                return
        self.sent.append(await self.producer.send(topic, value, key=key, partition=partition,
                                                  headers=headers))

    async def flush(self) -> None:
        for (topic, partition), (batch, count) in self.filling.items():
            if count:
                self.sent.append(await self.producer.send_batch(batch, topic,
                                                                partition=partition))
        self.filling.clear()
        await asyncio.gather(*self.sent)
        self.sent.clear()
