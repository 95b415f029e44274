"""`transcript-owner repartition --partitions N`: move a deployment from P to N partitions.

Made of Kafka's own tools, with the workers stopped (the group empty) and the connectors still
publishing; each step can be run again, so a kill -9 at any point is completed by a rerun:

1. begin   the group's committed offsets of every input and transcript.control partition are
           recorded in transcript.layout (`move/P-N`): below them P decided, from them on N
           does (workers/core/layout.py). Refused while transcript.control holds an erase not
           yet forwarded, and while the group has members.
2. grow    the changelog, transcript.entries, transcript.checkpoints and transcript.diagnostics
           get N partitions (CreatePartitions). The input keeps P, so a worker started now
           refuses: its TRANSCRIPT_PARTITIONS matches neither the input nor the changelog.
3. move    per old partition p, one transaction: the state keys of the sessions whose new
           partition is not p are copied there and tombstoned in p (the changelog is the state:
           a restore applies both); every live record of entries partition p (its last record
           per key, tombstones too) is copied, in offset order, to its session's partition
           under N, p included (p's last position record stays in p, after the entries it
           covers: DESIGN 1.3); and the marker `move/P-N/p` with p's old end offset. A rerun
           skips a partition with its marker; an aborted transaction left nothing. `--parallel`
           old partitions at a time, each in a process with a transactional producer of its
           own (workers/commands/repartition_move.py, which says why).
4. trim    the entries' old records go: DeleteRecords below each marker's offset (refused on a
           compact-only topic, so cleanup.policy is compact,delete meanwhile; retention stays
           infinite). Readers find every entry of a session, old and new, in its new partition.
5. open    the input and transcript.control get N partitions, last: connectors follow the new
           count (they re-check it while publishing), records still keyed for an old partition
           are re-keyed by the worker. `move/P-N` is marked done.

The workers stay stopped throughout, and two fences hold them so: a worker reads
transcript.layout when it starts and at every assignment and refuses (exit 2) while a move is
recorded and not done; and before each step that changes data (grow, each partition's move,
trim, open) the group must have no member and the committed offsets must be the ones recorded
at begin. A worker that joined before the move was recorded stops it there; one that committed
anything since makes the next run begin again from the new offsets, or, once the move has
grown the topics, refuse.

Then workers start with TRANSCRIPT_PARTITIONS=N, and topics.yaml declares N. The pause (the
workers' stop to their start) is this command's time plus the operator's: printed per step.
Records published under P after the workers stopped are decided under N: a session that moved
gets them after any record published to its new partition meanwhile (seqs stay contiguous).
Exit 0 moved (or already moved), 2 cannot (the reason, what to do).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from workers.commands.repartition_move import (
    PARALLEL,
    Task,
    fence,
    legacy_transactional_id,
    move_partitions,
    transactional_id,
)
from workers.core.checkpoint_format import CHECKPOINTS
from workers.core.errors import OwnerError
from workers.core.layout import (
    LAYOUT,
    Layout,
    Move,
    check_move,
    decode_layout,
    encode_move,
    move_key,
)
from workers.core.outputs import (
    CONFIRMATIONS,
    CONTROL,
    DIAGNOSTICS,
    ENTRIES,
    SESSIONS,
    changelog_topic,
)
from workers.settings import KafkaSettings, kafka_settings, worker_settings

MAX_PARALLEL = 64  # old partitions moved at once: a process each
CONFIG_APPLIED_S = 30.0  # the longest trim waits for the brokers to apply `compact,delete`


class MoveRefused(OwnerError):
    """The move cannot be made now (exit 2): what is wrong and what to do."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--partitions", type=int, required=True, metavar="N",
                        help="the new partition count: a multiple of today's")
    parser.add_argument("--wait-empty", type=float, default=60.0, metavar="SECONDS",
                        help="wait this long for the workers' group to have no member "
                             "(static members leave after their session timeout; default 60)")
    parser.add_argument("--parallel", type=_parallel, default=PARALLEL, metavar="K",
                        help="old partitions moved at once, a process each (1 to "
                             f"{MAX_PARALLEL}; default {PARALLEL}: measured best on 2 cores "
                             "beside the broker; about one more than this machine's cores)")


def _parallel(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if not 1 <= value <= MAX_PARALLEL:
        raise argparse.ArgumentTypeError(f"{value} is out of range (1 to {MAX_PARALLEL})")
    return value


def run(args: argparse.Namespace) -> int:
    ks, ws = kafka_settings(), worker_settings()
    from kafka.errors import KafkaError

    try:
        Mover(ks, ks.topic_prefix + ws.app_id,
              changelog_topic(ks.topic_prefix, ws.app_id, SESSIONS), say,
              parallel=args.parallel).run(args.partitions, args.wait_empty)
    except MoveRefused as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KafkaError as exc:
        print(f"error: {type(exc).__name__}: {exc} (nothing is lost: run the command again)",
              file=sys.stderr)
        return 2
    return 0


def say(line: str) -> None:
    print(line, flush=True)


class Mover:
    """The five steps against one cluster; `say` prints what is done."""

    def __init__(self, ks: KafkaSettings, group: str, changelog: str,
                 say: Callable[[str], None], parallel: int = PARALLEL) -> None:
        from kafka.admin import KafkaAdminClient

        self.ks, self.group, self.say, self.parallel = ks, group, say, parallel
        self.input, self.control = ks.topic(CONFIRMATIONS), ks.topic(CONTROL)
        self.entries, self.layout_topic = ks.topic(ENTRIES), ks.topic(LAYOUT)
        self.changelog = changelog
        self.inner = [changelog, self.entries, ks.topic(CHECKPOINTS), ks.topic(DIAGNOSTICS)]
        self.admin = KafkaAdminClient(**ks.kafka_python_kwargs(), request_timeout_ms=60_000,
                                      client_id="transcript-owner-repartition")
        self.times: dict[str, float] = {}

    def run(self, new: int, wait_empty: float) -> None:
        began = time.monotonic()
        try:
            counts = self._counts()
            layout = self._layout()
            move = layout.pending
            if move is not None and move.new != new:
                raise MoveRefused(f"the move {move.old} -> {move.new} partitions is not done: "
                                  f"run `repartition --partitions {move.new}` to complete it")
            old = move.old if move is not None else counts[self.input]
            if move is None and old == new and layout.moves:
                self.say(f"already moved: {self.input} has {new} partitions")
                return
            if move is None and (why := check_move(old, new)):
                raise MoveRefused(why)
            if move is None and (odd := [t for t in self.inner if counts[t] != old]):
                raise MoveRefused(f"topic {odd[0]} has {counts[odd[0]]} partitions, "
                                  f"{self.input} {old}: `topics check` shows the drift")
            if counts[self.input] < new:  # else opened already: a rerun after step 5
                self._group_empty(wait_empty)
                t = time.monotonic()
                move = self._begin(move, old, new, counts)
                self._step("begin", t)
                t = time.monotonic()
                self._still_stopped(move, wait_empty)
                self._grow(self.inner, new, counts)
                self._step("grow", t)
                t = time.monotonic()
                move = self._move_partitions(move, wait_empty)
                self._step("move", t)
            elif move is None or len(move.moved) != move.old:
                raise MoveRefused(f"{self.input} has {counts[self.input]} partitions but "
                                  f"{self.layout_topic} holds no complete move to {new}: "
                                  "the topic was grown by another tool; it cannot be moved")
            assert move is not None
            t = time.monotonic()
            self._still_stopped(move, wait_empty)
            self._trim(move)
            self._step("trim", t)
            t = time.monotonic()
            self._still_stopped(move, wait_empty)
            self._grow([self.input, self.control], new, counts)
            done = Move(move.old, move.new, move.input_offsets, move.control_offsets,
                        move.begun_at, _now())
            self._write({move_key(old, new): encode_move(done)})
            self._step("open", t)
        finally:
            self.admin.close()
        steps = ", ".join(f"{k} {v:.1f} s" for k, v in self.times.items())
        self.say(f"moved from {old} to {new} partitions in {time.monotonic() - began:.1f} s "
                 f"({steps}). Next: start the workers with TRANSCRIPT_PARTITIONS={new}; set "
                 f"`partitions: {new}` in topics.yaml; give readers (show, forget, sink) "
                 f"TRANSCRIPT_PARTITIONS={new}")

    def _step(self, name: str, since: float) -> None:
        self.times[name] = time.monotonic() - since
        self.say(f"{name}: done in {self.times[name]:.1f} s")

    # --- what is there ------------------------------------------------------------------

    def _counts(self) -> dict[str, int]:
        names = [self.input, self.control, *self.inner]
        described = {t["name"]: t for t in self.admin.describe_topics(names)}
        counts = {}
        for name in names:
            parts = (described.get(name) or {}).get("partitions") or []
            if not parts or (described.get(name) or {}).get("error_code"):
                raise MoveRefused(f"topic {name} does not exist: run `transcript-owner topics "
                                  "apply` (a move moves a deployment that runs)")
            counts[name] = len(parts)
        if counts[self.control] != counts[self.input]:
            raise MoveRefused(f"{self.control} has {counts[self.control]} partitions, "
                              f"{self.input} {counts[self.input]}: they must be equal")
        return counts

    def _layout(self) -> Layout:
        from kafka.admin import NewTopic
        from kafka.errors import TopicAlreadyExistsError

        from workers.kafka_io import read

        if self.layout_topic not in self.admin.list_topics():
            try:
                self.admin.create_topics([NewTopic(self.layout_topic, 1, self._replication(),
                                                   topic_configs={"cleanup.policy": "compact",
                                                                  "min.compaction.lag.ms": "0"})])
            except TopicAlreadyExistsError:
                pass
            return Layout()
        layout = decode_layout((r.key, r.value) for r in read(self.ks, self.layout_topic))
        if isinstance(layout, str):
            raise MoveRefused(f"{self.layout_topic}: {layout}; it is written only by "
                              "`repartition`: restore it from a backup or ask who wrote it")
        return layout

    def _replication(self) -> int:
        (topic,) = self.admin.describe_topics([self.input])
        return min(len(p["replica_nodes"]) for p in topic["partitions"])

    def _group_empty(self, wait: float) -> None:
        deadline = time.monotonic() + wait
        while True:
            members = self.admin.describe_groups([self.group])[self.group].get("members") or []
            if not members:
                return
            if time.monotonic() >= deadline:
                raise MoveRefused(
                    f"the workers' group {self.group} has {len(members)} "
                    f"member{'s' if len(members) > 1 else ''}: stop every "
                    "worker first (a static member leaves after its session timeout, or with "
                    "kafka-consumer-groups.sh --delete-members-...)")
            time.sleep(0.5)  # polling the coordinator: no event tells a group emptied

    def _still_stopped(self, move: Move, wait: float) -> None:
        """Before each step that changes data: no worker is in the group, and none committed
        anything since the move began (its offsets are the ones recorded). A worker started
        meanwhile refuses to take partitions (workers.stream.topic_check.MoveGuard: it reads
        the move from transcript.layout at its start and at every assignment), so this is the
        second fence: one that joined before the move was recorded stops the move here."""
        self._group_empty(wait)
        now = (self._committed(self.input, move.old), self._committed(self.control, move.old))
        if now != (move.input_offsets, move.control_offsets):
            raise MoveRefused(
                f"the workers' group {self.group} committed offsets since the move "
                f"{move.old} -> {move.new} began: a worker ran meanwhile. Stop every worker; "
                "what was moved so far is kept, and the move cannot go on from these offsets "
                "safely: `transcript-owner audit` shows what the worker decided")

    def _committed(self, topic: str, count: int) -> tuple[int, ...]:
        from kafka import TopicPartition

        found = self.admin.list_group_offsets(self.group).get(self.group, {})
        out = []
        for p in range(count):
            meta = found.get(TopicPartition(topic, p))
            offset = getattr(meta, "offset", meta) if meta is not None else None
            out.append(offset if isinstance(offset, int) and offset >= 0 else 0)
        return tuple(out)

    # --- 1. begin -----------------------------------------------------------------------

    def _begin(self, move: Move | None, old: int, new: int, counts: dict[str, int]) -> Move:
        inputs = self._committed(self.input, old)
        controls = self._committed(self.control, old)
        if move is not None and (move.input_offsets, move.control_offsets) == (inputs, controls):
            self.say(f"begin: the move {old} -> {new} resumes (begun {move.begun_at})")
            return move
        if move is not None and any(counts[t] != old for t in self.inner):
            raise MoveRefused(
                f"the group's committed offsets changed since the move {old} -> {new} began "
                f"and its topics grew: a worker ran meanwhile. Stop it; the move cannot be "
                "completed safely from here: restore the deployment from its backup")
        self._control_drained(controls)
        move = Move(old, new, inputs, controls, _now())
        self._write({move_key(old, new): encode_move(move)})
        self.say(f"begin: the move {old} -> {new} recorded in {self.layout_topic}")
        return move

    def _control_drained(self, committed: tuple[int, ...]) -> None:
        from kafka import TopicPartition

        from workers.kafka_io import consumer, ranges_with_records

        tps = [TopicPartition(self.control, p) for p in range(len(committed))]
        c = consumer(self.ks)
        try:
            ends = c.end_offsets(tps)
            ranges = {tp: (committed[tp.partition], ends[tp]) for tp in tps
                      if ends[tp] > committed[tp.partition]}
            held = ranges_with_records(c, ranges) if ranges else set()
        finally:
            c.close()
        if held:
            where = ", ".join(str(tp.partition) for tp in sorted(held))
            raise MoveRefused(
                f"{self.control} partitions {where} hold erases the workers have not forwarded "
                "yet: start the workers until their lag on it is 0, stop them, run again")

    # --- 2. and 5. grow -----------------------------------------------------------------

    def _grow(self, topics: list[str], new: int, counts: dict[str, int]) -> None:
        todo = {t: new for t in topics if counts[t] < new}
        if todo:
            self.admin.create_partitions(todo)
            self.say("grow: " + ", ".join(f"{t} {counts[t]} -> {new}" for t in todo))
            counts.update(todo)

    # --- 3. move ------------------------------------------------------------------------

    def _move_partitions(self, move: Move, wait_empty: float) -> Move:
        """Every old partition not yet moved, `parallel` at a time (repartition_move). First
        the transactions a dead run left open are ended (fence), then the layout is read again
        for what is done: a read_committed reader stops at the first open transaction, and a
        dead task's marker in flight would hide the markers other tasks committed after it."""
        todo = [p for p in range(move.old) if p not in move.moved]
        if not todo:
            return move
        fence(self.ks, [legacy_transactional_id(self.group),
                        *(transactional_id(self.group, p) for p in todo)])
        move = self._reread(move)
        todo = [p for p in range(move.old) if p not in move.moved]
        tasks = [Task(self.ks, self.group, self.changelog, self.entries, self.layout_topic,
                      move.old, move.new, p) for p in todo]
        ends = dict(move.entries_ends)
        ends.update(move_partitions(tasks, self.parallel,
                                    lambda: self._still_stopped(move, wait_empty), self.say))
        return Move(move.old, move.new, move.input_offsets, move.control_offsets,
                    move.begun_at, move.done_at, frozenset(ends), ends)

    def _reread(self, move: Move) -> Move:
        """`move` as transcript.layout has it now (its partitions' markers)."""
        found = next((m for m in self._layout().moves
                      if (m.old, m.new) == (move.old, move.new)), None)
        if found is None:
            raise MoveRefused(f"{self.layout_topic} lost the move {move.old} -> {move.new}: "
                              "it is written only by `repartition`; ask who changed it")
        return found

    # --- 4. trim ------------------------------------------------------------------------

    def _trim(self, move: Move) -> None:
        from kafka import TopicPartition
        from kafka.admin import ConfigResource, ConfigResourceType

        resource = ConfigResource(ConfigResourceType.TOPIC, self.entries,
                                  configs={"cleanup.policy": "compact,delete"})
        self.admin.alter_configs([resource])
        try:
            self._delete_below({TopicPartition(self.entries, p): end
                                for p, end in sorted(move.entries_ends.items())})
        finally:
            self.admin.alter_configs([ConfigResource(
                ConfigResourceType.TOPIC, self.entries, configs={"cleanup.policy": "compact"})])
        self.say(f"trim: {self.entries} partitions 0-{move.old - 1} start at their copies")

    def _delete_below(self, offsets: dict[Any, int]) -> None:
        """DeleteRecords. A broker refuses it (PolicyViolation) until it has applied the topic's
        `compact,delete`, which reaches it shortly after AlterConfigs returns (seen under load
        in tests/integration/test_repartition.py): retried for a while, as no event says when
        a broker applied a topic's config."""
        from kafka.errors import BrokerResponseError, PolicyViolationError

        deadline = time.monotonic() + CONFIG_APPLIED_S
        while True:
            try:
                self.admin.delete_records(offsets)
                return
            except BrokerResponseError as exc:
                policy = isinstance(exc, PolicyViolationError) \
                    or PolicyViolationError.__name__ in str(exc)
                if not policy or time.monotonic() >= deadline:
                    raise
            time.sleep(0.2)

    def _write(self, records: dict[bytes, bytes]) -> None:
        from workers.kafka_io import producer

        p = producer(self.ks)
        try:
            for key, value in records.items():
                p.send(self.layout_topic, key=key, value=value, partition=0).get(timeout=60)
        finally:
            p.close()


def _now() -> str:
    return datetime.now(UTC).isoformat()
