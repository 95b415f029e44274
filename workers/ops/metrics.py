"""The worker's metrics (docs/operating.md, "Metrics"): counted per batch on the hot path as plain
numbers, rendered in Prometheus's text format when scraped.

The hot path pays for what it cannot avoid (a comparison per record, a bucket lookup per written
entry); everything else (lag, state size, outcome totals) is read when /metrics is asked for.
Outcome totals are those of committed batches: a batch that fails exits the worker (70).
"""

from __future__ import annotations

import time
from bisect import bisect_left
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, ProcessCollector, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)

from workers.core.outcomes import HANDLING_FAILED, OUTCOME_KINDS

PREFIX = "transcript_owner_"
# an outcome kind; or a record forwarded to its own partition, or an erase of
# transcript.control forwarded into the input (workers/core/control.py)
OUTCOMES = (*OUTCOME_KINDS, "rekeyed", "forwarded")

# Dead-letter reasons by class: a bounded label set (the reason itself is free text)
REASON_CLASSES = (
    "oversize", "not_json", "unknown_schema", "invalid_field", "invalid_session_key",
    "unreadable_state", "handling_failed",
)
_REASON_PREFIXES = (
    ("oversize", "oversize"),
    ("not JSON", "not_json"),
    ("nested too deeply", "not_json"),
    ("unknown schema", "unknown_schema"),
    ("session_key", "invalid_session_key"),
    ("stored state of the session is unreadable", "unreadable_state"),
    (HANDLING_FAILED, "handling_failed"),
)

BATCH_RECORD_BUCKETS = (1, 10, 100, 500, 1_000, 2_000, 5_000, 10_000, 20_000, 50_000)
DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
LATENCY_BUCKETS = (0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0,
                   300.0)

METRIC_NAMES = (
    f"{PREFIX}records_total",
    f"{PREFIX}dead_letters_total",
    f"{PREFIX}consumer_lag",
    f"{PREFIX}batch_records",
    f"{PREFIX}batch_duration_seconds",
    f"{PREFIX}end_to_end_latency_seconds",
    f"{PREFIX}transactions_total",
    f"{PREFIX}rebalances_total",
    f"{PREFIX}assigned_partitions",
    f"{PREFIX}ready",
    f"{PREFIX}state_keys",
    f"{PREFIX}state_bytes",
    f"{PREFIX}restore_records_total",
    f"{PREFIX}restoring",
    f"{PREFIX}position_lag",
    f"{PREFIX}position_age_seconds",
    f"{PREFIX}standby_lag",
    "process_cpu_seconds_total",
    "process_resident_memory_bytes",
    "process_virtual_memory_bytes",
    "process_start_time_seconds",
    "process_open_fds",
    "process_max_fds",
)


def reason_class(reason: str | None) -> str:
    """The class of a dead letter's reason; a schema violation names a field, so it is the rest."""
    if reason:
        for start, name in _REASON_PREFIXES:
            if reason.startswith(start):
                return name
        if "session_key" in reason.split(":", 1)[0]:
            return "invalid_session_key"
    return "invalid_field"


@dataclass
class Histogram:
    """Cumulative buckets as Prometheus wants them, filled with one bisect per observation."""

    bounds: tuple[float, ...]
    counts: list[int] = field(default_factory=list)
    total: float = 0.0

    def __post_init__(self) -> None:
        self.counts = [0] * (len(self.bounds) + 1)

    def observe(self, value: float) -> None:
        self.counts[bisect_left(self.bounds, value)] += 1
        self.total += value

    def observe_many(self, values: Iterable[float]) -> None:
        counts, bounds, total = self.counts, self.bounds, 0.0
        for value in values:
            counts[bisect_left(bounds, value)] += 1
            total += value
        self.total += total

    def family(self, name: str, documentation: str) -> HistogramMetricFamily:
        buckets, running = [], 0
        for bound, n in zip((*self.bounds, float("inf")), self.counts, strict=True):
            running += n
            buckets.append(("+Inf" if bound == float("inf") else repr(float(bound)), running))
        return HistogramMetricFamily(name, documentation, buckets=buckets, sum_value=self.total)


@dataclass
class Gauges:
    """What is read at scrape time, set by the HTTP handler just before rendering."""

    lag: dict[int, int] = field(default_factory=dict)  # input partition -> records behind
    state: dict[int, tuple[int, int]] = field(default_factory=dict)  # partition -> keys, bytes
    assigned: int = 0
    ready: bool = False
    restoring: bool = False


class Metrics:
    """Counters of committed batches, and the gauges the last scrape read."""

    def __init__(self) -> None:
        self.records: Counter = Counter()
        self.dead_letters: Counter = Counter()
        self.batch_records = Histogram(BATCH_RECORD_BUCKETS)
        self.batch_duration = Histogram(DURATION_BUCKETS)
        self.latency = Histogram(LATENCY_BUCKETS)
        self.transactions: Callable[[], Mapping[str, int]] = dict
        self.transaction_version: Callable[[], int] = int  # 0: none (at-least-once)
        # per owned partition: (input offsets its last position record is behind the input's
        # last stable offset, that record's age in seconds); none at-least-once
        self.positions: Callable[[], Mapping[int, tuple[int, float]]] = dict
        # per standby partition: changelog records it has not applied (workers.stream.standby)
        self.standbys: Callable[[], Mapping[int, int]] = dict
        self.rebalances = 0
        self.restored = 0
        self.gauges = Gauges()
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(ProcessCollector(registry=None))
        self.registry.register(_Collector(self))

    def committed(self, outcomes: Mapping[str, int], size: int, began: float,
                  dead_reasons: Iterable[str | None], written_at_s: Iterable[float]) -> None:
        """A batch committed: `outcomes` are the totals so far, `began` its monotonic start,
        `written_at_s` the broker timestamps (seconds) of the records whose entries it wrote."""
        now_wall, now = time.time(), time.monotonic()
        self.records = Counter(outcomes)
        for reason in dead_reasons:
            self.dead_letters[reason_class(reason)] += 1
        self.batch_records.observe(size)
        self.batch_duration.observe(now - began)
        self.latency.observe_many(max(0.0, now_wall - ts) for ts in written_at_s)

    def render(self) -> bytes:
        return generate_latest(self.registry)


class _Collector:
    def __init__(self, metrics: Metrics) -> None:
        self.m = metrics

    def collect(self) -> Iterator[Metric]:
        m, g = self.m, self.m.gauges
        records = CounterMetricFamily(f"{PREFIX}records", "Input records by outcome, of "
                                      "committed batches", labels=["outcome"])
        for outcome in OUTCOMES:
            records.add_metric([outcome], m.records.get(outcome, 0))
        yield records
        dead = CounterMetricFamily(f"{PREFIX}dead_letters", "Records sent to the dead-letter "
                                   "topic, by reason class", labels=["reason"])
        for reason in REASON_CLASSES:
            dead.add_metric([reason], m.dead_letters.get(reason, 0))
        yield dead
        lag = GaugeMetricFamily(f"{PREFIX}consumer_lag", "Input records not yet processed, per "
                                "assigned input partition (while not ready: as last read)",
                                labels=["partition"])
        for partition, behind in sorted(g.lag.items()):
            lag.add_metric([str(partition)], behind)
        yield lag
        yield m.batch_records.family(f"{PREFIX}batch_records", "Input records per batch")
        yield m.batch_duration.family(f"{PREFIX}batch_duration_seconds",
                                      "Time from a batch's start to its commit")
        yield m.latency.family(f"{PREFIX}end_to_end_latency_seconds",
                               "From an input record's broker timestamp to its entry committed")
        txns = CounterMetricFamily(f"{PREFIX}transactions", "Kafka transactions by result "
                                   "(exactly-once)", labels=["result"])
        counts = m.transactions()
        for result in ("committed", "aborted"):
            txns.add_metric([result], counts.get(result, 0))
        yield txns
        yield GaugeMetricFamily(f"{PREFIX}transaction_version", "Kafka's transaction protocol "
                                "the worker speaks: 2 (KIP-890) or 1; 0 at-least-once",
                                value=m.transaction_version())
        yield CounterMetricFamily(f"{PREFIX}rebalances", "Partition assignments this worker "
                                  "received", value=m.rebalances)
        yield GaugeMetricFamily(f"{PREFIX}assigned_partitions", "Input partitions assigned",
                                value=g.assigned)
        yield GaugeMetricFamily(f"{PREFIX}ready", "1 when /readyz answers 200",
                                value=int(g.ready))
        keys = GaugeMetricFamily(f"{PREFIX}state_keys", "Estimated keys in the local state, "
                                 "per partition", labels=["partition"])
        size = GaugeMetricFamily(f"{PREFIX}state_bytes", "Estimated bytes of the local state "
                                 "(SST files and memtables), per partition", labels=["partition"])
        for partition, (n, nbytes) in sorted(g.state.items()):
            keys.add_metric([str(partition)], n)
            size.add_metric([str(partition)], nbytes)
        yield keys
        yield size
        yield CounterMetricFamily(f"{PREFIX}restore_records", "Changelog records applied to "
                                  "the local state at assignments", value=m.restored)
        yield GaugeMetricFamily(f"{PREFIX}restoring", "1 while assigned state is being "
                                "restored", value=int(g.restoring))
        behind = GaugeMetricFamily(
            f"{PREFIX}position_lag", "Input offsets between the partition's last stable offset "
            "(looked at once a second) and the worker's last position record: what a read "
            "bound to latest would wait for", labels=["partition"])
        age = GaugeMetricFamily(f"{PREFIX}position_age_seconds", "Age of the worker's last "
                                "position record, per owned partition", labels=["partition"])
        for partition, (n, seconds) in sorted(m.positions().items()):
            behind.add_metric([str(partition)], n)
            age.add_metric([str(partition)], seconds)
        yield behind
        yield age
        standby = GaugeMetricFamily(
            f"{PREFIX}standby_lag", "Changelog records a standby has not applied yet (its "
            "partition's last stable offset minus its position), per standby partition of this "
            "worker", labels=["partition"])
        for partition, n in sorted(m.standbys().items()):
            standby.add_metric([str(partition)], n)
        yield standby
