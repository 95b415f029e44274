"""The three-node local cluster (`KAFKA_NODES=3 deploy/local/kafka-up.sh`): topics get RF 3 and
min.insync.replicas 2, and the worker keeps writing entries when the broker leading the most
input partitions is killed with SIGKILL (2 of 3 replicas stay in sync).

It runs on its own cluster on ports 19092.. with its data under tmp_path (the `cluster` fixtures
of tests/conftest.py), not the session broker: it uses none of the `kafka_bootstrap` / `env`
fixtures. The fault suite kills the same node under a running feed (tests/faults)."""

from __future__ import annotations

import json
import time
from collections import Counter

import pytest

from tests.integration.harness import CLUSTER_BOOTSTRAP, Collector, describe, poll_until
from workers.core.outputs import CONFIRMATIONS, ENTRIES
from workers.kafka_io import publish
from workers.settings import kafka_settings

pytestmark = pytest.mark.kafka


def confirmations(tag: str, n: int, sessions: int = 16) -> list[tuple[bytes, bytes]]:
    """n confirmations over `sessions` direct-message sessions; each is one entry."""
    out = []
    for i in range(n):
        peer = f"u{tag}{i % sessions}"
        key = f"agent:ops:telegram:direct:{peer}"
        out.append((key.encode(), json.dumps({
            "schema": "delivery-confirmation/1", "send_id": f"send-{tag}-{i}",
            "confirmed_at": f"2026-05-01T12:{i // 60 % 60:02d}:{i % 60:02d}+00:00",
            "agent_id": "ops", "session_key": key,
            "route": {"channel": "telegram", "peer_kind": "direct", "peer_id": peer},
            "origin": {"kind": "message_tool"}, "payload": {"text": f"message {tag} {i}"},
            "receipt": {"platform_message_ids": [f"{tag}{i}"]},
        }).encode()))
    return out


def test_topics_rf3_and_the_worker_survives_killing_the_busiest_leader(
        cluster, cluster_env, cluster_workers):
    from kafka.admin import ConfigResource, ConfigResourceType

    t0 = time.monotonic()
    env = cluster_env
    prefix = env["TRANSCRIPT_TOPIC_PREFIX"]
    ks = kafka_settings(env)
    assert ks.bootstrap == CLUSTER_BOOTSTRAP
    topic_in, topic_out = ks.topic(CONFIRMATIONS), ks.topic(ENTRIES)
    admin = cluster.admin()
    entries = None
    try:
        mine = sorted(t for t in admin.list_topics() if t.startswith(prefix))
        assert topic_in in mine and topic_out in mine
        for name, parts in describe(admin, mine).items():
            assert {len(p["replica_nodes"]) for p in parts} == {3}, name
            assert {len(p["isr_nodes"]) for p in parts} == {3}, name
        configs = admin.describe_configs(
            [ConfigResource(ConfigResourceType.TOPIC, t) for t in mine], config_filter="all")
        for name in mine:
            assert configs["topic"][name]["min.insync.replicas"]["value"] == "2", name

        first = confirmations("a", 80)
        publish(ks, topic_in, first, 8)
        worker = cluster_workers("worker")
        entries = Collector(ks, topic_out)

        def sends() -> set[str]:
            return {json.loads(r.value)["send_id"] for r in entries.records}

        want_first = {f"send-a-{i}" for i in range(len(first))}
        entries.wait_for(lambda _: want_first <= sends(), 90, worker)

        # the node leading the most input partitions: SIGKILL, as a crash would
        victim, led = cluster.busiest_leader(admin, topic_in)
        assert led >= 3, (victim, led)
        cluster.run("kafka-node.sh", "kill", str(victim))
        t_kill = time.monotonic()
        # every input partition led by a live node, 2 in sync
        poll_until(lambda: cluster.in_sync(admin, [topic_in], 2, without=victim), 60,
                   [worker], "input partitions failed over")

        second = confirmations("b", 80)
        publish(ks, topic_in, second, 8)
        want = want_first | {f"send-b-{i}" for i in range(len(second))}
        entries.wait_for(lambda _: want <= sends(), 120, worker)
        recovered = time.monotonic() - t_kill
        assert worker.alive()

        # counted here; the fault suite (tests/faults, on this cluster too) asserts 0
        keys = Counter(r.key for r in entries.records)
        repeats = sum(n - 1 for n in keys.values())

        cluster.run("kafka-node.sh", "start", str(victim))
        out = cluster.run("kafka-status.sh")
        assert out.startswith("up nodes=3"), out
        assert worker.stop() == 0
        print(f"\nnode {victim} led {led}/8 input partitions; entries of the second batch "
              f"{recovered:.1f}s after the kill; {repeats} repeated entry keys; "
              f"test {time.monotonic() - t0:.1f}s")
    finally:
        if entries is not None:
            entries.close()
        admin.close()
