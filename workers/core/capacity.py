"""The capacity model behind `transcript-owner plan`: a deployment's size from its workload.

Pure: a `Workload` (what the operator expects), the `Constants` `make bench` measured (what one
worker, one restore, one state key and one record cost), and the retentions of topics.yaml in,
`Figure`s out. Each figure carries its formula and the constants it used, so an operator can
check it by hand and see which measurement to redo when the machine changes.

Every rate here is a mean over a day, times `peak_factor` where a peak matters (workers). The
state a partition holds is its sessions' heads and the send_ids remembered within the dedupe
window. The window runs on each session's own clock (DESIGN rule 3), so a session that falls
silent keeps its last window's send_ids until it speaks again: the figures hold for sessions
that keep their pace, and are a floor for a deployment of many silent ones. The changelog
holds the same keys (compacted), and up to twice that before the log cleaner runs
(min.cleanable.dirty.ratio 0.5, Kafka's default). Byte figures are uncompressed, as the bench
measured them, per replica unless a figure says "all replicas".

What one deployment accepts bounds what the model recommends (issue 42: it recommended 16,384
partitions, and 4.4e12 for absurd inputs, where the worker and the Python connector stop at
10,000). `fit` sizes a workload within those bounds and says what does not fit, and why;
`plan` gives the figures of that size.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields

DAY_S = 86_400.0
DIRTY_FACTOR = 2.0  # a compacted topic holds up to twice its live bytes before cleaning
MIN_PARTITIONS = 8  # today's count (topics.yaml): fewer gains nothing and shrinks the way up
# The most partitions one deployment takes: TRANSCRIPT_PARTITIONS' bound (workers/settings.py;
# the Python connector's `partitions` too), and so the most workers that own one.
MAX_PARTITIONS = 10_000
# The model chooses powers of two (a deployment grows by doubling: `repartition` needs a
# multiple); the largest within MAX_PARTITIONS.
MAX_CHOSEN_PARTITIONS = 1 << (MAX_PARTITIONS.bit_length() - 1)  # 8,192
MIB = 1024 * 1024
# `repartition` at 1,000,000 sessions from 8 to 16 partitions (make faults, its default
# --parallel, bench/results/repartition.json): the deployment's live state keys and entry records
# per second of the command, the mean of two runs on a quiet machine (199,266 and 182,868);
# Constants.move_records_per_s's default, so older files load
MOVE_RECORDS_PER_S = 191_000.0
MOVE_MEASURED_AT = "2026-12-05"


@dataclass(frozen=True)
class Workload:
    """What the operator expects; every default is today's (topics.yaml, the worker's)."""

    sessions: int
    sends_per_session_day: float
    dedupe_window_days: float = 7.0  # TRANSCRIPT_DEDUPE_WINDOW_DAYS
    history_days: float = 365.0  # entries are compacted, never deleted: the disk after this long
    replication_factor: int = 3  # production's (TRANSCRIPT_REPLICATION_FACTOR)
    peak_factor: float = 4.0  # the busiest hour's rate over the day's mean
    headroom: float = 0.5  # the share of a worker's measured drain its peak may use
    restore_target_s: float = 30.0  # the longest a partition may take to restore from Kafka
    worker_restore_target_s: float = 600.0  # the longest a worker on a new machine may take
    checkpoint_keep: int = 9  # TRANSCRIPT_CHECKPOINT_KEEP
    standby_replicas: int = 1  # TRANSCRIPT_STANDBY_REPLICAS
    partitions: int | None = None  # None: the model chooses
    workers: int | None = None  # None: the model chooses


@dataclass(frozen=True)
class Retentions:
    """Days each delete-policy topic keeps (topics.yaml's retention.ms)."""

    input_days: float = 7.0
    control_days: float = 7.0
    diagnostics_days: float = 30.0
    dead_letters_days: float = 30.0


@dataclass(frozen=True)
class Constants:
    """What `make bench` measured (bench/capacity.py), per input record of the bench's mix
    (workers/synthetic.py) unless a name says otherwise."""

    worker_records_per_s: float  # (c): one exactly-once worker process draining its input
    restore_records_per_s: float  # (e): changelog records applied per second, one process
    checkpoint_keys_per_s: float  # (e): state keys copied into a checkpoint per second
    head_bytes: float  # a session head in the state store: key + value
    seen_bytes: float  # a remembered send_id: key + value
    seen_per_record: float  # send_ids remembered per input record
    state_writes_per_record: float  # changelog records per input record, none coalesced
    written_share: float  # entries per input record
    diagnostic_share: float  # diagnostics per input record
    dead_letter_share: float  # dead letters per input record
    input_record_bytes: float  # on the broker, batch overhead included, per record
    entry_record_bytes: float
    diagnostic_record_bytes: float
    dead_letter_record_bytes: float
    changelog_record_bytes: float
    # `make bench-scale`: one exactly-once worker's peak RSS at the default memory settings,
    # which bound it whatever the sessions and partitions (docs/configuration.md, "Memory");
    # a constants file without it (before issue 43) takes this default
    worker_peak_rss_mb: float = 330.0
    # `make faults` (tests/faults/test_repartition_scale.py: 1,000,000 sessions, 8 -> 16): state
    # keys and live entry records `repartition` moves a second, with its default --parallel;
    # a constants file without it (before issue 44) takes the measured figure
    move_records_per_s: float = MOVE_RECORDS_PER_S
    source: str = "unknown"  # the run they come from

    @classmethod
    def from_dict(cls, raw: object, where: str) -> Constants:
        """From JSON (a bench result's `capacity.constants`); errors name `where` and the field,
        and a value out of its range (`CONSTANT_RANGES`) says the range and why."""
        if not isinstance(raw, dict):
            raise ValueError(f"{where}: not an object of constants")
        values: dict[str, object] = {}
        for f in fields(cls):
            value = raw.get(f.name)
            if f.name == "source":
                values[f.name] = str(value) if value is not None else where
                continue
            if value is None and f.name in OPTIONAL_CONSTANTS:
                continue  # the class's default
            if isinstance(value, bool) or not isinstance(value, int | float) \
                    or not math.isfinite(value) or value < 0:
                raise ValueError(f"{where}: field {f.name!r}: a finite number >= 0 is "
                                 f"required, got {value!r}")
            if f.name.endswith("_per_s") and value == 0:
                raise ValueError(f"{where}: field {f.name!r}: must be > 0")
            low, high, why = CONSTANT_RANGES[f.name]
            if not low <= value <= high:
                raise ValueError(f"{where}: field {f.name!r}: {value!r} is out of range "
                                 f"({low:g} to {high:g}: {why})")
            values[f.name] = float(value)
        return cls(**values)  # type: ignore[arg-type]

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


_RATE = (1.0, 1e9, "a process that moves fewer than one a second, or more than a billion, "
         "is a broken measurement")
_BYTES = (1.0, 2.0 * MIB, "no record or state value on the broker is larger than "
          "max.message.bytes, 2 MiB in topics.yaml")
_SHARE = (0.0, 1.0, "each input record has one outcome")
# Each constant's range: finite figures for every workload plan accepts (a rate of 1e-300 made
# an unnamed OverflowError, a size of 1e308 printed Infinity as JSON), and values a bench run
# can give at all.
OPTIONAL_CONSTANTS = frozenset({"worker_peak_rss_mb", "move_records_per_s"})
CONSTANT_RANGES: dict[str, tuple[float, float, str]] = {
    "worker_records_per_s": _RATE,
    "restore_records_per_s": _RATE,
    "checkpoint_keys_per_s": _RATE,
    "head_bytes": _BYTES,
    "seen_bytes": _BYTES,
    "seen_per_record": (0.0, 1.0, "a record carries one send_id at most"),
    "state_writes_per_record": (0.0, 2.0, "a record writes its session's head and its "
                                "send_id at most"),
    "written_share": _SHARE,
    "diagnostic_share": (0.0, 10.0, "a decision carries a few diagnostics at most"),
    "dead_letter_share": _SHARE,
    "input_record_bytes": _BYTES,
    "entry_record_bytes": _BYTES,
    "diagnostic_record_bytes": _BYTES,
    "dead_letter_record_bytes": _BYTES,
    "changelog_record_bytes": _BYTES,
    "move_records_per_s": _RATE,
    "worker_peak_rss_mb": (1.0, 1e6, "a worker process of less than 1 MB, or more than a "
                           "terabyte, is a broken measurement"),
}


@dataclass(frozen=True)
class Fit:
    """The deployment `plan` sizes: its worker processes and partitions, each with the formula
    that chose it, within what one deployment accepts; `misfits` says what of the workload does
    not fit that (empty: it all does)."""

    workers: int
    workers_formula: str
    partitions: int
    partitions_formula: str
    misfits: tuple[str, ...] = ()


def state_keys(w: Workload, c: Constants) -> float:
    return w.sessions * (1 + c.seen_per_record * w.sends_per_session_day * w.dedupe_window_days)


def fit(w: Workload, c: Constants) -> Fit:
    """The workers and partitions for `w`, never more than one deployment accepts. Each need is
    compared as a float before it is rounded, so that no input overflows."""
    misfits: list[str] = []
    peak_s = w.sessions * w.sends_per_session_day / DAY_S * w.peak_factor
    keys = state_keys(w, c)
    by_peak = peak_s / (c.worker_records_per_s * w.headroom)
    by_worker_restore = keys / (c.restore_records_per_s * w.worker_restore_target_s)
    by_restore = keys / (c.restore_records_per_s * w.restore_target_s)
    most = w.partitions if w.partitions is not None else MAX_CHOSEN_PARTITIONS

    if w.workers is not None:
        workers, why_w = w.workers, "given (--workers)"
    else:
        need = max(by_peak, by_worker_restore)
        workers = math.ceil(min(max(2.0, need), most))
        why_w = ("max(2 (one may fail), peak input / (worker_records_per_s x headroom), state keys "
                 "/ (restore_records_per_s x worker_restore_target_s)), rounded up, at most the "
                 "partitions")
        if need > most:
            peak = by_peak >= by_worker_restore
            what = ("for its peak input" if peak else
                    f"for a worker to restore its share within {w.worker_restore_target_s:g} s")
            relax = "--headroom" if peak else "--worker-restore-target-s"
            misfits.append(
                f"it needs {_count(need)} worker processes {what}, and {most:,} partitions "
                f"keep {most:,} busy at most: the figures are for {most:,}. "
                + (f"Give it more partitions (--partitions), or relax {relax}"
                   if need <= MAX_CHOSEN_PARTITIONS else
                   _split(need / MAX_CHOSEN_PARTITIONS, relax)))

    if w.partitions is not None:
        partitions, why_p = w.partitions, "given (--partitions)"
    else:
        need = max(float(MIN_PARTITIONS), 2.0 * workers, by_restore)
        partitions = min(_power_of_two(math.ceil(min(need, MAX_PARTITIONS))),
                         MAX_CHOSEN_PARTITIONS)
        why_p = ("the power of two >= max(8, 2 x workers, state keys / (restore_records_per_s x "
                 f"restore_target_s)), at most {MAX_CHOSEN_PARTITIONS:,}")
        if by_restore > MAX_CHOSEN_PARTITIONS:
            misfits.append(
                f"a partition restores within {w.restore_target_s:g} s (--restore-target-s) "
                f"only with {_count(by_restore)} partitions or more; plan counts them in powers "
                f"of two (a deployment grows by doubling), and the largest one deployment takes "
                f"is {MAX_CHOSEN_PARTITIONS:,} (TRANSCRIPT_PARTITIONS stops at "
                f"{MAX_PARTITIONS:,}): the figures are for {partitions:,}. "
                + _split(by_restore / MAX_CHOSEN_PARTITIONS, "--restore-target-s"))
    if workers > partitions:
        misfits.append(f"{workers:,} workers for {partitions:,} partitions: "
                       f"{workers - partitions:,} would own no partition")
    return Fit(workers, why_w, partitions, why_p, tuple(misfits))


def _split(deployments: float, relax: str) -> str:
    return (f"Split the sessions over {_count(deployments)} deployments (each its own "
            f"TRANSCRIPT_TOPIC_PREFIX), or relax {relax}")


def _count(x: float) -> str:
    """A count for a sentence: whole, with separators; a huge one in powers of ten."""
    return f"{math.ceil(x):,}" if x < 1e15 else f"{x:.2g}"


@dataclass(frozen=True)
class Figure:
    group: str  # "deployment", "per partition", "per day", "broker disk"
    name: str
    value: float
    unit: str
    formula: str
    constants: tuple[str, ...] = ()  # names of the Constants fields it uses


def plan(w: Workload, c: Constants, r: Retentions = Retentions()) -> list[Figure]:
    """Every figure of a deployment for `w`, in the order `plan` prints them."""
    out: list[Figure] = []

    def add(group: str, name: str, value: float, unit: str, formula: str,
            *constants: str) -> float:
        out.append(Figure(group, name, value, unit, formula, constants))
        return value

    dep, part, day, disk = "deployment", "per partition", "per day", "broker disk"
    records_day = w.sessions * w.sends_per_session_day
    mean_s = records_day / DAY_S
    add(dep, "peak input", mean_s * w.peak_factor, "records/s",
        "sessions x sends_per_session_day / 86400 x peak_factor")
    window_records = w.sends_per_session_day * w.dedupe_window_days
    keys = state_keys(w, c)
    state_bytes = w.sessions * (c.head_bytes + c.seen_bytes * c.seen_per_record
                                * window_records)
    size = fit(w, c)
    workers, partitions = size.workers, size.partitions
    add(dep, "worker processes", workers, "", size.workers_formula, "worker_records_per_s",
        "restore_records_per_s")
    add(dep, "state keys", keys, "keys",
        "sessions x (1 + seen_per_record x sends_per_session_day x dedupe_window_days)",
        "seen_per_record")
    add(dep, "state bytes", state_bytes, "bytes",
        "sessions x (head_bytes + seen_bytes x seen_per_record x sends_per_session_day x "
        "dedupe_window_days)", "head_bytes", "seen_bytes", "seen_per_record")
    add(dep, "partitions", partitions, "", size.partitions_formula, "restore_records_per_s")
    add(dep, "partitions per worker", partitions / workers, "", "partitions / workers")
    standbys = add(dep, "standbys per partition", min(w.standby_replicas, workers - 1), "",
                   "min(standby_replicas, workers - 1): other workers keeping a partition's "
                   "state warm (TRANSCRIPT_STANDBY_REPLICAS)")
    add(dep, "state bytes per worker", state_bytes * (1 + standbys) / workers, "bytes",
        "state bytes x (1 + standbys per partition) / workers (its RocksDB: its partitions' "
        "state and its standbys', before compression)")
    add(dep, "a worker's standby fetch", records_day / DAY_S * w.peak_factor
        * c.state_writes_per_record * standbys / workers, "records/s",
        "peak input x state_writes_per_record x standbys per partition / workers (changelog "
        "records its standbys tail at the peak)", "state_writes_per_record")
    add(dep, "a worker's memory", c.worker_peak_rss_mb * MIB, "bytes",
        "worker_peak_rss_mb (bounded by the memory settings, not by sessions or partitions; "
        "the pod's request, and its limit with room for a restore's batches: x 1.5)",
        "worker_peak_rss_mb")
    restore = add(dep, "a worker's restore", keys / c.restore_records_per_s / workers, "s",
                  "state keys / restore_records_per_s / workers (a new machine: no local "
                  "state)", "restore_records_per_s")
    live_entries = records_day * c.written_share * w.history_days
    add(dep, "a growth step's pause", (keys + live_entries) / c.move_records_per_s + restore,
        "s", "(state keys + sessions x sends_per_session_day x written_share x history_days "
        "live entry records) / move_records_per_s + a worker's restore: `repartition` to "
        "twice the partitions with the workers stopped copies every live entry, and the "
        "restarted workers apply the moved state (copies and tombstones)",
        "move_records_per_s", "written_share", "restore_records_per_s")

    p_keys = add(part, "state keys", keys / partitions, "keys", "state keys / partitions")
    p_bytes = add(part, "state bytes", state_bytes / partitions, "bytes",
                  "state bytes / partitions")
    changelog_live = p_keys * c.changelog_record_bytes
    add(part, "changelog bytes", changelog_live, "bytes",
        "state keys x changelog_record_bytes (cleaned; up to twice before the cleaner runs)",
        "changelog_record_bytes")
    add(part, "restore time", p_keys / c.restore_records_per_s, "s",
        "state keys / restore_records_per_s (no local state; up to twice before the cleaner "
        "runs)", "restore_records_per_s")
    add(part, "checkpoint size", p_bytes, "bytes", "state bytes of the partition")
    add(part, "checkpoint time", p_keys / c.checkpoint_keys_per_s, "s",
        "state keys / checkpoint_keys_per_s", "checkpoint_keys_per_s")

    add(day, "input records", records_day, "records", "sessions x sends_per_session_day")
    input_day = add(day, "input bytes", records_day * c.input_record_bytes, "bytes",
                    "input records x input_record_bytes", "input_record_bytes")
    entries_day = add(day, "entry bytes",
                      records_day * c.written_share * c.entry_record_bytes, "bytes",
                      "input records x written_share x entry_record_bytes",
                      "written_share", "entry_record_bytes")
    diagnostics_day = add(day, "diagnostic bytes",
                          records_day * c.diagnostic_share * c.diagnostic_record_bytes, "bytes",
                          "input records x diagnostic_share x diagnostic_record_bytes",
                          "diagnostic_share", "diagnostic_record_bytes")
    dead_day = add(day, "dead-letter bytes",
                   records_day * c.dead_letter_share * c.dead_letter_record_bytes, "bytes",
                   "input records x dead_letter_share x dead_letter_record_bytes",
                   "dead_letter_share", "dead_letter_record_bytes")
    add(day, "changelog bytes written", records_day * c.state_writes_per_record
        * c.changelog_record_bytes, "bytes",
        "input records x state_writes_per_record x changelog_record_bytes",
        "state_writes_per_record", "changelog_record_bytes")

    rf = w.replication_factor
    topics = (
        ("delivery.confirmations", input_day * r.input_days,
         f"input bytes x {r.input_days:g} days (retention)"),
        ("transcript.entries", entries_day * w.history_days,
         f"entry bytes x {w.history_days:g} days (history: compacted, never deleted)"),
        ("transcript.diagnostics", diagnostics_day * r.diagnostics_days,
         f"diagnostic bytes x {r.diagnostics_days:g} days (retention)"),
        ("delivery.confirmations.dlq", dead_day * r.dead_letters_days,
         f"dead-letter bytes x {r.dead_letters_days:g} days (retention)"),
        ("sessions changelog", changelog_live * partitions * DIRTY_FACTOR,
         "changelog bytes x partitions x 2 (uncleaned dirt, at most)"),
        ("transcript.checkpoints", state_bytes * w.checkpoint_keep,
         f"state bytes x {w.checkpoint_keep} (checkpoint slots)"),
    )
    total = 0.0
    for name, size, formula in topics:
        total += add(disk, name, size, "bytes", formula)
    add(disk, "all topics, all replicas", total * rf, "bytes",
        f"sum of the above x replication factor {rf}")
    return out


def _power_of_two(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


__all__ = ["CONSTANT_RANGES", "MAX_CHOSEN_PARTITIONS", "MAX_PARTITIONS", "MOVE_MEASURED_AT",
           "MOVE_RECORDS_PER_S", "Constants", "Figure", "Fit", "Retentions", "Workload", "fit",
           "plan", "state_keys"]
