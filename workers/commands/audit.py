"""`transcript-owner audit`: replay the input topic through the same code as the worker and
compare with what is in `transcript.entries`, `transcript.diagnostics` and the dead-letter topic.

Per input partition, in offset order, every record goes through `Owner.handle` — the worker's
own routing and decision — with session state in a dict. What that says the worker should have
written is compared with what the topics hold:
  missing     an expected entry key is absent (never written, or tombstoned)
  unexpected  an entry key the rules never produce
  differing   same key, different content (written_at aside)
  rewritten   one key written twice with different contents
  order       a session's entries out of seq order or with a gap, in its partition
  diagnostics / dead letters that differ from the expected ones
  erasures    a session-erase (`forget`) expects a tombstone for each of the session's entries
              (a live value left is `unexpected`) and its session-erasure/1 record in
              transcript.erasures (`erasures_missing`; one the replay cannot explain is
              `erasures_unexpected`); after compaction the session goes on at the next seq.
              Past input retention, a session erased before the checkpoint is checked
              against its erasure record: seqs up to its through_seq tombstoned, later ones
              present (workers/commands/audit_start.py)
  chain       a session's hash chain (DESIGN 1.2) broken: an entry changed, removed, inserted or
              moved, named by session and seq; checked over the whole compacted topic and
              against the worker's state (each session's head in the state changelog, and the
              checkpoint the audit starts from), so it needs no input (audit_chain.py)
  malformed   a record of a worker-owned topic (entries, diagnostics, dead letters, erasures,
              checkpoints) that is not one the worker writes: not JSON, the wrong shape, a key
              of the wrong form, a checkpoint manifest of another partition. Named by topic,
              partition and offset and what is wrong, never what it holds; left out of the
              comparison, and the audit goes on (whoever may write the topic can put anything
              there: an ACL too wide, an admin tool)
  unaudited   a partition past input retention whose checkpoints are all unusable, malformed
              records among them: the other partitions are audited
Repeats (one key written more than once with identical content, or one diagnostic twice, which
a crash between the outputs' write and the state's write can cause) are counted, not failures;
`--strict` fails entry and diagnostic repeats.

Memory: per partition, a digest per entry key, the chain of each live entry (no value: about
250 bytes an entry) and the session states: bounded by one partition's entries and sessions,
not by the length of the topic.
Exit 0 clean, 1 discrepancies, 2 cannot run. Run it when the worker has caught up.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import sys
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

from workers.commands import audit_chain, audit_control, audit_positions, audit_start
from workers.commands.loadgen import Progress
from workers.core import MemoryState
from workers.core.checkpoint_format import (
    OFFSET_MAX,
    PARTITION_MAX,
    Checkpoint,
    Malformed,
    json_object,
    text_member,
    whole_member,
)
from workers.core.layout import LAYOUT, Layout, decode_layout, family, segments
from workers.core.outputs import (
    CONFIRMATIONS,
    CONTROL,
    DIAGNOSTICS,
    DLQ,
    ENTRIES,
    ERASURES,
    SESSIONS,
    Source,
    changelog_topic,
    entry_key,
)
from workers.core.owner import Owner, apply, record_clock
from workers.core.state import CUTOVER_KEY
from workers.settings import KafkaSettings, kafka_settings, worker_settings

KINDS = ("missing", "unexpected", "differing", "rewritten", "order",
         "diagnostics_missing", "diagnostics_unexpected", "dead_letters_missing",
         "dead_letters_unexpected", "erasures_missing", "erasures_unexpected", "chain",
         "position", "malformed", "unaudited")
EXAMPLES = 20  # findings listed per kind in the report
SEQ_MAX = 9_999_999_999  # an entry key's seq has 10 digits
T = TypeVar("T")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument("--strict", action="store_true",
                        help="also fail on repeated entries (same key, same content) and repeated "
                             "diagnostics")
    parser.add_argument("--since", type=datetime.fromisoformat, default=None, metavar="TIME",
                        help="compare only entries delivered at or after TIME (RFC 3339); "
                             "the replay still starts at the beginning, for session state")
    parser.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None)


@dataclass
class Report:
    partitions: int = 0
    input_records: int = 0
    expected_entries: int = 0
    actual_entries: int = 0
    repeats: int = 0
    diagnostic_repeats: int = 0
    outcomes: Counter = field(default_factory=Counter)
    counts: Counter = field(default_factory=Counter)
    examples: dict[str, list[str]] = field(default_factory=dict)
    # the session-erasure/1 record the replay expects, per session key (the latest: the
    # topic is compacted), compared with transcript.erasures
    erasures: dict[bytes, bytes] = field(default_factory=dict)
    erased_before: set[bytes] = field(default_factory=set)  # erased before a checkpoint
    control_dead: set[tuple[int, int]] = field(default_factory=set)  # of transcript.control

    def find(self, kind: str, what: str) -> None:
        self.counts[kind] += 1
        found = self.examples.setdefault(kind, [])
        if len(found) < EXAMPLES:
            found.append(what)

    def malformed(self, topic: str, partition: int, offset: int, what: str) -> None:
        self.find("malformed", f"{topic} partition {partition} offset {offset}: {what}")

    def decoded(self, topic: str, record: Any, check: Callable[[Any], T]) -> T | None:
        """What the audit reads from a record of a worker-owned topic (`check(record)`, which
        raises Malformed for one the worker does not write); None for such a record, after
        reporting it (`malformed`)."""
        try:
            return check(record)
        except Malformed as exc:
            self.malformed(topic, record.partition, record.offset, str(exc))
            return None

    def clean(self, strict: bool) -> bool:
        return not sum(self.counts.values()) and not (
            strict and (self.repeats or self.diagnostic_repeats))

    def as_json(self) -> dict:
        return {
            "partitions": self.partitions, "input_records": self.input_records,
            "expected_entries": self.expected_entries, "actual_entries": self.actual_entries,
            "repeats": self.repeats, "diagnostic_repeats": self.diagnostic_repeats,
            "outcomes": dict(sorted(self.outcomes.items())),
            "discrepancies": {k: self.counts.get(k, 0) for k in KINDS},
            "examples": self.examples,
        }


def _digest(entry: dict) -> bytes:
    body = {k: v for k, v in entry.items() if k != "written_at"}
    return hashlib.blake2b(json.dumps(body, sort_keys=True).encode(), digest_size=16).digest()


def _diag_id(d: dict) -> str:
    return json.dumps([d["session_key"], d["code"], d["level"], d["send_id"], d["at"]])


# --- the records of the worker-owned topics, as the audit reads them (Report.decoded): each
# check returns what the audit uses, its members checked, or raises Malformed saying what is
# wrong. A tombstone (no value) is read before, where one is the worker's.


def entry_of(r: Any) -> dict:
    """A transcript-entry/1: the members the audit orders and selects by, and its key that of
    its session_key and seq."""
    entry = json_object(r.value)
    if entry.get("schema") != "transcript-entry/1":
        raise Malformed("not a transcript-entry/1")
    session = text_member(entry, "session_key")
    seq = whole_member(entry, "seq", 1, SEQ_MAX)
    _time_member(entry, "delivered_at")
    if r.key != entry_key(session, seq):
        raise Malformed("a key that is not <session_key>#<seq, 10 digits> of its value")
    return entry


def diagnostic_of(r: Any) -> str:
    """A diagnostic/1, as the audit compares it (its identity), keyed by its session key."""
    d = json_object(r.value)
    if d.get("schema") != "diagnostic/1":
        raise Malformed("not a diagnostic/1")
    session = text_member(d, "session_key")
    for name in ("code", "level", "at"):
        text_member(d, name)
    text_member(d, "send_id", null=True)
    if r.key != session.encode():
        raise Malformed("a key that is not its session_key")
    return _diag_id(d)


def erasure_of(r: Any) -> dict:
    """A session-erasure/1, keyed by its session key."""
    e = json_object(r.value)
    if e.get("schema") != "session-erasure/1":
        raise Malformed("not a session-erasure/1")
    session = text_member(e, "session_key")
    _time_member(e, "erased_at")
    whole_member(e, "epoch", 0, OFFSET_MAX)
    whole_member(e, "through_seq", 0, SEQ_MAX)
    text_member(e, "reason", null=True, absent=True)
    if r.key != session.encode():
        raise Malformed("a key that is not its session_key")
    return e


_TOPIC_NAME = re.compile(rb"[A-Za-z0-9._-]{1,249}")
_DIGITS = re.compile(rb"[0-9]{1,19}")


def dead_letter_of(r: Any) -> tuple[str, int, int]:
    """A dead letter's source (topic, partition, offset), from the headers the worker gives
    every one (its key and value are the original record's: anything)."""
    headers: dict[str, list[bytes | None]] = {}
    for name, value in r.headers or ():
        headers.setdefault(name, []).append(value)

    def header(name: str) -> bytes:
        values = headers.get(name, [])
        if len(values) != 1 or values[0] is None:
            raise Malformed(f"header {name}: " + ("given twice" if len(values) > 1 else "missing"))
        return values[0]

    try:
        header("error").decode("utf-8")
    except UnicodeDecodeError:
        raise Malformed("header error: not UTF-8") from None
    topic = header("source.topic")
    if not _TOPIC_NAME.fullmatch(topic):
        raise Malformed("header source.topic: not a topic name")
    at = []
    for name, highest in (("source.partition", PARTITION_MAX), ("source.offset", OFFSET_MAX)):
        raw = header(name)
        if not _DIGITS.fullmatch(raw) or int(raw) > highest:
            raise Malformed(f"header {name}: not a whole number from 0 to {highest}")
        at.append(int(raw))
    return topic.decode(), at[0], at[1]


def _time_member(doc: dict, name: str) -> datetime:
    """Member `name`, an RFC 3339 time with its UTC offset."""
    try:
        at = datetime.fromisoformat(text_member(doc, name) or "")
    except ValueError:
        at = None
    if at is None or at.tzinfo is None:
        raise Malformed(f"{name}: not a time with a UTC offset")
    return at


@dataclass(frozen=True)
class Replay:
    """What one unit of the audit replays, in order: `inputs` and `controls` are (owner,
    partition, start, end) ranges (None: its start or end), each decided by its owner (the
    partition count of its epoch); `partitions`: whose entries and diagnostics it compares.
    A partition alone, or after a repartition the family of an old one (workers/core/layout)."""

    partitions: list[int]
    inputs: list[tuple[Owner, int, int | None, int | None]]
    controls: list[tuple[Owner, int, int | None, int | None]]


def single(owner: Owner, partition: int, checkpoint: Checkpoint | None) -> Replay:
    start = None if checkpoint is None else checkpoint.input_offset
    return Replay([partition], [(owner, partition, start, None)],
                  [(owner, partition, None, None)])


def family_replay(layout: Layout, root: int, ends: dict[int, int], control_ends: dict[int, int],
                  owner_for: Callable[[int], Owner]) -> Replay:
    """The family of old partition `root`, epoch by epoch: every range decided under the
    first count, then the second, …; within an epoch a session is in one partition."""
    parts = family(layout, root)
    inputs: list[tuple[Owner, int, int | None, int | None]] = []
    controls: list[tuple[Owner, int, int | None, int | None]] = []
    for out, control, topic_ends in ((inputs, False, ends), (controls, True, control_ends)):
        ranges = [(count, p, start, end) for p in parts
                  for count, start, end in segments(layout, p, topic_ends.get(p, 0),
                                                    layout.moves[-1].new, control)]
        out.extend((owner_for(count), p, start, end) for count, p, start, end in
                   sorted(ranges, key=lambda r: (layout.counts(0).index(r[0]), r[1])))
    return Replay(parts, inputs, controls)


def audit_partition(ks: KafkaSettings, replay: Replay, report: Report,
                    since: datetime | None, bar: Progress,
                    checkpoint: Checkpoint | None = None,
                    erasures: dict[str, list[dict]] | None = None,
                    cutovers: dict[int, int | str] | None = None,
                    heads: dict[str, Any] | None = None) -> set[tuple[int, int]]:
    """Compare one partition (or family, `replay`); return the (partition, offset) pairs of
    the input that must be dead letters (transcript.control's: `report.control_dead`).
    `erasures`: transcript.erasures, session key -> its records oldest first (for sessions a
    checkpoint holds as erased); `cutovers`: the input partitions' erase cut-overs
    (audit_control); `heads`: the state's head of each session of the partition
    (audit_chain.state_heads)."""
    from workers.kafka_io import read

    # past input retention: from a checkpoint, with its state (workers/commands/audit_start.py)
    state = MemoryState() if checkpoint is None else audit_start.state_of(checkpoint)
    older = {} if checkpoint is None else audit_start.before(state)
    anchors = dict(state.heads)  # the checkpoint's heads, before the replay moves them on
    chain = audit_chain.ChainCheck()
    positions = audit_positions.PositionCheck()
    # sessions erased before the checkpoint: their erasure records are explained by its state,
    # and give the seqs the erasure tombstoned (through_seq) and those written after it
    erased_older = audit_start.erased_before(state, erasures or {})
    report.erased_before.update(k.encode() for k in erased_older)
    expected: dict[bytes, tuple[bytes, datetime]] = {}
    diags: Counter = Counter()
    dead: set[tuple[int, int]] = set()
    erased_keys: set[bytes] = set()  # entry keys an erasure tombstoned
    erased_through: dict[str, set[int]] = {}  # session -> the through_seq of each erasure
    source_topic = ks.topic(CONFIRMATIONS)
    # erasures, as the worker decided them (workers/commands/audit_control.py): each input
    # partition's cut-over, and the tickets of transcript.control's erases, for their
    # forwarded copies
    cuts: dict[int, int | None] = {}
    for p in replay.partitions:
        cut = (cutovers or {}).get(p)
        if isinstance(cut, str):
            report.find("malformed", cut)
            cut = None
        cuts[p] = cut
    for owner, p, start, end in replay.controls:
        state.partition_cutover = cuts.get(p)
        n, control_dead, outcomes = audit_control.replay_control(ks, owner, p, state, start, end)
        report.input_records += n
        report.outcomes.update(outcomes)
        report.control_dead |= control_dead
    wall = datetime.now(UTC)
    wall_s = wall.timestamp()

    for owner, partition, start, end in replay.inputs:
        state.partition_cutover = cuts.get(partition)
        for r in read(ks, source_topic, partitions=[partition],
                      start=None if start is None else {partition: start}):
            if end is not None and r.offset >= end:
                continue
            _replay_one(report, bar, owner, state, source_topic, partition, r, wall, wall_s,
                        expected, diags, dead, erased_keys, erased_through, positions)
    if since is not None:
        expected = {k: v for k, v in expected.items() if v[1] >= since}
    report.expected_entries += len(expected)

    erased_again = set(erased_through)  # sessions erased after the checkpoint (replayed)
    for session, through in erased_older.items():  # before it: later seqs go on after it
        if through is not None:
            erased_through.setdefault(session, set()).add(through)

    seen: dict[bytes, bytes | None] = {}
    hidden: set[bytes] = set()  # live entries delivered before --since: not compared
    last_seq: dict[str, int] = {}
    entries_topic = ks.topic(ENTRIES)

    def malformed_position(partition: int, offset: int, what: str) -> None:
        report.malformed(entries_topic, partition, offset, what)

    for r in read(ks, entries_topic, partitions=replay.partitions):
        key = r.key
        if positions.read(r, malformed_position):
            continue  # a position record: checked below, never an entry
        if r.value is None:  # tombstone: the entry is gone
            seen[key] = None
            hidden.discard(key)
            chain.read(key, None, ())
            continue
        entry = report.decoded(entries_topic, r, entry_of)
        if entry is None:
            continue  # not the worker's (reported): neither present nor compared
        positions.entry(key, r.partition, r.offset)
        chain.read(key, r.value, r.headers)  # the chain, over compaction's view
        if since is not None and datetime.fromisoformat(entry["delivered_at"]) < since:
            hidden.add(key)
            continue
        report.actual_entries += 1
        digest = _digest(entry)
        if key in seen and seen[key] is not None:
            if seen[key] == digest:
                report.repeats += 1
            else:
                report.find("rewritten", key.decode())
            continue
        seen[key] = digest
        session, seq = entry["session_key"], entry["seq"]
        if key in erased_keys:
            continue  # erased later (its tombstone follows, or compaction removes it)
        prev = last_seq.get(session, 0)
        # after an erasure (tombstones through N, compacted away) a session goes on at N + 1
        if seq != prev + 1 and since is None \
                and not (prev < seq and seq - 1 in erased_through.get(session, ())):
            report.find("order", f"{session}: seq {seq} after {prev}")
        last_seq[session] = max(seq, last_seq.get(session, 0))
    for key, (digest, _) in expected.items():
        got = seen.get(key)
        if got is None:
            report.find("missing", key.decode())
        elif got != digest:
            report.find("differing", key.decode())
    for key, digest in seen.items():
        if digest is not None and key not in expected and not (
                older and (at := audit_start.entry_position(key)) is not None
                and at[1] < older.get(at[0], 1)):  # written before the checkpoint
            report.find("unexpected", key.decode())
    for what in chain.findings(heads or {}, anchors):
        report.find("chain", what)
    from workers.kafka_io import end_offsets  # after the entries: what a position may claim

    input_ends = end_offsets(ks, source_topic)
    for kind, what in positions.findings(erased_keys, {p: input_ends[p] for p in
                                                        replay.partitions if p in input_ends}):
        report.find(kind, what)
    if older:  # before the checkpoint: still there, or tombstoned by an erasure
        live = {k for k, d in seen.items() if d is not None} | hidden
        for kind, what in audit_start.older(older, erased_older, erased_keys, live,
                                            erased_again):
            report.find(kind, what.decode())

    diagnostics_topic = ks.topic(DIAGNOSTICS)
    actual_diags: Counter = Counter()
    for r in read(ks, diagnostics_topic, partitions=replay.partitions,
                  start=None if checkpoint is None or checkpoint.diagnostics_offset is None
                  else {replay.partitions[0]: checkpoint.diagnostics_offset}):
        if r.value is not None and (d := report.decoded(diagnostics_topic, r,
                                                          diagnostic_of)) is not None:
            actual_diags[d] += 1
    # a diagnostic is one decision's: one more than its decisions made is a repeat (two
    # decisions can make the same one, e.g. two records of one send_id at one time)
    report.diagnostic_repeats += sum(max(0, n - max(1, diags[d])) for d, n in actual_diags.items())
    for d in sorted(set(diags) - set(actual_diags)):
        report.find("diagnostics_missing", d)
    if checkpoint is None or checkpoint.diagnostics_offset is not None:  # else: where the
        for d in sorted(set(actual_diags) - set(diags)):  # older ones end is not known
            report.find("diagnostics_unexpected", d)
    return dead


def _replay_one(report: Report, bar: Progress, owner: Owner, state: MemoryState, topic: str,
                partition: int, r: Any, wall: datetime, wall_s: float,
                expected: dict[bytes, tuple[bytes, datetime]], diags: Counter,
                dead: set[tuple[int, int]], erased_keys: set[bytes],
                erased_through: dict[str, set[int]],
                positions: audit_positions.PositionCheck | None = None) -> None:
    """One input record through the worker's step; what it says the worker wrote, noted."""
    report.input_records += 1
    bar.update(report.input_records)
    # the worker's clock for the record: its broker timestamp, as the worker read it
    step = owner.handle(Source(topic, partition, r.offset, r.key, r.value or b"",
                               tuple(r.headers or ())), state,
                        record_clock(r.timestamp / 1000, wall, wall_s))
    report.outcomes[step.outcome] += 1
    apply(state, step)
    for out in step.sends:
        if out.topic == ENTRIES and out.value is None:  # erased: a tombstone is expected
            expected.pop(out.key, None)
            erased_keys.add(out.key)
        elif out.topic == ENTRIES:
            entry = json.loads(out.value)
            expected[out.key] = (_digest(entry), datetime.fromisoformat(entry["delivered_at"]))
            if positions is not None:
                positions.expect(out.key, partition, r.offset)
        elif out.topic == DIAGNOSTICS:
            diags[_diag_id(json.loads(out.value))] += 1
        elif out.topic == DLQ:
            dead.add((partition, r.offset))
        elif out.topic == ERASURES:
            erasure = json.loads(out.value)
            report.erasures[out.key] = out.value
            erased_through.setdefault(erasure["session_key"], set()).add(erasure["through_seq"])


def read_layout(ks: KafkaSettings) -> Layout | str:
    """The repartitions made (transcript.layout), or why the audit cannot run."""
    from workers.kafka_io import end_offsets, read

    topic = ks.topic(LAYOUT)
    if not end_offsets(ks, topic):
        return Layout()
    layout = decode_layout((r.key, r.value) for r in read(ks, topic))
    if isinstance(layout, str):
        return f"{topic}: {layout}"
    if (move := layout.pending) is not None:
        return (f"the repartition {move.old} -> {move.new} is not done: complete it "
                f"(`transcript-owner repartition --partitions {move.new}`), then audit")
    return layout


def replays(ks: KafkaSettings, layout: Layout, owner: Owner,
            checkpoints: dict[int, Checkpoint | None], report: Report
            ) -> list[tuple[Replay, Checkpoint | None]]:
    """The units of the audit: each partition with its checkpoint; after a repartition, each
    family from its first record (one starting past input retention is `unaudited`)."""
    from workers.kafka_io import end_offsets

    if not layout.moves:
        return [(single(owner, p, checkpoints[p]), checkpoints[p]) for p in sorted(checkpoints)]
    ends = end_offsets(ks, ks.topic(CONFIRMATIONS))
    control_ends = end_offsets(ks, ks.topic(CONTROL))
    owners: dict[int, Owner] = {}

    def owner_for(count: int) -> Owner:
        if count not in owners:
            owners[count] = Owner(partitions=count, dedupe_window=owner.dedupe_window,
                                  clock=owner.clock, control=owner.control)
        return owners[count]

    out: list[tuple[Replay, Checkpoint | None]] = []
    for root in range(layout.moves[0].old):
        parts = family(layout, root)
        if any(p not in checkpoints or checkpoints[p] is not None for p in parts):
            report.find("unaudited", f"{ks.topic(CONFIRMATIONS)} partitions {parts}: older "
                                     "records deleted since a repartition (a family is replayed "
                                     "from its first record): not audited")
            continue
        out.append((family_replay(layout, root, ends, control_ends, owner_for), None))
    return out


def run(args: argparse.Namespace) -> int:
    ks, ws = kafka_settings(), worker_settings()  # a SettingsError is reported by the CLI (exit 2)
    from kafka.errors import KafkaError

    from workers.kafka_io import read

    since = args.since
    if since is not None and since.tzinfo is None:
        print("error: --since needs a UTC offset", file=sys.stderr)
        return 2
    owner = Owner(partitions=ws.partitions, dedupe_window=timedelta(days=ws.dedupe_window_days),
                  clock=lambda: datetime.now(UTC), control=ks.topic(CONTROL))
    report = Report()
    bar = Progress(0, sys.stderr.isatty() if args.progress is None else args.progress)
    try:
        from workers.kafka_io import end_offsets

        ends = end_offsets(ks, ks.topic(CONFIRMATIONS))
        if not ends:
            print(f"error: topic {ks.topic(CONFIRMATIONS)} not found", file=sys.stderr)
            return 2
        try:
            checkpoints = audit_start.starts(ks, ks.topic(CONFIRMATIONS), ends, report)
        except audit_start.NoCheckpoint as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        # where each partition's replay starts (an unaudited one: at its end, nothing of it)
        first = {p: ends[p] if p not in checkpoints else 0 if checkpoints[p] is None
                 else checkpoints[p].input_offset for p in ends}
        bar.total = sum(ends[p] - first[p] for p in ends)
        dead: set[tuple[int, int]] = set()
        erasures = read_erasures(ks, report)
        history = erasure_records(erasures) if any(checkpoints.values()) else {}
        changelog = changelog_topic(ks.topic_prefix, ws.app_id, SESSIONS)
        state = audit_control.changelog_records(
            ks, changelog, lambda k: k == CUTOVER_KEY or k.startswith(audit_chain.HEAD_KEYS))
        cuts = audit_control.cutovers(changelog, state)
        layout = read_layout(ks)
        if isinstance(layout, str):
            print(f"error: {layout}", file=sys.stderr)
            return 2
        units = replays(ks, layout, owner, checkpoints, report)
        audited = {p for replay, _ in units for p in replay.partitions}
        for p in set(ends) - audited:
            first[p] = ends[p]  # not audited (reported): nor are its dead letters
        for replay, checkpoint in units:
            report.partitions += len(replay.partitions)
            mine = set(replay.partitions)  # a session moved: its head's tombstone, then copy
            heads = audit_chain.state_heads(
                (k, v) for q, _, k, v in sorted((r for r in state if r[0] in mine),
                                                key=lambda r: (r[0], r[1]))
            ) if state is not None else None
            dead |= audit_partition(ks, replay, report, since, bar, checkpoint, history,
                                    cuts, heads)
        actual_dead = set()
        actual_control_dead = set()
        control = ks.topic(CONTROL)
        dlq_topic = ks.topic(DLQ)
        for r in read(ks, dlq_topic):
            if (source := report.decoded(dlq_topic, r, dead_letter_of)) is None:
                continue
            topic, at = source[0], source[1:]
            if topic == ks.topic(CONFIRMATIONS):
                if at[1] >= first.get(at[0], 0):  # older: its input is gone (checkpoints)
                    actual_dead.add(at)
            elif topic == control and at[0] in audited:  # (of an audited partition)
                actual_control_dead.add(at)
        for p, o in sorted(dead - actual_dead):
            report.find("dead_letters_missing", f"partition {p} offset {o}")
        for p, o in sorted(actual_dead - dead):
            report.find("dead_letters_unexpected", f"partition {p} offset {o}")
        for p, o in sorted(report.control_dead - actual_control_dead):
            report.find("dead_letters_missing", f"{control} partition {p} offset {o}")
        for p, o in sorted(actual_control_dead - report.control_dead):
            report.find("dead_letters_unexpected", f"{control} partition {p} offset {o}")
        compare_erasures(ks, report, erasures)
    except KafkaError as exc:
        print(f"error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    bar.update(bar.total, force=True)
    clean = report.clean(args.strict)
    if args.json:
        print(json.dumps({"clean": clean, **report.as_json()}, indent=2))
    else:
        print(render(report, clean))
    return 0 if clean else 1


def read_erasures(ks: KafkaSettings, report: Report) -> dict[bytes, list[dict | None]] | None:
    """transcript.erasures, per key its records oldest first (what compaction left: at least
    the latest of each session; None: a tombstone); a record the worker does not write is
    reported and left out. None: the topic does not exist."""
    from workers.kafka_io import end_offsets, read

    topic = ks.topic(ERASURES)
    if not end_offsets(ks, topic):
        return None
    out: dict[bytes, list[dict | None]] = {}
    for r in read(ks, topic):
        if r.value is None:
            if r.key is not None:  # (a compacted topic holds none without a key)
                out.setdefault(r.key, []).append(None)
        elif (record := report.decoded(topic, r, erasure_of)) is not None:
            out.setdefault(r.key, []).append(record)
    return out


def erasure_records(erasures: dict[bytes, list[dict | None]] | None) -> dict[str, list[dict]]:
    """Session key -> its session-erasure/1 records, oldest first (for the sessions a
    checkpoint holds as erased)."""
    out: dict[str, list[dict]] = {}
    for records in (erasures or {}).values():
        for record in records:
            if record is not None:
                out.setdefault(record["session_key"], []).append(record)
    return out


def compare_erasures(ks: KafkaSettings, report: Report,
                     erasures: dict[bytes, list[dict | None]] | None) -> None:
    """transcript.erasures (the latest record per session) against the replay's erasures."""
    if erasures is None:
        if report.erasures:
            report.find("erasures_missing", f"topic {ks.topic(ERASURES)} not found")
        return
    actual = {key: records[-1] for key, records in erasures.items()}
    for key, value in sorted(report.erasures.items()):
        got = actual.get(key)
        if got is None or got != json.loads(value):
            report.find("erasures_missing", key.decode(errors="replace"))
    for key, value in sorted(actual.items()):
        if value is not None and key not in report.erasures and key not in report.erased_before:
            report.find("erasures_unexpected", key.decode(errors="replace"))


def render(report: Report, clean: bool) -> str:
    lines = [
        f"audit: {report.input_records} input records in {report.partitions} partitions; "
        f"{report.expected_entries} entries expected, {report.actual_entries} read "
        f"({report.repeats} repeats; {report.diagnostic_repeats} repeated diagnostics)",
        "outcomes: " + ", ".join(f"{k} {v}" for k, v in sorted(report.outcomes.items())),
    ]
    for kind in KINDS:
        n = report.counts.get(kind, 0)
        if n:
            lines.append(f"{kind}: {n}")
            lines.extend(f"  {x}" for x in report.examples.get(kind, []))
    lines.append("clean" if clean else "DISCREPANCIES FOUND")
    return "\n".join(lines)
