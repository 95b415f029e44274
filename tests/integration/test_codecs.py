"""Compressed batches on the real broker: every reader takes gzip, snappy, lz4 and zstd.

Connectors compress (librdkafka, kafkajs, the Java client); a batch in a codec a client has
no library for stops it at that offset: the worker crash-looped on one `kcat -z zstd`
confirmation, `audit` and `sink` exited 2. Here confirmations are published through kcat
(librdkafka) with each codec and through the TypeScript connector with gzip, several per
session so that a real compressed batch forms (checked in the broker's own log segments);
the worker writes them all and stays up, and `audit --strict`, `sink` and `show` read them.
Then entries compressed by kafka-python with each codec are read by kafka_io.read (the
client `forget` reads with too), `sink` and `show`: the worker does not compress its output,
a mirror or a re-publisher may. (The restore reads the changelog with aiokafka: test_transactions.)
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections import defaultdict
from pathlib import Path

import pytest
from kafka.admin import KafkaAdminClient
from kafka.record.memory_records import MemoryRecords
from transcript_connector.partitioning import partition_for

from tests.conftest import cli
from tests.integration.harness import Collector, group_of, wait_drained
from tests.integration.test_sink import db_entries, entry, live_entries
from tests.typescript_connector import built
from workers.core.outputs import CONFIRMATIONS, DLQ, ENTRIES
from workers.kafka_io import producer, read
from workers.settings import kafka_settings, worker_settings

pytestmark = pytest.mark.kafka

CODECS = {"gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}  # the record batch's codec ids
PER_SESSION = 8


def kcat() -> str:
    """kcat from `make kcat-tool` (deploy/local/kcat-tool.sh), or $KCAT."""
    path = os.environ.get("KCAT") or shutil.which("kcat")
    assert path, "kcat is not on PATH: make kcat-tool (deploy/local/kcat-tool.sh) installs it"
    return path


def confirmations(tag: str) -> tuple[str, list[dict]]:
    """A DM session and PER_SESSION confirmations in it (canonical key: no re-keying)."""
    key = f"agent:ops:telegram:direct:u{tag}"
    return key, [{
        "schema": "delivery-confirmation/1", "send_id": f"{tag}-{i}",
        "confirmed_at": f"2026-05-01T12:00:{i:02d}Z", "agent_id": "ops", "session_key": key,
        "route": {"channel": "telegram", "peer_kind": "direct", "peer_id": f"u{tag}"},
        "origin": {"kind": "message_tool"},
        "payload": {"text": f"{tag} message {i}: " + "the same words compress well " * 4},
        "receipt": {"platform_message_ids": [f"{tag}{i}"]},
    } for i in range(PER_SESSION)]


def publish_with_kcat(bootstrap: str, topic: str, partition: int, codec: str, key: str,
                      values: list[dict]) -> None:
    """One kcat producer run: the records linger into one batch, compressed with `codec`."""
    lines = "".join(f"{key}\t{json.dumps(v)}\n" for v in values)
    done = subprocess.run(
        [kcat(), "-P", "-b", bootstrap, "-t", topic, "-p", str(partition), "-K", "\t",
         "-z", codec, "-X", "linger.ms=200", "-X", "acks=all"],
        input=lines.encode(), capture_output=True, timeout=60)
    assert done.returncode == 0, done.stderr.decode()


def publish_with_connector(env: dict[str, str], values: list[dict], tmp_path: Path) -> list[dict]:
    """ConfirmationPublisher (compression "gzip") publishes `values` in one call."""
    package = built()
    (tmp_path / "records.json").write_text(json.dumps(values))
    script = tmp_path / "publish.mjs"
    script.write_text(f"""
import {{ readFileSync }} from "node:fs";
import {{ buildConfirmation, ConfirmationPublisher }} from {json.dumps(
        (package / "dist/index.js").as_uri())};
const records = JSON.parse(readFileSync(process.argv[2], "utf8"))
  .map(({{ schema, ...fields }}) => buildConfirmation(fields));
const p = ConfirmationPublisher.fromEnv(process.env, {{ compression: "gzip", logLevel: "error" }});
await p.connect();
console.log(JSON.stringify(await p.publishAll(records)));
await p.close();
""")
    node_env = dict(env)
    node_env.pop("NODE_OPTIONS", None)
    done = subprocess.run(["node", str(script), str(tmp_path / "records.json")], cwd=package,
                          env=node_env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def batches(bootstrap: str, topic: str, partition: int) -> list[tuple[int, list[bytes]]]:
    """(codec id, record keys) of each data batch of a partition, read from the broker's own
    log segments (it runs on this machine: 127.0.0.1): which codec a batch was stored in is
    nowhere in what a consumer returns."""
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        found = admin.describe_log_dirs({topic: [partition]})
    finally:
        admin.close()
    dirs = [Path(d["log_dir"]) / f"{topic}-{partition}"
            for broker in found for d in broker["log_dirs"]
            if any(t["name"] == topic for t in d["topics"])]
    assert dirs and dirs[0].is_dir(), found
    out = []
    for segment in sorted(dirs[0].glob("*.log")):
        records = MemoryRecords(segment.read_bytes())
        while (batch := records.next_batch()) is not None:
            if not batch.is_control_batch:
                out.append((batch.compression_type, [r.key for r in batch]))
    return out


def assert_compressed(bootstrap: str, topic: str, partition: int, codec: str,
                      keys: list[bytes]) -> None:
    """The records keyed `keys` (one key per record) are all stored in `codec`, and at least
    two of them share a batch: a compressed batch, not single records."""
    wanted = set(keys)
    mine = [(c, sum(k in wanted for k in ks)) for c, ks in batches(bootstrap, topic, partition)]
    mine = [(c, n) for c, n in mine if n]
    assert {c for c, _ in mine} == {CODECS[codec]}, (codec, mine)
    assert sum(n for _, n in mine) == len(keys) and max(n for _, n in mine) > 1, (codec, mine)


def test_every_codec_from_kcat_and_the_connector_is_written_audited_sunk_and_shown(
        env, topics, workers, tmp_path, kafka_bootstrap):
    ks, ws = kafka_settings(env), worker_settings(env)
    topic = ks.topic(CONFIRMATIONS)
    sent: dict[str, list[dict]] = {}
    for codec in CODECS:
        key, values = confirmations(f"kcat{codec}")
        publish_with_kcat(kafka_bootstrap, topic, partition_for(key, ws.partitions), codec,
                          key, values)
        sent[key] = values
    key, values = confirmations("tsgzip")
    delivered = publish_with_connector(env, values, tmp_path)
    assert {d["partition"] for d in delivered} == {partition_for(key, ws.partitions)}
    sent[key] = values
    for key, codec in zip(sent, [*CODECS, "gzip"], strict=True):
        assert_compressed(kafka_bootstrap, topic, partition_for(key, ws.partitions), codec,
                          [key.encode()] * PER_SESSION)

    w = workers()
    total = len(sent) * PER_SESSION
    got = Collector(ks, ks.topic(ENTRIES))
    got.wait_for(lambda r: len(r) >= total, 120, w)
    wait_drained(kafka_bootstrap, group_of(env), topic, 60, [w])
    by_session: dict[str, list[dict]] = defaultdict(list)
    for e in got.values():
        by_session[e["session_key"]].append(e)
    got.close()
    assert set(by_session) == set(sent)
    for key, values in sent.items():
        entries = by_session[key]
        assert [e["seq"] for e in entries] == list(range(1, PER_SESSION + 1))
        assert [(e["send_id"], e["text"]) for e in entries] == [
            (v["send_id"], v["payload"]["text"]) for v in values]
    dlq = Collector(ks, ks.topic(DLQ))
    assert dlq.wait_for(lambda r: True, 5, w) == []
    dlq.close()

    audit = cli("audit", "--strict", "--json", env=env)
    assert audit.returncode == 0, audit.stdout.decode() + audit.stderr.decode()
    report = json.loads(audit.stdout)
    assert report["clean"] and report["expected_entries"] == report["actual_entries"] == total

    live, _ = live_entries(ks)
    assert len(live) == total
    db = tmp_path / "sink.db"
    sink = cli("sink", "sqlite", str(db), "--until-end", env=env)
    assert sink.returncode == 0, sink.stderr.decode()
    assert db_entries(db) == live

    for key in sent:
        shown = cli("show", key, "--json", env=env)
        assert shown.returncode == 0, shown.stderr.decode()
        assert [json.loads(ln) for ln in shown.stdout.splitlines()] == by_session[key]

    assert w.alive() and "crash" not in w.log.read_text(errors="replace").lower(), w.tail()
    assert w.stop() == 0


def test_entries_compressed_in_every_codec_are_read_sunk_and_shown(env, topics, tmp_path,
                                                                    kafka_bootstrap):
    ks, ws = kafka_settings(env), worker_settings(env)
    topic = ks.topic(ENTRIES)
    written: dict[str, list[dict]] = {}
    for codec in CODECS:
        key = f"agent:ops:telegram:direct:entries{codec}"
        written[key] = [entry(key, seq, f"{codec} entry {seq} " + "compressible " * 8)
                        for seq in range(1, PER_SESSION + 1)]
        p = producer(ks, compression_type=codec, linger_ms=200)
        sends = [p.send(topic, key=f"{key}#{e['seq']:010d}".encode(),
                        value=json.dumps(e).encode(), partition=partition_for(key, ws.partitions))
                 for e in written[key]]
        p.flush()
        for f in sends:
            f.get(timeout=30)
        p.close()
        assert_compressed(kafka_bootstrap, topic, partition_for(key, ws.partitions), codec,
                          [f"{key}#{seq:010d}".encode() for seq in range(1, PER_SESSION + 1)])

    read_back = [json.loads(r.value) for r in read(ks, topic)]
    assert sorted(read_back, key=lambda e: (e["session_key"], e["seq"])) == sorted(
        (e for es in written.values() for e in es), key=lambda e: (e["session_key"], e["seq"]))

    db = tmp_path / "sink.db"
    sink = cli("sink", "sqlite", str(db), "--until-end", env=env)
    assert sink.returncode == 0, sink.stderr.decode()
    live, _ = live_entries(ks)
    assert len(live) == len(CODECS) * PER_SESSION and db_entries(db) == live
    for key, entries in written.items():
        shown = cli("show", key, "--json", env=env)
        assert shown.returncode == 0, shown.stderr.decode()
        assert [json.loads(ln) for ln in shown.stdout.splitlines()] == entries
