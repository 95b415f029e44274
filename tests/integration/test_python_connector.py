"""The Python connector end to end on the real broker: connectors/python/tests/e2e, run with the
connector's own virtualenv (var/venv-connector: no worker dependency in it), publishes the demo
scenario (workers/scenario.py) through ConfirmationPublisher beside a running worker, with one
aborted and one committed transaction. Then, from the worker's side: the worker's entries and
diagnostics equal `replay` of exactly the committed bytes, nothing was dead-lettered or
re-keyed, and the aborted records were never read."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path

import pytest
from kafka import TopicPartition
from transcript_connector.partitioning import partition_for

from tests.conftest import ROOT, cli
from tests.integration.harness import group_of, wait_drained, without_positions, without_written_at
from workers.core.outputs import CONFIRMATIONS, DIAGNOSTICS, DLQ, ENTRIES
from workers.kafka_io import consumer, polls
from workers.scenario import steps
from workers.settings import KafkaSettings, kafka_settings

pytestmark = pytest.mark.kafka

SCRIPT = ROOT / "connectors/python/tests/e2e/publish_scenario.py"


def connector_python() -> Path:
    """The connector virtualenv's interpreter: TRANSCRIPT_CONNECTOR_PYTHON, else make's."""
    python = Path(os.environ.get("TRANSCRIPT_CONNECTOR_PYTHON")
                  or ROOT / "var/venv-connector/bin/python")
    if not python.exists():
        pytest.fail(f"{python} is missing: `make connector-python` creates the connector's "
                    "virtualenv (or set TRANSCRIPT_CONNECTOR_PYTHON)")
    return python


def read_all(ks: KafkaSettings, topic: str) -> list:
    """Every committed record of `topic` as a read_committed reader sees it, to its end."""
    c = consumer(ks)
    try:
        tps = [TopicPartition(topic, p) for p in sorted(c.partitions_for_topic(topic) or ())]
        c.assign(tps)
        c.seek_to_beginning()
        return [r for batch in polls(c, c.end_offsets(tps), timeout=60) for r in batch]
    finally:
        c.close()


def lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_demo_scenario_published_from_python(env, topics, workers, tmp_path, kafka_bootstrap):
    python = connector_python()
    scenario = steps("py1", datetime(2026, 5, 1, 12, 0, tzinfo=UTC))
    (tmp_path / "scenario.json").write_text(json.dumps(
        [dict(asdict(s), key=s.key.decode(), value=s.value.decode()) for s in scenario]))
    w = workers()
    # the connector's interpreter alone: no PYTHONPATH into the worker's sources
    run_env = {k: v for k, v in env.items() if k != "PYTHONPATH"}
    done = subprocess.run(
        [str(python), str(SCRIPT)], cwd=tmp_path, capture_output=True, text=True, timeout=300,
        env=dict(run_env, E2E_SCENARIO=str(tmp_path / "scenario.json"), E2E_OUT=str(tmp_path)))
    assert done.returncode == 0, done.stderr + "\n--- worker ---\n" + w.tail()

    published = lines(tmp_path / "published.jsonl")
    aborted = lines(tmp_path / "aborted.jsonl")
    assert len(published) == len(scenario) - 2  # the two invalid steps never left the builders
    assert [json.loads(a["value"])["send_id"] for a in aborted] == ["aborted-ghost"]
    for p in published + aborted:
        assert p["partition"] == partition_for(p["key"], 8)

    ks = kafka_settings(env)
    wait_drained(kafka_bootstrap, group_of(env), ks.topic(CONFIRMATIONS), 90, [w])

    # the input holds exactly what the connector committed, under its keys: no re-keyed copy
    # (every record was keyed canonically, in its home partition), the aborted record unread
    inputs = read_all(ks, ks.topic(CONFIRMATIONS))
    assert sorted((r.partition, r.offset, r.key.decode()) for r in inputs) == sorted(
        (p["partition"], p["offset"], p["key"]) for p in published)
    assert not any(dict(r.headers).get("rekeyed.from") for r in inputs)

    # what the worker must write: `replay` of exactly the committed bytes
    replayed = cli("replay", "-", env=env, input="".join(
        p["value"] + "\n" for p in published).encode())
    assert replayed.returncode == 0, replayed.stderr.decode()
    outcomes = [json.loads(line) for line in replayed.stdout.splitlines()]
    assert [o["outcome"] for o in outcomes] == [s.expect for s in scenario
                                                if s.expect != "dead_letter"]
    expected_entries = [o["entry"] for o in outcomes if "entry" in o]
    expected_diags = [d for o in outcomes for d in o.get("diagnostics", [])]

    def by_seq(e: dict) -> tuple[str, int]:
        return e["session_key"], e["seq"]

    entries = [json.loads(r.value) for r in without_positions(read_all(ks, ks.topic(ENTRIES)))]
    assert len(entries) == sum(s.expect == "written" for s in scenario) == 9
    assert sorted(without_written_at(entries), key=by_seq) == sorted(
        without_written_at(expected_entries), key=by_seq)
    diags = [json.loads(r.value) for r in read_all(ks, ks.topic(DIAGNOSTICS))]
    def stable(d: dict) -> str:
        return json.dumps(d, sort_keys=True)

    assert sorted(map(stable, diags)) == sorted(map(stable, expected_diags))
    assert len(diags) == 5
    assert read_all(ks, ks.topic(DLQ)) == []
    assert "aborted-ghost" not in json.dumps(entries + diags)
    assert w.stop() == 0


def test_the_publisher_refuses_a_topic_the_worker_does_not_read_and_is_fenced(env, topics):
    """connect() refuses a missing topic and another partition count; a second publisher with
    the transactional id fences the first, whose next transaction fails (and commits nothing);
    publishing on the publisher inside its own open transaction is refused, not a deadlock."""
    from transcript_connector import ConfirmationPublisher, PublishError, build_reset

    record = build_reset(session_key="agent:ops:main", reset_at="2026-05-01T12:00:00Z")

    async def run() -> list[str]:
        refusals = []
        for overrides in ({"partitions": 3}, {"topic_prefix": topics + "missing."}):
            with pytest.raises(PublishError) as caught:
                async with ConfirmationPublisher.from_env(env, **overrides):
                    pass
            refusals.append(str(caught.value))
        tid = f"{topics}fencing"
        async with ConfirmationPublisher.from_env(env, transactional_id=tid) as first:
            await first.publish(record)
            async with ConfirmationPublisher.from_env(env, transactional_id=tid) as second:
                with pytest.raises(PublishError, match="Fenced"):
                    await first.publish(record)
                await second.publish(record)
                async with second.transaction() as tx:  # would wait for itself: refused
                    with pytest.raises(PublishError, match="publish through its Transaction"):
                        await second.publish(record)
                    await tx.publish(record)
        return refusals

    refusals = asyncio.run(run())
    assert "has 8 partitions, the worker expects 3 (TRANSCRIPT_PARTITIONS)" in refusals[0]
    assert refusals[1] == (f"topic {topics}missing.delivery.confirmations does not exist "
                           "(transcript-owner topics apply creates it)")
    ks = kafka_settings(env)
    assert len(read_all(ks, ks.topic(CONFIRMATIONS))) == 3  # the fenced one's never landed
