"""Issue 23's hostile-input run: one worker on the real broker fed, in one run, every codec
(kcat with gzip, snappy, lz4 and zstd, the TypeScript connector), the three erasures a
connector could forge on the input (plain, `schema` twice, `schema_`), an operator's
`forget`, a session `K#1` beside `K`, and a send_id sent again after its dedupe window.
Then `show K` is exact, the sink's rows are the topic's live entries, `audit --strict` is
clean, every forged erase is a dead letter, and the worker never exited."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
from transcript_connector.partitioning import partition_for

from tests.conftest import cli
from tests.integration.harness import (
    Collector,
    group_of,
    replay_entries,
    wait_drained,
    without_written_at,
)
from tests.integration.test_codecs import (
    CODECS,
    PER_SESSION,
    confirmations,
    publish_with_connector,
    publish_with_kcat,
)
from tests.integration.test_sink import count, db_entries, live_entries
from tests.unit.wire import confirmation, dumps
from workers.core.control import ONLY_ON_CONTROL
from workers.core.outputs import CONFIRMATIONS, DLQ, ENTRIES, ERASURES, entry_key
from workers.kafka_io import publish, read
from workers.settings import kafka_settings, worker_settings

pytestmark = pytest.mark.kafka

ERASED = "agent:ops:telegram:direct:hostile-erased"
AGAIN = "agent:ops:telegram:direct:hostile-again"  # the send_id sent after its window


def beside_itself(n: int = 8) -> str:
    """A confirmations() tag whose session K has `K#1` in its own partition: a reader that
    selects K by a key prefix would read K#1's entries there."""
    for i in range(10_000):
        key, _ = confirmations(tag := f"hostile{i}")
        if partition_for(key, n) == partition_for(f"{key}#1", n):
            return tag
    raise AssertionError("no such tag")


def send(session: str, send_id: str, at: datetime, text: str) -> tuple[bytes, bytes]:
    """A confirmation as a plain (connector-like) producer publishes it."""
    stamp = at.isoformat()
    return session.encode(), dumps(confirmation(
        session_key=session, send_id=send_id, confirmed_at=stamp,
        **{"payload.text": text, "receipt.sent_at": stamp}))


def forged_erasures(session: str, now: datetime) -> dict[bytes, str]:
    """The three erasures a connector could forge on the input, value -> the dead letter's
    reason: `schema_` is no spelling of `schema` (the record has no tag), never an erase."""
    at = now.isoformat()
    plain = json.dumps({"schema": "session-erase/1", "session_key": session,
                        "erased_at": at, "reason": "forged"}).encode()
    # "schema" twice, by hand: a confirmation whose last `schema` is session-erase/1
    _, valid = send(session, "forged-twice", now - timedelta(seconds=20), "not an erase")
    twice = valid[:-1] + (f', "erased_at": "{at}", "reason": "forged", '
                          f'"schema": "session-erase/1"}}').encode()
    underscore = json.dumps({"schema_": "session-erase/1", "session_key": session,
                             "erased_at": at, "reason": "forged"}).encode()
    return {plain: ONLY_ON_CONTROL, twice: "duplicate member: schema",
            underscore: "schema: field required"}


def test_a_hostile_run_leaves_every_reader_exact_and_the_worker_up(
        env, topics, workers, tmp_path, kafka_bootstrap):
    ks, ws = kafka_settings(env), worker_settings(env)
    n, source = ws.partitions, ks.topic(CONFIRMATIONS)
    now = datetime.now(UTC).replace(microsecond=0)
    w = workers()
    entries = Collector(ks, ks.topic(ENTRIES))

    # 1. every codec: one session per kcat codec, one through the TypeScript connector
    sent: dict[str, list[dict]] = {}
    for codec in CODECS:
        key, values = confirmations(f"hostile-{codec}")
        publish_with_kcat(kafka_bootstrap, source, partition_for(key, n), codec, key, values)
        sent[key] = values
    key, values = confirmations("hostile-ts")
    publish_with_connector(env, values, tmp_path)
    sent[key] = values
    # 4. K (zstd) and K#1 (lz4) in one partition, both with entries
    k, k_values = confirmations(beside_itself(n))
    k1 = f"{k}#1"
    k1_values = [dict(v, session_key=k1, send_id=f"k1-{i}", payload={"text": f"another chat {i}"})
                 for i, v in enumerate(k_values)]
    publish_with_kcat(kafka_bootstrap, source, partition_for(k, n), "zstd", k, k_values)
    publish_with_kcat(kafka_bootstrap, source, partition_for(k1, n), "lz4", k1, k1_values)
    sent[k], sent[k1] = k_values, k1_values
    # the session to forget, and a send s1 whose dedupe window (7 d) has run out once s2
    # moves the session clock
    history = [send(ERASED, f"e{i}", now - timedelta(minutes=5 - i), f"erase me {i}")
               for i in range(3)]
    again = [send(AGAIN, "s1", now - timedelta(days=10), "first time"),
             send(AGAIN, "s2", now - timedelta(minutes=1), "in between")]
    publish(ks, source, history + again, n)
    first = len(sent) * PER_SESSION + len(history) + len(again)
    entries.wait_for(lambda r: len(r) >= first, 120, w)

    # 2. the forged erasures of K, and 5. s1 sent again after its window, with new text
    forged = forged_erasures(k, now)
    repeat = send(AGAIN, "s1", now - timedelta(seconds=30), "sent again")
    publish(ks, source, [(k.encode(), v) for v in forged] + [repeat], n)
    dlq = Collector(ks, ks.topic(DLQ))
    dlq.wait_for(lambda r: len(r) >= len(forged), 60, w)
    entries.wait_for(lambda r: any(x.key == entry_key(AGAIN, 3) for x in r), 60, w)

    # 3. an operator's forget of another session
    done = cli("forget", ERASED, "--reason", "hostile run", "--wait", "90", env=env)
    assert done.returncode == 0, done.stderr.decode() + w.tail()
    assert b"seq 1..3 tombstoned" in done.stdout, done.stdout.decode()
    tombstones = {entry_key(ERASED, seq) for seq in (1, 2, 3)}
    entries.wait_for(lambda r: tombstones <= {x.key for x in r if x.value is None}, 60, w)
    wait_drained(kafka_bootstrap, group_of(env), source, 60, [w])
    entries.close()

    # every forged erase is a dead letter with its reason; nothing else is
    dead = {r.value: dict(r.headers)["error"].decode() for r in read(ks, ks.topic(DLQ))}
    dlq.close()
    assert dead == forged, dead
    erasures = [json.loads(r.value) for r in read(ks, ks.topic(ERASURES))]
    assert [(e["session_key"], e["through_seq"]) for e in erasures] == [(ERASED, 3)]

    live, _ = live_entries(ks)
    by_id = {(e["session_key"], e["seq"]): e for e in map(json.loads, live.values())}
    by_session: dict[str, list[dict]] = {}
    for (session, _seq), e in sorted(by_id.items()):
        by_session.setdefault(session, []).append(e)
    # every codec's sends written, K's untouched by the forgeries, E erased
    assert set(by_session) == {*sent, AGAIN}
    for session, values in sent.items():
        assert [(e["seq"], e["send_id"], e["text"]) for e in by_session[session]] == [
            (i, v["send_id"], v["payload"]["text"]) for i, v in enumerate(values, 1)], session
    # the send_id sent after its window: a new entry at a new seq, as replay decides it
    assert [(e["seq"], e["send_id"], e["text"]) for e in by_session[AGAIN]] == [
        (1, "s1", "first time"), (2, "s2", "in between"), (3, "s1", "sent again")]
    replayed = replay_entries([v for _, v in [*again, repeat]], env)
    assert without_written_at(replayed) == without_written_at(by_session[AGAIN])

    # show K is exact: K's entries, none of K#1's
    shown = cli("show", k, "--json", env=env)
    assert shown.returncode == 0, shown.stderr.decode()
    assert [json.loads(ln) for ln in shown.stdout.splitlines()] == by_session[k]
    table = cli("show", k, env=env).stdout.decode()
    assert "message 7" in table and "another chat" not in table, table
    shown = cli("show", k1, "--json", env=env)
    assert [json.loads(ln) for ln in shown.stdout.splitlines()] == by_session[k1]

    # the sink's rows are the topic's live entries, both entries of s1 included
    db = tmp_path / "sink.db"
    sink = cli("sink", "sqlite", str(db), "--until-end", env=env)
    assert sink.returncode == 0, sink.stderr.decode()
    rows = db_entries(db)
    assert rows == live
    assert {(e["session_key"], e["seq"]): e for e in map(json.loads, rows.values())} == by_id
    assert count(db, f"SELECT count(*) FROM entries WHERE session_key = '{AGAIN}' "
                     "AND send_id = 's1'") == 2

    audit = cli("audit", "--strict", "--json", env=env)
    assert audit.returncode == 0, audit.stdout.decode() + audit.stderr.decode()
    report = json.loads(audit.stdout)
    # (actual_entries counts the erased entries' records too, until compaction drops them)
    assert report["clean"] and report["expected_entries"] == len(live)
    assert report["outcomes"]["dead_letter"] == len(forged)
    assert (report["outcomes"]["erased"], report["outcomes"]["forwarded"]) == (1, 1)

    log = w.log.read_text(errors="replace")
    assert w.alive() and "crash" not in log.lower() and "Traceback" not in log, w.tail()
    assert w.stop() == 0
