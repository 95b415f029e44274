"""`transcript-owner worker`: the faust app, wiring the input, the state table and the processor.

faust does what it is good at: group membership and partition assignment, the session table
on RocksDB with its changelog and recovery, lifecycle and signals. The per-record work is the
batch path of `workers.stream.processor` (see `workers.stream.ingest` for why not faust's
Stream), which sends through its own idempotent producer, a batch per partition
(`workers.stream.batch_send`).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
import threading
import time
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mode import Service

from workers.core.checkpoint_format import CHECKPOINTS
from workers.core.lifecycle import Assigned, Fail, Settled
from workers.core.outputs import (
    CONFIRMATIONS,
    CONTROL,
    DIAGNOSTICS,
    DLQ,
    ENTRIES,
    ERASURES,
    SESSIONS,
    changelog_topic,
)
from workers.core.owner import Owner
from workers.ops.health import Health
from workers.ops.metrics import Metrics
from workers.settings import (
    KafkaSettings,
    WorkerSettings,
    kafka_settings,
    worker_settings,
)
from workers.stream import local_state
from workers.stream.adapter import (
    GroupMember,
    membership,
    on_first_stop_signal,
    open_partition_stores,
    partition_store,
    prompt_table_manager,
    replace_table_rebalance,
)
from workers.stream.checkpoints import Checkpointer
from workers.stream.ingest import Inbox, input_topic, read_committed, scheduler_for
from workers.stream.processor import EXIT_FATAL, BatchClock, Processor
from workers.stream.transactions import BatchTransactions, worker_transactional_id

if TYPE_CHECKING:
    from workers.ops.http import HttpServer

log = logging.getLogger("transcript_owner.worker")
COMMITTED_OFFSETS_TIMEOUT_S = 120.0  # then the worker exits (70) and its supervisor restarts it
EXIT_STALE_STATE = 75  # faust found local state ahead of its changelog: discarded, restart me


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.epilog = "Configured by the environment: docs/configuration.md lists every variable."


def credentials(ks: KafkaSettings):
    """faust's consumer and producer: the TLS context and SASL settings of every client
    (KafkaSettings.ssl_context, kafka_python_kwargs)."""
    import faust

    context = ks.ssl_context()
    if ks.security_protocol.startswith("SASL"):
        return faust.SASLCredentials(
            username=ks.sasl_username,
            password=ks.sasl_password.get_secret_value() if ks.sasl_password else None,
            mechanism=ks.sasl_mechanism or "PLAIN",
            ssl_context=context,
        )
    return faust.SSLCredentials(context) if context else None


def committed_offsets(ks: KafkaSettings, group: str):  # noqa: ANN201
    """The group's committed offsets, asked of the cluster (once per rebalance, off the loop).
    Stable ones (KIP-447 require_stable, which a read_committed consumer asks for): while an
    offset commit of a transaction that has not ended is pending on a partition, the broker
    answers UNSTABLE_OFFSET_COMMIT and the ask is repeated, so a partition's new owner never
    starts below what its last owner's last transaction commits."""
    from kafka import KafkaConsumer, TopicPartition
    from kafka.errors import KafkaError

    client: list[KafkaConsumer] = []
    lock = threading.Lock()

    def connect() -> KafkaConsumer:
        with lock:  # a consumer that never subscribes: it asks, it does not join the group
            if not client:
                client.append(KafkaConsumer(**ks.kafka_python_kwargs(), group_id=group,
                                            client_id=f"{group}-offsets",
                                            isolation_level="read_committed",
                                            enable_auto_commit=False))
            return client[0]

    def warm_up() -> None:
        try:
            connect()
        except Exception:  # noqa: BLE001  (ask connects again, and says why it cannot)
            log.debug("the offsets client did not connect ahead of the first batch", exc_info=True)

    # connected while faust starts: a kafka-python client takes 0.2-0.5 s to bootstrap, and the
    # first batch waits for the committed offsets
    threading.Thread(target=warm_up, name="offsets-client", daemon=True).start()

    def ask(tps: list) -> dict:
        deadline, pause = time.monotonic() + COMMITTED_OFFSETS_TIMEOUT_S, 0.2
        found: dict = {}
        for tp in tps:
            while True:
                left_ms = max(1000, int((deadline - time.monotonic()) * 1000))
                try:
                    found[tp] = connect().committed(TopicPartition(tp.topic, tp.partition),
                                                    timeout_ms=left_ms)
                    break
                except KafkaError as exc:  # the coordinator moved or loads; a transaction ends
                    if not getattr(exc, "retriable", False) or time.monotonic() > deadline:
                        raise
                    log.warning("committed offsets not readable yet (%s); retrying",
                                type(exc).__name__)
                    time.sleep(pause)
                    pause = min(2.0, pause * 2)
        return found

    async def committed(tps: list) -> dict:
        return await asyncio.get_running_loop().run_in_executor(None, ask, tps)

    return committed


def producer_factory(ks: KafkaSettings, app_id: str, transaction_timeout_s: float = 60.0):  # noqa: ANN201
    """The processor's producer: idempotent, acks from all in-sync replicas, large batches;
    `new_producer(transactional_id)` for the exactly-once worker's (one per worker)."""

    def new_producer(transactional_id: str | None = None):  # noqa: ANN202  (on the running loop)
        from aiokafka import AIOKafkaProducer

        # the connection (bootstrap, TLS context, SASL) exactly as every kafka-python client's
        return AIOKafkaProducer(
            **ks.kafka_python_kwargs(), client_id=f"{app_id}-outputs",
            acks="all", enable_idempotence=True, max_batch_size=1024 * 1024,
            max_request_size=4 * 1024 * 1024, linger_ms=0,
            transactional_id=transactional_id,
            transaction_timeout_ms=int(transaction_timeout_s * 1000),
        )

    return new_producer


class _WithApp(Service):
    """A server started and stopped with the faust app (mode's Service: a dependency of it)."""

    def __init__(self, server: HttpServer, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.server = server

    async def on_start(self) -> None:
        await self.server.start()

    async def on_stop(self) -> None:
        await self.server.stop()


def build_app(ks: KafkaSettings, ws: WorkerSettings, topic_partitions: dict[str, int],
              http_socket=None, metrics: Metrics | None = None):  # noqa: ANN001
    """`http_socket`: a bound socket to serve /livez /readyz /metrics on."""
    import faust

    PromptTableManager = prompt_table_manager()
    inbox = Inbox(ks.topic(CONFIRMATIONS), maxsize=2 * ws.max_batch, control=ks.topic(CONTROL))
    app = faust.App(
        ks.topic_prefix + ws.app_id,
        broker=";".join(f"kafka://{h.strip()}" for h in ks.bootstrap.split(",")),
        broker_credentials=credentials(ks),
        store="rocksdb://",
        # per deployment, so that two never share a table (workers.stream.local_state)
        datadir=local_state.deployment_dir(ws.state_dir, ks.topic_prefix, ws.app_id),
        topic_partitions=ws.partitions,
        topic_replication_factor=ks.replication_factor or 1,
        # every topic is declared in topics.yaml and checked before faust starts (check_topics):
        # faust creates none, so the worker's principal needs no Create ACL
        topic_allow_declare=False,
        consumer_auto_offset_reset="earliest",
        # no standby replicas: a standby applies changelog records behind faust's recovery,
        # which the exactly-once top-up (on_assigned) would race with; a partition that moves
        # here is read from its last local offset to the changelog's end instead
        table_standby_replicas=0,
        broker_session_timeout=ws.session_timeout_s,
        # static membership: a restart within the session timeout moves no partition
        consumer_group_instance_id=ws.instance_id,
        broker_heartbeat_interval=max(1.0, ws.session_timeout_s / 4),
        web_enabled=False,  # the worker's own endpoints: workers.ops.http
        producer_acks=-1,
        broker_commit_interval=0.5,  # acked offsets are committed within half a second
        producer_max_request_size=4 * 1024 * 1024,
        consumer_max_fetch_size=1024 * 1024,
        # a fetch hands over at most a batch: with the inbox's bound of 2 batches, the worker
        # holds at most 3 batches of input records (plus one fetch per partition in aiokafka)
        broker_max_poll_records=ws.max_batch,
        ConsumerScheduler=scheduler_for(inbox),
        TableManager=PromptTableManager,
    )
    input_topic(app, inbox)
    exactly_once = ws.processing_guarantee == "exactly_once"
    read_committed(app, offsets_in_transactions=exactly_once)

    sessions = app.Table("sessions", default=None, partitions=ws.partitions,
                         key_type=bytes, value_type=bytes)
    # faust derives a table's codecs from its types (json for bytes); SessionState has its own
    # byte form, so store it as is. Read by the store and changelog when first used.
    sessions.key_serializer = sessions.value_serializer = "raw"
    clock = BatchClock()
    owner = Owner(
        partitions=ws.partitions, dedupe_window=timedelta(days=ws.dedupe_window_days), clock=clock,
        control=ks.topic(CONTROL),
    )
    new_producer = producer_factory(ks, app.conf.id, ws.transaction_timeout_s)
    metrics = metrics or Metrics()
    health = Health(ws.liveness_timeout_s, settles=exactly_once)
    health.attach(app)

    @app.on_rebalance_complete.connect
    async def check_starts(sender, **_) -> None:  # noqa: ANN001, ARG001
        inbox.nudge()
    transactions = checkpoints = member = None
    if exactly_once:
        transactions = BatchTransactions(new_producer, worker_transactional_id(
            app.conf.id, ws.instance_id, app.conf.datadir))
        metrics.transactions = lambda: transactions.results

        def member(generation: int) -> GroupMember:
            return GroupMember(app.conf.id, generation, membership(app).member_id,
                               ws.instance_id)

        checkpoints = Checkpointer(ks.topic(CHECKPOINTS), ws.checkpoint_interval_s,
                                   ws.checkpoint_keep, ws.checkpoint_keys_per_batch)
        on_assigned(app, ks, transactions, inbox.topic, inbox.topics,
                    changelog_topic(ks.topic_prefix, ws.app_id, SESSIONS),
                    ks.topic(DIAGNOSTICS), sessions, metrics, health, checkpoints,
                    settle_timeout_s=ws.transaction_timeout_s + 30)
    processor = Processor(
        app, inbox, sessions, owner,
        {name: ks.topic(name) for name in (CONFIRMATIONS, ENTRIES, DIAGNOSTICS, DLQ, ERASURES)},
        topic_partitions, committed_offsets(ks, app.conf.id), new_producer,
        clock, max_batch=ws.max_batch, linger_s=ws.linger_ms / 1000,
        transactions=transactions, member=member, batch_stop_s=ws.shutdown_timeout_s / 2,
        metrics=metrics, health=health,
        checkpoints=checkpoints,
    )
    app.task(processor.run)
    if http_socket is not None:
        from workers.ops.http import HttpServer

        app.add_dependency(_WithApp(HttpServer(
            http_socket, health, metrics, gauges_reader(app, inbox, sessions, health, metrics)),
            loop=app.loop))

    @app.timer(interval=10.0)
    async def report() -> None:
        if owner.counts:
            log.info("outcomes so far: %s; inbox high-water %d",
                     dict(sorted(owner.counts.items())), inbox.high_water)

    return app


def gauges_reader(app, inbox: Inbox, table, health: Health, metrics: Metrics):  # noqa: ANN001, ANN201
    """What /metrics reads at each scrape. Lag per input partition: the offsets the consumer
    has not fetched (up to the high watermark it last saw), plus the fetched records no batch
    has taken yet; a transaction marker is passed by the fetch, so it counts only until then."""

    async def refresh() -> None:
        g = metrics.gauges
        metrics.rebalances = health.assignments
        g.ready = health.readiness()[0]
        g.restoring = health.restoring
        if app.should_stop or health.phase != "ready":
            return  # lag and state keep their last values: the consumer is being reassigned
        consumer = app.consumer
        tps = [tp for tp in consumer.assignment() if tp.topic == inbox.topic]
        g.assigned = len(tps)
        held = inbox.pending()
        lag = {}
        for tp in tps:
            high, position = consumer.highwater(tp), await consumer.position(tp)
            if high is not None and position is not None:
                lag[tp.partition] = max(0, high - position) + held.get(tp.partition, 0)
        g.lag = lag
        dbs = open_partition_stores(table)  # only stores faust has open: never open one here
        state = {}
        for tp in tps:
            db = dbs.get(tp.partition)
            if db is not None:
                state[tp.partition] = (
                    db.property_int_value("rocksdb.estimate-num-keys") or 0,
                    (db.property_int_value("rocksdb.total-sst-files-size") or 0)
                    + (db.property_int_value("rocksdb.cur-size-all-mem-tables") or 0))
        g.state = state

    return refresh


def on_assigned(app, ks: KafkaSettings, transactions: BatchTransactions, input_name: str,  # noqa: ANN001
                read: frozenset[str], changelog: str, diagnostics: str, table,  # noqa: ANN001
                metrics: Metrics, health: Health, checkpoints: Checkpointer | None = None, *,
                settle_timeout_s: float = 90.0) -> None:
    """Exactly-once, at each assignment and before faust's table recovery: wait until the
    partitions' last owners' transactions have ended (their offset commits are stable, and no
    transaction is open on their changelog and diagnostics partitions), then bring their local
    state up to the changelog's end, which is final then: a last owner that lost the partitions
    can no longer commit (its offsets carry an older generation). Only then is the committed
    offset read (Processor._starts) and input processed. A failure here exits (70): the next
    start does the same from the beginning."""
    stable = committed_offsets(ks, app.conf.id)
    current: list = [None, None]  # the takeover in progress: its task, its superseded flag

    async def on_rebalance(assigned, revoked, newly_assigned, generation_id=0):  # noqa: ANN001, ANN202
        """faust's hook, run inside aiokafka's assignment callback, where this member sends no
        heartbeat: a takeover that waited there for a frozen last owner's transaction (up to
        the transaction timeout) outlived the session timeout and lost the assignment. So the
        takeover runs beside it; the partitions stay paused and flow control off until it
        hands them to faust's recovery."""
        if checkpoints is not None:  # its snapshot would hold a store faust closes and reopens
            checkpoints.abandon()
        task, superseded = current
        if task is not None and not task.done():  # a newer assignment: the last one ends first
            superseded.set()
            await asyncio.wait([task])
        if app.should_stop:  # an assignment that arrives as the worker stops: faust's stores
            return           # are closing, and the next start takes the partitions over
        superseded = threading.Event()
        current[:] = [asyncio.ensure_future(take_over(
            assigned, revoked, newly_assigned, generation_id, superseded)), superseded]

    async def take_over(assigned, revoked, newly_assigned, generation_id,  # noqa: ANN001, ANN202
                        superseded: threading.Event) -> None:
        def over() -> bool:
            return superseded.is_set() or app.should_stop

        try:
            mine = sorted({tp.partition for tp in assigned if tp.topic == input_name})
            health.send(Assigned(generation_id))
            began = time.monotonic()
            # this worker's own last incarnation is fenced once its producer holds its id
            await transactions.start()
            await stable([tp for tp in assigned if tp.topic in read])
            loop = asyncio.get_running_loop()
            done = await loop.run_in_executor(None, local_state.settle, ks,
                                              [(topic, p) for topic in (changelog, diagnostics)
                                               for p in mine], settle_timeout_s, 0.05, over)
            if not done or over():
                return
            settled = time.monotonic()
            health.send(Settled())
            dbs = {p: partition_store(table, p) for p in mine}
            applied = await loop.run_in_executor(None, local_state.top_up, ks, changelog, dbs)
            # faust's stores are the only holders again: a stop meanwhile clears them, and a
            # handle kept here would hold the RocksDB lock against their reopening
            del dbs
            metrics.restored += applied
            log.info("assigned input partitions %s: last owners' transactions ended in %.2fs, "
                     "%d changelog records applied in %.2fs", mine, settled - began, applied,
                     time.monotonic() - settled)
        except Exception:
            if over():
                log.info("the assigned partitions were not taken over: %s",
                         "stopping" if app.should_stop else "a newer assignment came")
                return
            health.send(Fail())
            log.exception("fatal: the assigned partitions could not be taken over; exiting")
            logging.shutdown()
            os._exit(EXIT_FATAL)
        if not over():  # a stop or a newer assignment came while the top-up ran
            await recover(assigned, revoked, newly_assigned, generation_id)

    recover = replace_table_rebalance(app, on_rebalance)  # faust's: the tables' recovery


def stop_within(worker, timeout_s: float) -> None:  # noqa: ANN001  (a faust Worker)
    """A signalled stop ends within `timeout_s`: the batch in flight has half of it
    (Processor), and should faust's own shutdown hang past it, the process exits 70 anyway."""

    def give_up() -> None:
        log.error("did not stop within %.0fs of the signal (TRANSCRIPT_SHUTDOWN_TIMEOUT_S); "
                  "exiting %d", timeout_s, EXIT_FATAL)
        logging.shutdown()
        os._exit(EXIT_FATAL)

    def watch() -> None:
        watchdog = threading.Timer(timeout_s, give_up)
        watchdog.daemon = True
        watchdog.start()

    on_first_stop_signal(worker, watch)


def check_topics(ks: KafkaSettings, ws: WorkerSettings) -> dict[str, int] | str:
    """Each topic's partition count, or why the worker must refuse to start (co-partitioning
    depends on the count; the session table's changelog is partitioned like the input)."""
    from kafka import KafkaConsumer
    from kafka.errors import KafkaError

    try:
        consumer = KafkaConsumer(**ks.kafka_python_kwargs(), request_timeout_ms=30000,
                                 enable_auto_commit=False)
    except KafkaError as exc:
        return f"cannot reach Kafka at {ks.bootstrap}: {exc}"
    changelog = changelog_topic(ks.topic_prefix, ws.app_id, SESSIONS)
    counts = {}
    try:
        for name in (*(ks.topic(n) for n in (CONFIRMATIONS, CONTROL, ENTRIES, DIAGNOSTICS, DLQ,
                                              ERASURES)),
                     changelog):
            parts = consumer.partitions_for_topic(name)
            if not parts:
                if ks.sasl_username:  # with ACLs, a topic one may not Describe looks absent
                    return (f"topic {name} does not exist, or KAFKA_SASL_USERNAME="
                            f"{ks.sasl_username!r} may not describe it: run `transcript-owner "
                            "topics apply` as an admin (topics.yaml: topics and acls)")
                return f"topic {name} does not exist: run `transcript-owner topics apply`"
            if name in (ks.topic(CONFIRMATIONS), ks.topic(CONTROL), ks.topic(ENTRIES), changelog) \
                    and len(parts) != ws.partitions:
                return (f"topic {name} has {len(parts)} partitions, "
                        f"TRANSCRIPT_PARTITIONS is {ws.partitions}")
            counts[name] = len(parts)
    finally:
        consumer.close()
    return counts


def run(args: argparse.Namespace) -> int:
    ks, ws = kafka_settings(), worker_settings()  # a SettingsError is reported by the CLI (exit 2)
    from workers.kafka_auth import check_access

    check_access(ks)  # credentials or certificate refused: a SettingsError too, named
    from mode.utils.logging import setup_logging

    setup_logging(loglevel=ws.log_level)  # as faust's Worker will: the checks below log alike
    kafka_log = logging.getLogger("kafka")  # the checks' clients: connection chatter at info
    kafka_log.setLevel(max(kafka_log.getEffectiveLevel(), logging.WARNING))
    http_socket = None
    if ws.http_port is not None:
        from workers.ops.http import bind

        try:
            http_socket = bind(ws.http_host, ws.http_port)
        except OSError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
    try:
        counts = check_topics(ks, ws)
        if isinstance(counts, str):
            print(f"error: {counts}", file=sys.stderr)
            return 2
        from faust import Worker
        from faust.exceptions import ConsistencyError

        metrics = Metrics()
        app = build_app(ks, ws, counts, http_socket, metrics)
        tabledir = Path(app.conf.tabledir)
        tabledir.mkdir(parents=True, exist_ok=True)
        local_state.warn_legacy_layout(ws.state_dir, Path(app.conf.datadir))
        changelog = changelog_topic(ks.topic_prefix, ws.app_id, SESSIONS)
        observed = local_state.observe_changelog(ks, changelog)
        local_state.prepare(tabledir, SESSIONS, observed)
        if os.environ.get("TRANSCRIPT_FAST_RESTORE", "1").strip().lower() not in (
                "0", "false", "no", "off"):
            metrics.restored += local_state.fast_restore(  # never raises
                ks, tabledir, SESSIONS, observed) or 0
    except (local_state.LocalStateError, OSError) as exc:
        print(f"error: local state: {exc}", file=sys.stderr)
        return 2
    finally:
        kafka_log.setLevel(logging.NOTSET)
    log.info("starting %s on %s (prefix %r), state in %s", app.conf.id, ks.bootstrap,
             ks.topic_prefix, app.conf.datadir)
    worker = Worker(app, loglevel=ws.log_level, quiet=True, redirect_stdouts=False)
    stop_within(worker, ws.shutdown_timeout_s)
    try:
        worker.execute_from_commandline()  # ends in sys.exit with the worker's exit code
    except SystemExit:
        reason = worker.crash_reason
        if not isinstance(reason, ConsistencyError):
            raise
        # the changelog changed under a running worker (e.g. its topic was recreated): faust
        # has closed the stores; without them the next start restores from the changelog
        gone = local_state.discard_all(tabledir, SESSIONS)
        log.error("local state is ahead of its changelog (%s): discarded the local state of "
                  "%s partitions %s; exiting %d, the next start restores it from the changelog",
                  " ".join(str(reason).split("\n\n")[0].split()), SESSIONS, gone,
                  EXIT_STALE_STATE)
        return EXIT_STALE_STATE
    return 0
