"""`plan --sessions N --sends-per-session-day X`: how large to start a deployment.

Prints the partitions and worker processes to run, each partition's state, changelog, restore
and checkpoint, the bytes a day adds to each topic, and the broker disk at topics.yaml's
retentions (workers/core/capacity.py: the model and its formulas). Each figure names its
formula and the constants it uses; the constants are the ones `make bench` measured
(`MEASURED` below, or `--constants` with a newer bench result). No Kafka needed.

It never recommends what the deployment refuses: partitions and workers stay within
TRANSCRIPT_PARTITIONS' bound (10,000; the model's powers of two: 8,192), and what does not fit
one deployment is said, beside the figures of the largest that does (`does not fit one
deployment:` in the table, `fits` and `does_not_fit` in --json); the exit status stays 0. A
constants file out of range is refused naming the file and field (exit 2), so every figure is
finite and --json is JSON (no Infinity or NaN).
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Callable
from pathlib import Path

from workers.core.capacity import (
    MAX_PARTITIONS,
    MOVE_MEASURED_AT,
    MOVE_RECORDS_PER_S,
    Constants,
    Figure,
    Retentions,
    Workload,
    fit,
    plan,
)
from workers.core.errors import OwnerError
from workers.topics import load_topics, topics_file

# `make bench` on this project's 2-core machine (bench/capacity.py; its `capacity.constants`),
# but for the drain and the memory: those come from `make bench-scale` (bench/scale.py), one
# exactly-once worker at 1,000,000 sessions on 64 partitions, what a deployment plan sizes looks
# like (the bench's 2,000 sessions on 8 partitions drain twice as fast: issue 43); and for a
# growth step's move: `make faults`' repartition of 1,000,000 sessions from 8 to 16 partitions
# (tests/faults/test_repartition_scale.py, bench/results/repartition.json)
MEASURED = Constants(
    worker_records_per_s=12_846.8,
    worker_peak_rss_mb=295.1,
    move_records_per_s=MOVE_RECORDS_PER_S,
    restore_records_per_s=267_500.0,
    checkpoint_keys_per_s=685_200.0,
    head_bytes=195.1,
    seen_bytes=120.2,
    seen_per_record=0.9389,
    state_writes_per_record=1.885,
    written_share=0.6107,
    diagnostic_share=0.04693,
    dead_letter_share=0.00485,
    input_record_bytes=662.4,
    entry_record_bytes=746.9,
    diagnostic_record_bytes=368.2,
    dead_letter_record_bytes=307.7,
    changelog_record_bytes=137.9,
    source="make bench 2026-12-04T03:03:51Z; drain and memory: make bench-scale "
           "2026-12-06T17:52Z and 18:06Z (the mean of the two); growth: make faults "
           f"{MOVE_MEASURED_AT}; 2 cores",
)


class PlanError(OwnerError):
    """A constants or topics file `plan` cannot use; the message names the file and field."""


def _bounded(kind: type, low: float, high: float, *, low_open: bool = False
             ) -> Callable[[str], float]:
    def parse(text: str) -> float:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a{'n integer' if kind is int else ' number'}:"
                                             f" {text!r}") from None
        if not math.isfinite(value) or value > high or value < low or (low_open and value == low):
            raise argparse.ArgumentTypeError(
                f"{text} is out of range ({'>' if low_open else '>='} {low:g}, <= {high:g})")
        return value
    return parse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    a = parser.add_argument
    a("--sessions", type=_bounded(int, 1, 10**10), required=True, metavar="N",
      help="sessions the deployment holds (chats with a transcript)")
    a("--sends-per-session-day", type=_bounded(float, 0, 10**6), required=True, metavar="X",
      help="delivery confirmations per session per day, on average")
    a("--dedupe-window-days", type=_bounded(float, 0, 3650, low_open=True), default=7.0,
      metavar="DAYS", help="TRANSCRIPT_DEDUPE_WINDOW_DAYS (default 7)")
    a("--history-days", type=_bounded(float, 0, 36500), default=365.0, metavar="DAYS",
      help="days of entries the disk figure holds: entries are never deleted (default 365)")
    a("--replication-factor", type=_bounded(int, 1, 16), default=3, metavar="N",
      help="of every topic (default 3, production's)")
    a("--peak-factor", type=_bounded(float, 1, 1000), default=4.0, metavar="X",
      help="the busiest hour's rate over the day's mean (default 4)")
    a("--headroom", type=_bounded(float, 0, 1, low_open=True), default=0.5, metavar="SHARE",
      help="the share of a worker's measured drain the peak may use (default 0.5)")
    a("--restore-target-s", type=_bounded(float, 0, 86400, low_open=True), default=30.0,
      metavar="S", help="the longest a partition may take to restore from Kafka (default 30)")
    a("--worker-restore-target-s", type=_bounded(float, 0, 7 * 86400, low_open=True),
      default=600.0, metavar="S", help="the longest a worker on a new machine (no local "
      "state) may take to restore its partitions (default 600)")
    a("--checkpoint-keep", type=_bounded(int, 1, 1000), default=9, metavar="N",
      help="TRANSCRIPT_CHECKPOINT_KEEP (default 9)")
    a("--standby-replicas", type=_bounded(int, 0, 16), default=1, metavar="N",
      help="TRANSCRIPT_STANDBY_REPLICAS (default 1)")
    a("--partitions", type=_bounded(int, 1, MAX_PARTITIONS), default=None, metavar="N",
      help="size for this partition count instead of choosing one (at most "
      f"{MAX_PARTITIONS:,}: TRANSCRIPT_PARTITIONS' bound)")
    a("--workers", type=_bounded(int, 1, MAX_PARTITIONS), default=None, metavar="N",
      help="size for this many worker processes instead of choosing (at most "
      f"{MAX_PARTITIONS:,}: no more than the partitions)")
    for field, what in (("input", "a delivery confirmation"), ("entry", "a transcript entry"),
                        ("diagnostic", "a diagnostic")):
        a(f"--{field}-record-bytes", type=_bounded(float, 1, 2 * 1024 * 1024), default=None,
          metavar="B", help=f"bytes of {what} on the broker (default: the bench's)")
    a("--constants", type=Path, default=None, metavar="FILE",
      help="a `make bench` result (bench/results/latest.json) or a JSON object of constants")
    a("--topics-file", type=Path, default=topics_file(),
      help="default: TRANSCRIPT_TOPICS_FILE, else %(default)s")
    a("--json", action="store_true", help="print JSON instead of a table")
    a("--brief", action="store_true", help="the table without formulas and constants")


def run(args: argparse.Namespace) -> int:
    constants = load_constants(args.constants) if args.constants else MEASURED
    sizes = {f"{k}_record_bytes": getattr(args, f"{k}_record_bytes")
             for k in ("input", "entry", "diagnostic")}
    if given := {k: v for k, v in sizes.items() if v is not None}:
        constants = Constants(**{**constants.to_dict(), **given})  # type: ignore[arg-type]
    workload = Workload(
        sessions=args.sessions, sends_per_session_day=args.sends_per_session_day,
        dedupe_window_days=args.dedupe_window_days, history_days=args.history_days,
        replication_factor=args.replication_factor, peak_factor=args.peak_factor,
        headroom=args.headroom, restore_target_s=args.restore_target_s,
        worker_restore_target_s=args.worker_restore_target_s,
        checkpoint_keep=args.checkpoint_keep, standby_replicas=args.standby_replicas,
        partitions=args.partitions, workers=args.workers)
    kept, declared = retentions(args.topics_file)
    figures = plan(workload, constants, kept)
    misfits = fit(workload, constants).misfits
    for f in figures:  # the constants' ranges keep them finite: a guard, named if not
        if not math.isfinite(f.value):
            raise PlanError(f"{f.group}: {f.name} is not a finite number ({f.value}): a "
                            "constant is out of its range")
    if args.json:
        print(json.dumps({"workload": vars(workload), "constants": constants.to_dict(),
                          "declared_partitions": declared, "fits": not misfits,
                          "does_not_fit": list(misfits),
                          "figures": [vars(f) | {"constants": list(f.constants)}
                                      for f in figures]}, indent=2, allow_nan=False))
        return 0
    print(table(figures, constants, brief=args.brief))
    if misfits:
        print("\ndoes not fit one deployment:")
        for reason in misfits:
            print(f"  - {reason}")
    partitions = next(int(f.value) for f in figures if f.name == "partitions")
    if partitions != declared:
        print(f"\n{args.topics_file} declares {declared} partitions: a new deployment of "
              f"{partitions} sets `defaults: partitions: {partitions}` there and "
              f"TRANSCRIPT_PARTITIONS={partitions} (workers and connectors) before "
              "`topics apply`; `topics apply` never changes the count of a topic that "
              "exists.")
    return 0


def load_constants(path: Path) -> Constants:
    """A bench result's `capacity.constants`, or a JSON object of the constants themselves."""
    try:
        raw = json.loads(path.read_bytes())
    except OSError as exc:
        raise PlanError(f"{path}: cannot be read: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise PlanError(f"{path}: not JSON: {exc}") from None
    if isinstance(raw, dict) and "capacity" in raw:
        capacity = raw["capacity"]
        raw = capacity.get("constants") if isinstance(capacity, dict) else None
        where = f"{path}: capacity.constants"
    else:
        where = str(path)
    try:
        return Constants.from_dict(raw, where)
    except ValueError as exc:
        raise PlanError(str(exc)) from None


_RETENTION = {"input_days": "delivery.confirmations", "control_days": "transcript.control",
              "diagnostics_days": "transcript.diagnostics",
              "dead_letters_days": "delivery.confirmations.dlq"}


def retentions(path: Path) -> tuple[Retentions, int]:
    """The delete-policy topics' retention.ms in topics.yaml, in days, and the input's
    partition count there."""
    specs = {s.name: s for s in load_topics(path)}
    days: dict[str, float] = {}
    for field, topic in _RETENTION.items():
        spec = specs.get(topic)
        if spec is None:
            raise PlanError(f"{path}: topic {topic!r} is not declared")
        raw = spec.config_map.get("retention.ms")
        try:
            ms = int(raw) if raw is not None else 7 * 86_400_000  # Kafka's default
        except ValueError:
            raise PlanError(f"{path}: topics.{topic}.configs.retention.ms: not an integer: "
                            f"{raw!r}") from None
        if ms < 0:
            raise PlanError(f"{path}: topics.{topic}.configs.retention.ms: {ms} keeps records "
                            "for ever; plan needs a finite retention for a delete-policy topic")
        days[field] = ms / 86_400_000
    return Retentions(**days), specs["delivery.confirmations"].partitions


def human(value: float, unit: str) -> str:
    if unit == "bytes":
        for size, name in ((1 << 40, "TiB"), (1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")):
            if value >= size:
                return f"{value / size:,.1f} {name}"
        return f"{value:,.0f} B"
    if unit == "s":
        return f"{value:,.2f} s"
    text = f"{value:,.0f}" if value >= 100 or value == int(value) else f"{value:,.2f}"
    return f"{text} {unit}".rstrip()


def table(figures: list[Figure], c: Constants, *, brief: bool = False) -> str:
    lines: list[str] = []
    group = None
    width = max(len(f.name) for f in figures)
    for f in figures:
        if f.group != group:
            group = f.group
            lines.append(("" if not lines else "\n") + f"{group}:")
        value = f"  {f.name:<{width}}  {human(f.value, f.unit):>16}"
        if brief:
            lines.append(value)
            continue
        used = ", ".join(f"{n} = {getattr(c, n):,.4g}" for n in f.constants)
        lines.append(f"{value}   {f.formula}" + (f"   [{used}]" if used else ""))
    lines.append(f"\nconstants: {c.source}; bytes uncompressed, per replica unless stated")
    return "\n".join(lines)
