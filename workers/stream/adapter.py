"""Every touch of faust's, mode's and aiokafka's internals, each named once with why.

A private name can vanish in any release; tests/unit/test_adapter.py has a canary for each one
used here, so a version that removed it fails with the name, not with an AttributeError deep in a
rebalance.

KIP-447 for aiokafka: aiokafka's `send_offsets_to_transaction` sends TxnOffsetCommit v0, which
carries the group id alone, so the broker cannot tell a zombie's offset commit from the current
owner's; the only fence then is a transactional id per input partition (one producer each). With
the group's generation and member id in the request (v3, Kafka >= 2.5), the group coordinator
refuses an offset commit from a member of an older generation (ILLEGAL_GENERATION,
UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID), the transaction aborts, and one producer per worker
process is as safe as one per partition (Kafka Streams' exactly_once_v2). `install_kip447`
teaches aiokafka's sender that request; `GroupMember` is the group id that carries the rest.

The rest, by owner:
  faust's store layout    `STORE_OFFSET_KEY`, `STORE_OWN_KEYS` (the state owner's stores keep
                          it: those written by a faust table are read as they are)
  faust's table manager   `prompt_table_manager` (no second's sleep before its recovery
                          service starts; a stop waits for `before_leave` first: faust stops
                          its tables after the streams' acks and before the consumer leaves
                          the group), `replace_table_rebalance` (a step between an
                          assignment and faust's recovery, which resumes the partitions). The
                          worker declares no faust table: its state has its own owner
                          (workers.stream.state_owner)
  faust's consumer        `read_committed_consumer` (read_committed, short polls, a fetch
                          response's bound, aiokafka's Fetcher holding what it fetched until
                          it is taken: `FETCH_HOLD_S`; no long poll of faust's leader topic
                          nor second's sleep while the inbox is full: a wait for it to
                          drop), `use_consumer`; `membership`,
                          `request_rejoin`
  faust's assignor        `warm_assignor` (standbys reported only when warm; moves to a member
                          without a warm standby held back: workers.core.warmup)
  mode's Worker           `on_first_stop_signal`
  aiokafka's producer     `install_kip447`, which also shortens aiokafka's wait between
                          transactions: a transaction's first AddPartitionsToTxn right after
                          the last one's commit is answered CONCURRENT_TRANSACTIONS while the
                          broker still writes the last one's markers (KAFKA-5477), and aiokafka
                          waits 20 ms (`sender.BACKOFF_OVERRIDE`) to ask again. Measured here
                          (one producer, 24 records a transaction): 28.6 ms a transaction
                          (p50) with 20 ms, 7.7 ms with 2 ms; a local broker's markers take
                          about a millisecond. And `use_transactions_v2` (below), which makes
                          the worker's one producer speak transactions v2 (KIP-890).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from workers.core.errors import OwnerError

log = logging.getLogger("transcript_owner.adapter")

# the errors by which the group coordinator fences an offset commit of an older member (KIP-447)
FENCING_ERRORS = {22: "ILLEGAL_GENERATION", 25: "UNKNOWN_MEMBER_ID", 82: "FENCED_INSTANCE_ID"}


class GroupMember(str):
    """A consumer group id (what aiokafka passes around as `group_id`) that also carries the
    member's generation, member id and static instance id, for TxnOffsetCommit v3."""

    generation_id: int
    member_id: str
    group_instance_id: str | None

    def __new__(cls, group_id: str, generation_id: int, member_id: str,
                group_instance_id: str | None) -> GroupMember:
        self = super().__new__(cls, group_id)
        self.generation_id, self.member_id = generation_id, member_id
        self.group_instance_id = group_instance_id
        return self

    @property
    def group_id(self) -> str:
        return str.__str__(self)


@dataclass(frozen=True)
class Membership:
    """Where a consumer stands in its group now."""

    generation_id: int
    member_id: str


def membership(app: Any) -> Membership:
    """The faust app's consumer's current generation and member id. faust keeps the generation
    (`app.consumer_generation_id`) but not the member id, which only aiokafka's coordinator
    knows: faust's Consumer -> its ConsumerThread (`_thread`) -> AIOKafkaConsumer
    (`_ensure_consumer()`) -> GroupCoordinator (`_coordinator`)."""
    coordinator = app.consumer._thread._ensure_consumer()._coordinator
    return Membership(coordinator.generation, coordinator.member_id)


def warm_assignor(input_topic: str, copartitioned: tuple[str, ...],
                  warm: Callable[[], set[int]]) -> type:
    """faust's partition assignor (the `PartitionAssignor` setting) with KIP-441's warm-up.

    faust's assignor already places standbys of co-partitioned topics (the input and
    transcript.control; `table_standby_replicas`): never on the active's member, spread by
    count, sticky, and an active that must move goes first to a member holding its standby. The
    worker keeps those standbys warm (workers.stream.standby). Here:
    - a member reports (`_metadata`, its subscription's user data) only the standbys of the
      input that are warm (`warm()`), so the leader knows which moves would be warm;
    - the leader (`_perform_assignment` keeps what each member reported; `_protocol_assignments`
      is handed faust's proposal before it is encoded) holds back each move to a member
      without a warm standby while the partition's last owner is in the group
      (workers.core.warmup.hold_back): the partition stays, and the member gets its standby,
      marked under the pseudo-topic `warm_up_topic(input)`, which faust never reads (it adds
      standbys to the Kafka assignment only for its tables' changelogs). The member asks for a
      new assignment once those are warm (`request_rejoin`)."""
    from faust.assignor import PartitionAssignor
    from faust.assignor.client_assignment import ClientAssignment, ClientMetadata

    from workers.core.warmup import hold_back

    topics = tuple(dict.fromkeys((input_topic, *copartitioned)))
    marker = warm_up_topic(input_topic)

    class WarmAssignor(PartitionAssignor):
        reported: dict[str, Any] = {}  # noqa: RUF012  (the leader's: each member's report)

        @property
        def _metadata(self) -> Any:
            md = super()._metadata
            hot = warm()
            standbys = {t: [p for p in ps if p in hot] if t in topics else list(ps)
                        for t, ps in md.assignment.standbys.items() if t != marker}
            return ClientMetadata(
                assignment=ClientAssignment(actives=dict(md.assignment.actives),
                                            standbys=standbys),
                url=md.url, changelog_distribution=md.changelog_distribution,
                external_topic_distribution=md.external_topic_distribution,
                topic_groups=md.topic_groups)

        def _perform_assignment(self, cluster: Any, member_metadata: Any) -> Any:
            self.reported = {m: self._get_client_metadata(md).assignment
                             for m, md in member_metadata.items()}
            return super()._perform_assignment(cluster, member_metadata)

        def _protocol_assignments(self, assignments: Any, *args: Any) -> Any:
            proposed = {m: set(a.actives.get(input_topic, ())) for m, a in assignments.items()}
            previous = {m: set(r.actives.get(input_topic, ())) for m, r in self.reported.items()}
            warm_of = {m: set(r.standbys.get(input_topic, ())) for m, r in self.reported.items()}
            actives, warming = hold_back(proposed, previous, warm_of)
            for m, a in assignments.items():
                for t in topics:
                    if t in a.actives:
                        a.actives[t] = sorted(actives[m])
                        a.standbys[t] = sorted((set(a.standbys.get(t, ())) | warming[m])
                                               - actives[m])
                a.standbys[marker] = sorted(warming[m])
            held = {m: sorted(ps) for m, ps in warming.items() if ps}
            if held:
                log.info("held back moves to members without a warm standby (they warm up "
                         "first): %s", held)
            return super()._protocol_assignments(assignments, *args)

    return WarmAssignor


def warm_up_topic(input_topic: str) -> str:
    """The pseudo-topic under which a member's assignment lists the standbys it warms up to
    take over (no such topic exists; faust never reads it)."""
    return f"{input_topic}#warm-up"


def request_rejoin(app: Any) -> None:
    """Ask the group for a new assignment (a probing rebalance: workers.stream.standby), from
    any thread: aiokafka's coordinator lives on faust's consumer thread's loop."""
    thread = app.consumer._thread
    coordinator = thread._ensure_consumer()._coordinator
    thread.thread_loop.call_soon_threadsafe(coordinator.request_rejoin)


# --- faust's RocksDB store layout (faust.stores.rocksdb.Store) ------------------------------

# The key under which faust's store kept, in each partition's RocksDB, the offset of the last
# changelog record it applied (`Store.offset_key`), and the prefix of its own keys. The worker's
# state owner keeps this layout (workers.stream.state_owner): stores written while a faust table
# held them are used as they are.
STORE_OFFSET_KEY = b"__faust\0offset__"
STORE_OWN_KEYS = b"__faust"


# --- faust's table manager (faust.tables.TableManager) --------------------------------------

def prompt_table_manager() -> type:
    """faust's TableManager with faust's own `on_start` less its sleep: it registers the tables'
    changelog channels (`TableManager._update_channels`, which has no public caller; there are
    none) and starts its recovery service at once, which resumes the assigned partitions after
    each rebalance. (faust is imported when the app is built.)"""
    from faust.tables import TableManager

    class PromptTableManager(TableManager):
        """faust's TableManager, without the second it sleeps before starting recovery (for
        tables declared after the app starts, and the worker declares none): every start,
        restart and rebalance test runs through this."""

        # awaited as faust stops, before its consumer leaves the group (App._stop_consumer
        # stops the tables after waiting for the streams' acks, then the consumer)
        before_leave: Callable[[], Awaitable[None]] | None = None

        async def on_start(self) -> None:
            if not self.should_stop:
                await self._update_channels()
                await self.recovery.start()

        async def on_stop(self) -> None:
            if self.before_leave is not None:
                await self.before_leave()
            await super().on_stop()

    return PromptTableManager


def replace_table_rebalance(app: Any, on_rebalance: Callable[..., Awaitable[None]]
                            ) -> Callable[..., Awaitable[None]]:
    """Make `on_rebalance(assigned, revoked, newly_assigned, generation_id)` what faust awaits at
    each assignment instead of its TableManager.on_rebalance (which starts the tables'
    recovery), and return faust's, for `on_rebalance` to await when it is done. faust has no
    hook between an assignment and its table recovery; its App looks `self.tables.on_rebalance`
    up at each assignment (`App._on_partitions_assigned`), so the instance's attribute is it."""
    tables = app.tables
    recover = tables.on_rebalance
    tables.on_rebalance = on_rebalance
    return recover


# --- faust's consumer (faust.transport.drivers.aiokafka) ------------------------------------

# How long aiokafka's Fetcher waits for records it holds to be taken before it fetches the other
# partitions of their broker (its own: 0.1 s). faust leaves a partition's records in the Fetcher
# while the inbox is full, and the Fetcher kept fetching the others, up to a partition's share
# each: every partition's at once.
FETCH_HOLD_S = 5.0


def read_committed_consumer(*, fetch_max_wait_ms: int, offsets_in_transactions: bool,
                            fetch_max_bytes: int) -> type:
    """faust's aiokafka Consumer, whose AIOKafkaConsumer reads read_committed, long-polls at
    most `fetch_max_wait_ms`, holds at most `fetch_max_bytes` in a fetch response and fetches
    again only once it is taken (FETCH_HOLD_S), and which, with `offsets_in_transactions`,
    sends no commit of its own
    (workers.stream.ingest.read_committed says why). faust has a setting for none of them: its
    consumer thread builds the AIOKafkaConsumer in `_create_worker_consumer`, and aiokafka hands
    `_isolation_level`, `_fetch_max_wait_ms` and `_fetch_max_bytes` to the Fetcher it builds at
    start, so they are set between construction and start. faust's Consumer makes its thread in
    `_new_consumer_thread` and sends a commit in `_commit` (its bookkeeping around it stays)."""
    from faust.transport.drivers import aiokafka as driver

    class ReadCommittedThread(driver.AIOKafkaConsumerThread):
        def _create_worker_consumer(self, transport: Any) -> Any:
            consumer = super()._create_worker_consumer(transport)
            consumer._isolation_level = "read_committed"
            # faust asks for 1.5 s long polls; the broker answers a connection's requests in
            # order, so the offset lookups of a recovery after each rebalance queued behind
            # them (1.5 s each, seen here). Fetches still return as soon as records arrive.
            consumer._fetch_max_wait_ms = fetch_max_wait_ms
            consumer._fetch_max_bytes = fetch_max_bytes
            start = consumer.start

            async def start_holding() -> None:
                await start()
                # the Fetcher (made at start) asks again only once what it holds is taken
                consumer._fetcher._prefetch_backoff = FETCH_HOLD_S

            consumer.start = start_holding
            return consumer

    class ReadCommittedConsumer(driver.Consumer):
        _resumed: asyncio.Event | None = None

        def _new_consumer_thread(self) -> Any:
            return ReadCommittedThread(self, loop=self.loop, beacon=self.beacon)

        def on_buffer_drop(self, tp: Any) -> None:
            super().on_buffer_drop(tp)
            if self._resumed is not None:
                self._resumed.set()

        async def _wait_next_records(self, timeout: float) -> tuple[Any, Any]:
            # While the inbox reports its partitions full, faust goes on long-polling the
            # others (its leader topic's, which carry no records) for `timeout`, or sleeps that
            # long with none: a second lost for each pause, which was most of a batch's time at
            # a small TRANSCRIPT_MAX_BATCH. Wait for the inbox to drop them instead.
            while (self._buffered_partitions and self.flow_active
                   and not self.app.client_only):
                if self._resumed is None:
                    self._resumed = asyncio.Event()
                self._resumed.clear()
                self.not_waiting_next_records.set()
                if (await self.wait_first(self._resumed, timeout=timeout)).stopped:
                    return None, None
            return await super()._wait_next_records(timeout)

        async def _commit(self, offsets: Mapping[Any, int]) -> bool:
            if offsets_in_transactions:
                return True  # committed already, in the transaction of their batch
            return await super()._commit(offsets)

    return ReadCommittedConsumer


def use_consumer(app: Any, consumer_class: type) -> None:
    """Make the app's consumer a `consumer_class`: faust's Transport builds its consumer from
    its `Consumer` class attribute (`Transport.create_consumer`), set here on the app's
    transport; before the app creates its consumer."""
    app.transport.Consumer = consumer_class


# --- mode's Worker (mode.worker.Worker) -----------------------------------------------------

def on_first_stop_signal(worker: Any, callback: Callable[[], None]) -> None:
    """Call `callback()` when mode's Worker gets its first stop signal (SIGTERM, SIGINT), just
    before it schedules its shutdown. mode has no hook for it: its signal handlers call
    `self._schedule_shutdown(signal)` (looked up on the instance, so wrapped here), which sets
    `_signal_stop_time` at the first signal only."""
    schedule = worker._schedule_shutdown

    def on_signal(signum):  # noqa: ANN001, ANN202
        if not worker._signal_stop_time:
            callback()
        schedule(signum)

    worker._schedule_shutdown = on_signal


class GroupFenced(OwnerError):
    """The group coordinator refused this worker's offset commit: it is a member of an older
    generation (its partitions were given to another member)."""


class TransactionAbortable(OwnerError):
    """The broker answered TRANSACTION_ABORTABLE (transactions v2): this transaction must abort;
    the producer goes on with the next one."""


_installed = False
CONCURRENT_TRANSACTIONS_BACKOFF_S = 0.002  # aiokafka's own: 0.02
# Kafka's error codes
COORDINATOR_LOAD_IN_PROGRESS, CONCURRENT_TRANSACTIONS, TRANSACTION_ABORTABLE = 14, 51, 120


def install_kip447() -> None:
    """Make aiokafka's sender send TxnOffsetCommit v3 (with the member's generation) whenever the
    group id it was given is a `GroupMember`; any other group id keeps aiokafka's v0. The sender
    looks its handler class up by name (`sender.TxnOffsetCommitHandler`) at each commit."""
    global _installed
    if _installed:
        return
    from aiokafka.producer import sender

    sender.TxnOffsetCommitHandler = _kip447_handler(sender.TxnOffsetCommitHandler)
    sender.BACKOFF_OVERRIDE = CONCURRENT_TRANSACTIONS_BACKOFF_S  # read at each answer
    _installed = True


def _kip447_request(version: int = 3) -> type:
    """TxnOffsetCommit v3 (KIP-447's fields), or v5: the same fields, which under transactions v2
    also add the group to the transaction (KIP-890)."""
    from aiokafka.protocol.api import Request, RequestStruct, Response
    from aiokafka.protocol.types import (
        CompactArray,
        CompactString,
        Int16,
        Int32,
        Int64,
        Schema,
        TaggedFields,
    )

    class TxnOffsetCommitResponse_v3(Response):  # noqa: N801  (Kafka's message names)
        API_KEY = 28
        API_VERSION = version
        SCHEMA = Schema(
            ("throttle_time_ms", Int32),
            ("topics", CompactArray(
                ("name", CompactString("utf-8")),
                ("partitions", CompactArray(
                    ("partition_index", Int32), ("error_code", Int16), ("tags", TaggedFields))),
                ("tags", TaggedFields))),
            ("tags", TaggedFields),
        )

    class TxnOffsetCommitRequest_v3(RequestStruct):  # noqa: N801
        FLEXIBLE_VERSION = True
        API_KEY = 28
        API_VERSION = version
        RESPONSE_TYPE = TxnOffsetCommitResponse_v3
        SCHEMA = Schema(
            ("transactional_id", CompactString("utf-8")),
            ("group_id", CompactString("utf-8")),
            ("producer_id", Int64),
            ("producer_epoch", Int16),
            ("generation_id", Int32),
            ("member_id", CompactString("utf-8")),
            ("group_instance_id", CompactString("utf-8")),  # nullable
            ("topics", CompactArray(
                ("name", CompactString("utf-8")),
                ("partitions", CompactArray(
                    ("partition_index", Int32),
                    ("committed_offset", Int64),
                    ("committed_leader_epoch", Int32),
                    ("committed_metadata", CompactString("utf-8")),
                    ("tags", TaggedFields))),
                ("tags", TaggedFields))),
            ("tags", TaggedFields),
        )

    class TxnOffsetCommitRequestKip447(Request[TxnOffsetCommitRequest_v3]):
        API_KEY = 28

        def __init__(self, transactional_id: str, producer_id: int, producer_epoch: int,
                     member: GroupMember, topics: list) -> None:
            self.args = (transactional_id, member.group_id, producer_id, producer_epoch,
                         member.generation_id, member.member_id, member.group_instance_id,
                         [(topic, [(p, offset, -1, metadata, {}) for p, offset, metadata in parts],
                           {}) for topic, parts in topics], {})

        def build(self, request_struct_class: type) -> Any:
            return request_struct_class(*self.args)

    return TxnOffsetCommitRequestKip447


def _kip447_handler(base: type) -> type:
    import collections

    request_classes = {3: _kip447_request(3), 5: _kip447_request(5)}

    class Kip447TxnOffsetCommitHandler(base):
        def create_request(self):  # noqa: ANN202
            member, txn = self._group_id, self._sender._txn_manager
            if not isinstance(member, GroupMember):
                if not isinstance(txn, _ManagerV2):
                    return super().create_request()
                # v2 has no AddOffsetsToTxn for a v0 commit to follow: v5, as a simple group's
                # (no generation; the coordinator refuses it for a group with members)
                member = GroupMember(member, -1, "", None)
            by_topic: dict[str, list] = collections.defaultdict(list)
            for tp, offset in sorted(self._offsets.items()):
                by_topic[tp.topic].append((tp.partition, offset.offset, offset.metadata))
            request_class = request_classes[5 if isinstance(txn, _ManagerV2) else 3]
            return request_class(txn.transactional_id, txn.producer_id, txn.producer_epoch,
                                 member, list(by_topic.items()))

        def handle_response(self, resp):  # noqa: ANN001, ANN202
            if resp.API_VERSION < 3:
                return super().handle_response(resp)
            codes = {code for _, partitions, _ in resp.topics for _, code, _ in partitions}
            if resp.API_VERSION >= 5 and codes & {CONCURRENT_TRANSACTIONS,
                                                  COORDINATOR_LOAD_IN_PROGRESS}:
                # v5: the group joins once the last transaction's markers are written (the
                # group coordinator answers LOAD_IN_PROGRESS while it asks the transaction
                # coordinator); aiokafka would wait 100 ms
                return CONCURRENT_TRANSACTIONS_BACKOFF_S
            for _name, partitions, _ in resp.topics:
                for _partition, code, _ in partitions:
                    if code == TRANSACTION_ABORTABLE:  # v5: the transaction can only abort
                        _, _, future = self._sender._txn_manager._pending_txn_offsets.popleft()
                        if not future.done():
                            future.set_exception(TransactionAbortable(
                                "the broker refused this transaction's offset commit "
                                "(TRANSACTION_ABORTABLE): it must abort"))
                        return None
                    if code in FENCING_ERRORS:
                        # A member of an older generation: this transaction must abort. Only
                        # the offsets' future fails (send_offsets_to_transaction raises);
                        # aiokafka's error_transaction would also forget the partitions the
                        # transaction wrote, and its abort would then end it locally without
                        # EndTxn, leaving it open on the broker until its timeout (and a next
                        # commit on this producer would commit it). `_pending_txn_offsets`:
                        # the (group, offsets, future) this handler was made for.
                        _, _, future = self._sender._txn_manager._pending_txn_offsets.popleft()
                        if not future.done():
                            future.set_exception(GroupFenced(
                                f"the group refused this worker's offset commit "
                                f"({FENCING_ERRORS[code]}): its partitions were given to "
                                "another member"))
                        return None
            # the v0 handler's error table, for the v0 shape of the same answer
            return super().handle_response(_V0Shape(
                [(name, [(p, code) for p, code, _ in parts]) for name, parts, _ in resp.topics]))

    return Kip447TxnOffsetCommitHandler


@dataclass
class _V0Shape:
    errors: list


# --- aiokafka's producer, transactions v2 (KIP-890) ------------------------------------------
#
# A transaction under v1 costs two requests before its commit (AddPartitionsToTxn,
# AddOffsetsToTxn), and the first of them is refused while the last transaction's markers are
# written (CONCURRENT_TRANSACTIONS, asked again). Under v2 the partitions join with the Produce
# (v12) and the group with the TxnOffsetCommit (v5), and EndTxn (v5) answers with the producer
# epoch of the next transaction (every partition's sequence starts again at 0). aiokafka 0.14
# speaks v1 only; `use_transactions_v2(producer)` makes one started producer speak v2, when
# `transaction_version(producer)` says the cluster has finalized it. Any other producer of the
# process keeps aiokafka's own requests.

TRANSACTION_VERSION_FEATURE = "transaction.version"


async def transaction_version(producer: Any) -> int:
    """The cluster's finalized `transaction.version` (0 when it has none: Kafka before 4.0, or
    a cluster that did not finalize it), from ApiVersions v3 asked of one broker."""
    request = _v2_requests()["api_versions"]()
    client = producer.client
    response = await client.send(client.get_random_node(), request)
    if response.error_code:
        return 0
    return finalized_features(response.tags).get(TRANSACTION_VERSION_FEATURE, 0)


def finalized_features(tags: Mapping[int, bytes]) -> dict[str, int]:
    """ApiVersions v3+'s FinalizedFeatures (tagged field 2): name -> max version level."""
    from io import BytesIO

    from aiokafka.protocol.types import CompactArray, CompactString, Int16, TaggedFields

    raw = tags.get(2)
    if not raw:
        return {}
    features = CompactArray(("name", CompactString("utf-8")), ("max_version_level", Int16),
                            ("min_version_level", Int16), ("tags", TaggedFields)
                            ).decode(BytesIO(raw)) or []
    return {name: level for name, level, _, _ in features}


def use_transactions_v2(producer: Any) -> None:
    """From the next transaction on, `producer` (started, transactional, between transactions)
    speaks transactions v2."""
    install_transactions_v2()
    txn = producer._sender._txn_manager
    txn.__class__ = _manager_v2(type(txn))


class _ManagerV2:
    """Marks a transaction manager whose producer speaks transactions v2."""


_v2_managers: dict[type, type] = {}


def _manager_v2(base: type) -> type:
    if issubclass(base, _ManagerV2):
        return base
    if base not in _v2_managers:
        from aiokafka.producer.transaction_manager import PidAndEpoch

        class TransactionManagerV2(_ManagerV2, base):
            def maybe_add_partition_to_txn(self, tp: Any) -> None:
                # the Produce adds it: the partition is in the transaction once sent, and the
                # sender needs no AddPartitionsToTxn (nor mutes the partition for one)
                if self.transactional_id is not None:
                    self._txn_partitions.add(tp)

            def add_offsets_to_txn(self, offsets: Any, group_id: str) -> Any:
                # the TxnOffsetCommit adds the group: no AddOffsetsToTxn first
                self._txn_consumer_group = group_id
                return super().add_offsets_to_txn(offsets, group_id)

            def next_epoch(self, producer_id: int, producer_epoch: int) -> None:
                """EndTxn v5 ended the transaction and bumped the epoch (a new producer id
                when the epoch ran out): the next one's batches carry these, sequences from 0."""
                self._pid_and_epoch = PidAndEpoch(producer_id, producer_epoch)
                self._sequence_numbers.clear()

        _v2_managers[base] = TransactionManagerV2
    return _v2_managers[base]


_v2_installed = False


def install_transactions_v2() -> None:
    """Teach aiokafka's sender the v2 requests for producers made v2 by `use_transactions_v2`.
    The sender looks its handlers up by module name (`sender.SendProduceReqHandler`,
    `sender.EndTxnHandler`) at each request, as it does `TxnOffsetCommitHandler`
    (install_kip447, which sends v5 instead of v3 for such a producer)."""
    global _v2_installed
    if _v2_installed:
        return
    from aiokafka.producer import sender

    install_kip447()
    sender.SendProduceReqHandler = _produce_v2_handler(sender.SendProduceReqHandler)
    sender.EndTxnHandler = _end_txn_v2_handler(sender.EndTxnHandler)
    _v2_installed = True


def _produce_v2_handler(base: type) -> type:
    import collections

    request_class = _v2_requests()["produce"]

    class ProduceV2Handler(base):
        def create_request(self):  # noqa: ANN202
            txn = self._sender._txn_manager
            if not isinstance(txn, _ManagerV2):
                return super().create_request()
            topics: dict[str, list] = collections.defaultdict(list)
            for tp, batch in self._batches.items():
                topics[tp.topic].append((tp.partition, batch.get_data_buffer()))
            return request_class(txn.transactional_id, self._sender._acks,
                                 self._sender._request_timeout_ms, list(topics.items()))

        def handle_response(self, response):  # noqa: ANN001, ANN202
            if response.API_VERSION < 9:
                return super().handle_response(response)
            if any(code == CONCURRENT_TRANSACTIONS for _, parts, _ in response.topics
                   for _, code, *_ in parts):
                # the last transaction's markers are still being written: ask again soon
                self._default_backoff = CONCURRENT_TRANSACTIONS_BACKOFF_S
            # the v8 shape of the same answer, which aiokafka's handler reads
            return super().handle_response(_ProduceV8Shape([
                (name, [(p, code, offset, timestamp, start, errors, message)
                        for p, code, offset, timestamp, start, errors, message, _ in parts])
                for name, parts, _ in response.topics]))

        def _can_retry(self, error, batch):  # noqa: ANN001, ANN202
            if getattr(error, "errno", None) == CONCURRENT_TRANSACTIONS:
                return True
            return super()._can_retry(error, batch)

    return ProduceV2Handler


@dataclass
class _ProduceV8Shape:
    topics: list
    API_VERSION: int = 8


def _end_txn_v2_handler(base: type) -> type:
    request_class = _v2_requests()["end_txn"]

    class EndTxnV2Handler(base):
        def create_request(self):  # noqa: ANN202
            txn = self._sender._txn_manager
            if not isinstance(txn, _ManagerV2):
                return super().create_request()
            return request_class(txn.transactional_id, txn.producer_id, txn.producer_epoch,
                                 bool(self._commit_result))

        def handle_response(self, resp):  # noqa: ANN001, ANN202
            if resp.API_VERSION >= 5 and resp.error_code == 0:
                self._sender._txn_manager.next_epoch(resp.producer_id, resp.producer_epoch)
            return super().handle_response(resp)

    return EndTxnV2Handler


_v2_request_classes: dict[str, type] = {}


def _v2_requests() -> dict[str, type]:
    """Produce v12, EndTxn v5, ApiVersions v3 in aiokafka's protocol types, as Kafka's message
    schemas (clients/src/main/resources/common/message) have them."""
    if _v2_request_classes:
        return _v2_request_classes
    from io import BytesIO

    from aiokafka.protocol.api import Request, RequestStruct, Response, ResponseHeader_v0
    from aiokafka.protocol.types import (
        Boolean,
        CompactArray,
        CompactBytes,
        CompactString,
        Int16,
        Int32,
        Int64,
        Schema,
        TaggedFields,
    )

    s = CompactString("utf-8")

    class ProduceResponse_v12(Response):  # noqa: N801
        API_KEY = 0
        API_VERSION = 12
        SCHEMA = Schema(
            ("topics", CompactArray(
                ("name", s),
                ("partitions", CompactArray(
                    ("index", Int32), ("error_code", Int16), ("base_offset", Int64),
                    ("log_append_time_ms", Int64), ("log_start_offset", Int64),
                    ("record_errors", CompactArray(
                        ("batch_index", Int32), ("batch_index_error_message", s),
                        ("tags", TaggedFields))),
                    ("error_message", s),
                    ("tags", TaggedFields))),
                ("tags", TaggedFields))),
            ("throttle_time_ms", Int32),
            ("tags", TaggedFields),
        )

    class ProduceRequest_v12(RequestStruct):  # noqa: N801
        FLEXIBLE_VERSION = True
        API_KEY = 0
        API_VERSION = 12
        RESPONSE_TYPE = ProduceResponse_v12
        SCHEMA = Schema(
            ("transactional_id", s),
            ("acks", Int16),
            ("timeout_ms", Int32),
            ("topic_data", CompactArray(
                ("name", s),
                ("partition_data", CompactArray(
                    ("index", Int32), ("records", CompactBytes), ("tags", TaggedFields))),
                ("tags", TaggedFields))),
            ("tags", TaggedFields),
        )

    class ProduceRequestV12(Request[ProduceRequest_v12]):
        API_KEY = 0

        def __init__(self, transactional_id: str, required_acks: int, timeout_ms: int,
                     topics: list) -> None:
            self.required_acks = required_acks
            self.args = (transactional_id, required_acks, timeout_ms,
                         [(t, [(p, data, {}) for p, data in parts], {}) for t, parts in topics],
                         {})

        def build(self, request_struct_class: type) -> Any:
            return request_struct_class(*self.args)

    class EndTxnResponse_v5(Response):  # noqa: N801
        API_KEY = 26
        API_VERSION = 5
        SCHEMA = Schema(("throttle_time_ms", Int32), ("error_code", Int16),
                        ("producer_id", Int64), ("producer_epoch", Int16),
                        ("tags", TaggedFields))

    class EndTxnRequest_v5(RequestStruct):  # noqa: N801
        FLEXIBLE_VERSION = True
        API_KEY = 26
        API_VERSION = 5
        RESPONSE_TYPE = EndTxnResponse_v5
        SCHEMA = Schema(("transactional_id", s), ("producer_id", Int64),
                        ("producer_epoch", Int16), ("committed", Boolean),
                        ("tags", TaggedFields))

    class EndTxnRequestV5(Request[EndTxnRequest_v5]):
        API_KEY = 26

        def __init__(self, transactional_id: str, producer_id: int, producer_epoch: int,
                     committed: bool) -> None:
            self.args = (transactional_id, producer_id, producer_epoch, committed, {})

        def build(self, request_struct_class: type) -> Any:
            return request_struct_class(*self.args)

    class ApiVersionsResponse_v3(Response):  # noqa: N801
        API_KEY = 18
        API_VERSION = 3
        SCHEMA = Schema(
            ("error_code", Int16),
            ("api_keys", CompactArray(("api_key", Int16), ("min_version", Int16),
                                      ("max_version", Int16), ("tags", TaggedFields))),
            ("throttle_time_ms", Int32),
            ("tags", TaggedFields),
        )

    class ApiVersionsRequest_v3(RequestStruct):  # noqa: N801
        FLEXIBLE_VERSION = True
        API_KEY = 18
        API_VERSION = 3
        RESPONSE_TYPE = ApiVersionsResponse_v3
        SCHEMA = Schema(("client_software_name", s), ("client_software_version", s),
                        ("tags", TaggedFields))

        def parse_response_header(self, read_buffer: BytesIO) -> Any:
            # ApiVersions answers with header v0 whatever its version (KIP-511)
            return ResponseHeader_v0.decode(read_buffer)

    class ApiVersionsRequestV3(Request[ApiVersionsRequest_v3]):
        API_KEY = 18

        def build(self, request_struct_class: type) -> Any:
            return request_struct_class("transcript-owner", "1", {})

    _v2_request_classes.update(produce=ProduceRequestV12, end_txn=EndTxnRequestV5,
                               api_versions=ApiVersionsRequestV3)
    return _v2_request_classes


# --- a produce request's bound (workers.stream.request_cap) -----------------------------------

_cap_installed = False


def cap_requests(producer: Any) -> Any:
    """Bound `producer`'s produce requests by its max_request_size (workers.stream.request_cap);
    returns it. aiokafka's own drain does the rest: the partitions held back go into it as
    muted ones, whose batches it leaves where they are."""
    global _cap_installed
    producer._message_accumulator._request_cap = producer._max_request_size
    if not _cap_installed:
        from aiokafka.producer.message_accumulator import MessageAccumulator

        MessageAccumulator.drain_by_nodes = _capped_drain(MessageAccumulator.drain_by_nodes)
        _cap_installed = True
    return producer


def _capped_drain(drain: Any) -> Any:
    import functools

    from workers.stream.request_cap import held_back

    @functools.wraps(drain)  # __wrapped__: the canary reads aiokafka's own drain
    def drain_by_nodes(self: Any, ignore_nodes: Any, muted_partitions: Any = frozenset()) -> Any:
        cap = getattr(self, "_request_cap", None)
        if cap is not None:
            held = held_back(_ready_batches(self, ignore_nodes, muted_partitions), cap)
            if held:
                muted_partitions = frozenset(muted_partitions) | held
        return drain(self, ignore_nodes, muted_partitions)

    return drain_by_nodes


def _ready_batches(acc: Any, ignore_nodes: Any, muted: Any) -> Any:
    """(partition, leader, bytes) of each first batch aiokafka's drain would take, in its
    order."""
    for tp, queue in acc._batches.items():
        if not queue or tp in muted:
            continue
        leader = acc._cluster.leader_for_partition(tp)
        if leader is None or leader == -1 or (ignore_nodes and leader in ignore_nodes):
            continue
        batch = queue[0]
        if batch.remaining_linger():
            continue
        yield tp, leader, batch._builder.size()
