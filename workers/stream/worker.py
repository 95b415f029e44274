"""`transcript-owner worker`: the faust app, wiring the input, the state owner and the processor.

faust does what it is good at: group membership and partition assignment, lifecycle and
signals. The session state has its own owner (`workers.stream.state_owner`: RocksDB per
partition, restored from the changelog), not a faust table. The per-record work is the batch
path of `workers.stream.processor` (see `workers.stream.ingest` for why not faust's Stream),
through the worker's own clients (`workers.stream.clients`); at each assignment the takeover
(`workers.stream.takeover`) runs before the partitions are processed.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import threading
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mode import Service

from workers import compiled
from workers.core.checkpoint_format import CHECKPOINTS
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
    worker_limits,
    worker_settings,
)
from workers.stream import local_state
from workers.stream.adapter import (
    GroupMember,
    membership,
    on_first_stop_signal,
    prompt_table_manager,
    request_rejoin,
    warm_assignor,
    warm_up_topic,
)
from workers.stream.checkpoints import Checkpointer
from workers.stream.clients import offsets_reader, producer_factory
from workers.stream.ingest import Inbox, input_topic, read_committed, scheduler_for
from workers.stream.positions import GapProbe, GapWatch, PositionKeeper
from workers.stream.processor import EXIT_FATAL, BatchClock, Processor
from workers.stream.standby import Standbys
from workers.stream.state_owner import StateOwner
from workers.stream.store_memory import StoreMemory
from workers.stream.takeover import on_assigned
from workers.stream.topic_check import MoveGuard, check_topics
from workers.stream.transactions import BatchTransactions, worker_transactional_id

if TYPE_CHECKING:
    from workers.ops.http import HttpServer

log = logging.getLogger("transcript_owner.worker")


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
              http_socket=None, metrics: Metrics | None = None,  # noqa: ANN001
              moves: MoveGuard | None = None):
    """`http_socket`: a bound socket to serve /livez /readyz /metrics on."""
    import faust

    PromptTableManager = prompt_table_manager()
    datadir = local_state.deployment_dir(ws.state_dir, ks.topic_prefix, ws.app_id)
    # the worker's name in the group is its transactional id: the group's members then say
    # whose transactions are alive (workers.stream.fencing, workers.stream.standby)
    name = worker_transactional_id(ks.topic_prefix + ws.app_id, ws.instance_id, datadir)
    inbox = Inbox(ks.topic(CONFIRMATIONS), maxsize=ws.max_batch, poll=ws.poll_records(),
                  control=ks.topic(CONTROL))
    warm: list[Callable[[], set[int]]] = [set]  # the standbys' warm partitions, once they exist
    app = faust.App(
        ks.topic_prefix + ws.app_id,
        broker=";".join(f"kafka://{h.strip()}" for h in ks.bootstrap.split(",")),
        broker_credentials=credentials(ks),
        # per deployment, so that two never share a store (workers.stream.local_state)
        datadir=datadir,
        broker_client_id=name,
        topic_partitions=ws.partitions,
        topic_replication_factor=ks.replication_factor or 1,
        # every topic is declared in topics.yaml and checked before faust starts (check_topics):
        # faust creates none, so the worker's principal needs no Create ACL
        topic_allow_declare=False,
        consumer_auto_offset_reset="earliest",
        broker_session_timeout=ws.session_timeout_s,
        # static membership: a restart within the session timeout moves no partition
        consumer_group_instance_id=ws.instance_id,
        broker_heartbeat_interval=max(1.0, ws.session_timeout_s / 4),
        web_enabled=False,  # the worker's own endpoints: workers.ops.http
        producer_acks=-1,
        broker_commit_interval=0.5,  # acked offsets are committed within half a second
        producer_max_request_size=4 * 1024 * 1024,
        # a partition's share of a fetch holds any batch of the input; the response is bounded
        # over all partitions (TRANSCRIPT_FETCH_BUFFER_MB: read_committed below)
        consumer_max_fetch_size=ws.fetch_bytes_per_partition(),
        # a poll hands over an eighth of a batch, and the inbox takes polls while one more
        # fits its bound of a batch: the worker holds 2 batches of input records decoded (one
        # is decided), plus a fetch response in aiokafka (TRANSCRIPT_FETCH_BUFFER_MB)
        broker_max_poll_records=ws.poll_records(),
        ConsumerScheduler=scheduler_for(inbox),
        TableManager=PromptTableManager,
        # standbys of the input's partitions, placed by faust's assignor, kept warm by the
        # worker (workers.stream.standby); moves wait for them (adapter.warm_assignor). At
        # least 1 even without standbys: at 0 (and no faust table) faust's consumer falls back
        # to aiokafka's round-robin assignor, which gives the input's and transcript.control's
        # partitions to members independently (a control record then meets a store that is not
        # open: exit 70); faust's copartitions them
        table_standby_replicas=max(1, ws.standby_replicas),
        **({"PartitionAssignor": warm_assignor(inbox.topic, (ks.topic(CONTROL),),
                                               lambda: warm[0]())}
           if ws.standby_replicas else {}),
    )
    input_topic(app, inbox)
    exactly_once = ws.processing_guarantee == "exactly_once"
    read_committed(app, offsets_in_transactions=exactly_once, fetch_max_bytes=ws.fetch_bytes())

    state = StateOwner(Path(app.conf.tabledir), SESSIONS,
                       changelog_topic(ks.topic_prefix, ws.app_id, SESSIONS),
                       StoreMemory(ws.state_cache_mb), ws.partitions, ws.restore_processes)
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
    transactions = checkpoints = member = positions = None
    if exactly_once:
        transactions = BatchTransactions(new_producer, name, ws.transaction_version)
        metrics.transactions = lambda: transactions.results
        metrics.transaction_version = lambda: transactions.version

        def member(generation: int) -> GroupMember:
            return GroupMember(app.conf.id, generation, membership(app).member_id,
                               ws.instance_id)

        checkpoints = Checkpointer(ks.topic(CHECKPOINTS), ws.checkpoint_interval_s,
                                   ws.checkpoint_keep, ws.checkpoint_keys_per_batch)
        positions = PositionKeeper(ks.topic(ENTRIES))
        metrics.positions = positions.lag
    def standby_partitions() -> tuple[set[int], set[int]]:
        tps = app.assignor.assigned_standbys() if ws.standby_replicas else ()
        return ({tp.partition for tp in tps if tp.topic == inbox.topic},
                {tp.partition for tp in tps if tp.topic == warm_up_topic(inbox.topic)})

    standbys = Standbys(ks, state, app.conf.id, standby_partitions,
                        lambda: request_rejoin(app))
    warm[0] = lambda: standbys.warm
    metrics.standbys = standbys.lag
    on_assigned(app, ks, transactions, inbox.topic, inbox.topics, ks.topic(DIAGNOSTICS), state,
                metrics, health, checkpoints, settle_timeout_s=ws.transaction_timeout_s + 30,
                moves=moves, standbys=standbys)
    processor = Processor(
        app, inbox, state, owner,
        {name: ks.topic(name) for name in (CONFIRMATIONS, ENTRIES, DIAGNOSTICS, DLQ, ERASURES)},
        topic_partitions, offsets_reader(ks, app.conf.id), new_producer,
        clock, max_batch=ws.max_batch, linger_s=ws.linger_ms / 1000, cache_size=ws.head_cache,
        transactions=transactions, member=member, batch_stop_s=ws.shutdown_timeout_s / 2,
        metrics=metrics, health=health,
        checkpoints=checkpoints, positions=positions,
    )
    if processor.positions is not None:
        processor.gap_watch = GapWatch(
            processor.positions, GapProbe(ks, f"{app.conf.id}-positions"), inbox.topic,
            processor.standing, processor.committed.ends, inbox.nudge)
    app.task(processor.run)
    if transactions is not None:
        # a quiet partition's checkpoint has no input message to hold faust's stop (it waits
        # for acks), and its offsets carry this member: it commits before the member leaves
        stop_s = processor.batch_stop_s
        app.tables.before_leave = lambda: transactions.settle(stop_s)
    if http_socket is not None:
        from workers.ops.http import HttpServer

        app.add_dependency(_WithApp(HttpServer(
            http_socket, health, metrics, gauges_reader(app, inbox, state, health, metrics)),
            loop=app.loop))

    @app.timer(interval=10.0)
    async def report() -> None:
        if owner.counts:
            log.info("outcomes so far: %s; inbox high-water %d",
                     dict(sorted(owner.counts.items())), inbox.high_water)

    return app, state, standbys


def gauges_reader(app, inbox: Inbox, owner: StateOwner, health: Health,  # noqa: ANN001, ANN201
                  metrics: Metrics):
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
        dbs = owner.open_stores()  # read only: never open one here
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


def run(args: argparse.Namespace) -> int:
    ks, ws = kafka_settings(), worker_settings()  # a SettingsError is reported by the CLI (exit 2)
    from workers.topics import retention_ms, topics_file

    declared = topics_file()  # what `topics apply` gave the cluster: the input's retention
    worker_limits(ws, retention_ms(declared, CONFIRMATIONS), str(declared))
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
        moves = MoveGuard()
        counts = check_topics(ks, ws, moves)
        if isinstance(counts, str):
            print(f"error: {counts}", file=sys.stderr)
            return 2
        from faust import Worker

        metrics = Metrics()
        app, state, standbys = build_app(ks, ws, counts, http_socket, metrics, moves)
        tabledir = Path(app.conf.tabledir)
        tabledir.mkdir(parents=True, exist_ok=True)
        local_state.warn_legacy_layout(ws.state_dir, Path(app.conf.datadir))
        changelog = changelog_topic(ks.topic_prefix, ws.app_id, SESSIONS)
        observed = local_state.observe_changelog(ks, changelog)
        local_state.prepare(tabledir, SESSIONS, observed)
    except (local_state.LocalStateError, OSError) as exc:
        print(f"error: local state: {exc}", file=sys.stderr)
        return 2
    finally:
        kafka_log.setLevel(logging.NOTSET)
    log.info("starting %s on %s (prefix %r), state in %s", app.conf.id, ks.bootstrap,
             ks.topic_prefix, app.conf.datadir)
    build = compiled.status()
    (log.warning if build.stale else log.info)("%s", build.describe())
    worker = Worker(app, loglevel=ws.log_level, quiet=True, redirect_stdouts=False)
    stop_within(worker, ws.shutdown_timeout_s)
    try:
        worker.execute_from_commandline()  # ends in sys.exit with the worker's exit code
    finally:
        standbys.stop()  # the loop has stopped: no batch, restore or tail is using a store
        state.close()
    return 0
