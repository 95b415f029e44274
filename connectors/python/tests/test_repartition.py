"""A connected publisher and a topic whose partition count changes: `transcript-owner repartition`
grows the input topic while gateways keep publishing. The decision alone (no broker), then a
real topic grown under a connected publisher (the local broker: `make kafka-up`, which `make
test` runs; KAFKA_BOOTSTRAP to aim elsewhere on this machine)."""

from __future__ import annotations

import asyncio
import logging
import os
import time
import uuid
from collections.abc import Iterator

import pytest
from kafka.admin import KafkaAdminClient, NewPartitions, NewTopic
from transcript_connector import ConnectorError, PublishError, build_reset, partition_for
from transcript_connector.publisher import (
    ConfirmationPublisher,
    PublisherOptions,
    next_partition_count,
    publisher_options_from_env,
)

TOPIC = "t.delivery.confirmations"


@pytest.mark.parametrize(("current", "seen"), [(2, 2), (2, 4), (8, 16), (8, 9), (1, 10_000)])
def test_a_count_that_stayed_or_grew_is_the_one_to_publish_with(current: int, seen: int) -> None:
    assert next_partition_count(TOPIC, current, seen) == seen


@pytest.mark.parametrize(("current", "seen"), [(4, 2), (16, 8), (2, 1)])
def test_a_count_that_shrank_is_a_recreated_topic(current: int, seen: int) -> None:
    with pytest.raises(PublishError) as caught:
        next_partition_count(TOPIC, current, seen)
    assert str(caught.value) == (
        f"topic {TOPIC} now has {seen} partitions, this publisher connected with {current}: the "
        f"topic was recreated; connect again (TRANSCRIPT_PARTITIONS={seen}, or unset to take "
        "the topic's count)")


def test_the_check_interval_is_an_option_and_a_variable() -> None:
    assert publisher_options_from_env({}).partitions_check_ms == 5000
    o = publisher_options_from_env({"TRANSCRIPT_PARTITIONS_CHECK_MS": "250"})
    assert o.partitions_check_ms == 250
    with pytest.raises(ConnectorError,
                       match="^invalid environment: TRANSCRIPT_PARTITIONS_CHECK_MS: "):
        publisher_options_from_env({"TRANSCRIPT_PARTITIONS_CHECK_MS": "0"})


@pytest.fixture
def bootstrap() -> str:
    """The local broker (a missing one is a failure, not a skip: make test starts it)."""
    value = os.environ.get("KAFKA_BOOTSTRAP") or "127.0.0.1:9092"
    host = value.split(",")[0].rsplit(":", 1)[0]
    assert host in ("127.0.0.1", "localhost", "::1"), "tests only talk to a broker on loopback"
    return value


@pytest.fixture
def admin(bootstrap: str) -> Iterator[KafkaAdminClient]:
    client = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=20_000)
    yield client
    client.close()


@pytest.fixture
def prefix(admin: KafkaAdminClient) -> Iterator[str]:
    """A topic prefix no other test uses (as the worker's suite names them); its topics are
    deleted after the test."""
    value = f"t{uuid.uuid4().hex[:10]}."
    yield value
    mine = [t for t in admin.list_topics() if t.startswith(value)]
    if mine:
        admin.delete_topics(mine)


def moving_key() -> str:
    """A session key whose home under 4 partitions is not its home under 2."""
    return next(key for key in (f"agent:ops:main-{i}" for i in range(100))
                if partition_for(key, 4) != partition_for(key, 2))


def test_a_topic_grown_while_connected_is_adopted(
        bootstrap: str, admin: KafkaAdminClient, prefix: str,
        caplog: pytest.LogCaptureFixture) -> None:
    options = PublisherOptions(bootstrap=bootstrap, topic_prefix=prefix, partitions=2,
                               partitions_check_ms=50, client_id="repartition-test")
    topic = options.topic_name
    admin.create_topics([NewTopic(topic, 2, 1)])
    key = moving_key()
    record = build_reset(session_key=key, reset_at="2026-05-01T12:00:00Z")
    caplog.set_level(logging.INFO, logger="transcript_connector.publisher")

    async def run() -> None:
        async with ConfirmationPublisher(options) as publisher:
            assert (await publisher.publish(record)).partition == partition_for(key, 2)
            assert publisher.partitions == 2
            await asyncio.to_thread(admin.create_partitions, {topic: NewPartitions(4)})
            deadline = time.monotonic() + 60
            while (delivery := await publisher.publish(record)).partition != partition_for(key, 4):
                assert delivery.partition == partition_for(key, 2)  # the old home, until noticed
                assert time.monotonic() < deadline, "the grown topic was not noticed in 60 s"
            assert publisher.partitions == 4
            # from then on, every record goes to its home under 4
            deliveries = await publisher.publish_all([record] * 3)
            assert {d.partition for d in deliveries} == {partition_for(key, 4)}

    asyncio.run(run())
    grew = [r for r in caplog.records if "grew" in r.getMessage()]
    assert [(r.levelno, r.getMessage()) for r in grew] == [
        (logging.INFO, f"topic {topic} grew from 2 to 4 partitions (transcript-owner "
                       "repartition): publishing with 4")]


def test_connect_says_what_to_do_about_another_count(
        bootstrap: str, admin: KafkaAdminClient, prefix: str) -> None:
    options = PublisherOptions(bootstrap=bootstrap, topic_prefix=prefix, partitions=2)
    admin.create_topics([NewTopic(options.topic_name, 4, 1)])

    async def run() -> None:
        with pytest.raises(PublishError) as caught:
            async with ConfirmationPublisher(options):
                pass
        assert str(caught.value) == (
            f"topic {options.topic_name} has 4 partitions, the worker expects 2 "
            "(TRANSCRIPT_PARTITIONS): if the deployment was repartitioned (transcript-owner "
            "repartition), set TRANSCRIPT_PARTITIONS=4, or unset it to take the topic's count")
        async with ConfirmationPublisher(options.model_copy(update={"partitions": None})) as p:
            assert p.partitions == 4

    asyncio.run(run())
