"""State of format 1 (one value per session, every send_id in it) in the changelog, as the
version before this one wrote it: a worker restores it, migrates it, and decides on it."""

from __future__ import annotations

import json

import pytest
from transcript_connector.partitioning import partition_for

from tests.integration.harness import Collector, group_of, wait_drained
from workers.core import head_key, seen_key
from workers.core.outputs import CONFIRMATIONS, ENTRIES
from workers.kafka_io import publish, read
from workers.settings import kafka_settings

pytestmark = pytest.mark.kafka

KEY = "agent:ops:telegram:direct:u42"
US = 1_764_000_000_000_000  # 2025-11-24T16:00:00Z in µs


def confirmation(send_id: str, text: str) -> bytes:
    return json.dumps({
        "schema": "delivery-confirmation/1", "send_id": send_id,
        "confirmed_at": "2025-11-24T16:05:00Z", "agent_id": "ops", "session_key": KEY,
        "route": {"channel": "telegram", "peer_kind": "direct", "peer_id": "u42"},
        "origin": {"kind": "message_tool"}, "payload": {"text": text},
        "receipt": {"platform_message_ids": ["9"]},
    }).encode()


def test_format_1_state_is_migrated_and_decides_as_before(env, topics, workers,
                                                          kafka_bootstrap):
    ks = kafka_settings(env)
    changelog = ks.topic("transcript-owner-sessions-changelog")
    v1 = json.dumps({"v": 1, "epoch": 1, "next_seq": 4, "clock": US, "last_reset_at": US - 10,
                     "seen": [["s1", US - 2, "f" * 32], ["s2", US - 1, "e" * 32]]},
                    separators=(",", ":")).encode()
    publish(ks, changelog, [(KEY.encode(), v1)], 8)  # partition_for(KEY): where faust keeps it

    w = workers()
    # a retry of a send the old state remembers (other content: its fingerprint is not
    # comparable across formats), then a new send: seq and epoch go on from the old state
    inputs = [confirmation("s1", "retried"), confirmation("s3", "new")]
    publish(ks, ks.topic(CONFIRMATIONS), [(KEY.encode(), value) for value in inputs], 8)
    entries = Collector(ks, ks.topic(ENTRIES))
    entries.wait_for(lambda r: len(r) >= 1, 120, w)
    wait_drained(kafka_bootstrap, group_of(env), ks.topic(CONFIRMATIONS), 120, [w])
    assert [(e["send_id"], e["seq"], e["epoch"]) for e in entries.values()] == [("s3", 4, 1)]
    assert w.stop() == 0

    latest: dict[bytes, bytes | None] = {}
    for r in read(ks, changelog, partitions=[partition_for(KEY, 8)]):
        latest[r.key] = r.value
    assert latest[KEY.encode()] is None  # the format-1 record is tombstoned
    head = json.loads(latest[head_key(KEY)])  # type: ignore[arg-type]
    assert (head["v"], head["epoch"], head["next_seq"]) == (2, 1, 5)
    for send_id in ("s1", "s2", "s3"):
        assert latest[seen_key(KEY, send_id)] is not None
    assert max(len(v) for v in latest.values() if v is not None) < 200
