"""What the sink says of itself (docs/sink.md, "Staleness"): per partition, its position (the
input offset its rows reflect, DESIGN 1.3), that position's age, and its lag behind the worker
(entries records written that it has not applied); in its periodic log line, and with
`--metrics-port` on /metrics (Prometheus), /livez and /readyz, served by the worker's own
bounded HTTP server (workers/ops/http.py) on a thread of its own.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

log = logging.getLogger("transcript_owner.sink")
PREFIX = "transcript_sink_"


@dataclass
class SinkGauges:
    """Set by the sink's loop (its thread owns the database); read by a scrape."""

    # partition -> (input offset, seconds since the worker wrote it)
    positions: dict[int, tuple[int, float]] = field(default_factory=dict)
    lag: dict[int, int] = field(default_factory=dict)  # partition -> entries records not applied
    partitions: int = 0
    applied: int = 0  # records applied since start (rows, tombstones, positions)
    skipped: int = 0
    caught_up: bool = False  # every partition read to the end it had when last looked at

    def summary(self) -> str:
        """The log line's part: how many partitions have a position, the oldest, the lag."""
        if not self.partitions:
            return "no partitions yet"
        oldest = max(self.positions.values(), key=lambda v: v[1], default=None)
        behind = max(self.lag.items(), key=lambda kv: kv[1], default=(None, 0))
        text = f"positions in {len(self.positions)}/{self.partitions} partitions"
        if oldest is not None:
            text += f", the oldest {oldest[1]:.1f}s old"
        text += f"; lag {sum(self.lag.values())} entries records"
        if behind[1]:
            text += f" (partition {behind[0]}: {behind[1]})"
        return text


def ages(positions: Mapping[int, tuple[int, int, str]], now: datetime | None = None
         ) -> dict[int, tuple[int, float]]:
    """SinkDB.positions() as (input offset, age in seconds)."""
    now = now or datetime.now(UTC)
    out = {}
    for p, (inp, _, at) in positions.items():
        try:
            age = max(0.0, (now - datetime.fromisoformat(at)).total_seconds())
        except ValueError:
            continue
        out[p] = (inp, age)
    return out


class SinkMetrics:
    """The Prometheus text of the gauges (what HttpServer's /metrics renders)."""

    def __init__(self, gauges: SinkGauges) -> None:
        self.gauges = gauges
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(_Collector(gauges))

    def render(self) -> bytes:
        return generate_latest(self.registry)


class SinkHealth:
    """/livez: the sink's thread answers; /readyz: it has caught up once since it started."""

    def __init__(self, gauges: SinkGauges) -> None:
        self.gauges = gauges

    def liveness(self) -> tuple[bool, str]:
        return True, "ok"

    def readiness(self) -> tuple[bool, str]:
        if self.gauges.caught_up:
            return True, "ok"
        return False, "catching up with transcript.entries"


class _Collector:
    def __init__(self, gauges: SinkGauges) -> None:
        self.g = gauges

    def collect(self) -> Iterator[Metric]:
        g = self.g
        position = GaugeMetricFamily(f"{PREFIX}position", "The input offset the sink's rows "
                                     "reflect, per partition (its last position record)",
                                     labels=["partition"])
        age = GaugeMetricFamily(f"{PREFIX}position_age_seconds", "Age of that position record "
                                "(the worker's clock when written)", labels=["partition"])
        for p, (inp, seconds) in sorted(g.positions.items()):
            position.add_metric([str(p)], inp)
            age.add_metric([str(p)], seconds)
        yield position
        yield age
        lag = GaugeMetricFamily(f"{PREFIX}lag", "Records of transcript.entries written and not "
                                "yet applied, per partition", labels=["partition"])
        for p, n in sorted(g.lag.items()):
            lag.add_metric([str(p)], n)
        yield lag
        yield CounterMetricFamily(f"{PREFIX}records", "Records applied since start",
                                  value=g.applied)
        yield CounterMetricFamily(f"{PREFIX}skipped", "Records skipped since start (table "
                                  "skipped says why)", value=g.skipped)


def serve(host: str, port: int, gauges: SinkGauges) -> socket.socket:
    """Start /metrics, /livez and /readyz on host:port on a daemon thread; OSError when the port
    cannot be bound (the caller exits 2 naming it)."""
    from workers.ops.http import HttpServer, bind

    try:
        sock = bind(host, port)
    except OSError as exc:
        raise OSError(str(exc).replace("(TRANSCRIPT_HTTP_HOST, TRANSCRIPT_HTTP_PORT)",
                                       "(--metrics-host, --metrics-port)")) from None
    started = threading.Event()

    async def refresh() -> None:
        return None

    def run() -> None:
        loop = asyncio.new_event_loop()
        server = HttpServer(sock, SinkHealth(gauges), SinkMetrics(gauges), refresh)  # type: ignore[arg-type]
        loop.run_until_complete(server.start())
        started.set()
        loop.run_forever()

    threading.Thread(target=run, name="sink-metrics", daemon=True).start()
    started.wait(10)
    return sock
