"""The pause of a repartition at 1,000,000 sessions (issue 27): `make faults` only (marker
`scale`: `make test` leaves it out, it takes about ten minutes).

`loadgen` publishes 2,000,000 confirmations over 1,000,000 sessions to 8 partitions; a worker
drains them and stops; `repartition --partitions 16` moves the deployment; a worker with the
same state directory starts with 16 partitions (its old partitions' stores catch up with the
tombstones, the new ones restore from the changelog) and decides one more record, published
before it started as a connector's would be during the move. The pause,
the command's steps and the restart, are written to var/faults/repartition_1m_sessions.json
and printed; then every entry is in its session's partition under 16, and `audit --strict` is
clean over the whole history. Times are recorded, never asserted.

The same figures go to bench/results/repartition.json, committed: `plan`'s growth-step constant
(`move_records_per_s`: the deployment's live state keys, twice the keys that moved, plus the
entries copied, per second of the command) is held to it by tests/unit/test_plan.py. The load
average beside them says whether the machine was busy.
"""

from __future__ import annotations

import json
import os
import re
import time
from datetime import UTC, datetime

import pytest
from transcript_connector.partitioning import partition_for

from bench.capacity import RESTORED
from tests.conftest import ROOT, cli
from tests.faults.test_faults import audit, record
from tests.integration.harness import (
    GroupLag,
    WorkerProcess,
    entry_records,
    group_of,
    poll_until,
    wait_drained,
)
from workers.core.outputs import CONFIRMATIONS, parse_entry_key
from workers.settings import kafka_settings

pytestmark = [pytest.mark.kafka, pytest.mark.faults, pytest.mark.scale]
SESSIONS = 1_000_000
RECORDS = 2_000_000
STEP = re.compile(r"(begin|grow|move|trim|open): done in ([0-9.]+) s")
MOVED = re.compile(r"move: partition \d+: (\d+) state keys, (\d+) entries")
RESULT = ROOT / "bench" / "results" / "repartition.json"


def test_the_pause_of_a_move_from_8_to_16_partitions_at_a_million_sessions(env, topics,
                                                                          tmp_path):
    began = time.monotonic()
    ks = kafka_settings(env)
    done = cli("loadgen", "--count", str(RECORDS), "--sessions", str(SESSIONS), "--seed", "27",
               "--no-progress", env=env, timeout=1800)
    assert done.returncode == 0, done.stderr.decode()
    state = tmp_path / "state"
    first = WorkerProcess(env, state, tmp_path / "w1.log").start()
    wait_drained(env["KAFKA_BOOTSTRAP"], group_of(env), ks.topic(CONFIRMATIONS), 1800, [first])
    assert first.stop() == 0, first.tail()

    load_before = os.getloadavg()[0]
    t = time.monotonic()
    move = cli("repartition", "--partitions", "16", env=env, timeout=3600)
    move_s = time.monotonic() - t
    load_after = os.getloadavg()[0]
    assert move.returncode == 0, move.stderr.decode()
    out = move.stdout.decode()
    steps = {name: float(s) for name, s in STEP.findall(out)}
    moved = [line for line in out.splitlines() if line.startswith("move: partition")]
    keys = sum(int(k) for k, _ in MOVED.findall(out))
    copied = sum(int(e) for _, e in MOVED.findall(out))

    env16 = {**env, "TRANSCRIPT_PARTITIONS": "16"}
    # a confirmation waits in the input, as connectors go on publishing during a move: the
    # restart ends at the worker's first decision (its commit past that record), with neither
    # a publish after the restore nor a fresh admin client a look counted in it
    done = cli("loadgen", "--count", "1", "--sessions", "1", "--seed", "28", "--no-progress",
               env=env16)
    assert done.returncode == 0, done.stderr.decode()
    lag = GroupLag(env["KAFKA_BOOTSTRAP"], group_of(env), ks.topic(CONFIRMATIONS))
    try:
        t = time.monotonic()
        second = WorkerProcess(env16, state, tmp_path / "w2.log").start()
        poll_until(lambda: lag() == 0, 1800, [second], "the first decision after the move",
                   interval=0.05)
        restart_s = time.monotonic() - t
    finally:
        lag.close()
    m = RESTORED.search(second.log.read_bytes())
    assert m is not None, second.tail()
    assert second.stop() == 0, second.tail()

    strays = entries = 0
    for r in entry_records(ks):
        named = parse_entry_key(r.key)
        entries += 1
        strays += named is None or r.partition != partition_for(named[0], 16)
    report = audit(env16)
    figures = {
        "sessions": SESSIONS, "records": RECORDS, "from": 8, "to": 16,
        "command_s": round(move_s, 1), "steps_s": steps,
        "restart_to_first_decision_s": round(restart_s, 1),
        "restored_records": int(m.group(1)), "restore_s": float(m.group(2)),
        "pause_s": round(move_s + restart_s, 1),
        "moved_state_keys": keys, "copied_entries": copied,
        "move_records_per_s": round((2 * keys + copied) / move_s),
        "load_average": [round(load_before, 2), round(load_after, 2)], "cores": os.cpu_count(),
        "partitions_moved": moved, "entry_records": entries, "strays": strays,
        "audit_exit": report["exit"], "missing": report["discrepancies"]["missing"],
        "repeats": report["repeats"], "test_s": round(time.monotonic() - began, 1)}
    record("repartition_1m_sessions", figures)
    if report["exit"] == 0 and strays == 0:
        at = datetime.now(UTC).isoformat(timespec="seconds")
        RESULT.write_text(json.dumps({"measured_at": at, **figures}, indent=1) + "\n")
    assert strays == 0 and entries > RECORDS // 2
    assert report["discrepancies"]["missing"] == 0 and report["repeats"] == 0
    assert report["exit"] == 0, report
