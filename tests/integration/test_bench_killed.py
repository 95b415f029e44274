"""A `bench/run.py` ended by `kill` cleans up as an interrupted one does: the worker it started
stops and its topics are deleted (a killed run used to leave its worker running beside the next
measurement, and its partitions on the broker)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.conftest import ROOT, delete_topics


def bench_workers(prefix: str) -> list[int]:
    """Pids of the processes whose topic prefix is under the run's `prefix` (its workers)."""
    found = []
    for pid in (p for p in os.listdir("/proc") if p.isdigit()):
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:  # ended meanwhile, or not ours to read
            continue
        if any(v.startswith(b"TRANSCRIPT_TOPIC_PREFIX=" + prefix.encode()) for v in environ):
            found.append(int(pid))
    return found


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_a_killed_bench_run_stops_its_worker_and_deletes_its_topics(kafka_bootstrap, tmp_path):
    from kafka.admin import KafkaAdminClient

    env = dict(os.environ, KAFKA_BOOTSTRAP=kafka_bootstrap, PYTHONUNBUFFERED="1")
    run = subprocess.Popen(
        [sys.executable, "bench/run.py", "--modes", "exactly_once", "--baselines", "none",
         "--records", "50000", "--sessions", "200", "--partitions", "2", "--only", "c",
         "--no-scaling", "--no-read-cost", "--no-chain-cost", "--no-position-cost",
         "--results", str(tmp_path)],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines: list[str] = []
    prefix = None
    try:
        for line in run.stdout:  # type: ignore[union-attr]
            lines.append(line)
            if m := re.search(r"prefix '([^']+)'", line):
                prefix = m.group(1)
            if "(c) worker, exactly_once: draining" in line:
                break
        assert prefix is not None, "".join(lines)
        deadline = time.monotonic() + 60
        while not (workers := bench_workers(prefix)):
            assert time.monotonic() < deadline, "the run started no worker:\n" + "".join(lines)
            assert run.poll() is None, "the run ended first:\n" + "".join(lines)
            time.sleep(0.05)
        admin = KafkaAdminClient(bootstrap_servers=kafka_bootstrap)
        try:
            listed = [t for t in admin.list_topics() if t.startswith(prefix)]
        finally:
            admin.close()
        assert listed, "".join(lines)

        run.send_signal(signal.SIGTERM)
        rest, _ = run.communicate(timeout=120)
        lines.append(rest)
        assert run.returncode == 128 + signal.SIGTERM, "".join(lines)
        assert not [pid for pid in workers if alive(pid)], "".join(lines)
        # the run deletes by prefix and its DeleteTopics raises unless the broker answered, so
        # its own count says the topics went (the worker may have made more since the listing)
        cleaned = re.search(r"cleanup: worker stopped, (\d+) topics under '([^']+)' deleted", rest)
        assert cleaned and cleaned.group(2) == prefix, rest
        assert int(cleaned.group(1)) >= len(listed), (listed, rest)
    finally:  # what a failed run left: its workers, its topics
        if run.poll() is None:
            run.kill()
            run.wait()
        if prefix is not None:
            for pid in bench_workers(prefix):
                os.kill(pid, signal.SIGKILL)
            delete_topics(kafka_bootstrap, prefix)
