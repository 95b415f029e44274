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


def test_canary_faust_consumer_builds_aiokafka_consumer_and_commits_through_hooks(tmp_path):
    import faust
    from aiokafka import AIOKafkaConsumer
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
    for name in ("_isolation_level", "_fetch_max_wait_ms"):
        assert f"self.{name} = " in init and f"=self.{name}" in start, (
            f"aiokafka's AIOKafkaConsumer no longer hands self.{name} to its Fetcher at start: "
            "setting it after construction (adapter.read_committed_consumer) does nothing")
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
        app = faust.App("canary", broker="kafka://127.0.0.1:9092", datadir=str(tmp_path),
                        web_enabled=False)
        adapter.use_consumer(app, adapter.read_committed_consumer(
            fetch_max_wait_ms=100, offsets_in_transactions=True))
        consumer = app.consumer
        client = consumer._thread._create_worker_consumer(app.transport)
        try:
            return (type(consumer).__name__, client._isolation_level,
                    client._fetch_max_wait_ms, await consumer._commit({}))
        finally:
            await client.stop()

    assert asyncio.run(built()) == ("ReadCommittedConsumer", "read_committed", 100, True)


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
    "_ensure_consumer", "__faust",
    # mode
    "_schedule_shutdown", "_signal_stop_time",
    # aiokafka
    "_isolation_level", "_fetch_max_wait_ms", "_coordinator", "_sender", "_txn_manager",
    "_pending_txn_offsets", "_offsets", "_group_id",
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


def test_canary_aiokafka_waits_backoff_override_after_concurrent_transactions():
    from aiokafka.producer import sender

    assert isinstance(getattr(sender, "BACKOFF_OVERRIDE", None), float), (
        "aiokafka.producer.sender.BACKOFF_OVERRIDE is gone: every transaction would wait "
        "aiokafka's own pause after the last one's commit")
    source = inspect.getsource(sender.AddPartitionsToTxnHandler.handle_response)
    assert "ConcurrentTransactions" in source and "BACKOFF_OVERRIDE" in source, (
        "AddPartitionsToTxnHandler no longer answers CONCURRENT_TRANSACTIONS with "
        "BACKOFF_OVERRIDE")
