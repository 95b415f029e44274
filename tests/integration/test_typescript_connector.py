"""The TypeScript connector end to end on the real broker: connectors/typescript/test/e2e
publishes the demo scenario (workers/scenario.py) through ConfirmationPublisher beside a running
worker and checks, in Node, what a read_committed reader reads back against `replay` of the bytes
it published, and the reader example. Then, from Python: the worker took every record where the
connector put it (nothing re-keyed, nothing dead-lettered, the aborted transaction unseen)."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import asdict
from datetime import UTC, datetime

import pytest
from transcript_connector.partitioning import partition_for

from tests.conftest import ROOT
from tests.integration.harness import Collector, group_of, wait_drained
from tests.typescript_connector import built, failures, tap_summary
from workers.core.outputs import CONFIRMATIONS, DIAGNOSTICS, DLQ, ENTRIES
from workers.scenario import steps
from workers.settings import kafka_settings

pytestmark = pytest.mark.kafka


def test_demo_scenario_published_from_typescript(env, topics, workers, tmp_path, kafka_bootstrap):
    package = built()
    scenario = steps("ts1", datetime(2026, 5, 1, 12, 0, tzinfo=UTC))
    (tmp_path / "scenario.json").write_text(json.dumps(
        [dict(asdict(s), key=s.key.decode(), value=s.value.decode()) for s in scenario]))
    w = workers()
    node_env = dict(env, E2E_SCENARIO=str(tmp_path / "scenario.json"), E2E_OUT=str(tmp_path),
                    PYTHON=sys.executable, E2E_REPO=str(ROOT))
    node_env.pop("NODE_OPTIONS", None)
    e2e = sorted(str(p.relative_to(package)) for p in package.glob("build/test/e2e/*.test.js"))
    done = subprocess.run(["node", "--test", *e2e], cwd=package, env=node_env,
                          capture_output=True, text=True, timeout=420)
    summary = tap_summary(done.stdout)
    assert done.returncode == 0 and summary.get("fail") == 0 and summary.get("pass") == 1, (
        failures(done.stdout + done.stderr) + "\n--- worker ---\n" + w.tail())

    ks = kafka_settings(env)
    published = [json.loads(ln) for ln in (tmp_path / "published.jsonl").read_text().splitlines()]
    assert len(published) == len(scenario) - 2  # the two invalid steps never left the builder
    for p in published:
        assert p["partition"] == partition_for(p["key"], 8)
    wait_drained(kafka_bootstrap, group_of(env), ks.topic(CONFIRMATIONS), 60, [w])

    # the input holds exactly what the connector committed: no re-keyed copies (every record was
    # keyed canonically, in its home partition), and the aborted transaction's record is unread
    inputs = Collector(ks, ks.topic(CONFIRMATIONS))
    got = inputs.wait_for(lambda r: len(r) >= len(published), 30, w)
    assert sorted((r.partition, r.offset) for r in got) == sorted(
        (p["partition"], int(p["offset"])) for p in published)
    assert not any(dict(r.headers).get("rekeyed.from") for r in got)
    assert all(r.key.decode() == p["key"] for r, p in zip(
        sorted(got, key=lambda r: (r.partition, r.offset)),
        sorted(published, key=lambda p: (p["partition"], int(p["offset"]))), strict=True))
    inputs.close()

    entries = Collector(ks, ks.topic(ENTRIES))
    values = entries.wait_for(lambda r: len(r) >= 9, 30, w)
    assert len(values) == sum(s.expect == "written" for s in scenario) == 9
    assert all(r.partition == partition_for(r.key.decode().split("#")[0], 8) for r in values)
    entries.close()
    diags = Collector(ks, ks.topic(DIAGNOSTICS))
    assert len(diags.wait_for(lambda r: len(r) >= 5, 30, w)) == 5
    diags.close()
    dlq = Collector(ks, ks.topic(DLQ))
    assert dlq.wait_for(lambda r: True, 5, w) == []
    dlq.close()
    assert w.stop() == 0
    assert "aborted-ghost" not in (tmp_path / "entries.jsonl").read_text()
