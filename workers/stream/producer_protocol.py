"""What aiokafka's producer is taught: TxnOffsetCommit v3/v5 (KIP-447) and transactions v2
(KIP-890). Each private name of aiokafka used here has a canary in tests/unit/test_adapter.py.

KIP-447 for aiokafka: aiokafka's `send_offsets_to_transaction` sends TxnOffsetCommit v0, which
carries the group id alone, so the broker cannot tell a zombie's offset commit from the current
owner's; the only fence then is a transactional id per input partition (one producer each). With
the group's generation and member id in the request (v3, Kafka >= 2.5), the group coordinator
refuses an offset commit from a member of an older generation (ILLEGAL_GENERATION,
UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID), the transaction aborts, and one producer per worker
process is as safe as one per partition (Kafka Streams' exactly_once_v2). `install_kip447`
teaches aiokafka's sender that request; `GroupMember` is the group id that carries the rest.

`install_kip447` also shortens aiokafka's wait between transactions: a transaction's first
AddPartitionsToTxn right after the last one's commit is answered CONCURRENT_TRANSACTIONS while
the broker still writes the last one's markers (KAFKA-5477), and aiokafka waits 20 ms
(`sender.BACKOFF_OVERRIDE`) to ask again. Measured here (one producer, 24 records a
transaction): 28.6 ms a transaction (p50) with 20 ms, 7.7 ms with 2 ms; a local broker's markers
take about a millisecond. `use_transactions_v2` (below) makes the worker's one producer speak
transactions v2 (KIP-890).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
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
                topics[tp.topic].append((tp.partition, bytes(batch.get_data_buffer())))
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
