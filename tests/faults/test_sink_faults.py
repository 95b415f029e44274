"""The SQLite sink under kill -9: nothing lost, nothing applied twice.

The worker runs on a steady feed of 50,000 realistic confirmations (as in test_faults.py); the
sink (`sink sqlite PATH`) is killed with SIGKILL three times while entries arrive and is
restarted on the same database each time. Once the input is drained and the sink has caught
up, the database must hold exactly the distinct live entry keys a read_committed reader counts,
with their values, and audit triggers (tests/integration/test_sink.py) must show 0 repeats: no
record of the topic written to the table more often than the topic holds it. At each kill, what
the killed sink left is checked: its rows are exactly the topic's below its stored offsets, and
no stored position (DESIGN 1.3) was read at or past them. Figures go to
var/faults/sink_kill_9.json.
"""

from __future__ import annotations

import sqlite3
import time

import pytest
from transcript_connector.entries_topic import entry_key
from transcript_connector.partitioning import partition_for

from tests.faults.test_faults import FEED_RATE, feed, record  # noqa: F401  (feed: a fixture)
from tests.integration.harness import entry_records, group_of, wait_drained
from tests.integration.test_sink import (
    count,
    live_entries,
    repeats,
    sinks,  # noqa: F401  (a fixture)
    wait_sink_matches,
    with_audit_triggers,
)
from workers.core.outputs import CONFIRMATIONS, ENTRIES
from workers.settings import kafka_settings

pytestmark = [pytest.mark.kafka, pytest.mark.faults]


@pytest.fixture
def ks(env, topics):
    return kafka_settings(env)


def positions_behind_rows(ks, db) -> int:  # noqa: ANN001
    """What a killed sink left: each partition's stored position (DESIGN 1.3) was read at an
    offset below the partition's stored next offset, and the rows of the partition are exactly
    compaction's view of its records below that offset, so no position claims a row the
    database lacks. Returns how many partitions have a position."""
    c = sqlite3.connect(db)
    try:
        offsets = dict(c.execute("SELECT partition, next_offset FROM offsets"))
        stored = dict(c.execute("SELECT partition, entries_offset FROM positions"))
        rows = c.execute("SELECT session_key, seq, entry_json FROM entries").fetchall()
    finally:
        c.close()
    for p, at in stored.items():
        assert at < offsets[p], (p, at, offsets[p])
    n = len(offsets)
    held: dict[int, dict[bytes, str]] = {}
    for session, seq, value in rows:
        held.setdefault(partition_for(session, n), {})[entry_key(session, seq)] = value
    for p, end in offsets.items():
        latest: dict[bytes, bytes | None] = {}
        for r in entry_records(ks, partitions=[p]):
            if r.offset < end:
                latest[r.key] = r.value
        view = {k: v.decode() for k, v in latest.items() if v is not None}
        assert held.get(p, {}) == view, f"partition {p}: rows differ below offset {end}"
    return len(stored)


def test_kill_9_of_the_sink_x3_during_a_stream(ks, env, feed, workers, sinks, tmp_path):  # noqa: F811
    began = time.monotonic()
    db = tmp_path / "gateway.db"
    with_audit_triggers(db, ks.topic(ENTRIES))
    feeder = feed(ks, seed=909)
    w = workers("w0")
    sink = sinks(db, name="sink0")
    expected_total = 30_000  # about 60% of the 50,000 inputs are written (30,362 measured)
    kills, recoveries, positions = [], [], []
    for i, fraction in enumerate((0.2, 0.45, 0.7), 1):
        deadline = time.monotonic() + 300
        while count(db, "SELECT count(*) FROM entries") < expected_total * fraction:
            assert sink.alive(), sink.tail()
            assert w.alive(), w.tail()
            assert time.monotonic() < deadline, f"{count(db, 'SELECT count(*) FROM entries')}"
            time.sleep(0.05)
        rows = count(db, "SELECT count(*) FROM entries")
        sink.kill()  # SIGKILL: mid-batch or between batches, wherever it was
        kills.append(rows)
        positions.append(positions_behind_rows(ks, db))
        t0 = time.monotonic()
        sink = sinks(db, name=f"sink{i}")
        while count(db, "SELECT count(*) FROM entries") <= rows:  # the restart writes again
            assert sink.alive(), sink.tail()
            assert time.monotonic() - t0 < 120, sink.tail()
            time.sleep(0.05)
        recoveries.append(round(time.monotonic() - t0, 2))
    records = feeder.finish()
    assert feeder.rate == FEED_RATE
    wait_drained(env["KAFKA_BOOTSTRAP"], group_of(env), ks.topic(CONFIRMATIONS), 600, [w])
    expected, occurrences = live_entries(ks)
    wait_sink_matches(db, expected, sink, timeout=300)
    repeated = repeats(db, occurrences)
    skipped = count(db, "SELECT count(*) FROM skipped")
    topic_repeats = sum(n - 1 for n in occurrences.values() if n > 1)
    record("sink_kill_9", {
        "records": records, "entries": len(expected), "rows": len(expected),
        "kills": len(kills), "rows_at_kill": kills, "recovery_s": recoveries,
        "repeats": repeated, "skipped": skipped, "topic_repeated_keys": topic_repeats,
        "positions_at_kill": positions,
        "test_s": round(time.monotonic() - began, 1)})
    assert len(expected) > 30_000
    assert repeated == 0
    assert skipped == 0
    assert sink.stop() == 0
    assert w.stop() == 0
