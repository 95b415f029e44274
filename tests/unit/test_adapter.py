"""workers/stream/adapter.py: the KIP-447 request is what Kafka's schema says (byte for byte the
encoding of kafka-python's generated TxnOffsetCommitRequest v3), and a canary per private name
of faust, mode and aiokafka the adapter uses: a version that removed one fails here, naming it."""

from __future__ import annotations

import collections
import inspect
from io import BytesIO

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
