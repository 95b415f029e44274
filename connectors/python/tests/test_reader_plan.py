"""What a bound read needs, decided without I/O (transcript_connector.reader_plan), the held
session's view of its records, the reader's options and its error messages. No broker."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from kafka.errors import (
    KafkaTimeoutError,
    SaslAuthenticationFailedError,
    TopicAuthorizationFailedError,
)
from transcript_connector import ConnectorError, StaleReadError, partition_for
from transcript_connector.entries_topic import Delete, Position, Skip, Upsert, classify, entry_key
from transcript_connector.reader import BlockingSessionReader
from transcript_connector.reader_kafka import read_error
from transcript_connector.reader_options import ReaderOptions, reader_options_from_env
from transcript_connector.reader_plan import (
    LATEST,
    At,
    HeldSession,
    Need,
    Plan,
    Refused,
    earlier_counts,
    parse_at,
    plan_read,
    stale,
)

K = "agent:a:main"


def key_moving(old: int, new: int) -> str:
    """A session key whose home under `new` partitions is not its home under `old`."""
    return next(k for k in (f"agent:a:s{i}" for i in range(200))
                if partition_for(k, old) != partition_for(k, new))


# --- the plan ------------------------------------------------------------------------------


def test_latest_needs_the_last_stable_offset_of_home_taken_when_the_step_starts() -> None:
    home = partition_for(K, 8)
    assert plan_read(K, LATEST, 8, 8) == Plan(home, (Need(home, None),), None)


def test_latest_after_repartitions_first_waits_for_the_sessions_earlier_homes() -> None:
    """A publisher that has not yet seen a move still sends to the session's home under the
    old count; the worker re-keys those records home, so LATEST first waits there."""
    keys = [f"agent:a:s{i}" for i in range(400)]
    moved = next(k for k in keys if len({partition_for(k, n) for n in (8, 16, 32)}) == 3)
    stayed = next(k for k in keys if partition_for(k, 8) == partition_for(k, 32))
    plan = plan_read(moved, LATEST, 32, 32, (8, 16))
    assert plan.steps == (Need(partition_for(moved, 8), None), Need(partition_for(moved, 16), None),
                          Need(partition_for(moved, 32), None))
    assert plan_read(stayed, LATEST, 32, 32, (8,)).steps == (Need(partition_for(stayed, 32), None),)
    # a delivery names its partition: one step on home, two elsewhere, whatever the history
    home = partition_for(moved, 32)
    assert plan_read(moved, At(home, 5), 32, 32, (8, 16)).steps == (Need(home, 6),)


@pytest.mark.parametrize(("keys", "now", "earlier"), [
    ([], 8, ()),
    ([b"move/8-16", b"move/8-16/0", b"move/8-16/7"], 16, (8,)),
    ([b"move/8-16", b"move/16-32", b"move/16-32/3"], 32, (8, 16)),
    ([b"move/8-16", b"move/16-32"], 16, (8,)),  # 16 -> 32 not ended: the input has 16
    ([b"move/08-16", b"move/8-16x", b"other", None, b"move/0-8"], 16, ()),
])
def test_the_earlier_counts_are_transcript_layouts_moves_that_ended(keys, now, earlier) -> None:
    assert earlier_counts(keys, now) == earlier


def test_a_delivery_on_home_needs_the_position_past_it() -> None:
    home = partition_for(K, 8)
    assert plan_read(K, At(home, 41), 8, 8) == Plan(home, (Need(home, 42),), None)
    assert plan_read(K, At(home, 0), 8, 8).steps == (Need(home, 1),)


def test_a_delivery_elsewhere_waits_there_then_for_homes_last_stable_offset() -> None:
    """Published under an older count (or keyed non-canonically): the worker re-keys it home in
    the transaction that moves that partition's position past it."""
    key = key_moving(4, 8)
    old, home = partition_for(key, 4), partition_for(key, 8)
    assert plan_read(key, At(old, 7), 8, 8) == Plan(home, (Need(old, 8), Need(home, None)), None)


def test_a_delivery_on_a_partition_the_input_lacks_is_refused() -> None:
    found = plan_read(K, At(8, 3), 8, 8)
    assert found == Refused("delivery 8:3: delivery.confirmations has 8 partitions, none "
                            "numbered 8")
    assert isinstance(plan_read(K, At(-1, 3), 8, 8), Refused)
    assert isinstance(plan_read(K, At(0, -3), 8, 8), Refused)


def test_differing_counts_block_the_read_and_say_why() -> None:
    """A repartition in progress: the input is grown last, so it has fewer partitions until
    the move ends; home is taken under the input's count."""
    plan = plan_read(K, LATEST, 8, 16)
    assert isinstance(plan, Plan) and plan.home == partition_for(K, 8)
    assert plan.blocked == ("a repartition is in progress: delivery.confirmations has 8 "
                            "partitions, transcript.entries 16")
    assert plan_read(K, At(plan.home, 3), 8, 16).blocked == plan.blocked


@pytest.mark.parametrize(("text", "bound"), [
    ("latest", LATEST), ("0:0", At(0, 0)), ("3:1200", At(3, 1200)),
    ("2147483647:9223372036854775807", At(2**31 - 1, 2**63 - 1))])
def test_a_bound_is_parsed_from_its_text(text: str, bound: object) -> None:
    assert parse_at(text) == bound


@pytest.mark.parametrize("text", [
    "", "LATEST", "Latest", "3", "3:", ":3", "a:b", "-1:2", "1:-2", "03:1", "3:01", " 3:1",
    "3:1 ", "3:1:2", "3.0:1", "\u0663:1", "2147483648:0", "1:9223372036854775808",
    "99999999999:1"])
def test_a_malformed_bound_is_named(text: str) -> None:
    with pytest.raises(ValueError) as caught:
        parse_at(text)
    assert str(caught.value).startswith(f"--at {text!r}: ")


def test_a_stale_read_names_partition_positions_and_age() -> None:
    now = datetime(2026, 5, 1, 12, 0, 10, tzinfo=UTC)
    error = stale(Position(3, 100, 4, now - timedelta(seconds=2.5)), 120, now)
    assert isinstance(error, StaleReadError)
    assert (error.partition, error.reached, error.needed, error.age_s) == (3, 100, 120, 2.5)
    assert str(error) == ("stale read: partition 3 reached input offset 100, needed 120; the "
                          "worker's last position there is 2.5s old")
    none = stale(Position(5), 1, now, "a repartition is in progress: x")
    assert str(none) == ("stale read: partition 5 reached input offset 0, needed 1; the worker "
                         "has written no position there; a repartition is in progress: x")


# --- a held session: compaction's view -----------------------------------------------------


def entry(session_key: str, seq: int, text: str = "hi") -> bytes:
    return (f'{{"schema":"transcript-entry/1","session_key":"{session_key}","epoch":0,'
            f'"seq":{seq},"entry_id":"e{seq}","send_id":"s{seq}","role":"assistant",'
            f'"agent_id":"a","text":"{text}","media":[],"source":"automation_result",'
            '"posted_by":{"kind":"job","id":"j"},"delivered_at":"2026-12-04T10:00:00Z",'
            '"written_at":"2026-12-04T10:00:00Z","platform_message_ids":["1"]}').encode()


def apply(held: HeldSession, seq: int, value: bytes | None, chain: str | None = None) -> None:
    headers = [] if chain is None else [("chain", chain.encode())]
    change = classify(entry_key(K, seq), value, headers)
    assert isinstance(change, Upsert | Delete | Skip)
    held.apply(seq, change, value, chain)


def test_the_latest_value_per_seq_wins_tombstones_remove_and_invalid_values_hide() -> None:
    held = HeldSession()
    apply(held, 2, entry(K, 2, "two"), "c2")
    apply(held, 1, entry(K, 1, "one"))
    apply(held, 3, entry(K, 3, "three"))
    apply(held, 3, None)  # erased
    apply(held, 1, entry(K, 1, "one, again"))
    apply(held, 4, entry(K, 4))
    apply(held, 4, b'{"not": "an entry"}')  # compaction keeps this one: no entry 4
    apply(held, 5, entry("agent:a:other", 5))  # names another session than its key
    entries, unreadable = held.snapshot()
    assert [(e.seq, e.entry.text, e.chain) for e in entries] == [
        (1, "one, again", None), (2, "two", "c2")]
    assert entries[1].value == entry(K, 2, "two")  # the bytes as stored
    assert [(u.seq, u.value) for u in unreadable] == [
        (4, b'{"not": "an entry"}'), (5, entry("agent:a:other", 5))]
    assert all("an entry" not in u.reason for u in unreadable)  # names fields, not content
    assert held.snapshot() is held.snapshot()  # kept until the next record
    apply(held, 4, None)
    assert [u.seq for u in held.snapshot()[1]] == [5]


# --- options and errors --------------------------------------------------------------------


def test_the_reader_reads_the_workers_variables_and_its_own() -> None:
    o = reader_options_from_env({
        "KAFKA_BOOTSTRAP": "127.0.0.1:9092", "TRANSCRIPT_TOPIC_PREFIX": "t1.",
        "KAFKA_SECURITY_PROTOCOL": "sasl_ssl", "KAFKA_SASL_MECHANISM": "scram-sha-256",
        "KAFKA_SASL_USERNAME": "reader", "KAFKA_SASL_PASSWORD": "pw-not-shown",
        "TRANSCRIPT_PARTITIONS": "3",  # not the reader's: it takes the topic's count
        "TRANSCRIPT_READ_TIMEOUT_MS": "2500", "TRANSCRIPT_READ_SESSIONS_PER_PARTITION": "7",
        "TRANSCRIPT_READ_DB_POLL_MS": "2"})
    assert (o.input_topic, o.entries_topic) == ("t1.delivery.confirmations",
                                                "t1.transcript.entries")
    assert (o.timeout_ms, o.sessions_per_partition, o.db_poll_ms) == (2500, 7, 2)
    assert (o.sasl_mechanism, o.client_id) == ("SCRAM-SHA-256", "transcript-owner-reader")
    assert "pw-not-shown" not in repr(o)
    assert reader_options_from_env({}, timeout_ms=1).timeout_ms == 1


@pytest.mark.parametrize(("env", "variable"), [
    ({"TRANSCRIPT_READ_TIMEOUT_MS": "0"}, "TRANSCRIPT_READ_TIMEOUT_MS"),
    ({"TRANSCRIPT_READ_TIMEOUT_MS": "1e30"}, "TRANSCRIPT_READ_TIMEOUT_MS"),
    ({"TRANSCRIPT_READ_SESSIONS_PER_PARTITION": "0"}, "TRANSCRIPT_READ_SESSIONS_PER_PARTITION"),
    ({"TRANSCRIPT_READ_DB_POLL_MS": "5000"}, "TRANSCRIPT_READ_DB_POLL_MS"),
    ({"KAFKA_BOOTSTRAP": "nohost"}, "KAFKA_BOOTSTRAP"),
])
def test_a_bad_variable_is_named_never_its_value(env: dict[str, str], variable: str) -> None:
    with pytest.raises(ConnectorError, match=f"^invalid environment: {variable}: ") as caught:
        reader_options_from_env(env)
    assert list(env.values())[0] not in str(caught.value)


SASL = ReaderOptions(security_protocol="SASL_SSL", sasl_mechanism="SCRAM-SHA-512",
                     sasl_username="gw", sasl_password="hunter2", topic_prefix="p.")


def test_an_authorization_refusal_names_who_and_the_acl_needed() -> None:
    refused = TopicAuthorizationFailedError("Topic authorization failed")
    on_input = read_error("cannot read the last stable offset of p.delivery.confirmations[3]",
                          SASL, refused, "p.delivery.confirmations")
    assert str(on_input) == (
        "cannot read the last stable offset of p.delivery.confirmations[3]: "
        "TopicAuthorizationFailedError: KAFKA_SASL_USERNAME='gw' (SASL SCRAM-SHA-512 over "
        "SASL_SSL) is not authorized: a reader needs an ACL allowing Describe on topic "
        "p.delivery.confirmations (and Describe on p.delivery.confirmations, Read on "
        "p.transcript.entries and p.transcript.layout)")
    on_entries = read_error("cannot read p.transcript.entries", SASL, refused,
                            "p.transcript.entries")
    assert "allowing Read on topic p.transcript.entries" in str(on_entries)


def test_other_kafka_errors_name_what_failed_and_never_the_password() -> None:
    refused = read_error("cannot connect", SASL,
                         SaslAuthenticationFailedError("bad credentials"), "x")
    assert str(refused).startswith("cannot connect: authentication failed: Kafka at "
                                   "127.0.0.1:9092 refused KAFKA_SASL_USERNAME='gw'")
    silent = read_error("cannot read p.transcript.entries", SASL,
                        KafkaTimeoutError("Unable to bootstrap"), "p.transcript.entries")
    assert str(silent) == ("cannot read p.transcript.entries: Kafka at 127.0.0.1:9092 did not "
                           "answer: KafkaTimeoutError: Unable to bootstrap")
    assert all("hunter2" not in str(e) for e in (refused, silent))


def test_the_reader_is_loaded_on_first_use_only() -> None:
    """The worker imports the package for the contract: the bound and the result types load no
    Kafka client; the readers do, when asked for."""
    import subprocess
    import sys

    probe = ("import sys, transcript_connector as t; t.LATEST, t.At, t.SessionRead; "
             "before = 'kafka' in sys.modules; t.SessionReader, t.BlockingSessionReader; "
             "print(before, 'kafka' in sys.modules, t.ReaderOptions().client_id)")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          timeout=120, check=True)
    assert done.stdout.split() == ["False", "True", "transcript-owner-reader"]


# --- Kafka not answering: waited out until the deadline, then stale with the reason ---------


class FlakyCluster:
    """A cluster whose lookups fail as a restarting broker's do for the first `down` asks."""

    def __init__(self, down: int) -> None:
        self.down, self.asked = down, 0

    def _maybe_fail(self) -> None:
        from transcript_connector.reader_kafka import KafkaUnavailable

        self.asked += 1
        if self.asked <= self.down:
            raise KafkaUnavailable("cannot read the topics' metadata: Kafka at 127.0.0.1:9 did "
                                   "not answer: KafkaConnectionError")

    def counts(self) -> tuple[int, int]:
        self._maybe_fail()
        return 8, 8

    def earlier_counts(self, input_partitions: int) -> tuple[int, ...]:
        return ()

    def last_stable_offset(self, partition: int) -> int:
        self._maybe_fail()
        return 5

    def close(self) -> None:
        pass


class ReachedSource:
    """A source whose position for every partition is input offset 5, written just now."""

    def begin(self, partition: int, session_key: str | None) -> None:
        pass

    def end(self, partition: int, session_key: str | None) -> None:
        pass

    def look(self, partition: int, session_key: str | None, needed: int):  # noqa: ANN201
        from datetime import UTC, datetime

        return Position(partition, 5, 0, datetime.now(UTC)), ((), ())

    def wait(self, seconds: float) -> None:
        pass  # nothing arrives: the read asks Kafka again at its next look

    def held(self) -> dict:
        return {}

    def close(self) -> None:
        pass


def reader_with(cluster: FlakyCluster) -> BlockingSessionReader:
    reader = BlockingSessionReader(ReaderOptions())
    reader._cluster, reader._source = cluster, ReachedSource()  # type: ignore[assignment]
    return reader


def test_a_read_waits_kafka_out_and_completes_once_it_answers(monkeypatch) -> None:
    import transcript_connector.reader as reader_module

    monkeypatch.setattr(reader_module, "METADATA_EVERY_S", 0.0)  # ask again at the next look
    cluster = FlakyCluster(down=3)
    read = reader_with(cluster).read(K, at=LATEST, timeout_s=30)
    assert (read.needed, read.position.input_offset, cluster.asked) == (5, 5, 5)


def test_a_read_whose_deadline_comes_while_kafka_is_away_is_stale_and_says_why() -> None:
    cluster = FlakyCluster(down=10**9)
    with pytest.raises(StaleReadError) as caught:
        reader_with(cluster).read(K, at=LATEST, timeout_s=0.05)
    stale_error = caught.value
    assert stale_error.reason is not None and "did not answer" in stale_error.reason
    assert "KafkaConnectionError" in str(stale_error)
    assert cluster.asked >= 1
