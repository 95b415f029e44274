"""Shared fixtures: one real broker per test session, a unique topic prefix per test.

A missing broker is a failure, not a skip: `make test` starts it, and so does this fixture
when KAFKA_BOOTSTRAP is not set. Tests of a three-node cluster get their own (`cluster`,
`cluster_env`, `cluster_workers`), started and torn down per test.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def pytest_sessionstart(session: pytest.Session) -> None:
    """A compiled module older than its source would test old code (workers/compiled.py)."""
    from workers.compiled import status

    stale = status().stale
    if stale:
        pytest.exit(f"compiled modules older than their sources: {', '.join(stale)}; run "
                    "`make compile` (or `make uncompile` to test the sources)", returncode=2)


@pytest.fixture(scope="session")
def kafka_bootstrap() -> str:
    bootstrap = os.environ.get("KAFKA_BOOTSTRAP")
    if not bootstrap:
        subprocess.run([str(ROOT / "deploy/local/kafka-up.sh")], check=True)
        bootstrap = f"127.0.0.1:{os.environ.get('KAFKA_PORT', '9092')}"
    host = bootstrap.split(",")[0].rsplit(":", 1)[0]
    assert host in ("127.0.0.1", "localhost", "::1"), "tests only talk to a broker on loopback"
    from kafka.admin import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=20000)
    admin.list_topics()  # raises if the broker does not answer
    admin.close()
    return bootstrap


@pytest.fixture
def prefix() -> str:
    """A topic prefix no other test uses, so tests share one broker without seeing each other."""
    return f"t{uuid.uuid4().hex[:10]}."


@pytest.fixture
def env(kafka_bootstrap: str, prefix: str) -> dict[str, str]:
    """Environment for a `transcript-owner` subprocess aimed at this test's topics."""
    e = dict(os.environ)
    e.update(KAFKA_BOOTSTRAP=kafka_bootstrap, TRANSCRIPT_TOPIC_PREFIX=prefix, PYTHONUNBUFFERED="1")
    return e


def keeping_input(env: dict[str, str], directory: Path) -> dict[str, str]:
    """`env` with TRANSCRIPT_TOPICS_FILE naming a copy of topics.yaml whose input keeps its
    records for ever (retention.ms -1), read by `topics apply` and by the worker alike: what a
    test declares that checkpoints every second and deletes its oldest input itself
    (delete_records). Against topics.yaml's 7 days, the worker refuses a span of checkpoints a
    second apart at start (workers.settings.worker_limits)."""
    import yaml

    doc = yaml.safe_load((ROOT / "topics.yaml").read_text())
    doc["topics"]["delivery.confirmations"]["configs"]["retention.ms"] = "-1"
    path = directory / "topics-input-kept.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return {**env, "TRANSCRIPT_TOPICS_FILE": str(path)}


def cli(*args: str, env: dict[str, str], input: bytes | None = None, timeout: float = 120):
    """Run `python -m workers …` and return the CompletedProcess (text output)."""
    return subprocess.run(
        [sys.executable, "-m", "workers", *args],
        cwd=ROOT, env=env, input=input, capture_output=True, timeout=timeout,
    )


@pytest.fixture
def topics(env: dict[str, str]) -> Iterator[str]:
    """This test's topics, created from topics.yaml under its prefix. Yields the prefix."""
    done = cli("topics", "apply", env=env)
    assert done.returncode == 0, done.stderr.decode()
    prefix = env["TRANSCRIPT_TOPIC_PREFIX"]
    yield prefix
    delete_topics(env["KAFKA_BOOTSTRAP"], prefix)


def delete_topics(bootstrap: str, prefix: str) -> None:
    """Drop a test's topics so a long suite does not pile partitions onto one broker."""
    from kafka.admin import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        mine = [t for t in admin.list_topics() if t.startswith(prefix)]
        if mine:
            admin.delete_topics(mine)
    finally:
        admin.close()


def worker_factory(env: dict[str, str], tmp_path: Path) -> Iterator:
    """make(name, state=None, **extra_env) starts a worker; any still alive are killed after."""
    from tests.integration.harness import WorkerProcess

    made: list = []

    def make(name: str = "w", state: Path | None = None, **extra_env: str):
        w = WorkerProcess(env, state or tmp_path / f"state-{name}", tmp_path / f"{name}.log",
                          **extra_env)
        made.append(w)
        return w.start()

    yield make
    for w in made:
        if w.alive():
            w.kill()


@pytest.fixture
def workers(env, topics, tmp_path):
    """A factory of worker processes on this test's topics; any still alive are killed after.

    workers(name) gets its own state dir; workers(name, state) shares or reuses one; keyword
    arguments are extra environment variables."""
    yield from worker_factory(env, tmp_path)


@pytest.fixture
def cluster(tmp_path: Path):
    """Its own three-node cluster (tests.integration.harness.Cluster) on ports 19092.., data
    under tmp_path; torn down after the test even when it failed to come up."""
    from tests.integration.harness import CLUSTER_BOOTSTRAP, SCRIPTS, Cluster

    c = Cluster(tmp_path / "kafka")
    try:
        out = c.run("kafka-up.sh")
        assert f"bootstrap: {CLUSTER_BOOTSTRAP}" in out, out
        yield c
    finally:
        # always, even when kafka-up failed half-way: no JVM outlives the test
        subprocess.run([str(SCRIPTS / "kafka-down.sh")], env=c.env, cwd=ROOT,
                       capture_output=True, timeout=120)


@pytest.fixture
def cluster_env(cluster, prefix: str) -> dict[str, str]:
    """Environment for a `transcript-owner` subprocess on the three-node cluster, its topics
    (RF 3, min.insync.replicas 2) created; they go with the cluster."""
    e = cluster.client_env(prefix)
    done = cli("topics", "apply", env=e)
    assert done.returncode == 0, done.stderr.decode()
    return e


@pytest.fixture
def cluster_workers(cluster_env, tmp_path):
    """As `workers`, on the three-node cluster."""
    yield from worker_factory(cluster_env, tmp_path)
