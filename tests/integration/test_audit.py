"""`audit` and `show` against the real broker: clean on the worker's output, and able to fail."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from tests.conftest import cli
from tests.integration.harness import Collector, WorkerProcess, wait_drained
from workers.kafka_io import producer, publish
from workers.scenario import steps
from workers.settings import kafka_settings
from workers.stream.outputs import CONFIRMATIONS, ENTRIES
from workers.stream.partitioning import partition_for

pytestmark = pytest.mark.kafka


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
