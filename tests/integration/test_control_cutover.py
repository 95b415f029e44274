"""The erase cut-over against the real broker (workers/core/control.py): a deployment upgraded
from 1.1, whose input still holds erases a 1.1 `forget` published there.

The partition's state is made as a 1.2 worker leaves it when it takes the partition over
mid-history: its changelog holds the cut-over (here offset 3). The worker restores it, so the
erase below it (1.1 history) erases, as it did, and the one at or above it (a connector's) is a
dead letter; `audit --strict`, which reads the cut-over from the changelog, agrees.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
from transcript_connector.partitioning import partition_for

from tests.conftest import cli
from tests.integration.harness import Collector, entry_records, group_of, wait_drained
from tests.unit.wire import confirmation, dumps
from workers.core.outputs import (
    CONFIRMATIONS,
    DLQ,
    ERASURES,
    SESSIONS,
    changelog_topic,
    entry_key,
)
from workers.core.state import CUTOVER_KEY
from workers.kafka_io import producer, read
from workers.settings import kafka_settings

pytestmark = pytest.mark.kafka

SESSION = "agent:ops:telegram:direct:upgraded"


def test_below_the_cut_over_an_input_erase_is_history_above_it_a_dead_letter(env, topics,
                                                                             workers):
    ks = kafka_settings(env)
    source, part = ks.topic(CONFIRMATIONS), partition_for(SESSION, 8)
    t0 = datetime.now(UTC) - timedelta(hours=1)

    def send(i: int) -> bytes:
        at = (t0 + timedelta(minutes=i)).isoformat()
        return dumps(confirmation(session_key=SESSION, send_id=f"u{i}", confirmed_at=at,
                                  **{"payload.text": f"text {i}", "receipt.sent_at": at}))

    def erase(minutes: int) -> bytes:
        return json.dumps({"schema": "session-erase/1", "session_key": SESSION,
                           "erased_at": (t0 + timedelta(minutes=minutes)).isoformat(),
                           "reason": "1.1 forget"}).encode()

    p = producer(ks)
    try:
        # offsets 0..4 of the session's partition: two sends, a 1.1 erase, a send, a new erase
        offsets = [p.send(source, key=SESSION.encode(), value=v, partition=part).get(30).offset
                   for v in (send(1), send(2), erase(3), send(4), erase(5))]
        assert offsets == [0, 1, 2, 3, 4]
        # the state a 1.2 worker left when it took the partition over at offset 3
        p.send(changelog_topic(ks.topic_prefix, "transcript-owner", SESSIONS),
               key=CUTOVER_KEY, value=b"3", partition=part).get(30)
    finally:
        p.close()

    w = workers("w")
    wait_drained(env["KAFKA_BOOTSTRAP"], group_of(env), source, 120, [w])
    [dead] = Collector(ks, ks.topic(DLQ)).wait_for(lambda r: len(r) >= 1, 60, w)
    headers = dict(dead.headers)
    assert headers["error"] == b"session-erase/1 is accepted only on transcript.control"
    assert (headers["source.partition"], headers["source.offset"]) == (str(part).encode(), b"4")

    latest = {r.key: r.value for r in entry_records(ks, partitions=[part])}
    assert latest[entry_key(SESSION, 1)] is None and latest[entry_key(SESSION, 2)] is None
    assert json.loads(latest[entry_key(SESSION, 3)])["send_id"] == "u4"  # after the erasure
    [erasure] = [json.loads(r.value) for r in read(ks, ks.topic(ERASURES))]
    assert (erasure["session_key"], erasure["through_seq"], erasure["epoch"]) == (SESSION, 2, 1)

    audit = cli("audit", "--strict", "--json", env=env)
    assert audit.returncode == 0, audit.stdout.decode() + audit.stderr.decode()
    report = json.loads(audit.stdout)
    assert (report["outcomes"]["erased"], report["outcomes"]["dead_letter"]) == (1, 1)
    assert w.stop() == 0
    assert "erase cut-over" not in w.log.read_text()  # known already: not written again
