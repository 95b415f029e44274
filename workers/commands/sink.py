"""`transcript-owner sink sqlite PATH`: materialise `transcript.entries` into SQLite, exactly once.

A gateway reads its sessions from its own SQLite store, not by scanning the compacted topic per
request. The sink consumes the entries topic read_committed (what a transcript reader sees:
never an aborted batch of the worker) and keeps table `entries` equal to the topic's latest
value per key (the database: workers/commands/sink_db.py).

Exactly once, through kill -9: each poll batch is one SQLite transaction holding the batch's
rows *and* each partition's next offset. At start every partition is sought to the offset
stored in the database, never to a consumer group's committed offset, so a crash before the
commit re-reads the batch (nothing lost) and a crash after it reads on from the batch's end
(nothing repeated). Writes are upserts keyed by (session_key, seq), so even a batch applied
twice (it cannot be) would leave the same rows.

Partitions: by default an instance assigns itself every partition of the topic (no consumer
group: the offsets live in the database), so each database is a complete copy and gateways
scale by each running its own sink and database. With `--group NAME` the instances join the
consumer group `<prefix>NAME` and split the partitions; they must then share one database file
(on one host: SQLite's locking does not hold on network file systems). The group only assigns
partitions: each assigned partition is sought to the database's offset, and the group's
committed offsets (written after each SQLite commit, for lag monitoring) are never read. Every
offset write is a compare-and-set against the offset this process last saw, so a process whose
partition moved to another (a stalled member) cannot write a batch over the new owner's: its
transaction rolls back and it re-seeks.

SIGTERM (or Ctrl-C): the batch in hand is finished and committed, then the sink exits 0.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
import time
from typing import Any

from workers.commands import sink_metrics
from workers.commands.sink_db import (
    APPLICATION_ID,
    SCHEMA_VERSION,
    Applied,
    OffsetConflict,
    SinkDB,
    SinkError,
    sink_format,
)
from workers.commands.sink_metrics import SinkGauges

log = logging.getLogger("transcript_owner.sink")
LOOK_EVERY_S = 1.0  # the gauges: positions and lag

POLL_TIMEOUT_MS = 500
MAX_BATCH = 5000  # records per poll, so per SQLite transaction
REPORT_EVERY_S = 10.0
# manual assignment: partitions added to the topic (a repartition) are picked up this often, from
# metadata at most as old (reads bound to a position in them wait for it, DESIGN 1.3)
PARTITIONS_CHECK_EVERY_S = 5.0


# --- the command -----------------------------------------------------------------------------


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("kind", choices=["sqlite"], help="the store (only sqlite)")
    parser.add_argument("path", metavar="PATH", help="the SQLite database (created if missing)")
    parser.add_argument(
        "--group", metavar="NAME",
        help="join consumer group <prefix>NAME and share the partitions with its other "
             "members, which must use the same database file; default: this instance "
             "assigns itself every partition (no group)")
    parser.add_argument(
        "--from-beginning", action="store_true",
        help="rebuild: delete every row and stored offset, then read every partition from "
             "its start")
    parser.add_argument(
        "--until-end", action="store_true",
        help="exit 0 once every partition is consumed up to its end offset at start (a "
             "one-shot catch-up; not with --group)")
    parser.add_argument(
        "--synchronous", choices=["normal", "full"], default="normal",
        help="SQLite synchronous mode (WAL either way; default normal: a power loss can roll "
             "back the last batches, rows and offsets together, and they are consumed again)")
    parser.add_argument(
        "--metrics-port", type=int, metavar="PORT",
        help="serve /metrics (Prometheus: each partition's position, its age and the lag "
             "behind the worker), /livez and /readyz on this port (0: any free one)")
    parser.add_argument("--metrics-host", default="127.0.0.1", metavar="HOST",
                        help="the address --metrics-port listens on (default 127.0.0.1)")


class _Stop:
    def __init__(self) -> None:
        self.requested = False

    def __call__(self, signum, frame) -> None:  # noqa: ANN001
        self.requested = True


def run(args: argparse.Namespace) -> int:
    from workers.settings import kafka_settings, worker_settings

    ks, ws = kafka_settings(), worker_settings()
    level = getattr(logging, ws.log_level.upper())
    logging.basicConfig(level=level,
                        format="[%(asctime)s] [%(process)d] [%(levelname)s] %(name)s: %(message)s")
    logging.getLogger("kafka").setLevel(max(level, logging.WARNING))  # its connection chatter
    topic = ks.topic(_entries())
    stop = _Stop()
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    gauges = SinkGauges()
    try:
        if args.until_end and args.group:
            raise SinkError("--until-end reads every partition: it does not go with --group")
        if args.metrics_port is not None and not 0 <= args.metrics_port <= 65535:
            raise SinkError(f"--metrics-port {args.metrics_port}: not a port (0..65535)")
        db = SinkDB(args.path, topic, synchronous=args.synchronous)  # refuses another's db
    except SinkError as exc:
        print(f"sink: {exc}", file=sys.stderr)
        return 2
    if args.metrics_port is not None:
        try:
            host, port = sink_metrics.serve(args.metrics_host, args.metrics_port,
                                            gauges).getsockname()[:2]
        except OSError as exc:
            db.close()
            print(f"sink: {exc}", file=sys.stderr)
            return 2
        log.info("metrics on http://%s:%s/metrics", host, port)
    try:
        if args.from_beginning:
            db.reset()
            log.info("--from-beginning: every row and stored offset of %s deleted", args.path)
        return Sink(ks, db, topic, group=args.group, stop=stop, until_end=args.until_end,
                    gauges=gauges).run()
    except SinkError as exc:
        print(f"sink: {exc}", file=sys.stderr)
        return 2
    finally:
        db.close()


def _entries() -> str:
    from workers.core.outputs import ENTRIES

    return ENTRIES


class Sink:
    """The consume loop: poll a batch, apply it in one transaction, repeat until stopped."""

    def __init__(self, ks, db: SinkDB, topic: str, *, group: str | None, stop: _Stop,  # noqa: ANN001
                 until_end: bool = False, gauges: SinkGauges | None = None) -> None:
        self.gauges = gauges or SinkGauges()
        self.ks, self.db, self.topic, self.stop = ks, db, topic, stop
        self.until_end: dict | None = {} if until_end else None  # TopicPartition -> end offset
        self.group = f"{ks.topic_prefix}{group}" if group else None
        self.expected: dict[int, int | None] = {}  # partition -> offset the db holds, as seen
        self.totals = Applied()
        self.conflicts = 0
        self._t0 = time.monotonic()
        self.lock = threading.Lock()  # --group: the rebalance listener runs on another thread
        self.pending: set[int] = set()
        self.rechain: dict[int, int] = {}  # partition -> until_offset (SinkDB.rechain), sought

    def run(self) -> int:
        from kafka import ConsumerRebalanceListener

        from workers.kafka_io import consumer

        options: dict[str, Any] = dict(max_poll_records=MAX_BATCH, metadata_max_age_ms=int(
            PARTITIONS_CHECK_EVERY_S * 1000))
        if self.group:
            options.update(group_id=self.group)
        self.consumer = c = consumer(self.ks, **options)
        try:
            parts = c.partitions_for_topic(self.topic)
            if not parts:
                raise SinkError(f"topic {self.topic} does not exist (run `topics apply`)")
            if self.group:
                sink = self

                class Listener(ConsumerRebalanceListener):
                    """Runs on kafka-python's I/O thread, where neither the database (bound to
                    the main thread) nor a blocking consumer call may be used: it pauses what
                    it was given, and the main loop seeks it to the database's offsets."""

                    def on_partitions_revoked(self, revoked) -> None:  # noqa: ANN001
                        with sink.lock:
                            for tp in revoked:
                                sink.expected.pop(tp.partition, None)
                                sink.pending.discard(tp.partition)

                    def on_partitions_assigned(self, assigned) -> None:  # noqa: ANN001
                        c.pause(*assigned)
                        with sink.lock:
                            sink.pending.update(tp.partition for tp in assigned)

                c.subscribe(topics=[self.topic], listener=Listener())
                log.info("consuming %s into %s as a member of group %s", self.topic,
                         self.db.path, self.group)
            else:
                self._assign(sorted(parts))
                log.info("consuming all %d partitions of %s into %s", len(parts), self.topic,
                         self.db.path)
            self._loop()
        finally:
            # kafka-python 3.0 can log a traceback from its I/O thread while closing (a socket
            # already gone); the sink's work is committed by then
            logging.getLogger("kafka").setLevel(logging.CRITICAL)
            c.close()
        self._report(final=True)
        return 0

    def _assign(self, parts: list[int]) -> None:
        from kafka import TopicPartition

        self.consumer.assign([TopicPartition(self.topic, p) for p in parts])
        self._seek(parts)

    def _caught_up(self) -> bool:
        """--until-end: every partition's position has reached its end offset at start."""
        c = self.consumer
        if not self.until_end:
            self.until_end = c.end_offsets(list(c.assignment()))
        return all(c.position(tp) >= end for tp, end in self.until_end.items())

    def _seek(self, parts: list[int]) -> None:
        """Each partition to the offset the database holds (its start when it holds none)."""
        from kafka import TopicPartition

        c = self.consumer
        tps = [TopicPartition(self.topic, p) for p in parts]
        stored, rechain = self.db.offsets(parts), self.db.rechain()
        starts, ends = c.beginning_offsets(tps), c.end_offsets(tps)
        for tp in tps:
            offset = stored.get(tp.partition)
            self.expected[tp.partition] = offset
            if offset is None:
                c.seek(tp, starts[tp])
                continue
            if tp.partition in rechain:
                self.rechain[tp.partition] = rechain[tp.partition]
            consumed = max(offset, rechain.get(tp.partition, 0))  # before a migration's rewind
            if consumed > ends[tp]:
                raise SinkError(
                    f"{self.db.path} has consumed {self.topic}[{tp.partition}] up to offset "
                    f"{consumed}, beyond its end {ends[tp]}: the topic was recreated; rebuild "
                    "with --from-beginning")
            if offset < starts[tp] and offset == 0:  # rewound by a migration: nothing lost
                offset = starts[tp]
            elif offset < starts[tp]:
                log.warning("%s[%d]: stored offset %d is before the log start %d (records "
                            "deleted); reading on from the log start", self.topic,
                            tp.partition, offset, starts[tp])
                offset = starts[tp]
            c.seek(tp, offset)

    def _loop(self) -> None:
        c = self.consumer
        last_report = last_check = last_look = time.monotonic()
        while not self.stop.requested:
            if self.until_end is not None and self._caught_up():
                log.info("caught up with the end offsets at start (--until-end)")
                break
            polled = c.poll(timeout_ms=POLL_TIMEOUT_MS, max_records=MAX_BATCH)
            if self.pending:  # --group: partitions just assigned, paused until sought
                with self.lock:
                    parts, self.pending = sorted(self.pending), set()
                polled = {tp: r for tp, r in polled.items() if tp.partition not in parts}
                self._seek(parts)
                from kafka import TopicPartition

                c.resume(*(TopicPartition(self.topic, p) for p in parts))
                log.info("assigned partitions %s, sought to the offsets in %s", parts,
                         self.db.path)
            if polled:
                batch = {tp.partition: recs for tp, recs in polled.items()}
                try:
                    done = self.db.apply(batch, self.expected)
                except OffsetConflict as exc:
                    self.conflicts += 1
                    log.warning("%s: partitions %s were written by another process; this "
                                "batch was rolled back, re-reading from the stored offsets",
                                self.db.path, exc.partitions)
                    self._seek(exc.partitions)
                    continue
                self.expected.update(done.offsets)
                self.totals.upserted += done.upserted
                self.totals.deleted += done.deleted
                self.totals.skipped += done.skipped
                self.totals.rechained += done.rechained
                self.totals.positions += done.positions
                if self.group:
                    self._commit_to_group(done.offsets)
            if self.rechain:
                self._check_rechain()
            now = time.monotonic()
            if now - last_look >= LOOK_EVERY_S or not polled:
                self._look()
                last_look = now
            if now - last_report >= REPORT_EVERY_S:
                self._report()
                last_report = now
            if not self.group and now - last_check >= PARTITIONS_CHECK_EVERY_S:
                last_check = now
                parts = c.partitions_for_topic(self.topic) or set()
                if parts - set(self.expected):
                    log.info("%s has %d partitions now; assigning them all", self.topic,
                             len(parts))
                    self._assign(sorted(parts))

    def _look(self) -> None:
        """The gauges: each partition's position (from the database) and lag (the consumer's
        high watermark, from its last fetch, less its position: no request)."""
        g, c = self.gauges, self.consumer
        g.positions = sink_metrics.ages(self.db.positions())
        lag = {}
        for tp in c.assignment():
            high = c.highwater(tp)
            try:
                position = c.position(tp)
            except Exception:  # noqa: BLE001  (revoked meanwhile: looked at again next time)
                continue
            if high is not None and position is not None:
                lag[tp.partition] = max(0, high - position)
        g.lag, g.partitions = lag, len(c.assignment())
        t = self.totals
        g.skipped = t.skipped
        g.applied = t.upserted + t.deleted + t.skipped + t.positions
        if lag and not any(lag.values()):
            g.caught_up = True

    def _check_rechain(self) -> None:
        """Partitions read again after the migration to format 3 (SinkDB.rechain) whose
        position has passed their `until_offset`: done, also when no record at or after it
        came (SinkDB.apply ends the others)."""
        from kafka import TopicPartition

        assigned = self.consumer.assignment()
        for partition, until in list(self.rechain.items()):
            tp = TopicPartition(self.topic, partition)
            with self.lock:
                expected = self.expected.get(partition)
                if partition in self.pending or tp not in assigned:
                    self.rechain.pop(partition)  # sought again (and reloaded) when assigned
                    continue
            try:
                position = self.consumer.position(tp)
            except Exception as exc:  # noqa: BLE001  (revoked meanwhile: checked again when sought)
                log.debug("position of %s unknown: %s", tp, type(exc).__name__)
                continue
            if position is not None and position >= until:
                self.db.end_rechain(partition, expected)
                self.rechain.pop(partition)

    def _commit_to_group(self, offsets: dict[int, int]) -> None:
        """For lag monitoring only: positions come from the database."""
        from kafka import TopicPartition
        from kafka.structs import OffsetAndMetadata

        try:
            self.consumer.commit_async({
                TopicPartition(self.topic, p): OffsetAndMetadata(o, "", -1)
                for p, o in offsets.items()})
        except Exception as exc:  # noqa: BLE001  (a rebalance in progress: next batch commits)
            log.debug("group commit skipped: %s", type(exc).__name__)

    def _report(self, final: bool = False) -> None:
        t = self.totals
        elapsed = max(time.monotonic() - self._t0, 1e-9)
        rechained = f", {t.rechained} rows given their chain (read again)" if t.rechained else ""
        log.info("%s%d rows written, %d deleted, %d records skipped (invalid; see table "
                 "skipped)%s, %d offset conflicts; %.0f records/s; %s",
                 "stopped: " if final else "", t.upserted, t.deleted, t.skipped, rechained,
                 self.conflicts, (t.upserted + t.deleted + t.skipped + t.positions) / elapsed,
                 self.gauges.summary())


__all__ = ["APPLICATION_ID", "SCHEMA_VERSION", "SinkDB", "SinkError", "OffsetConflict", "Sink",
           "add_arguments", "run", "sink_format"]
