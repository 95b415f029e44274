"""The owner has no poison pill: one worker on the real broker fed every hostile case of
issue 12 at once, then a second deployment on the same state dir."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta

import pytest
from kafka import KafkaProducer

from tests.conftest import cli, delete_topics
from tests.integration.harness import Collector, group_of, wait_drained
from workers.core.outputs import CONFIRMATIONS, DIAGNOSTICS, DLQ, ENTRIES
from workers.kafka_io import publish
from workers.settings import kafka_settings

pytestmark = pytest.mark.kafka

# Five days before the worker's clock: nothing here is skewed, and every send is inside the
# 7-day window even after the record dated 2099 moves the session clock to the worker's clock.
T0 = (datetime.now(UTC) - timedelta(days=5)).replace(microsecond=0)
BUSY = "agent:ops:telegram:group:-100777"
BUSY_SENDS = 12_000


def ts(at: datetime) -> str:
    return at.isoformat().replace("+00:00", "Z")


def confirmation(send_id: str, at: str, key: str = "agent:ops:telegram:direct:u1",
                 agent: str = "ops", text: str = "hello", **extra) -> dict:
    record = {
        "schema": "delivery-confirmation/1", "send_id": send_id, "confirmed_at": at,
        "agent_id": agent, "session_key": key,
        "route": {"channel": "telegram", "peer_kind": "direct", "peer_id": "u1"},
        "origin": {"kind": "message_tool"}, "payload": {"text": text},
        "receipt": {"platform_message_ids": ["1"]},
    }
    record.update(extra)
    return record


def keyed(record: dict) -> tuple[bytes, bytes]:
    return record["session_key"].encode(), json.dumps(record).encode()


def hostile_cases() -> list[tuple[bytes | None, bytes | None]]:
    """(key, value) of every finding's record, in order, with the expected outcome noted."""
    direct = "agent:ops:telegram:direct:u1"
    media = [{"kind": "image", "name": "chart.png", "url": "https://cdn/x?sig=one"}]
    resigned = [{"kind": "image", "name": "chart.png", "url": "https://cdn/x?sig=two",
                 "mime": "image/png"}]
    cases = [
        # 1. out-of-range timestamps: dead letters naming the field
        confirmation("h-old", "0001-01-01T00:00:00Z"),
        confirmation("h-far", "9999-12-31T23:00:00-05:00"),
        # 3. a send dated 2099 is written (clock_skew); the session still remembers h-early
        confirmation("h-early", ts(T0)),
        confirmation("h-2099", "2099-01-01T00:00:00Z"),
        confirmation("h-early", ts(T0 + timedelta(minutes=1))),  # retry: duplicate
        # 4. another agent's chat: other_agent, no entry
        confirmation("h-sales", ts(T0), key="agent:sales:telegram:group:-100123",
                     agent="ops"),
        # 5. a turn reply without its turn: dead letter naming origin.turn
        confirmation("h-turn", ts(T0), origin={"kind": "turn_reply"}),
        # 6. a retry with a re-signed URL and an added mime type: duplicate, not a conflict
        confirmation("h-media", ts(T0), payload={"text": "chart", "media": media}),
        confirmation("h-media", ts(T0), payload={"text": "chart", "media": resigned}),
        # a long session key (diagnostics quote it bounded)
        confirmation("h-long", ts(T0), key="agent:ops:telegram:group:" + "g" * 200_000),
    ]
    out: list[tuple[bytes | None, bytes | None]] = [keyed(c) for c in cases]
    # 7. NaN inside a native item; deep nesting; a tombstone; not UTF-8
    nan = json.dumps(confirmation("h-nan", ts(T0), payload={"native": [{"kind": "embed",
                                                                        "score": "X"}]}))
    out.append((direct.encode(), nan.replace('"X"', "NaN").encode()))
    deep = confirmation("h-deep", ts(T0), payload={"text": "x", "native": [{"kind": "embed"}]})
    body = json.dumps(deep).replace('{"kind": "embed"}',
                                    '{"kind": "embed", "n": ' + "[" * 10_000 + "]" * 10_000 + "}")
    out.append((direct.encode(), body.encode()))
    out.append((direct.encode(), None))
    out.append((direct.encode(), b"\xff\xfe\x00 not utf-8"))
    return out


def busy_session() -> list[tuple[bytes, bytes]]:
    """12,000 sends, 80-character send_ids, 30 s apart (4.2 days: inside the window), and a
    retry of the first at the end."""
    sends = [confirmation(f"{i:08d}".ljust(80, "s"), ts(T0 + timedelta(seconds=30 * i)),
                          key=BUSY, text=f"busy {i}")
             for i in range(BUSY_SENDS)]
    retry = dict(sends[0], confirmed_at=ts(T0 + timedelta(seconds=30 * BUSY_SENDS)))
    return [keyed(s) for s in [*sends, retry]]


def publish_huge_gzip(ks, topic: str, key: bytes) -> None:
    """A 3 MiB record that the broker takes compressed (the topic's limit is 2 MiB)."""
    value = b'{"schema": "delivery-confirmation/1", "pad": "' + b"a" * (3 << 20) + b'"}'
    producer = KafkaProducer(**ks.kafka_python_kwargs(), compression_type="gzip",
                             max_request_size=8 << 20, acks="all")
    try:
        producer.send(topic, key=key, value=value).get(timeout=60)
    finally:
        producer.close()


def test_hostile_corpus_never_stops_the_worker(env, topics, workers, kafka_bootstrap, tmp_path):
    ks = kafka_settings(env)
    source = ks.topic(CONFIRMATIONS)
    state = tmp_path / "shared-state"
    w = workers("hostile", state)

    publish(ks, source, hostile_cases(), 8)
    publish(ks, source, busy_session(), 8)
    after = "agent:ops:telegram:direct:after"
    publish_huge_gzip(ks, source, after.encode())
    publish(ks, source, [keyed(confirmation("h-after", ts(T0), key=after))], 8)

    wait_drained(kafka_bootstrap, group_of(env), source, 600, [w])
    assert w.alive(), w.tail()

    entries = Collector(ks, ks.topic(ENTRIES))
    want = BUSY_SENDS + 3 + 1 + 1  # busy, h-early/h-2099/h-media, h-long, h-after
    entries.wait_for(lambda r: len(r) >= want, 120, w)
    assert any(e["send_id"] == "h-after" for e in entries.values())
    by_session: dict[str, list[dict]] = {}
    for e in entries.values():
        by_session.setdefault(e["session_key"], []).append(e)
    busy = by_session[BUSY]
    assert len(busy) == BUSY_SENDS  # the retry of the first send was a duplicate
    assert [e["seq"] for e in busy] == list(range(1, BUSY_SENDS + 1))
    direct = [e["send_id"] for e in by_session["agent:ops:telegram:direct:u1"]]
    assert direct == ["h-early", "h-2099", "h-media"]
    assert not any(k.startswith("agent:sales:") for k in by_session)
    assert len(entries.records) == want

    diags = Collector(ks, ks.topic(DIAGNOSTICS))
    diags.wait_for(lambda r: len(r) >= 2, 60, w)
    codes = {(d["code"], d["send_id"]) for d in diags.values()}
    assert ("clock_skew", "h-2099") in codes
    assert ("destination_bound_to_other_agent", "h-sales") in codes
    assert not any(code == "conflicting_duplicate" for code, _ in codes)

    dlq = Collector(ks, ks.topic(DLQ))
    dlq.wait_for(lambda r: len(r) >= 8, 60, w)
    reasons = [dict(r.headers).get("error", b"").decode() for r in dlq.records]
    assert any(r.startswith("confirmed_at:") for r in reasons)
    assert any("origin.turn" in r for r in reasons)
    huge = [r for r in dlq.records if "truncated" in dict(r.headers)]
    assert len(huge) == 1 and int(dict(huge[0].headers)["truncated"]) > 3 << 20
    assert len(huge[0].value) < 2 << 20

    done = cli("audit", "--json", env=env, timeout=600)
    assert done.returncode == 0, done.stdout.decode()[-3000:] + done.stderr.decode()[-2000:]
    report = json.loads(done.stdout)
    assert report["expected_entries"] == report["actual_entries"]
    assert w.alive(), w.tail()
    assert w.stop() == 0

    # another deployment (another prefix) on the same state dir starts and writes
    other = f"t{uuid.uuid4().hex[:10]}."
    env2 = dict(env, TRANSCRIPT_TOPIC_PREFIX=other)
    try:
        assert cli("topics", "apply", env=env2).returncode == 0
        ks2 = kafka_settings(env2)
        publish(ks2, ks2.topic(CONFIRMATIONS), [keyed(confirmation("o-1", ts(T0)))], 8)
        w2 = workers("other", state, TRANSCRIPT_TOPIC_PREFIX=other)
        written = Collector(ks2, ks2.topic(ENTRIES))
        written.wait_for(lambda r: len(r) >= 1, 120, w2)
        assert [e["send_id"] for e in written.values()] == ["o-1"]
        assert w2.stop() == 0
    finally:
        delete_topics(kafka_bootstrap, other)
