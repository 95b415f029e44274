"""`audit` and `show` against the real broker: clean on the worker's output, and able to fail."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from transcript_connector.partitioning import partition_for

from tests.conftest import cli, keeping_input
from tests.integration.harness import Collector, WorkerProcess, wait_drained
from tests.integration.test_audit_retention import DM, truncated  # noqa: F401  (a fixture)
from workers.core.checkpoint_format import CHECKPOINTS
from workers.core.outputs import CONFIRMATIONS, DIAGNOSTICS, DLQ, ENTRIES, ERASURES
from workers.kafka_io import producer, publish
from workers.scenario import steps
from workers.settings import kafka_settings

pytestmark = pytest.mark.kafka


@pytest.fixture
def env(env, tmp_path):
    """The input kept for ever, as `truncated` (test_audit_retention) deletes its oldest records
    and checkpoints every second (tests.conftest.keeping_input)."""
    return keeping_input(env, tmp_path)


@pytest.fixture
def processed(env, topics, tmp_path):
    """The demo scenario, processed by a worker that has caught up and stopped."""
    ks = kafka_settings(env)
    scenario = steps("aud1", datetime(2026, 6, 1, 9, 0, tzinfo=UTC))
    publish(ks, ks.topic(CONFIRMATIONS), [(s.key, s.value) for s in scenario], 8)
    w = WorkerProcess(env, tmp_path / "state", tmp_path / "w.log").start()
    wait_drained(env["KAFKA_BOOTSTRAP"], env["TRANSCRIPT_TOPIC_PREFIX"] + "transcript-owner",
                 ks.topic(CONFIRMATIONS), 120, [w])
    Collector(ks, ks.topic(ENTRIES)).wait_for(
        lambda r: len(r) >= sum(s.expect == "written" for s in scenario), 30, w)
    assert w.stop() == 0
    return ks


def test_audit_is_clean_on_what_the_worker_wrote(env, processed):
    done = cli("audit", "--json", env=env)
    assert done.returncode == 0, done.stdout.decode()
    report = json.loads(done.stdout)
    assert report["clean"] and report["expected_entries"] == report["actual_entries"] == 9
    assert report["outcomes"]["dead_letter"] == 2


def test_audit_reports_a_forged_and_a_removed_entry(env, processed):
    ks = processed
    dm = "agent:ops:telegram:direct:uaud1"
    entries = [json.loads(r.value) for r in Collector(ks, ks.topic(ENTRIES)).wait_for(
        lambda r: len(r) >= 9, 30)]
    victim = next(e for e in entries if e["session_key"] == dm and e["seq"] == 2)
    forged = dict(victim, seq=99, text="I never said this", entry_id="forged")
    p = producer(ks)
    part = partition_for(dm, 8)
    p.send(ks.topic(ENTRIES), key=f"{dm}#{99:010d}".encode(), value=json.dumps(forged).encode(),
           partition=part).get(timeout=10)
    p.send(ks.topic(ENTRIES), key=f"{dm}#{2:010d}".encode(), value=None,
           partition=part).get(timeout=10)  # tombstone: erase entry 2
    p.close()

    done = cli("audit", "--json", env=env)
    assert done.returncode == 1
    report = json.loads(done.stdout)
    assert report["discrepancies"]["missing"] == 1
    assert report["examples"]["missing"] == [f"{dm}#{2:010d}"]
    assert report["discrepancies"]["unexpected"] == 1
    assert report["examples"]["unexpected"] == [f"{dm}#{99:010d}"]
    text = cli("audit", env=env).stdout.decode()
    assert "DISCREPANCIES FOUND" in text and "missing: 1" in text


def test_show_prints_one_session_in_order(env, processed):
    dm = "agent:ops:telegram:direct:uaud1"
    done = cli("show", dm, "--json", env=env)
    assert done.returncode == 0
    shown = [json.loads(line) for line in done.stdout.splitlines()]
    assert [e["seq"] for e in shown] == [1, 2, 3, 4, 5, 6]
    assert {e["session_key"] for e in shown} == {dm}
    table = cli("show", dm, env=env).stdout.decode()
    assert "Report: 3 open tickets" in table.splitlines()[2]


def test_audit_reports_garbage_on_every_worker_owned_topic(env, truncated):  # noqa: F811
    """Whoever may write a worker-owned topic (an ACL too wide, an admin tool) can put anything
    there. Past input retention, so that the audit reads the checkpoints too: non-JSON on
    entries, diagnostics and erasures, a dead letter without headers and one with a bad
    `source.partition`, a bad checkpoint key, a manifest with a string `input_offset` and one
    naming another partition (the oldest, where the audit would start). Each is a finding
    naming topic, partition and offset, never what it holds; the audit goes on from the
    worker's checkpoint and exits 1. Before, it stopped with exit 2 on the first of them."""
    ks, _, _ = truncated
    part = partition_for(DM, 8)
    starts = KafkaConsumer(**ks.kafka_python_kwargs())
    first = starts.beginning_offsets([TopicPartition(ks.topic(CONFIRMATIONS), part)])
    starts.close()
    assert (retained := next(iter(first.values()))) > 0
    secret = b"s3cret-text"
    manifest = {"schema": "checkpoint/1", "partition": part, "id": 0, "copy": "x",
                "input_offset": retained, "diagnostics_offset": 0, "chunks": 0, "keys": 0,
                "taken_at": "2026-06-01T09:00:00+00:00"}
    source = [("error", b"e"), ("source.topic", ks.topic(CONFIRMATIONS).encode()),
              ("source.offset", b"1")]
    garbage = [  # topic, key, value, headers, what the finding says
        (ENTRIES, f"{DM}#{99:010d}".encode(), secret, [], "not JSON"),
        (ENTRIES, secret, json.dumps([secret.decode()]).encode(), [],
         "JSON an array, not an object"),
        (DIAGNOSTICS, DM.encode(), b"\xff" + secret, [], "not UTF-8"),
        (DLQ, secret, secret, [], "header error: missing"),
        (DLQ, secret, secret, [*source, ("source.partition", b"x")],
         "header source.partition: not a whole number from 0 to 2147483647"),
        (ERASURES, DM.encode(), b"{" + secret, [], "not JSON"),
        (CHECKPOINTS, b"c/x", secret, [], "a key that is neither m/<partition>/<slot> nor "
                                          "c/<partition>/<slot>/<chunk, 6 digits>"),
        (CHECKPOINTS, f"m/{part}/5000".encode(),
         json.dumps(dict(manifest, input_offset=str(retained))).encode(), [],
         "input_offset: not a whole number from 0 to 9223372036854775807"),
        (CHECKPOINTS, f"m/{part}/5001".encode(),
         json.dumps(dict(manifest, partition=(part + 1) % 8)).encode(), [],
         f"a manifest of partition {(part + 1) % 8} under a key of partition {part}"),
    ]
    plain = KafkaProducer(**ks.kafka_python_kwargs())
    wanted = []
    for topic, key, value, headers, what in garbage:
        at = plain.send(ks.topic(topic), key=key, value=value, headers=headers,
                        partition=part).get(timeout=10)
        wanted.append(f"{ks.topic(topic)} partition {part} offset {at.offset}: {what}")
    plain.close()

    done = cli("audit", "--json", env=env)
    assert (done.returncode, done.stderr.decode()) == (1, ""), done.stdout.decode()
    report = json.loads(done.stdout)
    assert {k: n for k, n in report["discrepancies"].items() if n} == {"malformed": len(wanted)}
    assert sorted(report["examples"]["malformed"]) == sorted(wanted)
    assert report["partitions"] == 8 and report["outcomes"].get("duplicate", 0) >= 1
    assert secret.decode() not in done.stdout.decode()
    text = cli("audit", env=env)
    assert text.returncode == 1 and f"malformed: {len(wanted)}" in text.stdout.decode()
    assert secret not in text.stdout + text.stderr
