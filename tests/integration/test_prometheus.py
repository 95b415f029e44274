"""The worker's /metrics scraped by a real Prometheus: what it reports equals what it wrote.

A Prometheus binary (`make prometheus-tool`, or PROMETHEUS=/path) scrapes one worker every
second on 127.0.0.1. The worker takes a synthetic load with connector retries and invalid
records; once its group has committed every input record, the counts Prometheus holds must
equal the records in the topics, read read_committed: entries written, dead letters, every
input record (re-keyed copies included) counted once. Prometheus scrapes on its own clock,
so each check awaits its value there with a time-out.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import signal
import socket
import subprocess
import textwrap
import urllib.error
import urllib.parse
import urllib.request
from collections import Counter
from pathlib import Path

import pytest

from tests.integration.harness import ROOT, entry_records, group_of, poll_until, wait_drained
from workers.core.outputs import CONFIRMATIONS, DLQ
from workers.kafka_io import end_offsets, publish, read
from workers.settings import kafka_settings
from workers.synthetic import generate

pytestmark = pytest.mark.kafka

HOST = "127.0.0.1"
PARTITIONS = 8  # topics.yaml defaults
RECORDS = 30_000
# the dead-letter reasons and record outcomes the worker labels its counters with
REASONS = {"oversize", "not_json", "unknown_schema", "invalid_field", "invalid_session_key",
           "unreadable_state", "handling_failed"}
OUTCOMES = {"written", "duplicate", "conflict", "skipped_same_turn", "other_agent",
            "native_only", "reset", "dead_letter", "erased", "erased_send", "rekeyed",
            "forwarded"}


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def http_get(url: str, timeout: float = 5.0) -> tuple[int, bytes]:
    """(status, body); (0, b"") while nothing answers."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:  # noqa: S310 (loopback only)
            return r.status, r.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return 0, b""


class PrometheusProcess:
    """The `prometheus` binary on 127.0.0.1:<port> with its own config and TSDB under `home`.

    Quacks like harness.WorkerProcess (alive, proc, tail), so poll_until fails at once with
    its log when it dies."""

    def __init__(self, binary: str, home: Path, target: str) -> None:
        self.port = free_port()
        self.url = f"http://{HOST}:{self.port}"
        self.home = home
        home.mkdir(parents=True, exist_ok=True)
        self.config = home / "prometheus.yml"
        self.config.write_text(textwrap.dedent(f"""\
            global:
              scrape_interval: 1s
              scrape_timeout: 1s
              evaluation_interval: 1s
            scrape_configs:
              - job_name: transcript-owner
                metrics_path: /metrics
                static_configs:
                  - targets: ["{target}"]
            """))
        self.log = home / "prometheus.log"
        self.cmd = [binary, f"--config.file={self.config}",
                    f"--storage.tsdb.path={home / 'tsdb'}",
                    f"--web.listen-address={HOST}:{self.port}",
                    "--storage.tsdb.retention.time=1h", "--log.level=warn"]
        self.proc: subprocess.Popen | None = None

    def start(self) -> PrometheusProcess:
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(self.cmd, cwd=self.home, stdout=out,
                                         stderr=subprocess.STDOUT, start_new_session=True)
        return self

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def tail(self, n: int = 40) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-n:])

    def kill(self) -> None:
        if self.alive():
            assert self.proc is not None
            os.killpg(self.proc.pid, signal.SIGKILL)  # its own session: only it
            self.proc.wait(timeout=30)

    def api(self, path: str, **params: str) -> dict:
        url = f"{self.url}/api/v1/{path}"
        if params:
            url += "?" + urllib.parse.urlencode(params)
        status, body = http_get(url)
        assert status == 200, f"{url}: {status} {body[:500]!r}\n{self.tail()}"
        answer = json.loads(body)
        assert answer["status"] == "success", answer
        return answer["data"]

    def query(self, expr: str) -> list[dict]:
        """The instant vector of `expr` at now: [{"metric": {...}, "value": [t, "v"]}, ...]."""
        data = self.api("query", query=expr)
        assert data["resultType"] == "vector", data
        return data["result"]

    def scalar(self, expr: str) -> float | None:
        """The one value of `expr`, None while it has no series."""
        result = self.query(expr)
        assert len(result) <= 1, result
        return float(result[0]["value"][1]) if result else None

    def by(self, label: str, expr: str) -> dict[str, float]:
        return {r["metric"].get(label, ""): float(r["value"][1]) for r in self.query(expr)}


@pytest.fixture
def prometheus_binary() -> str:
    binary = os.environ.get("PROMETHEUS") or shutil.which("prometheus")
    assert binary, "no prometheus binary: run `make prometheus-tool` (or set PROMETHEUS)"
    return binary


@pytest.fixture
def prometheus(prometheus_binary, tmp_path):
    """A factory: prometheus(target) starts one scraping http://<target>/metrics; killed after."""
    made: list[PrometheusProcess] = []

    def make(target: str) -> PrometheusProcess:
        p = PrometheusProcess(prometheus_binary, tmp_path / "prometheus", target)
        made.append(p)
        return p.start()

    yield make
    for p in made:
        p.kill()


def awaited(prom: PrometheusProcess, expr: str, done, what: str, procs: list,
            timeout: float = 60.0) -> float | None:
    """The value of `expr` once done(value) holds; fails with the last value seen."""
    seen: list[float | None] = [None]

    def check() -> bool:
        seen[0] = prom.scalar(expr)
        return done(seen[0])

    try:
        poll_until(check, timeout, procs, what, interval=0.5)
    except AssertionError as exc:
        raise AssertionError(f"{expr} = {seen[0]}: {exc}") from None
    return seen[0]


def dashboard_queries() -> list[tuple[str, str]]:
    """(panel title, expr) of deploy/grafana/transcript-owner.json, with Grafana's variables
    as a dashboard over this one worker would expand them."""
    dashboard = json.loads((ROOT / "deploy/grafana/transcript-owner.json").read_text())
    values = {"$__rate_interval": "1m", "$__range": "5m", "$job": ".+", "$instance": ".+"}
    out = []
    panels = [q for p in dashboard["panels"] for q in (p, *p.get("panels", []))]  # rows too
    for panel in panels:
        for target in panel.get("targets", []):
            expr = target["expr"]
            for name, value in values.items():
                expr = expr.replace(name, value)
            assert "$" not in expr, (panel["title"], expr)
            out.append((panel["title"], expr))
    return out


def load() -> list[tuple[bytes | None, bytes]]:
    """Synthetic confirmations (5% connector retries, 0.5% invalid, resets, legacy keys that
    are re-keyed), then more retries of records already sent and invalid records of every
    kind a gateway can produce before the worker's checks: not JSON, oversize, unknown
    schema, a missing field, an invalid session key."""
    records = list(generate(RECORDS, sessions_n=2000, seed=14))
    retries = records[:500]
    key = b"agent:ops:telegram:direct:u1"
    bad_key = "agent:no agent!:telegram:direct:u1"  # names no agent
    good = json.loads(next(v for _, v in records if b'"delivery-confirmation/1"' in v))
    invalid = [
        (key, b"\xff\xfe not json"),
        (key, json.dumps({**good, "payload": {"text": "x" * (1024 * 1024 + 10)}}).encode()),
        (key, json.dumps({**good, "schema": "delivery-confirmation/9"}).encode()),
        (key, json.dumps({k: v for k, v in good.items() if k != "send_id"}).encode()),
        (bad_key.encode(), json.dumps({**good, "send_id": "bad-key",
                                       "session_key": bad_key}).encode()),
    ]
    return records + retries + invalid


def test_prometheus_counts_what_the_worker_wrote(env, workers, prometheus, kafka_bootstrap):
    ks = kafka_settings(env)
    inputs = ks.topic(CONFIRMATIONS)
    http_port = free_port()
    prom = prometheus(f"{HOST}:{http_port}")
    w = workers(TRANSCRIPT_HTTP_HOST=HOST, TRANSCRIPT_HTTP_PORT=str(http_port))
    procs = [w, prom]

    # the worker reports ready once its partitions are assigned and recovered
    poll_until(lambda: http_get(f"http://{HOST}:{http_port}/livez")[0] == 200, 60, procs,
               "/livez answers 200")
    poll_until(lambda: http_get(f"http://{HOST}:{http_port}/readyz")[0] == 200, 90, procs,
               "/readyz answers 200")
    ready = lambda: prom.scalar("transcript_owner_ready") == 1  # noqa: E731
    poll_until(ready, 60, procs, "Prometheus sees the worker ready")
    targets = prom.api("targets", state="active")["activeTargets"]
    assert [(t["scrapeUrl"], t["health"]) for t in targets] == [
        (f"http://{HOST}:{http_port}/metrics", "up")], targets

    records = load()
    publish(ks, inputs, records)
    wait_drained(kafka_bootstrap, group_of(env), inputs, 300, procs)

    last: dict[int, int] = {}  # input partition -> its last record's offset
    n_input = 0  # published + the re-keyed copies
    for r in read(ks, inputs):
        n_input += 1
        last[r.partition] = max(last.get(r.partition, -1), r.offset)
    # the re-keyed copies were written in transactions: their commit markers end partitions
    ends = end_offsets(ks, inputs)
    ended_by_marker = {p for p, end in ends.items() if end > last.get(p, -1) + 1}
    assert ended_by_marker, (ends, last)
    n_entries = len(entry_records(ks))
    dlq = list(read(ks, ks.topic(DLQ)))
    assert n_input > len(records) and n_entries > RECORDS // 2 and len(dlq) >= 5

    written = awaited(prom, 'sum(transcript_owner_records_total{outcome="written"})',
                      lambda v: v == n_entries, f"{n_entries} written", procs)
    assert written == n_entries
    # every input record has exactly one outcome, counted once: a re-keyed record, then its copy
    outcomes = prom.by("outcome", "sum by (outcome) (transcript_owner_records_total)")
    assert set(outcomes) <= OUTCOMES, outcomes
    assert sum(outcomes.values()) == n_input, outcomes
    assert outcomes["rekeyed"] == n_input - len(records), outcomes
    assert outcomes["dead_letter"] == len(dlq), outcomes
    assert outcomes["duplicate"] >= 500, outcomes  # the retries, at least

    reasons = prom.by("reason", "sum by (reason) (transcript_owner_dead_letters_total)")
    assert set(reasons) <= REASONS, reasons
    assert sum(reasons.values()) == len(dlq), (reasons, Counter(
        dict(r.headers)["error"].decode()[:40] for r in dlq))
    assert {"oversize", "not_json", "unknown_schema", "invalid_field",
            "invalid_session_key"} <= {r for r, n in reasons.items() if n > 0}, reasons

    # lag: a series per input partition, all drained. Records, not offsets: the commit
    # markers that end partitions (ended_by_marker) hold no record, so they are no lag
    lag = awaited(prom, "sum(transcript_owner_consumer_lag)", lambda v: v == 0,
                  "lag 0", procs)
    assert lag == 0
    partitions = prom.by("partition", "transcript_owner_consumer_lag")
    assert set(partitions) == {str(p) for p in range(PARTITIONS)}, partitions

    # end-to-end latency: the quantiles a dashboard shows are numbers, in order, and bounded
    quantiles = {}
    for q in (0.5, 0.95, 0.99):
        quantiles[q] = prom.scalar(
            f"histogram_quantile({q}, sum by (le) "
            f"(rate(transcript_owner_end_to_end_latency_seconds_bucket[5m])))")
    assert all(v is not None and math.isfinite(v) and v > 0 for v in quantiles.values()), quantiles
    assert quantiles[0.5] <= quantiles[0.95] <= quantiles[0.99] < 300, quantiles
    # observed once per entry written
    assert prom.scalar("sum(transcript_owner_end_to_end_latency_seconds_count)") == n_entries
    batches = prom.scalar("sum(transcript_owner_batch_records_count)")
    batched = prom.scalar("sum(transcript_owner_batch_records_sum)")
    assert batches and batches >= 1 and batched == n_input, (batches, batched)
    assert (prom.scalar("sum(transcript_owner_batch_duration_seconds_count)") or 0) >= 1

    # one worker, no fault: every transaction committed, none aborted
    tx = prom.by("result", "sum by (result) (transcript_owner_transactions_total)")
    assert tx.get("committed", 0) >= 1 and tx.get("aborted", 0) == 0, tx
    assert prom.scalar("transcript_owner_assigned_partitions") == PARTITIONS
    assert (prom.scalar("transcript_owner_rebalances_total") or 0) >= 1
    assert prom.scalar("transcript_owner_restoring") == 0
    assert prom.scalar("transcript_owner_restore_records_total") is not None
    keys = prom.by("partition", "transcript_owner_state_keys")
    assert set(keys) == {str(p) for p in range(PARTITIONS)}, keys
    assert set(prom.by("partition", "transcript_owner_state_bytes")) == set(keys)
    awaited(prom, "sum(transcript_owner_state_keys)", lambda v: v is not None and v > 0,
            "state keys estimated", procs)
    assert (prom.scalar("process_resident_memory_bytes") or 0) > 0
    assert prom.scalar("process_cpu_seconds_total") is not None
    assert prom.scalar('up{job="transcript-owner"}') == 1

    # every query of the Grafana dashboard is valid PromQL and finds series of this worker
    for title, expr in dashboard_queries():
        result = prom.query(expr)
        assert result, f"{title}: no series for {expr}"

    assert w.stop() == 0
    # a stopped worker is a target down
    awaited(prom, 'up{job="transcript-owner"}', lambda v: v == 0, "target down", [prom])
