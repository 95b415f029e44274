"""`transcript-owner loadgen`: publish realistic synthetic confirmations (workers.synthetic)."""

from __future__ import annotations

import argparse
import sys
import time

from workers.core.outputs import CONFIRMATIONS
from workers.settings import kafka_settings
from workers.synthetic import generate


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--count", type=int, default=10_000, help="records (default 10000)")
    parser.add_argument("--rate", type=float, default=0.0,
                        help="records per second; 0 = as fast as possible (default)")
    parser.add_argument("--sessions", type=int, default=2000,
                        help="distinct sessions (default 2000)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                        help="progress bar on stderr (default: when stderr is a terminal)")


class Progress:
    def __init__(self, total: int, enabled: bool) -> None:
        self.total, self.enabled, self.t0, self.last = total, enabled, time.monotonic(), 0.0

    def update(self, done: int, force: bool = False) -> None:
        now = time.monotonic()
        if not self.enabled or (not force and now - self.last < 0.2):
            return
        self.last = now
        width = 30
        filled = int(width * done / max(self.total, 1))
        rate = done / max(now - self.t0, 1e-9)
        sys.stderr.write(f"\r[{'#' * filled}{'.' * (width - filled)}] {done}/{self.total} "
                         f"{rate:,.0f}/s ")
        if done >= self.total:
            sys.stderr.write("\n")
        sys.stderr.flush()


def run(args: argparse.Namespace) -> int:
    ks = kafka_settings()  # a SettingsError is reported by the CLI (exit 2)
    from workers.kafka_io import producer

    topic = ks.topic(CONFIRMATIONS)
    # metadata every 5 s: a repartition's new count is followed soon (the default is 5 min)
    p = producer(ks, linger_ms=20, batch_size=256 * 1024, compression_type=None,
                 metadata_max_age_ms=5000)
    bar = Progress(args.count, sys.stderr.isatty() if args.progress is None else args.progress)
    t0 = time.monotonic()
    for i, (key, value) in enumerate(
        generate(args.count, sessions_n=args.sessions, seed=args.seed), 1
    ):
        p.send(topic, key=key, value=value)
        if args.rate > 0:
            ahead = t0 + i / args.rate - time.monotonic()
            if ahead > 0:
                time.sleep(ahead)  # pacing to the requested rate
        bar.update(i)
    p.flush()
    p.close()
    bar.update(args.count, force=True)
    elapsed = time.monotonic() - t0
    print(f"published {args.count} records to {topic} in {elapsed:.1f}s "
          f"({args.count / max(elapsed, 1e-9):,.0f}/s)", file=sys.stderr)
    return 0
