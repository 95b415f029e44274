"""ConfirmationPublisher: delivery confirmations and resets onto the worker's input topic, from
asyncio (as connectors/typescript's publisher.ts).

Each record is keyed by its canonical session key and sent to the partition the worker owns the
key from (`partition_for`, the Java client's murmur2), so the worker never re-keys it and a
session's records stay in order. The producer (kafka-python) is idempotent (a retried send is
written once), acks=all, at most 5 requests in flight (the most that keeps order under
idempotence), and never creates a topic. `publish` returns when the broker acknowledged.

kafka-python is blocking and thread-safe: every call into it runs on one thread of the
publisher's own (so calls keep their order and the event loop never blocks), and an
acknowledgement resolves the awaiting coroutine from kafka-python's I/O thread.

With `transactional_id`, records go out in Kafka transactions: `async with
publisher.transaction() as tx` commits what `tx` published, or aborts it when the block raises
(an aborted confirmation was never confirmed: the worker reads read_committed and gives it no
outcome). `publish` outside a transaction then runs in a transaction of its own. A second
publisher with the same id fences the first: its next call raises PublishError, for good.

Repartitioning: `transcript-owner repartition --partitions N` grows the input topic as its last
step, and workers restart with TRANSCRIPT_PARTITIONS=N. A connected publisher notices without a
restart: at the start of a publish call, at most once per `partitions_check_ms` (5 s), it reads
the topic's count from its producer's metadata (refreshed as often: a local read, no request of
its own). A count that grew is adopted for that call and every later one, logged once at INFO;
records published under the old count before then are re-keyed by the worker (slower, never
lost). A count that shrank means the topic was recreated: every call raises PublishError, and
nothing is sent, until the publisher connects again.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Literal, Self, TypeVar

from kafka import KafkaProducer, codec
from kafka.admin import KafkaAdminClient
from kafka.errors import (
    KafkaError,
    SaslAuthenticationFailedError,
    TopicAuthorizationFailedError,
    TransactionalIdAuthorizationFailedError,
    UnsupportedSaslMechanismError,
    for_code,
)
from pydantic import Field, model_validator

from transcript_connector.builders import BuiltRecord
from transcript_connector.connection import (
    CONNECTION_ENV,
    ConnectionOptions,
    SaslMechanism,  # noqa: F401  (re-exported: the worker's tests compare them)
    SecurityProtocol,  # noqa: F401
    check_sasl,
    check_tls,
    options_from_env,
)
from transcript_connector.connection import reason as _reason
from transcript_connector.errors import ConnectorError, PublishError
from transcript_connector.partitioning import partition_for

CONFIRMATIONS_TOPIC = "delivery.confirmations"
DEFAULT_PARTITIONS = 8  # the worker's TRANSCRIPT_PARTITIONS default (workers/settings.py)
# how often a connected publisher looks at the topic's partition count (a repartition grows it)
DEFAULT_PARTITIONS_CHECK_MS = 5000
MAX_PARTITIONS_CHECK_MS = 300_000  # the Kafka clients' default metadata.max.age.ms
MAX_TRANSACTION_TIMEOUT_MS = 900_000  # the broker's default transaction.max.timeout.ms
MAX_DELIVERY_TIMEOUT_MS = 900_000  # 15 minutes: past it a gateway must hear of the failure
# the topic takes 2 MiB records (topics.yaml): a record the worker accepts (1 MiB) plus its key
# and the batch's overhead always fits one request
MAX_REQUEST_BYTES = 2 << 20

Compression = Literal["gzip", "snappy", "lz4", "zstd"]

log = logging.getLogger(__name__)

# environment variable -> option: the worker's names (workers/settings.py ENV, WORKER_ENV)
ENV = {**CONNECTION_ENV, "TRANSCRIPT_PARTITIONS": "partitions"}
# the connector's own variables (no worker reads them) -> option
CONNECTOR_ENV = {
    "TRANSCRIPT_PARTITIONS_CHECK_MS": "partitions_check_ms",
}

T = TypeVar("T")


class PublisherOptions(ConnectionOptions):
    """How to reach the worker's input topic (the connection: ConnectionOptions).
    `partitions`: the count the worker runs with; `connect` refuses a topic with another
    (records would land where the worker does not look); None takes the topic's count as it
    is. `partitions_check_ms`: how often, at most, a connected publisher looks for a changed
    count (a repartition grows the topic). `transactional_id`: one per publisher process."""

    topic: str | None = None  # the input topic's full name, when not <prefix>delivery.confirmations
    partitions: int | None = Field(default=DEFAULT_PARTITIONS, ge=1, le=10_000)
    # also the producer's metadata_max_age_ms: no faster than a metadata request per 50 ms, and
    # no slower than the Kafka clients' default metadata.max.age.ms (5 min): a publisher follows
    # a repartition within that (issue 42: 1e30 was accepted, a publisher that never would)
    partitions_check_ms: int = Field(default=DEFAULT_PARTITIONS_CHECK_MS, ge=50,
                                     le=MAX_PARTITIONS_CHECK_MS)
    transactional_id: str | None = Field(default=None, min_length=1)
    # at most the broker's default transaction.max.timeout.ms: above it init_transactions fails
    transaction_timeout_ms: int = Field(default=60_000, ge=1000, le=MAX_TRANSACTION_TIMEOUT_MS)
    # publish raises PublishError after this long without an acknowledgement: 15 minutes at
    # most, and at least one request's timeout (kafka-python refuses a shorter one)
    delivery_timeout_ms: int = Field(default=120_000, ge=1000, le=MAX_DELIVERY_TIMEOUT_MS)
    compression: Compression | None = None

    @model_validator(mode="after")
    def _delivery_outlasts_a_request(self) -> Self:
        if self.delivery_timeout_ms < self.request_timeout_ms:
            raise ValueError(
                f"delivery_timeout_ms={self.delivery_timeout_ms} is below request_timeout_ms="
                f"{self.request_timeout_ms}: a record must be given at least one request's "
                "time (kafka-python refuses the producer)")
        return self

    @property
    def topic_name(self) -> str:
        return self.topic or f"{self.topic_prefix}{CONFIRMATIONS_TOPIC}"


def publisher_options_from_env(environ: Mapping[str, str], **overrides: Any) -> PublisherOptions:
    """Options from the worker's variables (docs/configuration.md): KAFKA_BOOTSTRAP,
    TRANSCRIPT_TOPIC_PREFIX, TRANSCRIPT_PARTITIONS, KAFKA_SECURITY_PROTOCOL, KAFKA_SASL_*,
    KAFKA_SSL_*, and TRANSCRIPT_PARTITIONS_CHECK_MS; empty counts as unset. ConnectorError names
    the variable (never its value)."""
    return options_from_env(PublisherOptions, {**ENV, **CONNECTOR_ENV}, environ, overrides)


def next_partition_count(topic: str, current: int, seen: int) -> int:
    """The count to publish with when the topic shows `seen` partitions to a publisher using
    `current`. More: a repartition grew it (Kafka topics only grow), adopt it. Fewer: the topic
    was deleted and created again, and a record's home under either count may be wrong, so
    PublishError until the publisher connects again."""
    if seen < current:
        raise PublishError(
            f"topic {topic} now has {seen} partitions, this publisher connected with {current}: "
            f"the topic was recreated; connect again (TRANSCRIPT_PARTITIONS={seen}, or unset to "
            "take the topic's count)")
    return seen


@dataclass(frozen=True, slots=True)
class Delivery:
    """Where a record was written: `key` is its canonical session key."""

    topic: str
    partition: int
    offset: int
    key: str


class Transaction:
    """Publishing inside `ConfirmationPublisher.transaction()`."""

    def __init__(self, publisher: ConfirmationPublisher) -> None:
        self._publisher = publisher

    async def publish(self, record: BuiltRecord) -> Delivery:
        return (await self._publisher._send([record]))[0]

    async def publish_all(self, records: Sequence[BuiltRecord]) -> list[Delivery]:
        return await self._publisher._send(records)


class ConfirmationPublisher:
    """`async with ConfirmationPublisher(options) as p: await p.publish(record)`: connects on
    entry (refusing a missing topic or another partition count), closes on exit."""

    def __init__(self, options: PublisherOptions) -> None:
        name = options.compression
        if name is not None and not getattr(codec, f"has_{name}")():  # gzip: always there
            raise ConnectorError(f"compression {name}: its library is not installed "
                                 f"(pip install 'transcript-connector[{name}]')")
        self.options = options
        self.topic = options.topic_name
        # one thread: kafka-python's calls run in the order they were made, off the event loop
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="transcript-pub")
        self._producer: KafkaProducer | None = None
        self._partitions: int | None = None
        self._checked_at = 0.0  # time.monotonic() of the last look at the topic's count
        self._one_transaction = asyncio.Lock()
        self._in_transaction: asyncio.Task[Any] | None = None  # the task whose transaction is open

    @classmethod
    def from_env(cls, environ: Mapping[str, str], **overrides: Any) -> ConfirmationPublisher:
        """A publisher configured from the worker's variables (publisher_options_from_env)."""
        return cls(publisher_options_from_env(environ, **overrides))

    @property
    def transactional(self) -> bool:
        return self.options.transactional_id is not None

    @property
    def partitions(self) -> int:
        """The input topic's partition count records are published with (known once
        connected; a repartition grows it while connected)."""
        if self._partitions is None:
            raise PublishError("not connected: call connect() first")
        return self._partitions

    async def __aenter__(self) -> Self:
        try:
            await self.connect()
        except BaseException:
            await self.close()
            raise
        return self

    async def __aexit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.close()

    async def connect(self) -> None:
        """Checks that the topic exists (it is never created here: a mistyped prefix would make
        a topic the worker does not read) and has the partition count the worker expects, then
        starts the producer (and, with a transactional id, fences its predecessors)."""
        if self._producer is not None:
            return
        kwargs = self.options.kafka_kwargs()
        await self._call("cannot connect", self._check_tls, kwargs)
        await self._call("cannot connect", self._check_sasl, kwargs)
        self._partitions = await self._call("cannot connect", self._check_topic, kwargs)
        self._producer = await self._call("cannot connect", self._start_producer, kwargs)
        self._checked_at = time.monotonic()

    async def publish(self, record: BuiltRecord) -> Delivery:
        """Publishes one record; returns when the broker acknowledged it (in a transaction of
        its own, with a transactional id: when committed)."""
        return (await self.publish_all([record]))[0]

    async def publish_all(self, records: Sequence[BuiltRecord]) -> list[Delivery]:
        """Publishes records in order (per session the worker decides them in this order);
        returns when all are acknowledged."""
        if self.transactional:
            if self._in_transaction is asyncio.current_task():
                # it would wait for the open transaction, which waits for it
                raise PublishError("inside transaction(), publish through its Transaction")
            async with self.transaction() as tx:
                return await tx.publish_all(records)
        return await self._send(records)

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[Transaction]:
        """A Kafka transaction: committed when the block ends, aborted when it raises (the
        exception propagates). Transactions of one publisher run one after another."""
        if not self.transactional:
            raise PublishError("transactions need the transactional_id option")
        async with self._one_transaction:
            producer = self._connected()
            await self._call("cannot begin a transaction", producer.begin_transaction)
            self._in_transaction = asyncio.current_task()
            try:
                yield Transaction(self)
                await self._call("transaction not committed", producer.commit_transaction)
            except BaseException:
                # a failed commit leaves the transaction to abort, as a failed block does
                with suppress(PublishError):  # else the broker aborts it at its timeout
                    await self._call("transaction not aborted", producer.abort_transaction)
                raise
            finally:
                self._in_transaction = None

    async def close(self) -> None:
        """Flushes and closes the producer and the publisher's thread. Safe to call twice."""
        producer, self._producer = self._producer, None
        if producer is not None:
            await asyncio.get_running_loop().run_in_executor(self._thread, producer.close)
        self._thread.shutdown(wait=False)

    # --- the blocking side: run on the publisher's thread -------------------------------

    def _check_tls(self, kwargs: dict[str, Any]) -> None:
        """A TLS refusal named at once (connection.check_tls)."""
        check_tls(self.options, kwargs, PublishError)

    def _check_sasl(self, kwargs: dict[str, Any]) -> None:
        """A SASL refusal named at once (connection.check_sasl; `_call` names the user)."""
        check_sasl(self.options, kwargs)

    def _check_topic(self, kwargs: dict[str, Any]) -> int:
        admin = KafkaAdminClient(**kwargs)
        try:
            if self.topic not in admin.list_topics():
                # not listed: missing, or this principal may not see it (no Describe ACL)
                (described,) = admin.describe_topics([self.topic])
                if for_code(described["error_code"]) is TopicAuthorizationFailedError:
                    raise PublishError(
                        f"topic {self.topic}: TopicAuthorizationFailedError: "
                        f"{self.options.who()} is not authorized to describe or write it "
                        "(nor told whether it exists)")
                raise PublishError(f"topic {self.topic} does not exist "
                                   "(transcript-owner topics apply creates it)")
            (described,) = admin.describe_topics([self.topic])
            count = len(described["partitions"])
        finally:
            admin.close()
        expected = self.options.partitions
        if expected is not None and count != expected:
            raise PublishError(
                f"topic {self.topic} has {count} partitions, the worker expects {expected} "
                f"(TRANSCRIPT_PARTITIONS): if the deployment was repartitioned (transcript-owner "
                f"repartition), set TRANSCRIPT_PARTITIONS={count}, or unset it to take the "
                "topic's count")
        return count

    def _start_producer(self, kwargs: dict[str, Any]) -> KafkaProducer:
        o = self.options
        producer = KafkaProducer(
            **kwargs,
            enable_idempotence=True,
            acks="all",
            max_in_flight_requests_per_connection=5,
            allow_auto_create_topics=False,
            transactional_id=o.transactional_id,
            transaction_timeout_ms=o.transaction_timeout_ms,
            delivery_timeout_ms=o.delivery_timeout_ms,
            compression_type=o.compression,
            max_request_size=MAX_REQUEST_BYTES,
            # the partition count `_count_now` reads: at most this old
            metadata_max_age_ms=o.partitions_check_ms,
        )
        if o.transactional_id is not None:
            try:
                producer.init_transactions()
            except BaseException:
                producer.close(timeout=0)
                raise
        return producer

    def _count_now(self, producer: KafkaProducer) -> int:
        """The partition count this publish call uses: the topic's, from the producer's own
        metadata (a local read: kafka-python refreshes it every partitions_check_ms, and its
        send accepts exactly the partitions it lists), looked at once per partitions_check_ms
        at most. A refusal is looked at again on the next call: it lasts until a reconnect."""
        current = self.partitions
        now = time.monotonic()
        if now - self._checked_at < self.options.partitions_check_ms / 1000:
            return current
        count = next_partition_count(self.topic, current, len(producer.partitions_for(self.topic)))
        self._checked_at = now
        if count != current:
            log.info("topic %s grew from %d to %d partitions (transcript-owner repartition): "
                     "publishing with %d", self.topic, current, count, count)
            self._partitions = count
        return count

    # --- the asyncio side ------------------------------------------------------------------

    def _connected(self) -> KafkaProducer:
        if self._producer is None:
            raise PublishError("not connected: call connect() first")
        return self._producer

    async def _call(self, what: str, fn: Callable[..., T], *params: Any) -> T:
        """`fn(*params)` on the publisher's thread; kafka-python's errors become PublishError
        with `what` in front (the error's class and message: never a record's content)."""
        try:
            return await asyncio.get_running_loop().run_in_executor(self._thread, fn, *params)
        except (SaslAuthenticationFailedError, UnsupportedSaslMechanismError) as exc:
            o = self.options
            raise PublishError(
                f"{what}: authentication failed: Kafka at {o.bootstrap} refused {o.who()}; "
                f"check KAFKA_SASL_USERNAME, KAFKA_SASL_PASSWORD and KAFKA_SASL_MECHANISM: "
                f"{_reason(exc)}") from exc
        except TransactionalIdAuthorizationFailedError as exc:
            raise PublishError(
                f"{what}: TransactionalIdAuthorizationFailedError: {self.options.who()} may not "
                f"use the transactional id {self.options.transactional_id!r} (it needs an ACL "
                f"allowing Write on it): {_reason(exc)}") from exc
        except KafkaError as exc:
            raise PublishError(f"{what}: {type(exc).__name__}: {exc}") from exc

    async def _send(self, records: Sequence[BuiltRecord]) -> list[Delivery]:
        """Sends each record to its home partition, in order; awaits every acknowledgement."""
        producer = self._connected()
        for record in records:
            if not isinstance(record, BuiltRecord):
                raise TypeError("publish takes records made by build_confirmation, build_reset "
                                f"or BuiltRecord(bytes), not {type(record).__name__}")
        loop = asyncio.get_running_loop()

        def send_all() -> list[asyncio.Future[Delivery]]:
            n = self._count_now(producer)  # before any send: a refusal sends nothing
            acks: list[asyncio.Future[Delivery]] = []
            try:
                for r in records:
                    acks.append(self._send_one(loop, producer, r, partition_for(r.key, n)))
            except BaseException:
                # the records before it may still land (or fail): what becomes of them is
                # taken, so that no acknowledgement is left unretrieved; the error is the call's
                for ack in acks:
                    loop.call_soon_threadsafe(ack.add_done_callback, _retrieve)
                raise
            return acks

        acks = await self._call("not published", send_all)
        try:
            return list(await asyncio.gather(*acks))
        except KafkaError as exc:
            raise PublishError(f"not published: {type(exc).__name__}: {exc}") from exc

    def _send_one(self, loop: asyncio.AbstractEventLoop, producer: KafkaProducer,
                  record: BuiltRecord, partition: int) -> asyncio.Future[Delivery]:
        """producer.send, its acknowledgement handed to the event loop as a Future."""
        done: asyncio.Future[Delivery] = loop.create_future()

        def settle(outcome: Delivery | BaseException) -> None:
            if done.cancelled():
                return
            if isinstance(outcome, BaseException):
                done.set_exception(outcome)
            else:
                done.set_result(outcome)

        sent = producer.send(self.topic, value=record.value, key=record.key.encode(),
                             partition=partition)
        sent.add_callback(lambda meta: loop.call_soon_threadsafe(
            settle, Delivery(meta.topic, meta.partition, meta.offset, record.key)))
        sent.add_errback(lambda exc: loop.call_soon_threadsafe(settle, exc))
        return done


def _retrieve(ack: asyncio.Future[Delivery]) -> None:
    if not ack.cancelled():
        ack.exception()


__all__ = [
    "CONFIRMATIONS_TOPIC",
    "DEFAULT_PARTITIONS",
    "DEFAULT_PARTITIONS_CHECK_MS",
    "ConfirmationPublisher",
    "Delivery",
    "PublisherOptions",
    "Transaction",
    "next_partition_count",
    "publisher_options_from_env",
]
