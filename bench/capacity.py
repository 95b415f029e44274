"""(h) The capacity model's constants (workers/core/capacity.py), measured by `make bench`.

Three sources, each where the quantity is made:
  - the workload's mix, from the core over the bench's own input (no broker): the shares of
    entries, diagnostics and dead letters per input record, the send_ids remembered and the
    state writes (none coalesced) per record, and a head's and a send_id's bytes in the store;
  - the broker, right after (c) drained the input in large batches: bytes per record of each
    topic as stored (uncompressed, batch overhead and transaction markers included), from
    DescribeLogDirs and the partitions' offsets;
  - the worker: (c)'s records/s, and (e)'s log lines, the changelog records a restore applied
    per second and the state keys a checkpoint copied per second.
`predict` runs the model on a workload and prints it beside what the bench measured.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from pathlib import Path

from kafka import KafkaConsumer, TopicPartition
from kafka.admin import KafkaAdminClient

from bench.common import BOOTSTRAP, KS
from workers.core import MemoryState
from workers.core.capacity import Constants, Workload, plan
from workers.core.outputs import CONFIRMATIONS, DIAGNOSTICS, DLQ, ENTRIES, Source
from workers.core.owner import Owner, apply
from workers.core.state import head_key, seen_key
from workers.kafka_io import read
from workers.stream.local_state import OWN_KEYS

RESTORED = re.compile(rb"(\d+) changelog records applied in ([0-9.]+)s")
_CHECKPOINTED = re.compile(rb"checkpoints of partitions .*?: (\d+) state keys, \d+ bytes, "
                           rb"built in ([0-9.]+)s")


def mix(records: Iterable[tuple[bytes | None, bytes]]) -> dict[str, float]:
    """The core over `records` as replay runs it: outcome shares and state per input record."""
    at = datetime(2027, 1, 1, tzinfo=UTC)
    owner = Owner(None, timedelta(days=7), lambda: at)
    state = MemoryState()
    n = writes = diagnostics = 0
    for i, (key, value) in enumerate(records):
        step = owner.handle(Source(CONFIRMATIONS, 0, i, key, value), state, at)
        n += 1
        writes += (step.head is not None) + (step.seen is not None)
        if step.decided is not None:
            diagnostics += len(step.decided.diagnostics)
        apply(state, step)
    counts: Counter = owner.counts
    heads = sum(len(head_key(k)) + len(h.to_bytes()) for k, h in state.heads.items())
    seens = sum(len(seen_key(k, s)) + len(v.to_bytes()) for (k, s), v in state.seens.items())
    return {
        "records": n,
        "written_share": counts["written"] / n,
        "diagnostic_share": diagnostics / n,
        "dead_letter_share": counts["dead_letter"] / n,
        "seen_per_record": len(state.seens) / n,
        "state_writes_per_record": writes / n,
        "head_bytes": heads / max(1, len(state.heads)),
        "seen_bytes": seens / max(1, len(state.seens)),
        "sessions": len(state.heads),
    }


def log_dir_bytes(names: list[str], bootstrap: str = BOOTSTRAP) -> dict[str, int]:
    """Bytes each topic in `names` takes in the brokers' log dirs (DescribeLogDirs), all its
    partitions and replicas."""
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="bench-capacity")
    try:
        sizes = dict.fromkeys(names, 0)
        for broker in admin.describe_log_dirs():
            for log_dir in broker["log_dirs"]:
                for topic in log_dir["topics"]:
                    if topic["name"] in sizes:
                        sizes[topic["name"]] += sum(p["partition_size"]
                                                    for p in topic["partitions"])
        return sizes
    finally:
        admin.close()


def topic_bytes(prefix: str, changelog: str) -> dict[str, dict[str, float]]:
    """Per topic of the deployment under `prefix`: bytes stored, offsets (records and
    transaction markers) and bytes per offset."""
    names = {"input": prefix + CONFIRMATIONS, "entry": prefix + ENTRIES,
             "diagnostic": prefix + DIAGNOSTICS, "dead_letter": prefix + DLQ,
             "changelog": changelog}
    sizes = log_dir_bytes(list(names.values()))
    c = KafkaConsumer(bootstrap_servers=BOOTSTRAP, enable_auto_commit=False)
    try:
        out = {}
        for what, name in names.items():
            tps = [TopicPartition(name, p) for p in sorted(c.partitions_for_topic(name) or ())]
            ends, starts = c.end_offsets(tps), c.beginning_offsets(tps)
            offsets = sum(ends[tp] - starts[tp] for tp in tps)
            out[what] = {"bytes": sizes[name], "offsets": offsets,
                         "bytes_per_offset": sizes[name] / offsets if offsets else 0.0}
        return out
    finally:
        c.close()


def live_state(changelog: str) -> tuple[int, int]:
    """(keys, key + value bytes) of the session state in `changelog` as compaction leaves it:
    each key's last value, tombstones and the store's own keys left out."""
    last: dict[bytes, int] = {}
    for r in read(KS, changelog, timeout=300, check_crcs=False):
        if r.key is None or r.key.startswith(OWN_KEYS):
            continue
        if r.value is None:
            last.pop(r.key, None)
        else:
            last[r.key] = len(r.key) + len(r.value)
    return len(last), sum(last.values())


def measure_drained(prefix: str, changelog: str, partitions: int) -> dict:
    """What (c) left after draining `records` of the bench's input: each topic's bytes, and the
    state as compaction leaves it; the model's figures of the same names (`predict`)."""
    sizes = topic_bytes(prefix, changelog)
    keys, state = live_state(changelog)
    return {"sizes": sizes, "measured": {
        "deployment: state keys": keys, "deployment: state bytes": state,
        "per day: input bytes": sizes["input"]["bytes"],
        "per day: entry bytes": sizes["entry"]["bytes"],
        "per day: diagnostic bytes": sizes["diagnostic"]["bytes"],
        "per day: dead-letter bytes": sizes["dead_letter"]["bytes"],
        "per partition: changelog bytes": sizes["changelog"]["bytes"] / partitions}}


def from_log(path: Path, pattern: re.Pattern[bytes]) -> tuple[int, float]:
    """(count, seconds) summed over the lines of a worker's log that match `pattern`."""
    count, seconds = 0, 0.0
    for m in pattern.finditer(path.read_bytes()):
        count += int(m.group(1))
        seconds += float(m.group(2))
    return count, seconds


def restored(path: Path) -> tuple[int, float]:
    """(records, seconds) of the last restore in a worker's log that applied any."""
    runs = [(int(m.group(1)), float(m.group(2))) for m in RESTORED.finditer(path.read_bytes())
            if int(m.group(1))]
    if not runs:
        raise ValueError(f"{path}: no restore that applied changelog records")
    return runs[-1]


def constants(result: dict, mixed: dict[str, float], sizes: dict[str, dict[str, float]],
              restore_log: Path, checkpoint_log: Path) -> dict:
    """The Constants of this run, as JSON, from the figures measured above."""
    records, seconds = restored(restore_log)
    keys, built_s = from_log(checkpoint_log, _CHECKPOINTED)
    if not keys or not built_s:
        raise ValueError(f"{checkpoint_log}: no checkpoint built")
    entries = result["throughput"]["worker"]["events"] * mixed["written_share"]
    n = result["throughput"]["worker"]["events"]

    def per(what: str, count: float) -> float:
        return sizes[what]["bytes"] / count

    c = Constants(
        worker_records_per_s=result["throughput"]["worker"]["events_per_s"],
        restore_records_per_s=records / seconds,
        checkpoint_keys_per_s=keys / built_s,
        head_bytes=mixed["head_bytes"], seen_bytes=mixed["seen_bytes"],
        seen_per_record=mixed["seen_per_record"],
        state_writes_per_record=mixed["state_writes_per_record"],
        written_share=mixed["written_share"], diagnostic_share=mixed["diagnostic_share"],
        dead_letter_share=mixed["dead_letter_share"],
        input_record_bytes=per("input", n), entry_record_bytes=per("entry", entries),
        diagnostic_record_bytes=per("diagnostic", max(1.0, n * mixed["diagnostic_share"])),
        dead_letter_record_bytes=per("dead_letter", max(1.0, n * mixed["dead_letter_share"])),
        changelog_record_bytes=sizes["changelog"]["bytes_per_offset"],
        source=f"make bench {result['timestamp']}",
    )
    return c.to_dict()


def predict(c: Constants, sessions: int, records: int, partitions: int,
            measured: dict[str, float]) -> list[dict]:
    """The model's figures for a deployment that has run one day, `records` over `sessions`
    (all within one dedupe window: a window of one day), beside the `measured` ones of the
    same names (those the bench has). Each row holds the range the model gives: its figure,
    and for the changelog (cleaned in the model, measured before any cleaning) up to twice
    that or every state write of the day, uncoalesced, whichever is more; `held` when the
    measurement is within 25% of that range."""
    figures = {f"{f.group}: {f.name}": f.value for f in plan(Workload(
        sessions=sessions, sends_per_session_day=records / sessions, dedupe_window_days=1,
        partitions=partitions, workers=1, replication_factor=1), c)}
    rows = []
    for name, value in measured.items():
        low = high = figures[name]
        if name == "per partition: changelog bytes":
            high = max(2 * low, figures["per day: changelog bytes written"] / partitions)
        rows.append({"figure": name, "predicted": low, "up_to": high, "measured": value,
                     "ratio": low / value if value else None,
                     "held": 0.75 * low <= value <= 1.25 * high})
    return rows
