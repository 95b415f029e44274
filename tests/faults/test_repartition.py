"""`repartition` against the real broker (issue 27): 8 -> 16 while a producer publishes, then a
kill -9 in the middle of 16 -> 32 and a rerun; every confirmation gets exactly one outcome.

The feed is kafka-python's producer with its default partitioner (murmur2 of the key, as the
connectors'): it follows the input's new count when its metadata refreshes (every 2 s here),
so records are published under the old count during and after each move and re-keyed by the
worker. One worker state directory serves every run: the old partitions' local stores are
stale after a move (their sessions moved out) and must catch up from the changelog.
"""

from __future__ import annotations

import json
import time

import pytest
from kafka import TopicPartition
from transcript_connector.partitioning import partition_for

from tests.conftest import cli
from tests.faults.test_faults import conclude, drained_and_audited, feed, ks  # noqa: F401
from tests.integration.harness import CliProcess, entry_records, group_of, poll_until, wait_drained
from workers.core.layout import LAYOUT, decode_layout
from workers.core.outputs import CONFIRMATIONS, ENTRIES, parse_entry_key
from workers.kafka_io import consumer, read

pytestmark = [pytest.mark.kafka, pytest.mark.faults]
RATE = 1_000  # records/s, below the worker's speed: the moves happen with the feed running


def layout(settings):  # noqa: ANN001, ANN201
    return decode_layout((r.key, r.value) for r in read(settings, settings.topic(LAYOUT)))


def entries_per_partition(settings) -> dict[int, int]:  # noqa: ANN001
    c = consumer(settings)
    try:
        topic = settings.topic(ENTRIES)
        tps = [TopicPartition(topic, p) for p in sorted(c.partitions_for_topic(topic))]
        ends, starts = c.end_offsets(tps), c.beginning_offsets(tps)
        return {tp.partition: ends[tp] - starts[tp] for tp in tps}
    finally:
        c.close()


def test_repartition_under_load_then_kill_9_during_the_second_move(ks, env, feed, workers,  # noqa: F811
                                                                     tmp_path):
    began = time.monotonic()
    feeder = feed(ks, seed=2727, rate=RATE, records=60_000, open_ended=True,
                  metadata_max_age_ms=2000)
    state = tmp_path / "state"
    w = workers("p8", state)
    poll_until(lambda: sum(entries_per_partition(ks).values()) > 5_000, 300, [w],
               "entries under 8 partitions")
    assert w.stop() == 0, w.tail()

    t = time.monotonic()
    first = cli("repartition", "--partitions", "16", env=env, timeout=600)
    first_s = time.monotonic() - t
    assert first.returncode == 0, first.stderr.decode()
    assert "moved from 8 to 16 partitions" in first.stdout.decode(), first.stdout.decode()
    again = cli("repartition", "--partitions", "16", env=env)
    assert again.returncode == 0 and b"already moved" in again.stdout, again.stdout

    w = workers("p16", state, TRANSCRIPT_PARTITIONS="16")
    before = entries_per_partition(ks)
    poll_until(lambda: sum(entries_per_partition(ks).values()) > sum(before.values()) + 5_000,
               300, [w], "entries under 16 partitions")
    assert w.stop() == 0, w.tail()

    # the second move, killed once it has moved some old partitions and not all
    env16 = {**env, "TRANSCRIPT_PARTITIONS": "16"}
    second = CliProcess(["repartition", "--partitions", "32"], env16, tmp_path / "move.log")
    second.start()
    poll_until(lambda: b"move: partition 5:" in second.log.read_bytes(), 300, [],
               "the second move under way")
    second.kill()
    pending = layout(ks)
    assert not isinstance(pending, str) and pending.pending is not None, pending
    assert 0 < len(pending.pending.moved) < 16, pending.pending.moved
    # no worker may start meanwhile: its count matches neither the input nor the changelog
    for count in ("16", "32"):
        refused = cli("worker", env={**env, "TRANSCRIPT_PARTITIONS": count,
                                     "TRANSCRIPT_STATE_DIR": str(tmp_path / "refused")},
                      timeout=120)
        assert refused.returncode != 0 and b"partitions" in refused.stderr, refused.stderr
    wrong = cli("repartition", "--partitions", "64", env=env16)
    assert wrong.returncode == 2 and b"--partitions 32" in wrong.stderr, wrong.stderr

    t = time.monotonic()
    rerun = cli("repartition", "--partitions", "32", env=env16, timeout=600)
    rerun_s = time.monotonic() - t
    assert rerun.returncode == 0, rerun.stderr.decode()
    assert "resumes" in rerun.stdout.decode(), rerun.stdout.decode()

    env32 = {**env, "TRANSCRIPT_PARTITIONS": "32"}
    w = workers("p32", state, TRANSCRIPT_PARTITIONS="32")
    records, report = drained_and_audited(feeder, env32, ks, [w])
    wait_drained(env["KAFKA_BOOTSTRAP"], group_of(env), ks.topic(CONFIRMATIONS), 300, [w])
    assert w.stop() == 0, w.tail()

    # every entry, old and new, in its session's partition under 32
    homes = strays = 0
    for r in entry_records(ks):
        named = parse_entry_key(r.key)
        assert named is not None, r.key
        homes += 1
        strays += r.partition != partition_for(named[0], 32)
    assert strays == 0 and homes > 0
    done = layout(ks)
    assert not isinstance(done, str) and [(m.old, m.new) for m in done.moves] == [(8, 16),
                                                                                  (16, 32)]
    assert done.pending is None
    conclude("repartition", {
        "records": records, "entry_records": homes,
        "move_8_16_s": round(first_s, 1), "move_16_32_rerun_s": round(rerun_s, 1),
        "move_8_16_output": first.stdout.decode().strip().splitlines()[-1],
        "moved": json.loads(json.dumps({f"{m.old}->{m.new}": sorted(m.entries_ends.items())
                                        for m in done.moves}))},
        report, began, ks)
