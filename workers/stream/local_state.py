"""The worker's local state is a cache of its changelog: where it lives, when to discard it, and
how a store is read up to its changelog's end.

Layout. The state of a deployment is TRANSCRIPT_STATE_DIR/<prefix><app id>/ (`deployment_dir`),
so two deployments (another TRANSCRIPT_TOPIC_PREFIX or TRANSCRIPT_APP_ID) on one state dir never
share a store. Under it, v1/tables/sessions-<partition>.db is one RocksDB per input partition
(workers.stream.state_owner opens them), each holding, beside the sessions, the offset of the
last changelog record it applied (under `OFFSET_KEY`). `sessions.changelog.json` beside them
records which changelog topic (name and topic id) they were written from.

At start `prepare` compares every partition store with the changelog, as Kafka Streams compares
a task's checkpoint with its changelog and wipes a corrupted task. A store is discarded, with a
warning, and restored from the changelog, when
  - it has applied an offset at or past the changelog's end (its last stable offset): the topic
    was deleted and recreated, or truncated;
  - it has applied an offset below the changelog's start - 1: records it missed are gone;
  - the changelog's topic id differs from the recorded one: the topic was recreated, even if
    the new one has grown past the old offsets (offsets alone cannot tell);
  - it was written from another changelog topic, has a partition the changelog lacks, or
    cannot be read.
`verdict` decides (pure); the rest reads the disk and the cluster and removes directories.

At each assignment `top_up` reads each assigned store from its applied offset + 1 (or the log
start) to the changelog's end, with one aiokafka consumer, read_committed (its record batches
decode in C: a third of kafka-python's time here), and writes the records in RocksDB write
batches (a tombstone deletes the key), each batch carrying the offset of its last record, so a
store never claims an offset it has not applied. A store the same `verdict` finds stale then
(the topic was recreated under a running worker) raises StaleState. `due_ranges`,
`restore_range` and `batch_ops` decide (pure). Exactly-once, `settle` first waits for the last
owners' transactions to end, with two consumers of the same kind.
"""

from __future__ import annotations

import asyncio
import fcntl
import json
import logging
import os
import re
import shutil
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from workers.core.errors import OwnerError
from workers.stream.adapter import STORE_OFFSET_KEY, STORE_OWN_KEYS

log = logging.getLogger("transcript_owner.local_state")

# The key a store keeps its applied changelog offset under, and the prefix of every key of its
# own bookkeeping (not session state): faust's store layout (workers.stream.adapter), kept so
# that stores written while a faust table held them are used as they are.
OFFSET_KEY, OWN_KEYS = STORE_OFFSET_KEY, STORE_OWN_KEYS
LEGACY_TABLES = Path("v1") / "tables"  # the layout before 1.1: one table dir for every deployment


class LocalStateError(OwnerError):
    """The local state cannot be checked or discarded (the cluster or the disk failed)."""


@dataclass(frozen=True)
class Store:
    """One partition store, as read from disk."""

    partition: int
    offset: int | None  # the last changelog offset it applied; None: it applied none
    error: str | None = None  # why it could not be read


@dataclass(frozen=True)
class Changelog:
    """The changelog topic as the cluster has it now."""

    topic: str
    topic_id: str | None  # None: the cluster does not say (brokers before 2.8)
    starts: Mapping[int, int]  # partition -> earliest offset
    ends: Mapping[int, int]  # partition -> last stable offset (end for read_committed)


@dataclass(frozen=True)
class Marker:
    """What `sessions.changelog.json` records: the topic the stores were written from."""

    topic: str
    topic_id: str | None


def verdict(store: Store, changelog: Changelog, marker: Marker | None) -> str | None:
    """Why `store` does not match `changelog` and must be discarded, or None to keep it."""
    if store.error is not None:
        return f"it cannot be read ({store.error})"
    if store.partition not in changelog.ends:
        return f"{changelog.topic} has no partition {store.partition}"
    if marker is not None and marker.topic != changelog.topic:
        return f"it was written from changelog {marker.topic}, not {changelog.topic}"
    if (marker is not None and marker.topic_id and changelog.topic_id
            and marker.topic_id != changelog.topic_id):
        return (f"it was written from topic id {marker.topic_id}, and {changelog.topic} has "
                f"topic id {changelog.topic_id} now (the topic was recreated)")
    if store.offset is None:
        return None
    end, start = changelog.ends[store.partition], changelog.starts.get(store.partition, 0)
    if store.offset >= end:
        return (f"it has applied changelog offset {store.offset}, but the changelog end offset "
                f"is {end} (the topic was recreated or truncated)")
    if store.offset < start - 1:
        return (f"it has applied changelog offset {store.offset}, but the changelog starts at "
                f"offset {start} (the records in between are gone)")
    return None


def deployment_dir(state_dir: str | Path, topic_prefix: str, app_id: str) -> Path:
    """faust's datadir for one deployment: TRANSCRIPT_STATE_DIR/<prefix><app id>."""
    name = f"{topic_prefix}{app_id}"
    if name in (".", ".."):
        raise LocalStateError(f"TRANSCRIPT_TOPIC_PREFIX + TRANSCRIPT_APP_ID = {name!r} cannot "
                              "name a state directory")
    return Path(state_dir) / name


def restore_range(persisted: int | None, start: int, end: int) -> tuple[int, int] | None:
    """The changelog offsets [first, end) a store that has applied `persisted` still lacks,
    given the changelog's start and end offsets; None when it lacks none."""
    first = start if persisted is None else max(persisted + 1, start)
    return (first, end) if first < end else None


def batch_ops(records: Iterable[Any], end: int, put: Callable[[bytes, bytes], object],
              delete: Callable[[bytes], object]) -> tuple[int, int | None]:
    """Changelog records (with `offset`, `key` and `value`: aiokafka's), in log order, as a
    store's writes, in the same order: `put(key, value)`, or `delete(key)` for a tombstone.
    Returns how many it wrote and the offset of the last record taken. Records at or past
    `end`, without a key, or with faust's offset key are not written (as faust, a store applies
    up to the end it was restored to, and only table keys). One loop, no list between: a
    restore runs it for every record."""
    written = 0
    last = None
    for record in records:
        offset = record.offset
        if offset >= end:
            break
        last = offset
        key = record.key
        if key is None or key == OFFSET_KEY:
            continue
        value = record.value
        if value is None:
            delete(key)
        else:
            put(key, value)
        written += 1
    return written, last


# ---- the shell: disk and cluster --------------------------------------------------------------


def partition_stores(tabledir: Path, table: str) -> dict[int, Path]:
    """partition -> store directory, for every store of `table` on disk."""
    pattern = re.compile(rf"^{re.escape(table)}-(\d+)\.db$")
    found = {}
    if tabledir.is_dir():
        for path in tabledir.iterdir():
            if (m := pattern.match(path.name)) and path.is_dir():
                found[int(m.group(1))] = path
    return dict(sorted(found.items()))


def read_store(partition: int, path: Path) -> Store:
    """The store's persisted changelog offset, read without taking its lock."""
    import rocksdict

    try:
        db = rocksdict.Rdict(str(path), options=rocksdict.Options(raw_mode=True),
                             access_type=rocksdict.AccessType.read_only())
    except Exception as exc:  # noqa: BLE001  (rocksdict raises plain Exception)
        return Store(partition, None, f"{type(exc).__name__}: {exc}")
    try:
        raw = db.get(OFFSET_KEY)
    finally:
        db.close()
    if raw is None:
        return Store(partition, None)
    try:
        return Store(partition, int(raw))
    except ValueError:
        return Store(partition, None, f"persisted offset {raw[:40]!r} is not a number")


def in_use(path: Path) -> bool:
    """Does another process hold the store open (RocksDB's lock on its LOCK file)?"""
    try:
        fd = os.open(path / "LOCK", os.O_RDWR)
    except FileNotFoundError:
        return False
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return True
    else:
        fcntl.lockf(fd, fcntl.LOCK_UN)
        return False
    finally:
        os.close(fd)


def marker_path(tabledir: Path, table: str) -> Path:
    return tabledir / f"{table}.changelog.json"


def read_marker(path: Path) -> Marker | None:
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
        return Marker(str(raw["topic"]), raw.get("topic_id"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        log.warning("ignoring %s: unreadable (%s)", path, exc)
        return None


def write_marker(path: Path, marker: Marker) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps({"topic": marker.topic, "topic_id": marker.topic_id}) + "\n",
                   encoding="utf-8")
    os.replace(tmp, path)


def observe_changelog(ks, topic: str) -> Changelog:  # noqa: ANN001  (KafkaSettings)
    """The changelog's topic id and its start and last stable offsets, asked of the cluster."""
    from kafka import IsolationLevel, OffsetSpec, TopicPartition
    from kafka.admin import KafkaAdminClient
    from kafka.errors import KafkaError

    try:
        admin = KafkaAdminClient(**ks.kafka_python_kwargs(), client_id="transcript-owner-state",
                                 request_timeout_ms=30000)
    except KafkaError as exc:
        raise LocalStateError(f"cannot reach Kafka at {ks.bootstrap}: {exc}") from None
    try:
        (described,) = admin.describe_topics([topic])
        if described.get("error_code") or not described.get("partitions"):
            raise LocalStateError(f"changelog {topic} cannot be described (error code "
                                  f"{described.get('error_code')}): run `transcript-owner "
                                  "topics apply`")
        tps = [TopicPartition(topic, p["partition_index"]) for p in described["partitions"]]
        ends = admin.list_partition_offsets({tp: OffsetSpec.LATEST for tp in tps},
                                            isolation_level=IsolationLevel.READ_COMMITTED)
        starts = admin.list_partition_offsets({tp: OffsetSpec.EARLIEST for tp in tps})
    except KafkaError as exc:
        raise LocalStateError(f"cannot read changelog {topic}: {type(exc).__name__}: {exc}") \
            from None
    finally:
        admin.close()
    topic_id = described.get("topic_id")
    return Changelog(
        topic, None if not topic_id or set(str(topic_id)) <= set("0-") else str(topic_id),
        starts={tp.partition: o.offset for tp, o in starts.items()},
        ends={tp.partition: o.offset for tp, o in ends.items()},
    )


def prepare(tabledir: Path, table: str, changelog: Changelog) -> list[int]:
    """Discard every partition store of `table` that does not match `changelog`, then record
    the changelog beside the stores. Returns the partitions discarded."""
    marker_file = marker_path(tabledir, table)
    marker = read_marker(marker_file)
    stale: dict[str, list[tuple[int, Path]]] = {}  # reason -> the stores it applies to
    for partition, path in partition_stores(tabledir, table).items():
        if in_use(path):
            log.warning("local state of %s partition %d (%s) is open in another process: not "
                        "checked; give each worker its own TRANSCRIPT_STATE_DIR",
                        table, partition, path)
            continue
        why = verdict(read_store(partition, path), changelog, marker)
        if why is not None:
            stale.setdefault(why, []).append((partition, path))
    discarded = []
    for why, stores in stale.items():  # one line per reason: a recreated topic is one line
        parts = ", ".join(str(p) for p, _ in stores)
        log.warning("discarding local state of %s %s: %s; %s restored from %s (removed %s)",
                    table, f"partition {parts}" if len(stores) == 1 else f"partitions {parts}",
                    why, "it is" if len(stores) == 1 else "they are", changelog.topic,
                    stores[0][1] if len(stores) == 1 else f"{table}-<partition>.db in {tabledir}")
        for partition, path in stores:
            try:
                shutil.rmtree(path)
            except OSError as exc:
                raise LocalStateError(f"cannot remove {path}: {exc.strerror}") from None
            discarded.append(partition)
    try:
        write_marker(marker_file, Marker(changelog.topic, changelog.topic_id))
    except OSError as exc:
        raise LocalStateError(f"cannot write {marker_file}: {exc.strerror}") from None
    return sorted(discarded)


def warn_legacy_layout(state_dir: str | Path, deployment: Path) -> None:
    """State of the layout before 1.1 (one table dir for every deployment) is never read."""
    legacy = Path(state_dir) / LEGACY_TABLES
    if legacy.is_dir():
        log.warning("%s holds local state in the layout before 1.1, shared by every deployment: "
                    "not used (this deployment's state is %s, restored from the changelog); "
                    "delete it once no older worker runs on this state dir", legacy, deployment)


RESTORE_IDLE_S = 30.0  # no record for this long while records are due: the restore failed


class SettleTimeout(OwnerError):
    """A transaction stayed open on a partition past the transaction timeout."""


def settle(ks, partitions: Iterable[tuple[str, int]], timeout_s: float,  # noqa: ANN001
           poll_s: float = 0.05, given_up: Callable[[], bool] | None = None) -> bool:
    """Return once every transaction open on these (topic, partition)s when asked has ended:
    each one's last stable offset (a read_committed end) has reached its high watermark as it
    was then. A partition's new owner calls it before it reads the changelog: the last owner's
    last transaction may be committing still (its markers are written after the commit
    returns), and a last owner that stalled holds its transaction open until it learns it was
    fenced or the transaction times out; in either case the changelog is final only after.
    False if `given_up()` became true first (a newer assignment, a stop). Blocking: the
    worker runs it in an executor."""
    from aiokafka import TopicPartition

    tps = [TopicPartition(topic, p) for topic, p in partitions]
    if not tps:
        return True
    return _on_own_loop(ks, _settle(ks, tps, timeout_s, poll_s, given_up))


async def _settle(ks, tps: list, timeout_s: float, poll_s: float,  # noqa: ANN001
                  given_up: Callable[[], bool] | None) -> bool:
    deadline = time.monotonic() + timeout_s
    raw = changelog_reader(ks, "transcript-owner-settle", isolation_level="read_uncommitted")
    try:
        await raw.start()
        wanted = await raw.end_offsets(tps)  # high watermarks
    finally:
        await raw.stop()
    stable = changelog_reader(ks, "transcript-owner-settle")
    try:
        await stable.start()
        while True:
            ends = await stable.end_offsets(tps)  # last stable offsets
            open_ = sorted(f"{tp.topic}[{tp.partition}]" for tp in tps if ends[tp] < wanted[tp])
            if not open_:
                return True
            if given_up is not None and given_up():
                return False
            if time.monotonic() > deadline:
                raise SettleTimeout(f"a transaction stayed open on {', '.join(open_)} for "
                                    f"{timeout_s:.0f}s")
            await asyncio.sleep(poll_s)
    finally:
        await stable.stop()


class StaleState(LocalStateError):
    """Stores are ahead of their changelog, or behind its start (the topic was recreated or
    truncated under a running worker): they cannot be topped up, only rebuilt."""

    def __init__(self, partitions: list[int], reason: str) -> None:
        super().__init__(reason)
        self.partitions = partitions


def due_ranges(changelog: Changelog, applied: Mapping[int, bytes | None]
               ) -> tuple[dict[int, tuple[int, int]], dict[int, str]]:
    """For each store (partition -> the offset it has applied, as stored under OFFSET_KEY, or
    None), the changelog offsets [first, end) it still lacks (only those lacking some), and
    why each store that cannot be topped up is stale (`verdict`)."""
    due: dict[int, tuple[int, int]] = {}
    stale: dict[int, str] = {}
    for partition, raw in sorted(applied.items()):
        try:
            persisted = None if raw is None else int(raw)
        except ValueError:
            stale[partition] = f"its applied offset {raw[:40]!r} is not a number"
            continue
        why = verdict(Store(partition, persisted), changelog, None)
        if why is not None:
            stale[partition] = why
            continue
        span = restore_range(persisted, changelog.starts[partition], changelog.ends[partition])
        if span is not None:
            due[partition] = span
    return due, stale


def top_up(ks, topic: str, dbs: Mapping[int, object],  # noqa: ANN001
           elsewhere: Callable[[Mapping[int, tuple[int, int]]], int | None] | None = None
           ) -> int:
    """Bring the open partition stores `dbs` up to their changelog's end as it is now; returns
    the records applied. The worker calls it (through StateOwner.restore) when it is assigned
    partitions, exactly-once once the last owners' transactions have ended (settle): the
    changelog is final then. Raises StaleState, before applying anything, when a store has
    applied an offset the changelog no longer has (`verdict`), LocalStateError when the
    changelog cannot be read. Blocking: the worker runs it in an executor.

    Read read_committed (an aborted batch's state is never applied), with aiokafka's consumer
    on an event loop of its own in this thread: its record batches are decoded in C,
    kafka-python's in Python. Measured here over 180,000 changelog records on 8 partitions:
    0.8-0.9 s against 2.0-2.6 s, the record decode being 80% of kafka-python's time
    (docs/performance.md, "The restore on aiokafka").

    `elsewhere(due)`, given the changelog offsets [first, end) due by partition once they are
    known and checked, may restore them itself and return the records applied (the state
    owner's split over processes), or return None to have them read here."""
    if not dbs:
        return 0
    return _on_own_loop(ks, _top_up(ks, topic, dbs, elsewhere))


async def _top_up(ks, topic: str, dbs: Mapping[int, object],  # noqa: ANN001
                  elsewhere: Callable[[Mapping[int, tuple[int, int]]], int | None] | None
                  ) -> int:
    from aiokafka import TopicPartition

    c = changelog_reader(ks, "transcript-owner-top-up")
    try:
        await c.start()
        tps = [TopicPartition(topic, p) for p in sorted(dbs)]
        starts, ends = await c.beginning_offsets(tps), await c.end_offsets(tps)  # ends: stable
        changelog = Changelog(topic, None, {tp.partition: starts[tp] for tp in tps},
                              {tp.partition: ends[tp] for tp in tps})
        due, stale = due_ranges(changelog, {p: db.get(OFFSET_KEY)  # type: ignore[attr-defined]
                                            for p, db in dbs.items()})
        if stale:
            raise StaleState(sorted(stale), "; ".join(
                f"partition {p}: {why}" for p, why in sorted(stale.items())))
        if due and elsewhere is not None:  # c, assigned nothing, idles meanwhile
            if (applied_there := elsewhere(due)) is not None:
                return applied_there  # each store holds the offset it reached
        applied = await _copy(c, topic, due, dbs) if due else 0
    except LocalStateError:  # StaleState too
        raise
    except Exception as exc:  # the cluster refused or failed the read: nothing half-claimed
        raise LocalStateError(f"the restore from {topic} failed: {type(exc).__name__}: "
                              f"{exc}") from None
    finally:
        await c.stop()
    # everything below each `end` is applied (offsets in between, if any, are transaction
    # markers, aborted or compacted away): the store's next read starts at `end`
    for partition, (_, end) in due.items():
        dbs[partition].put(OFFSET_KEY, str(end - 1).encode())  # type: ignore[attr-defined]
    return applied


async def _copy(c, topic: str, due: Mapping[int, tuple[int, int]],  # noqa: ANN001
                dbs: Mapping[int, object]) -> int:
    """Apply changelog offsets [first, end) of each partition in `due` to its store in `dbs`,
    read by `c` (started); each write batch carries the offset of its last record, so a store
    never claims an offset it has not applied."""
    from aiokafka import TopicPartition

    ends = {TopicPartition(topic, p): end for p, (_, end) in due.items()}
    c.assign(list(ends))
    for tp in ends:
        c.seek(tp, due[tp.partition][0])
    applied = 0
    pending = set(ends)
    last_record = time.monotonic()
    while pending:
        if time.monotonic() - last_record > RESTORE_IDLE_S:
            left = ", ".join(f"{tp.topic}[{tp.partition}]" for tp in sorted(pending))
            raise LocalStateError(f"the restore from {topic} stalled: no record for "
                                  f"{RESTORE_IDLE_S:.0f}s; {left} not read to its end")
        batch = await c.getmany(timeout_ms=50, max_records=50_000)
        if batch:
            last_record = time.monotonic()
        for tp, rs in batch.items():
            applied += apply(dbs[tp.partition], rs, ends[tp])
        pending = {tp for tp in pending if await c.position(tp) < ends[tp]}
    return applied


def apply(db, records, end: int) -> int:  # noqa: ANN001  (a store, aiokafka's records)
    """Write changelog `records` (of one partition, in log order, below `end`) to its store in
    one write batch carrying the offset of the last one, so a store never claims an offset it
    has not applied; returns the records applied. The restore and the standbys' tail share
    it."""
    import rocksdict

    wb = rocksdict.WriteBatch(raw_mode=True)
    written, last = batch_ops(records, end, wb.put, wb.delete)
    if last is None:
        return 0
    wb.put(OFFSET_KEY, str(last).encode())  # in the batch: applied with it
    db.write(wb)
    return written


def changelog_reader(ks, client_id: str, isolation_level: str = "read_committed"):  # noqa: ANN001, ANN201
    """The takeover's consumer (settle, top-up): aiokafka's, no group, large fetches. A retry
    backoff of 20 ms, not 100: its first request for the topics' metadata waits that long after
    the bootstrap (measured: 104 ms to a partition's offsets at 100 against 16 ms at 10)."""
    from aiokafka import AIOKafkaConsumer

    return AIOKafkaConsumer(
        **ks.kafka_python_kwargs(), client_id=client_id, group_id=None,
        isolation_level=isolation_level, enable_auto_commit=False,
        auto_offset_reset="none", retry_backoff_ms=20, fetch_max_bytes=64 * 1024 * 1024,
        max_partition_fetch_bytes=16 * 1024 * 1024,
        # short fetch waits: the last offsets below `end` are often transaction markers, which
        # a fetch passes without returning a record
        fetch_max_wait_ms=50)


def _on_own_loop(ks, coroutine):  # noqa: ANN001, ANN202
    """Run `coroutine` to its end on an event loop of its own, once the settings' access is
    checked: in this thread (an executor's, the worker's case), or, called on a thread whose
    loop is running, in a thread of its own (blocking that loop, as a blocking call does)."""
    from workers.kafka_auth import check_access

    try:
        check_access(ks)
    except BaseException:
        coroutine.close()
        raise
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return _run(coroutine)
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(1, thread_name_prefix="transcript-owner-read") as pool:
        return pool.submit(_run, coroutine).result()


def _run(coroutine):  # noqa: ANN001, ANN202
    loop = asyncio.new_event_loop()
    try:
        return loop.run_until_complete(coroutine)
    finally:
        loop.close()
