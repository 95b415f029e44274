"""workers/stream/adapter.py: the KIP-447 request is what Kafka's schema says (byte for byte the
encoding of kafka-python's generated TxnOffsetCommitRequest v3), and a canary per private name
of faust, mode and aiokafka the adapter uses: a version that removed one fails here, naming it.
And no module but the adapter names one of them (a reintroduction fails with its file and line)."""

from __future__ import annotations

import asyncio
import collections
import inspect
import re
from io import BytesIO
from pathlib import Path

import pytest

from workers.stream import adapter
from workers.stream.adapter import FENCING_ERRORS, GroupMember


def test_a_group_member_is_its_group_id_to_aiokafka():
    m = GroupMember("p.app", 7, "member-1", "pod-0")
    assert m == "p.app" and isinstance(m, str) and m.group_id == "p.app"
    assert (m.generation_id, m.member_id, m.group_instance_id) == (7, "member-1", "pod-0")
    assert hash(m) == hash("p.app")  # aiokafka keys its coordinators by the group id


@pytest.mark.parametrize("instance", ["pod-0", None])
def test_the_v3_request_encodes_as_kafka_schema_says(instance):
    from kafka.protocol.producer.transaction import TxnOffsetCommitRequest as Reference

    request = adapter._kip447_request()(
        "p.app-w1", 4711, 3, GroupMember("p.app", 9, "m-1", instance),
        [("in", [(0, 10, ""), (5, 99, "")]), ("control", [(5, 2, "")])])
    struct = request.prepare({28: (0, 5)})
    assert struct.API_VERSION == 3 and struct.FLEXIBLE_VERSION
    P = Reference.TxnOffsetCommitRequestTopic.TxnOffsetCommitRequestPartition
    reference = Reference(
        transactional_id="p.app-w1", group_id="p.app", producer_id=4711, producer_epoch=3,
        generation_id=9, member_id="m-1", group_instance_id=instance,
        topics=[Reference.TxnOffsetCommitRequestTopic(name=t, partitions=[
            P(partition_index=p, committed_offset=o, committed_leader_epoch=-1,
              committed_metadata=md) for p, o, md in parts])
            for t, parts in [("in", [(0, 10, ""), (5, 99, "")]), ("control", [(5, 2, "")])]])
    assert struct.encode() == reference.encode(version=3)


def test_the_v3_response_decodes_kafka_encoding():
    from kafka.protocol.producer.transaction import TxnOffsetCommitResponse as Reference

    T = Reference.TxnOffsetCommitResponseTopic
    raw = Reference(throttle_time_ms=0, topics=[T(name="in", partitions=[
        T.TxnOffsetCommitResponsePartition(partition_index=3, error_code=22)])]).encode(version=3)
    request = adapter._kip447_request()("t", 1, 0, GroupMember("g", 1, "m", None), [])
    response = request.prepare({28: (0, 5)}).RESPONSE_TYPE.decode(BytesIO(raw))
    assert [(n, [(p, c) for p, c, _ in parts]) for n, parts, _ in response.topics] == [
        ("in", [(3, 22)])]
    assert FENCING_ERRORS[22] == "ILLEGAL_GENERATION"


# --- canaries: each private name the adapter touches, with what breaks without it -----------

def test_canary_aiokafka_sender_looks_its_offset_commit_handler_up_by_name():
    from aiokafka.producer import sender

    assert hasattr(sender, "TxnOffsetCommitHandler"), (
        "aiokafka.producer.sender.TxnOffsetCommitHandler is gone: install_kip447 cannot add "
        "KIP-447 fencing (exactly-once would be unfenced)")
    source = inspect.getsource(sender.Sender._do_txn_offset_commit)
    assert "TxnOffsetCommitHandler(self, offsets, group_id)" in source, (
        "Sender._do_txn_offset_commit no longer builds TxnOffsetCommitHandler(self, offsets, "
        "group_id) by its module name: install_kip447's handler would never be used")
    handler = sender.TxnOffsetCommitHandler
    for name in ("create_request", "handle_response"):
        assert callable(getattr(handler, name, None)), f"TxnOffsetCommitHandler.{name} is gone"
    init = inspect.getsource(handler.__init__)
    for attribute in ("self._offsets", "self._group_id"):
        assert attribute in init, f"TxnOffsetCommitHandler sets no {attribute}"


def test_canary_aiokafka_transaction_manager_keeps_pending_offsets_in_a_deque():
    import asyncio

    from aiokafka.producer.transaction_manager import TransactionManager

    async def made() -> TransactionManager:  # it makes futures: on a running loop
        return TransactionManager("t", 60000)

    txn = asyncio.run(made())
    assert isinstance(getattr(txn, "_pending_txn_offsets", None), collections.deque), (
        "TransactionManager._pending_txn_offsets is gone: a fenced offset commit could not fail "
        "its future without forgetting the transaction's partitions")
    for name in ("transactional_id", "producer_id", "producer_epoch"):
        assert hasattr(type(txn), name) or hasattr(txn, name), f"TransactionManager.{name}"
    assert "_pending_txn_offsets" in inspect.getsource(TransactionManager.add_offsets_to_txn)


def test_canary_aiokafka_protocol_has_flexible_versions():
    from aiokafka.protocol import api, types

    for name in ("CompactArray", "CompactString", "TaggedFields", "Int16", "Int32", "Int64",
                 "Schema"):
        assert hasattr(types, name), f"aiokafka.protocol.types.{name} is gone"
    assert hasattr(api.RequestStruct, "FLEXIBLE_VERSION"), "RequestStruct.FLEXIBLE_VERSION"
    assert callable(getattr(api.Request, "prepare", None)), "Request.prepare (version choice)"


def test_canary_the_member_id_path_through_faust_to_aiokafka():
    from aiokafka.consumer.group_coordinator import GroupCoordinator
    from faust.transport.drivers import aiokafka as driver

    assert callable(getattr(driver.AIOKafkaConsumerThread, "_ensure_consumer", None)), (
        "faust's AIOKafkaConsumerThread._ensure_consumer is gone: adapter.membership cannot "
        "reach the member id")
    assert "self._thread" in inspect.getsource(driver.Consumer), "faust Consumer._thread"
    init = inspect.getsource(GroupCoordinator.__init__)
    for attribute in ("self.generation", "self.member_id"):
        assert attribute in init, f"aiokafka GroupCoordinator sets no {attribute}"
    assert "self._coordinator" in inspect.getsource(
        __import__("aiokafka").AIOKafkaConsumer), "AIOKafkaConsumer._coordinator"


def test_canary_faust_assignor_hooks_the_warm_up_overrides():
    """adapter.warm_assignor overrides these of faust's PartitionAssignor, with these shapes."""
    from faust.assignor import PartitionAssignor
    from faust.assignor.client_assignment import ClientAssignment, ClientMetadata

    assert isinstance(inspect.getattr_static(PartitionAssignor, "_metadata"), property), \
        "faust PartitionAssignor._metadata (the member's subscription user data) is gone"
    assert list(inspect.signature(PartitionAssignor._perform_assignment).parameters) == [
        "self", "cluster", "member_metadata"], "PartitionAssignor._perform_assignment"
    assert list(inspect.signature(PartitionAssignor._protocol_assignments).parameters)[:2] == [
        "self", "assignments"], "PartitionAssignor._protocol_assignments"
    assert callable(getattr(PartitionAssignor, "_get_client_metadata", None))
    assert "self._protocol_assignments(" in inspect.getsource(
        PartitionAssignor._perform_assignment), "faust encodes its proposal through it"
    assert set(ClientAssignment._options.fields) >= {"actives", "standbys"}
    assert set(ClientMetadata._options.fields) >= {
        "assignment", "url", "changelog_distribution", "external_topic_distribution",
        "topic_groups"}
    # standbys reach the Kafka assignment only for tables' changelogs: the warm-up marks stay
    # faust's own
    assert "table_manager.changelog_topics" in inspect.getsource(
        ClientAssignment.kafka_protocol_assignment)


def test_canary_faust_falls_back_to_round_robin_without_standby_replicas():
    """Why the worker sets table_standby_replicas to at least 1: at 0, with no faust table,
    faust's consumer uses aiokafka's round-robin assignor, which does not keep the input and
    transcript.control co-partitioned."""
    from faust.transport.drivers import aiokafka as driver

    source = inspect.getsource(driver.AIOKafkaConsumerThread._create_worker_consumer)
    assert "table_standby_replicas > 0" in source and "RoundRobinPartitionAssignor" in source


def test_canary_aiokafka_coordinator_rejoins_on_request():
    from aiokafka.consumer.group_coordinator import GroupCoordinator
    from mode.threads import ServiceThread

    assert callable(getattr(GroupCoordinator, "request_rejoin", None)), \
        "aiokafka GroupCoordinator.request_rejoin (adapter.request_rejoin) is gone"
    assert "self.thread_loop" in inspect.getsource(ServiceThread.__init__)


def test_canary_faust_table_manager_starts_recovery_through_update_channels():
    from faust.tables import TableManager

    assert inspect.iscoroutinefunction(getattr(TableManager, "_update_channels", None)), (
        "faust's TableManager._update_channels is gone: adapter.prompt_table_manager's on_start "
        "cannot start faust's recovery service (which resumes the partitions after each "
        "rebalance)")
    source = inspect.getsource(TableManager.on_start)
    for step in ("self._update_channels()", "self.recovery.start()"):
        assert step in source, (
            f"faust's TableManager.on_start no longer awaits {step}: adapter."
            "prompt_table_manager's copy of it (less the sleep) no longer does what faust's does")
    assert issubclass(adapter.prompt_table_manager(), TableManager)


def test_canary_faust_awaits_the_table_managers_on_rebalance_at_each_assignment(tmp_path):
    import faust
    from faust.tables import TableManager

    assert "self.tables.on_rebalance" in inspect.getsource(faust.App._on_partitions_assigned), (
        "faust's App._on_partitions_assigned no longer awaits self.tables.on_rebalance: "
        "adapter.replace_table_rebalance's step (takeover.on_assigned: the takeover and the "
        "restore before faust resumes the partitions) would never run")
    assert list(inspect.signature(TableManager.on_rebalance).parameters) == [
        "self", "assigned", "revoked", "newly_assigned", "generation_id"], (
        "faust's TableManager.on_rebalance takes other arguments than takeover.on_assigned passes")
    app = faust.App("canary", datadir=str(tmp_path), web_enabled=False)

    async def hook(assigned, revoked, newly_assigned, generation_id=0):  # noqa: ANN001, ANN202
        return None

    recover = adapter.replace_table_rebalance(app, hook)
    assert app.tables.on_rebalance is hook and recover.__func__ is TableManager.on_rebalance


def read_committed_app(tmp_path: Path) -> tuple:
    """A faust app (not started) with adapter.read_committed_consumer, and its consumer."""
    import faust

    app = faust.App("canary", broker="kafka://127.0.0.1:9092", datadir=str(tmp_path),
                    web_enabled=False)
    adapter.use_consumer(app, adapter.read_committed_consumer(
        fetch_max_wait_ms=100, offsets_in_transactions=True, fetch_max_bytes=12345))
    return app, app.consumer


def test_canary_faust_consumer_builds_aiokafka_consumer_and_commits_through_hooks(tmp_path):
    from aiokafka import AIOKafkaConsumer
    from aiokafka.consumer.fetcher import Fetcher
    from faust.transport import base
    from faust.transport import consumer as faust_consumer
    from faust.transport.drivers import aiokafka as driver

    thread = driver.AIOKafkaConsumerThread
    assert "self._create_worker_consumer(transport)" in inspect.getsource(
        thread._create_consumer), (
        "faust's AIOKafkaConsumerThread no longer builds its consumer in "
        "_create_worker_consumer: adapter.read_committed_consumer could not make it read "
        "read_committed (aborted confirmations would get outcomes)")
    init, start = (inspect.getsource(f) for f in (AIOKafkaConsumer.__init__,
                                                  AIOKafkaConsumer.start))
    for name in ("_isolation_level", "_fetch_max_wait_ms", "_fetch_max_bytes"):
        assert f"self.{name} = " in init and f"=self.{name}" in start, (
            f"aiokafka's AIOKafkaConsumer no longer hands self.{name} to its Fetcher at start: "
            "setting it after construction (adapter.read_committed_consumer) does nothing")
    assert "self._fetcher = Fetcher(" in start, (
        "aiokafka's AIOKafkaConsumer no longer makes its Fetcher in start: adapter."
        "read_committed_consumer could not set how long it holds fetched records")
    fetcher = inspect.getsource(Fetcher)
    assert "backoff=self._prefetch_backoff" in fetcher and "record.calculate_backoff()" in (
        inspect.getsource(Fetcher._get_actions_per_node)), (
        "aiokafka's Fetcher no longer waits _prefetch_backoff for the records it holds before "
        "fetching again: the worker's input fetched ahead (adapter.FETCH_HOLD_S) is unbounded")
    assert "self._thread = self._new_consumer_thread()" in inspect.getsource(
        faust_consumer.ThreadDelegateConsumer.__init__), (
        "faust's Consumer no longer makes its thread in _new_consumer_thread: adapter."
        "read_committed_consumer's thread (read_committed, short polls) would not be used")
    assert "AIOKafkaConsumerThread(self, loop=self.loop, beacon=self.beacon)" in (
        inspect.getsource(driver.Consumer._new_consumer_thread)), (
        "faust builds its consumer thread with other arguments than adapter.read_committed_"
        "consumer passes")
    assert "await self._commit(" in inspect.getsource(
        faust_consumer.Consumer._commit_offsets), (
        "faust's Consumer no longer sends its commits through _commit: exactly-once, a commit "
        "of its own outside the batch's transaction could commit unwritten outputs")
    assert "self.Consumer(" in inspect.getsource(base.Transport.create_consumer), (
        "faust's Transport no longer builds its consumer from its Consumer attribute: "
        "adapter.use_consumer would not install the read_committed consumer")

    async def built() -> tuple:
        app, consumer = read_committed_app(tmp_path)
        client = consumer._thread._create_worker_consumer(app.transport)
        try:
            return (type(consumer).__name__, client._isolation_level,
                    client._fetch_max_wait_ms, client._fetch_max_bytes,
                    await consumer._commit({}))
        finally:
            await client.stop()

    assert asyncio.run(built()) == ("ReadCommittedConsumer", "read_committed", 100, 12345, True)


def test_canary_faust_consumer_waits_a_poll_or_a_second_while_partitions_are_full():
    """adapter.read_committed_consumer replaces that wait by one for on_buffer_drop."""
    from faust.transport import consumer as faust_consumer

    consumer = faust_consumer.Consumer
    wait = inspect.getsource(consumer._wait_next_records)
    assert "await self.sleep(1)" in wait and "self._get_active_partitions()" in wait and (
        "self.not_waiting_next_records.set()" in wait), (
        "faust's Consumer._wait_next_records changed: check what adapter.read_committed_"
        "consumer's wait for on_buffer_drop in front of it still matches")
    assert "self._buffered_partitions.add(tp)" in inspect.getsource(consumer.on_buffer_full)
    drop = inspect.getsource(consumer.on_buffer_drop)
    assert "active_partitions.add(tp)" in drop and "buffered_partitions.discard(tp)" in drop, (
        "faust's Consumer.on_buffer_drop no longer makes the partition active again")


def test_a_consumer_with_its_input_full_polls_again_once_it_drops(tmp_path):
    from faust.types import TP

    async def polled() -> list:
        _, consumer = read_committed_app(tmp_path)
        tp, leader = TP("input", 0), TP("canary-__assignor-__leader", 0)
        consumer._set_active_tps({tp, leader})
        consumer.on_buffer_full(tp)
        polls: list = []

        async def getmany(active_partitions: set, timeout: float) -> dict:
            polls.append(set(active_partitions))
            return {}

        async def slept(seconds: float) -> None:
            raise AssertionError(f"slept {seconds}s with the input full")

        # faust would long-poll the leader topic alone for the timeout (or sleep, with none)
        consumer._getmany, consumer.sleep = getmany, slept
        waiting = asyncio.ensure_future(consumer._wait_next_records(30.0))
        for _ in range(3):
            await asyncio.sleep(0)
        assert not waiting.done() and polls == []
        consumer.on_buffer_drop(tp)
        assert await asyncio.wait_for(waiting, 60) == ({}, {tp, leader})
        return polls

    assert asyncio.run(polled()) == [{TP("input", 0), TP("canary-__assignor-__leader", 0)}]


def test_canary_mode_worker_schedules_its_shutdown_on_each_signal():
    import mode

    for handler in ("_on_sigterm", "_on_sigint"):
        assert "self._schedule_shutdown(" in inspect.getsource(getattr(mode.Worker, handler)), (
            f"mode's Worker.{handler} no longer calls self._schedule_shutdown: adapter."
            "on_first_stop_signal would not see the signal (no stop deadline: a hung shutdown "
            "would hang the worker)")
    assert "self._signal_stop_time" in inspect.getsource(mode.Worker._schedule_shutdown), (
        "mode's Worker._schedule_shutdown no longer marks the first signal in _signal_stop_time")
    assert mode.Worker._signal_stop_time is None, "mode.Worker._signal_stop_time"

    async def signalled() -> list:
        worker = mode.Worker(loglevel="warning", quiet=True, redirect_stdouts=False)
        calls: list = []
        adapter.on_first_stop_signal(worker, lambda: calls.append(worker._signal_stop_time))
        worker._on_sigterm()
        worker._on_sigterm()
        worker._signal_stop_future.cancel()
        return calls

    assert asyncio.run(signalled()) == [None], "the callback runs once, before mode's own"


# --- no module but the adapter names a private name of faust, mode or aiokafka ---------------

ROOT = Path(__file__).resolve().parents[2]
ADAPTER = ROOT / "workers" / "stream" / "adapter.py"
PRIVATE_NAMES = (
    # faust
    "_update_channels", "_create_worker_consumer", "_new_consumer_thread", "_commit", "_thread",
    "_ensure_consumer", "__faust", "_metadata", "_perform_assignment", "_protocol_assignments",
    "_get_client_metadata", "_wait_next_records", "_buffered_partitions",
    # mode
    "_schedule_shutdown", "_signal_stop_time",
    # aiokafka
    "_isolation_level", "_fetch_max_wait_ms", "_fetch_max_bytes", "_fetcher", "_prefetch_backoff",
    "_coordinator", "_sender", "_txn_manager",
    "_pending_txn_offsets", "_offsets", "_group_id", "_batches", "_acks", "_request_timeout_ms",
    "_default_backoff", "_can_retry", "_commit_result", "_txn_partitions", "_txn_consumer_group",
    "_pid_and_epoch", "_sequence_numbers", "_message_accumulator", "_max_request_size",
    "_cluster", "_builder",
)
NAME = re.compile(r"(?<![A-Za-z0-9_])(" + "|".join(map(re.escape, PRIVATE_NAMES))
                  + r")(?![A-Za-z0-9_])")
# public names that faust reads from an instance, replaced on it: a hook as much as a private one
HOOKS = re.compile(r"\.on_rebalance\s*=(?!=)|\btransport\.Consumer\b")


def test_no_module_but_the_adapter_names_a_private_name_of_faust_mode_or_aiokafka():
    found = []
    for path in sorted((ROOT / "workers").rglob("*.py")):
        if path == ADAPTER:
            continue
        for number, line in enumerate(path.read_text("utf-8").splitlines(), 1):
            for match in (*NAME.finditer(line), *HOOKS.finditer(line)):
                found.append(f"{path.relative_to(ROOT)}:{number}: {match.group(0)!r}: "
                             f"{line.strip()}")
    assert not found, (
        "a private name (or instance hook) of faust, mode or aiokafka outside "
        "workers/stream/adapter.py; give the adapter a function for it, with a canary here:\n"
        + "\n".join(found))
    source = ADAPTER.read_text("utf-8")
    assert not [n for n in PRIVATE_NAMES if n not in source], "a name the adapter no longer uses"


def test_canary_aiokafka_drains_by_nodes_leaving_muted_partitions_where_they_are():
    """adapter.cap_requests holds partitions back by passing them to the drain as muted ones,
    and sizes each partition's first batch in `_batches` by its builder. Reads aiokafka's own
    drain even when an earlier test in this process installed the cap around it."""
    from types import SimpleNamespace

    from aiokafka.producer.message_accumulator import MessageAccumulator, MessageBatch
    from aiokafka.producer.producer import AIOKafkaProducer

    adapter.cap_requests(SimpleNamespace(_message_accumulator=SimpleNamespace(),
                                         _max_request_size=1 << 22))  # as a worker would have
    drain = inspect.getsource(inspect.unwrap(MessageAccumulator.drain_by_nodes))
    assert "if tp in muted_partitions:" in drain and "self._batches[tp]" in drain, (
        "MessageAccumulator.drain_by_nodes no longer skips muted partitions")
    assert "self._builder = builder" in inspect.getsource(MessageBatch.__init__)
    assert "self._max_request_size = max_request_size" in inspect.getsource(
        AIOKafkaProducer.__init__)
    assert "self._message_accumulator = MessageAccumulator(" in inspect.getsource(
        AIOKafkaProducer.__init__)


def test_canary_aiokafka_waits_backoff_override_after_concurrent_transactions():
    from aiokafka.producer import sender

    assert isinstance(getattr(sender, "BACKOFF_OVERRIDE", None), float), (
        "aiokafka.producer.sender.BACKOFF_OVERRIDE is gone: every transaction would wait "
        "aiokafka's own pause after the last one's commit")
    source = inspect.getsource(sender.AddPartitionsToTxnHandler.handle_response)
    assert "ConcurrentTransactions" in source and "BACKOFF_OVERRIDE" in source, (
        "AddPartitionsToTxnHandler no longer answers CONCURRENT_TRANSACTIONS with "
        "BACKOFF_OVERRIDE")


# --- transactions v2 (KIP-890): the requests as Kafka's schemas say, and what they change ------

def _v2(name: str):
    return adapter._v2_requests()[name]


def test_the_produce_v12_request_encodes_as_kafka_schema_says():
    from kafka.protocol.producer import ProduceRequest as Reference

    topics = [("out", [(0, b"batch-0"), (3, b"batch-3")]), ("dlq", [(1, b"x" * 300)])]
    struct = _v2("produce")("p.app-w1", -1, 30000, topics).prepare({0: (3, 13)})
    assert struct.API_VERSION == 12 and struct.FLEXIBLE_VERSION
    T = Reference.TopicProduceData
    reference = Reference(transactional_id="p.app-w1", acks=-1, timeout_ms=30000, topic_data=[
        T(name=t, partition_data=[T.PartitionProduceData(index=p, records=r) for p, r in parts])
        for t, parts in topics])
    assert struct.encode() == reference.encode(version=12)


def test_a_broker_without_produce_v12_is_never_sent_a_v2_produce_in_an_older_version():
    # (a cluster finalizes transaction.version 2 only once every broker has these versions)
    with pytest.raises(NotImplementedError, match="ProduceRequestV12"):
        _v2("produce")("t", -1, 30000, []).prepare({0: (3, 11)})


def _produce_response(*partitions) -> bytes:
    from kafka.protocol.producer import ProduceResponse as Reference

    R = Reference.TopicProduceResponse
    P = R.PartitionProduceResponse
    return Reference(throttle_time_ms=0, responses=[R(name="out", partition_responses=[
        P(index=p, error_code=code, base_offset=offset, log_append_time_ms=-1,
          log_start_offset=0, record_errors=[], error_message=None,
          current_leader=P.LeaderIdAndEpoch(leader_id=1, leader_epoch=4))  # a tagged field
        for p, code, offset in partitions])]).encode(version=12)


class _Batch:
    def __init__(self) -> None:
        self.calls: list = []

    def done(self, *args) -> None:
        self.calls.append(("done", *args))

    def failure(self, exception) -> None:
        self.calls.append(("failure", type(exception).__name__))


def _produce_handler(batches: dict, txn_manager=None):
    from types import SimpleNamespace

    from aiokafka.producer import sender

    cls = adapter._produce_v2_handler(sender.SendProduceReqHandler)
    return cls(SimpleNamespace(client=None, _retry_backoff=0.1, _txn_manager=txn_manager,
                               _acks=-1, _request_timeout_ms=30000), batches)


def test_a_produce_v12_answer_reaches_aiokafka_batches_as_a_v8_answer_would():
    from aiokafka.structs import TopicPartition

    struct = _v2("produce")("t", -1, 30000, []).prepare({0: (3, 12)})
    response = struct.RESPONSE_TYPE.decode(BytesIO(_produce_response((3, 0, 42), (5, 0, 7))))
    three, five = _Batch(), _Batch()
    handler = _produce_handler({TopicPartition("out", 3): three, TopicPartition("out", 5): five})
    handler.handle_response(response)
    assert three.calls == [("done", 42, -1, 0)] and five.calls == [("done", 7, -1, 0)]
    assert handler._to_reenqueue == []


def test_a_produce_v12_meeting_the_last_transactions_markers_is_asked_again_soon():
    from aiokafka.structs import TopicPartition

    struct = _v2("produce")("t", -1, 30000, []).prepare({0: (3, 12)})
    batch = _Batch()
    handler = _produce_handler({TopicPartition("out", 3): batch}, txn_manager=object())
    handler.handle_response(struct.RESPONSE_TYPE.decode(BytesIO(_produce_response(
        (3, adapter.CONCURRENT_TRANSACTIONS, -1)))))
    assert batch.calls == [] and handler._to_reenqueue == [batch]  # aiokafka would fail it
    assert handler._default_backoff == adapter.CONCURRENT_TRANSACTIONS_BACKOFF_S

    other = _Batch()  # any other refusal fails the batch (and so the transaction), as in v1
    handler = _produce_handler({TopicPartition("out", 3): other}, txn_manager=object())
    handler.handle_response(struct.RESPONSE_TYPE.decode(BytesIO(_produce_response(
        (3, adapter.TRANSACTION_ABORTABLE, -1)))))
    assert other.calls and other.calls[0][0] == "failure" and handler._to_reenqueue == []


def test_the_end_txn_v5_request_and_answer_are_as_kafka_schema_says():
    from kafka.protocol.producer import EndTxnRequest, EndTxnResponse

    struct = _v2("end_txn")("p.app-w1", 4711, 32766, True).prepare({26: (0, 5)})
    assert struct.API_VERSION == 5 and struct.FLEXIBLE_VERSION
    assert struct.encode() == EndTxnRequest(transactional_id="p.app-w1", producer_id=4711,
                                            producer_epoch=32766, committed=True
                                            ).encode(version=5)
    raw = EndTxnResponse(throttle_time_ms=0, error_code=0, producer_id=4712, producer_epoch=0
                         ).encode(version=5)
    answer = struct.RESPONSE_TYPE.decode(BytesIO(raw))
    assert (answer.error_code, answer.producer_id, answer.producer_epoch) == (0, 4712, 0)


def _v2_manager():
    """A v2 transaction manager; called on a running loop (it makes futures)."""
    from aiokafka.producer.transaction_manager import TransactionManager

    txn = TransactionManager("p.app-w1", 60000)
    txn.__class__ = adapter._manager_v2(TransactionManager)
    return txn


def on_a_loop(test):
    """Run the test's body on an event loop of its own: aiokafka's transaction manager makes
    futures on the running loop."""
    import functools

    @functools.wraps(test)
    def run(*args, **kwargs):
        async def body():
            return test(*args, **kwargs)

        return asyncio.run(body())

    return run


@on_a_loop
def test_under_v2_partitions_and_the_group_join_without_requests_of_their_own():
    from aiokafka.structs import OffsetAndMetadata, TopicPartition

    txn = _v2_manager()
    txn.set_pid_and_epoch(4711, 0)
    txn.begin_transaction()
    tp = TopicPartition("out", 3)
    txn.maybe_add_partition_to_txn(tp)
    # no AddPartitionsToTxn (and the partition is not muted for one), yet in the transaction
    assert txn.partitions_to_add() == set() and txn.txn_partitions == {tp}
    assert not txn.is_empty_transaction()
    offsets = {TopicPartition("in", 3): OffsetAndMetadata(10, "")}
    txn.add_offsets_to_txn(offsets, GroupMember("p.app", 3, "m", None))
    # no AddOffsetsToTxn: the sender's next request is the TxnOffsetCommit itself
    assert txn.consumer_group_to_add() is None
    assert txn.offsets_to_commit() == (offsets, "p.app")


@on_a_loop
def test_end_txn_v5_gives_the_next_transaction_its_epoch_and_fresh_sequences():
    from types import SimpleNamespace

    from aiokafka.producer import sender
    from aiokafka.producer.transaction_manager import TransactionState
    from aiokafka.structs import TopicPartition
    from kafka.protocol.producer import EndTxnResponse

    txn = _v2_manager()
    txn.set_pid_and_epoch(4711, 6)
    txn.begin_transaction()
    tp = TopicPartition("out", 3)
    txn.maybe_add_partition_to_txn(tp)
    txn.increment_sequence_number(tp, 5)
    txn.committing_transaction()
    handler = adapter._end_txn_v2_handler(sender.EndTxnHandler)(
        SimpleNamespace(_retry_backoff=0.1, _txn_manager=txn), 1)
    assert handler.create_request().prepare({26: (0, 5)}).API_VERSION == 5
    struct = _v2("end_txn")("t", 1, 0, True).prepare({26: (0, 5)})
    # the epoch ran out: the coordinator answers with a new producer id
    raw = EndTxnResponse(throttle_time_ms=0, error_code=0, producer_id=4712, producer_epoch=0
                         ).encode(version=5)
    assert handler.handle_response(struct.RESPONSE_TYPE.decode(BytesIO(raw))) is None
    assert (txn.producer_id, txn.producer_epoch) == (4712, 0)
    assert txn.sequence_number(tp) == 0 and txn.state == TransactionState.READY

    # a refused EndTxn changes nothing: aiokafka's handler decides what follows
    txn.begin_transaction()
    txn.maybe_add_partition_to_txn(tp)
    txn.committing_transaction()
    refused = EndTxnResponse(throttle_time_ms=0, error_code=51, producer_id=-1,
                             producer_epoch=-1).encode(version=5)
    assert handler.handle_response(struct.RESPONSE_TYPE.decode(BytesIO(refused))) is not None
    assert (txn.producer_id, txn.producer_epoch) == (4712, 0)


@on_a_loop
def test_a_v1_producer_keeps_aiokafkas_own_requests():
    from types import SimpleNamespace

    from aiokafka.producer import sender
    from aiokafka.producer.transaction_manager import TransactionManager

    txn = TransactionManager("t", 60000)
    txn.set_pid_and_epoch(1, 0)
    end = adapter._end_txn_v2_handler(sender.EndTxnHandler)(
        SimpleNamespace(_retry_backoff=0.1, _txn_manager=txn), 1)
    assert type(end.create_request()).__module__.startswith("aiokafka")
    produce = _produce_handler({}, txn_manager=txn)
    assert type(produce.create_request()).__module__.startswith("aiokafka")


def test_the_api_versions_v3_answer_gives_the_finalized_features():
    from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse

    struct = _v2("api_versions")().prepare({18: (0, 4)})
    assert struct.API_VERSION == 3 and struct.FLEXIBLE_VERSION
    assert struct.encode() == ApiVersionsRequest(
        client_software_name="transcript-owner", client_software_version="1").encode(version=3)
    # its answer's header is v0 whatever its version (no tagged fields after the correlation id)
    header = BytesIO(b"\x00\x00\x00\x07rest")
    assert struct.parse_response_header(header).correlation_id == 7 and header.read() == b"rest"
    R = ApiVersionsResponse
    raw = R(error_code=0, api_keys=[R.ApiVersion(api_key=0, min_version=3, max_version=13)],
            throttle_time_ms=0,
            supported_features=[R.SupportedFeatureKey(name="transaction.version", min_version=0,
                                                      max_version=2)],
            finalized_features_epoch=9,
            finalized_features=[
                R.FinalizedFeatureKey(name="metadata.version", max_version_level=27,
                                      min_version_level=27),
                R.FinalizedFeatureKey(name="transaction.version", max_version_level=2,
                                      min_version_level=2)]).encode(version=3)
    answer = struct.RESPONSE_TYPE.decode(BytesIO(raw))
    assert adapter.finalized_features(answer.tags) == {"metadata.version": 27,
                                                       "transaction.version": 2}
    none = R(error_code=0, api_keys=[], throttle_time_ms=0).encode(version=3)
    assert adapter.finalized_features(struct.RESPONSE_TYPE.decode(BytesIO(none)).tags) == {}


def test_canary_aiokafka_sender_looks_its_produce_and_end_txn_handlers_up_by_name():
    from aiokafka.producer import sender

    for call, method in (("SendProduceReqHandler(self, batches)", sender.Sender._send_produce_req),
                         ("EndTxnHandler(self, commit_result)", sender.Sender._do_txn_commit)):
        assert call in inspect.getsource(method), (
            f"aiokafka's Sender no longer builds {call} by its module name: transactions v2 "
            "would never be spoken (the worker would send v1's requests with v2 fields)")
    init = inspect.getsource(sender.Sender.__init__)
    for attribute in ("self._acks", "self._request_timeout_ms", "self._txn_manager"):
        assert attribute in init, f"Sender sets no {attribute}"
    # aiokafka's own class, also once install_transactions_v2 put its subclass in its place
    produce = next(c for c in sender.SendProduceReqHandler.__mro__
                   if c.__module__ == sender.__name__)
    assert "self._batches" in inspect.getsource(produce.__init__)
    assert callable(getattr(produce, "_can_retry", None)), "SendProduceReqHandler._can_retry"
    assert "global_error" in inspect.getsource(produce.handle_response), (
        "SendProduceReqHandler reads a v8+ answer differently: the v12 answer's v8 shape")
    assert "request.required_acks" in inspect.getsource(produce.do)
    assert "self._default_backoff" in inspect.getsource(sender.BaseHandler.__init__)
    end_txn = next(c for c in sender.EndTxnHandler.__mro__ if c.__module__ == sender.__name__)
    assert "self._commit_result" in inspect.getsource(end_txn.__init__)


def test_canary_aiokafka_transaction_manager_state_that_transactions_v2_sets():
    from aiokafka.producer import message_accumulator
    from aiokafka.producer.transaction_manager import PidAndEpoch, TransactionManager

    assert PidAndEpoch._fields == ("pid", "epoch")
    source = inspect.getsource(TransactionManager)
    for name in ("self._txn_partitions", "self._txn_consumer_group", "self._pid_and_epoch",
                 "self._sequence_numbers"):
        assert name in source, f"TransactionManager has no {name}"
    for method in ("maybe_add_partition_to_txn", "add_offsets_to_txn", "partitions_to_add",
                   "consumer_group_to_add", "offsets_to_commit", "is_empty_transaction"):
        assert callable(getattr(TransactionManager, method, None)), f"TransactionManager.{method}"
    # batches take the producer id, epoch and sequence when they are drained, not when made:
    # the epoch EndTxn v5 answers reaches the next transaction's batches
    drain = inspect.getsource(message_accumulator.MessageAccumulator)
    assert "sequence_number(" in drain
    assert "producer_epoch=self._txn_manager.producer_epoch" in drain
    assert "maybe_add_partition_to_txn(" in drain


def test_canary_aiokafka_producer_client_sends_a_request_to_a_node():
    from aiokafka.client import AIOKafkaClient

    assert callable(getattr(AIOKafkaClient, "get_random_node", None))
    assert list(inspect.signature(AIOKafkaClient.send).parameters)[:3] == [
        "self", "node_id", "request"]
    from aiokafka.protocol import api

    assert hasattr(api, "ResponseHeader_v0") and callable(
        getattr(api.RequestStruct, "parse_response_header", None))


@on_a_loop
def test_under_v2_the_offsets_go_as_txn_offset_commit_v5_and_its_refusals_are_answered():
    from types import SimpleNamespace

    from aiokafka.producer import sender
    from aiokafka.producer.transaction_manager import TransactionManager
    from aiokafka.structs import OffsetAndMetadata, TopicPartition
    from kafka.protocol.producer.transaction import TxnOffsetCommitResponse as Reference

    member = GroupMember("p.app", 9, "m-1", None)
    offsets = {TopicPartition("in", 3): OffsetAndMetadata(10, "")}
    handler_class = adapter._kip447_handler(sender.TxnOffsetCommitHandler)

    def handler(txn):
        return handler_class(SimpleNamespace(_retry_backoff=0.1, _txn_manager=txn),
                             dict(offsets), member)

    v1 = TransactionManager("t", 60000)
    v1.set_pid_and_epoch(1, 0)
    assert handler(v1).create_request().prepare({28: (0, 5)}).API_VERSION == 3
    txn = _v2_manager()
    txn.set_pid_and_epoch(1, 0)
    txn.begin_transaction()
    future = txn.add_offsets_to_txn(dict(offsets), member)
    struct = handler(txn).create_request().prepare({28: (0, 5)})
    assert struct.API_VERSION == 5

    def answer(code: int):
        T = Reference.TxnOffsetCommitResponseTopic
        raw = Reference(throttle_time_ms=0, topics=[T(name="in", partitions=[
            T.TxnOffsetCommitResponsePartition(partition_index=3, error_code=code)])]
        ).encode(version=5)
        return struct.RESPONSE_TYPE.decode(BytesIO(raw))

    # a group id alone (a group without members) goes as v5 too: v2 sent no AddOffsetsToTxn
    # for aiokafka's v0 commit to follow
    plain = handler_class(SimpleNamespace(_retry_backoff=0.1, _txn_manager=txn), dict(offsets),
                          "p.simple").create_request().prepare({28: (0, 5)})
    assert plain.API_VERSION == 5
    assert (plain.group_id, plain.generation_id, plain.member_id) == ("p.simple", -1, "")

    # the last transaction's markers are still being written: asked again soon, not in 100 ms
    for code in (adapter.CONCURRENT_TRANSACTIONS, adapter.COORDINATOR_LOAD_IN_PROGRESS):
        assert handler(txn).handle_response(answer(code)) == \
            adapter.CONCURRENT_TRANSACTIONS_BACKOFF_S
        assert not future.done()
    # TRANSACTION_ABORTABLE: the offsets' future fails, so the transaction aborts
    assert handler(txn).handle_response(answer(adapter.TRANSACTION_ABORTABLE)) is None
    with pytest.raises(adapter.TransactionAbortable):
        future.result()
