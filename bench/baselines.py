"""The baselines of issue 15 for bench/run.py: a librdkafka passthrough and a Quix Streams pipeline.

Both run in their own interpreter, the bench virtualenv (var/venv-bench, made by `make bench`
from the `bench` extra of pyproject.toml): quixstreams pins pydantic below the worker's, so it
is kept out of the project's .venv, and the worker is measured on its own dependencies.
BENCH_PYTHON names another interpreter that has quixstreams, confluent-kafka and orjson.

- librdkafka(): bench/librdkafka_passthrough.py, the loop of the aiokafka ceiling (ceiling.py)
  with confluent-kafka; timed inside the process, as the ceiling.
- QuixProc + worker_bench.throughput(): bench/quix_baseline.py on its own copy of the input
  (it writes re-keyed records back to its input, as the worker does), measured from outside
  with the worker's own measurement: first output -> the group's committed lag 0.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient

from bench.common import BOOTSTRAP, ROOT
from workers.core.outputs import CONFIRMATIONS, DIAGNOSTICS, DLQ, ENTRIES

BENCH_VENV = ROOT / "var" / "venv-bench"
# name -> the worker's processing guarantee it is compared with (None: the passthrough)
BASELINES = {"librdkafka": None, "quix_exactly_once": "exactly_once",
             "quix_at_least_once": "at_least_once"}
ALIASES = {"all": tuple(BASELINES), "none": (), "quix": ("quix_exactly_once", "quix_at_least_once"),
           "quix_eos": ("quix_exactly_once",), "quix_alo": ("quix_at_least_once",)}
QUIX_GUARANTEE = {"exactly_once": "exactly-once", "at_least_once": "at-least-once"}
SHORT = {"quix_exactly_once": "qeos", "quix_at_least_once": "qalo"}
QUIX_APP_ID = "bench-quix"


def parse(spec: str) -> list[str]:
    """`--baselines`: names of BASELINES and the aliases above, comma-separated; in run order."""
    out: list[str] = []
    for part in (p.strip().replace("-", "_") for p in spec.split(",")):
        if not part:
            continue
        names = ALIASES.get(part, (part,))
        for name in names:
            if name not in BASELINES:
                raise ValueError(f"unknown baseline {part!r}: one of "
                                 f"{', '.join([*BASELINES, *ALIASES])}")
            if name not in out:
                out.append(name)
    return out


def python() -> Path:
    return Path(os.environ.get("BENCH_PYTHON") or BENCH_VENV / "bin" / "python")


def versions() -> dict:
    """Python and package versions of the bench interpreter (raises if it is missing)."""
    code = ("import json, platform, importlib.metadata as m, confluent_kafka as c; "
            "print(json.dumps({'python': platform.python_version(), "
            "'quixstreams': m.version('quixstreams'), 'confluent_kafka': c.__version__, "
            "'librdkafka': c.libversion()[0], 'orjson': m.version('orjson'), "
            "'rocksdict': m.version('rocksdict')}))")
    done = subprocess.run([str(python()), "-W", "ignore", "-c", code], capture_output=True,
                          timeout=60, cwd=ROOT)
    if done.returncode != 0:
        raise RuntimeError(f"{python()}: {done.stderr.decode()[-500:]} (make bench installs "
                           "var/venv-bench from the bench extra)")
    return json.loads(done.stdout)


def quix_prefix(prefix: str, name: str) -> str:
    return f"{prefix}{SHORT[name]}."


def log_append_time(prefix: str) -> None:
    """Quix's to_topic gives each output the input record's timestamp; with the broker's
    append time on the output topics, their first record's timestamp is when it was written
    (what the worker's CreateTime is), so the worker's measurement applies unchanged."""
    admin = KafkaAdminClient(bootstrap_servers=BOOTSTRAP)
    try:
        admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, prefix + t,
                                            configs={"message.timestamp.type": "LogAppendTime"})
                             for t in (ENTRIES, DIAGNOSTICS, DLQ)])
    finally:
        admin.close()


def librdkafka(src: str, dst: str, group: str, n: int, log: Path, timeout: float = 180) -> dict:
    with log.open("ab") as err:
        done = subprocess.run([str(python()), "-W", "ignore", "bench/librdkafka_passthrough.py",
                               "--bootstrap", BOOTSTRAP, "--src", src, "--dst", dst,
                               "--group", group, "-n", str(n), "--timeout", str(timeout)],
                              cwd=ROOT, stdout=subprocess.PIPE, stderr=err,
                              timeout=timeout + 60)
    lines = done.stdout.decode().strip().splitlines()
    if done.returncode != 0 or not lines:
        raise RuntimeError(f"librdkafka passthrough exited {done.returncode}; see {log}")
    return json.loads(lines[-1])


class QuixProc:
    """bench/quix_baseline.py as a process, shaped like bench.common.WorkerProc (start, alive,
    stop, group, guarantee, started_at) so that worker_bench.throughput measures it."""

    def __init__(self, prefix: str, state_dir: Path, log: Path, guarantee: str,
                 commit_interval: float) -> None:
        self.guarantee = guarantee  # the worker's spelling (exactly_once, at_least_once)
        self.group = prefix + QUIX_APP_ID
        self.log = log
        self.commit_interval = commit_interval
        self.argv = [str(python()), "-W", "ignore", "bench/quix_baseline.py",
                     "--bootstrap", BOOTSTRAP, "--input", prefix + CONFIRMATIONS,
                     "--entries", prefix + ENTRIES, "--diagnostics", prefix + DIAGNOSTICS,
                     "--dlq", prefix + DLQ, "--group", self.group, "--state-dir", str(state_dir),
                     "--guarantee", QUIX_GUARANTEE[guarantee],
                     "--commit-interval", str(commit_interval)]
        self.proc: subprocess.Popen | None = None
        self.started_at = 0.0

    def start(self) -> QuixProc:
        out = self.log.open("ab")
        self.started_at = time.time()
        self.proc = subprocess.Popen(self.argv, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT,
                                     env=dict(os.environ, PYTHONUNBUFFERED="1"))
        return self

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout: float = 60) -> int | None:
        if self.proc is None or self.proc.poll() is not None:
            return None if self.proc is None else self.proc.returncode
        self.proc.send_signal(signal.SIGTERM)  # Quix's graceful stop: last checkpoint, close
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait(timeout=30)

    def tail(self, n: int = 40) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-n:])
