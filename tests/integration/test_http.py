"""The worker's HTTP endpoints on the real broker: readiness through a rebalance, metrics that
match what a read_committed reader finds, liveness while the broker is frozen, a port in use,
a thousand idle connections against a worker short of files."""

from __future__ import annotations

import json
import os
import resource
import signal
import socket
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import cli
from tests.integration.harness import (
    ROOT,
    Collector,
    WorkerProcess,
    entry_records,
    group_of,
    poll_until,
    replay_entries,
    wait_drained,
    wait_members,
)
from workers.core.outputs import CONFIRMATIONS, DLQ, ENTRIES
from workers.kafka_io import publish, read
from workers.settings import kafka_settings
from workers.synthetic import generate

pytestmark = pytest.mark.kafka


def free_port() -> int:
    with socket.create_server(("127.0.0.1", 0)) as s:
        return s.getsockname()[1]


def get(port: int, path: str) -> tuple[int, str]:
    """(status, body); (0, reason) while nothing listens."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()
    except (urllib.error.URLError, ConnectionError, TimeoutError) as exc:
        return 0, str(exc)


def samples(port: int) -> dict[tuple[str, tuple], float]:
    status, body = get(port, "/metrics")
    assert status == 200, body
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for f in text_string_to_metric_families(body) for s in f.samples}


def total(found: dict, name: str, **labels: str) -> float:
    want = set(labels.items())
    return sum(v for (n, ls), v in found.items() if n == name and want <= set(ls))


class Watcher:
    """Polls /readyz in the background and keeps every (status, reason) it saw, in order."""

    def __init__(self, port: int) -> None:
        self.port, self.seen, self._stop = port, [], threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            status, body = get(self.port, "/readyz")
            if status:
                reason = json.loads(body)["reason"]
                if not self.seen or self.seen[-1] != (status, reason):
                    self.seen.append((status, reason))
            self._stop.wait(0.02)

    def stop(self) -> list[tuple[int, str]]:
        self._stop.set()
        self._thread.join()
        return self.seen


def test_ready_through_a_rebalance_and_metrics_equal_what_readers_find(env, workers):
    ks = kafka_settings(env)
    port_a, port_b = free_port(), free_port()
    a = workers("a", TRANSCRIPT_HTTP_PORT=str(port_a))
    watch_a = Watcher(port_a)
    poll_until(lambda: get(port_a, "/readyz")[0] == 200, 90, [a], "worker a ready")
    assert json.loads(get(port_a, "/livez")[1])["live"] is True

    publish(ks, ks.topic(CONFIRMATIONS), generate(6000, seed=14), 8)
    wait_drained(env["KAFKA_BOOTSTRAP"], group_of(env), ks.topic(CONFIRMATIONS), 120, [a])
    b = workers("b", TRANSCRIPT_HTTP_PORT=str(port_b))
    watch_b = Watcher(port_b)
    wait_members(env["KAFKA_BOOTSTRAP"], group_of(env), 2, [a, b])
    poll_until(lambda: get(port_a, "/readyz")[0] == 200 and get(port_b, "/readyz")[0] == 200,
               90, [a, b], "both ready after the rebalance")
    publish(ks, ks.topic(CONFIRMATIONS), generate(4000, seed=15), 8)
    wait_drained(env["KAFKA_BOOTSTRAP"], group_of(env), ks.topic(CONFIRMATIONS), 120, [a, b])
    seen_a, seen_b = watch_a.stop(), watch_b.stop()

    # a: unready until assigned, ready, unready in the rebalance, ready again
    assert seen_a[0][0] == 503 and seen_a[-1] == (200, "processing"), seen_a
    statuses = [s for s, _ in seen_a]
    first_ready = statuses.index(200)
    assert 503 in statuses[first_ready:], seen_a  # the rebalance was seen
    # b answered before the group had assigned it anything, with a reason
    assert seen_b[0][0] == 503 and seen_b[-1][0] == 200, seen_b

    entries = len(entry_records(ks))
    dead = sum(1 for _ in read(ks, ks.topic(DLQ)))
    metrics = [samples(port_a), samples(port_b)]
    written = sum(total(m, "transcript_owner_records_total", outcome="written") for m in metrics)
    # a's counts include what it wrote before b joined: together they wrote every entry once
    assert written == entries > 0
    assert sum(total(m, "transcript_owner_dead_letters_total") for m in metrics) == dead > 0
    assert sum(total(m, "transcript_owner_records_total", outcome="dead_letter")
               for m in metrics) == dead
    for m in metrics:
        assert total(m, "transcript_owner_assigned_partitions") == 4
        assert total(m, "transcript_owner_ready") == 1
        lags = {dict(ls)["partition"]: v for (n, ls), v in m.items()
                if n == "transcript_owner_consumer_lag"}
        assert len(lags) == 4 and sum(lags.values()) == 0, lags
        assert total(m, "transcript_owner_transactions_total", result="committed") > 0
        assert total(m, "transcript_owner_transactions_total", result="aborted") == 0
        assert total(m, "transcript_owner_state_keys") > 0
    assert total(metrics[0], "transcript_owner_rebalances_total") >= 2
    assert a.stop() == 0 and b.stop() == 0


def _broker_pid() -> int:
    data = Path(os.environ.get("KAFKA_DATA_DIR", ROOT / "var/kafka"))
    return int((data / "kafka.pid").read_text().split()[0])


def test_livez_fails_while_a_batch_cannot_commit_and_recovers(env, workers):
    """A frozen broker holds the batch in flight: /livez turns 503 past the liveness timeout
    (a supervisor would restart the worker), and 200 again once the broker answers.

    At least once: exactly once, the worker refuses a liveness timeout below its transaction
    timeout (settings.worker_limits), so a batch held past it is one whose transaction the broker
    aborts, and a restart, not the broker's answer, ends it. What /livez measures, a batch in
    flight, is the same in both modes.

    The input is published before the worker starts, so that the broker freezes while the
    worker is still working through it: published while it ran, the worker could have taken
    all of it before the broker froze, and then no batch is in flight to hold."""
    ks = kafka_settings(env)
    port = free_port()
    publish(ks, ks.topic(CONFIRMATIONS), generate(80_000, seed=16), 8)
    w = workers("w", TRANSCRIPT_HTTP_PORT=str(port), TRANSCRIPT_LIVENESS_TIMEOUT_S="2",
                TRANSCRIPT_MAX_BATCH="2000", TRANSCRIPT_PROCESSING_GUARANTEE="at_least_once")
    poll_until(lambda: get(port, "/readyz")[0] == 200, 90, [w], "ready")
    poll_until(lambda: total(samples(port), "transcript_owner_batch_records_count") > 0, 60, [w],
               "a batch committed", interval=0.05)
    assert total(samples(port), "transcript_owner_batch_records_sum") < 80_000, \
        "the worker took all of its input before the broker froze"
    pid = _broker_pid()
    os.kill(pid, signal.SIGSTOP)
    try:
        deadline = time.monotonic() + 30
        while (status := get(port, "/livez"))[0] != 503:
            assert time.monotonic() < deadline, f"/livez stayed {status}\n{w.tail()}"
            time.sleep(0.1)
        assert "in flight" in json.loads(status[1])["reason"]
    finally:
        os.kill(pid, signal.SIGCONT)
    poll_until(lambda: get(port, "/livez")[0] == 200, 60, [w], "live again")
    wait_drained(env["KAFKA_BOOTSTRAP"], group_of(env), ks.topic(CONFIRMATIONS), 180, [w])
    assert w.stop() == 0


def test_a_port_in_use_is_refused_at_start(env, topics):
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        done = cli("worker", env=dict(env, TRANSCRIPT_HTTP_PORT=str(port)), timeout=60)
    assert done.returncode == 2
    err = done.stderr.decode()
    assert f"127.0.0.1:{port}" in err and "TRANSCRIPT_HTTP_PORT" in err
    assert "Traceback" not in err


NOFILE = 256  # the worker's file limit: what ~250 idle connections used to exhaust
IDLE_CONNECTIONS = 1000


def open_idle(port: int, n: int) -> list[socket.socket]:
    """n TCP connections that send nothing, opened without waiting on each: against a server
    that stops accepting, the rest wait in the kernel (SYN retries), not in the test."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = n + 256  # the test's own files besides
    if soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want if hard < 0 else min(want, hard), hard))
    opened = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            opened.append(s)
            s.setblocking(False)
            s.connect_ex(("127.0.0.1", port))
    except BaseException:
        for s in opened:
            s.close()
        raise
    return opened


def test_a_thousand_idle_connections_do_not_starve_a_worker_short_of_files(env, topics, tmp_path):
    """DESIGN 1.2. They are opened once the port answers, while the worker still joins its
    group, starts its producers and opens its stores (all need files), and held to the end."""
    ks = kafka_settings(env)
    port = free_port()
    records = list(generate(2000, sessions_n=200, seed=18))
    expected = replay_entries([v for _, v in records], env)
    w = WorkerProcess(env, tmp_path / "state", tmp_path / "w.log",
                      TRANSCRIPT_HTTP_PORT=str(port)).start(nofile=NOFILE)
    held: list[socket.socket] = []
    try:
        poll_until(lambda: get(port, "/livez")[0] == 200, 90, [w], "the port answers")
        held = open_idle(port, IDLE_CONNECTIONS)
        entries = Collector(ks, ks.topic(ENTRIES))
        publish(ks, ks.topic(CONFIRMATIONS), records, 8)
        entries.wait_for(lambda r: len(r) >= len(expected), 180, w)
        # the held connections are evicted by newer ones and closed at the idle bound: it answers
        poll_until(lambda: get(port, "/metrics")[0] == 200, 60, [w], "/metrics answers")
        assert total(samples(port), "transcript_owner_records_total", outcome="written") \
            == len(expected) > 0
        assert w.alive()
        assert w.stop() == 0
    finally:
        for s in held:
            s.close()
        if w.alive():
            w.kill()
    log = w.log.read_text(errors="replace")
    assert "Traceback" not in log, log[-4000:]
