"""What a session reader asks Kafka besides the entries: both topics' partition counts and an
input partition's last stable offset (one KafkaAdminClient, kept), and the one translation of
kafka-python's errors into ReadError, naming what failed and, when refused, who and which ACL
a reader needs (Describe on the input topic, Read on the entries topic; nothing that writes).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from kafka import IsolationLevel, OffsetSpec, TopicPartition
from kafka.admin import KafkaAdminClient
from kafka.errors import (
    BrokerNotAvailableError,
    KafkaConnectionError,
    KafkaError,
    KafkaTimeoutError,
    SaslAuthenticationFailedError,
    TopicAuthorizationFailedError,
    UnknownBrokerIdError,
    UnknownTopicOrPartitionError,
    UnsupportedSaslMechanismError,
    for_code,
)

from transcript_connector.connection import reason
from transcript_connector.errors import ReadError
from transcript_connector.reader_options import ReaderOptions
from transcript_connector.reader_plan import earlier_counts

COUNTS_TTL_S = 0.1  # how old the partition counts a read plans with may be


def acl_needed(options: ReaderOptions, topic: str) -> str:
    """The ACL a reader needs on `topic`."""
    return "Describe" if topic == options.input_topic else "Read"  # entries, layout


def read_error(what: str, options: ReaderOptions, exc: BaseException, topic: str) -> ReadError:
    """kafka-python's `exc`, met doing `what` with `topic`, as one line for the user."""
    o = options
    if isinstance(exc, SaslAuthenticationFailedError | UnsupportedSaslMechanismError):
        return ReadError(
            f"{what}: authentication failed: Kafka at {o.bootstrap} refused {o.who()}; check "
            f"KAFKA_SASL_USERNAME, KAFKA_SASL_PASSWORD and KAFKA_SASL_MECHANISM: {reason(exc)}")
    if isinstance(exc, TopicAuthorizationFailedError):
        return ReadError(
            f"{what}: TopicAuthorizationFailedError: {o.who()} is not authorized: a reader "
            f"needs an ACL allowing {acl_needed(o, topic)} on topic {topic} (and Describe on "
            f"{o.input_topic}, Read on {o.entries_topic} and {o.layout_topic})")
    if isinstance(exc, UnknownTopicOrPartitionError):
        return ReadError(f"{what}: topic {topic} does not exist (transcript-owner topics apply "
                         "creates it)")
    # not answering now: a broker restarting (its leaders unknown meanwhile: kafka-python's
    # admin says UnknownBrokerIdError -1, or BrokerNotAvailable), a leader moving, a timeout
    if isinstance(exc, KafkaConnectionError | KafkaTimeoutError | UnknownBrokerIdError
                  | BrokerNotAvailableError) or getattr(exc, "retriable", False):
        return KafkaUnavailable(f"{what}: Kafka at {o.bootstrap} did not answer: "
                                f"{reason(exc)}")
    return ReadError(f"{what}: {reason(exc)}")


class KafkaUnavailable(ReadError):
    """Kafka did not answer now (a broker restarting, a leader moving): a read waits and asks
    again until its deadline, then says it is stale and why; never a ReadError of its own."""


@contextmanager
def kafka_errors(what: str, options: ReaderOptions, topic: str) -> Iterator[None]:
    """kafka-python's errors inside the block become ReadError (read_error)."""
    try:
        yield
    except KafkaError as exc:
        raise read_error(what, options, exc, topic) from exc


class Cluster:
    """Metadata and last stable offsets, through one admin client kept for the reader's life
    (a read pays one request for each, never a new client)."""

    def __init__(self, options: ReaderOptions, kwargs: dict[str, Any]) -> None:
        self.options, self._kwargs = options, kwargs
        self._earlier: tuple[int, ...] = ()
        self._layout_at: int | None = None  # the input's count when the layout was read
        self._counts: tuple[int, int] | None = None
        self._counts_at = 0.0
        with kafka_errors("cannot connect", options, options.input_topic):
            self._admin = KafkaAdminClient(**kwargs)

    def counts(self) -> tuple[int, int]:
        """The partition counts of the input and the entries topic (ReadError: either is
        missing or not described to this principal), at most COUNTS_TTL_S old: reads that
        start together share one request (one per read made the reader's thread a queue of
        metadata requests under load), and a repartition's first step, which makes them
        differ, is seen within that."""
        now = time.monotonic()
        if self._counts is not None and now - self._counts_at < COUNTS_TTL_S:
            return self._counts
        counts = self._describe()
        self._counts, self._counts_at = counts, now
        return counts

    def _describe(self) -> tuple[int, int]:
        o = self.options
        names = (o.input_topic, o.entries_topic)
        with kafka_errors("cannot read the topics' metadata", o, o.input_topic):
            described = {t["name"]: t for t in self._admin.describe_topics(list(names))}
        counts = []
        for name in names:
            topic = described.get(name)
            error = for_code(topic["error_code"]) if topic is not None else None
            if topic is None or error is UnknownTopicOrPartitionError:
                raise ReadError(f"topic {name} does not exist (transcript-owner topics apply "
                                "creates it)")
            if error is not None and error.errno != 0:
                raise read_error(f"cannot describe topic {name}", o, error(), name)
            counts.append(len(topic["partitions"]))
        return counts[0], counts[1]

    def last_stable_offset(self, partition: int) -> int:
        """Input partition `partition`'s last stable offset (ListOffsets, READ_COMMITTED: the
        offset below which every transaction is decided)."""
        o = self.options
        tp = TopicPartition(o.input_topic, partition)
        with kafka_errors(f"cannot read the last stable offset of {o.input_topic}[{partition}]",
                          o, o.input_topic):
            found = self._admin.list_partition_offsets(
                {tp: OffsetSpec.LATEST}, isolation_level=IsolationLevel.READ_COMMITTED)
        return int(found[tp].offset)

    def earlier_counts(self, input_partitions: int) -> tuple[int, ...]:
        """The partition counts before each repartition (reader_plan.earlier_counts), read
        from transcript.layout when the input's count is not the one last read at (a move
        ended since); none when the topic does not exist (no move was ever made)."""
        if self._layout_at == input_partitions:
            return self._earlier
        o = self.options
        topic = o.layout_topic
        with kafka_errors(f"cannot read {topic}", o, topic):
            if topic not in self._admin.list_topics():
                keys: list[bytes] = []
            else:
                keys = self._layout_keys(topic)
        self._earlier, self._layout_at = earlier_counts(keys, input_partitions), input_partitions
        return self._earlier

    def _layout_keys(self, topic: str) -> list[bytes]:
        """Every key of transcript.layout's one partition, to its end (a few records)."""
        from kafka import KafkaConsumer

        consumer = KafkaConsumer(**self._kwargs, group_id=None, enable_auto_commit=False,
                                 isolation_level="read_committed")
        try:
            tp = TopicPartition(topic, 0)
            consumer.assign([tp])
            consumer.seek_to_beginning(tp)
            end = consumer.end_offsets([tp])[tp]
            keys: list[bytes] = []
            deadline = time.monotonic() + self.options.request_timeout_ms / 1000
            while consumer.position(tp) < end:
                if time.monotonic() > deadline:
                    raise KafkaTimeoutError(f"{topic} not read to its end")
                for records in consumer.poll(timeout_ms=200).values():
                    keys.extend(r.key for r in records if r.key is not None)
            return keys
        finally:
            consumer.close()

    def close(self) -> None:
        self._admin.close()


__all__ = ["Cluster", "KafkaUnavailable", "acl_needed", "kafka_errors", "read_error"]
