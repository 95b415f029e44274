"""Every touch of faust's, mode's and aiokafka's internals, each named once with why.

A private name can vanish in any release; tests/unit/test_adapter.py has a canary for each one
used here, so a version that removed it fails with the name, not with an AttributeError deep in a
rebalance.

aiokafka's producer is taught its two protocols in workers.stream.producer_protocol (KIP-447's
TxnOffsetCommit and transactions v2); the canaries and the rule that no other module names a
private name cover both modules.

By owner:
  faust's store layout    `STORE_OFFSET_KEY`, `STORE_OWN_KEYS` (the state owner's stores keep
                          it: those written by a faust table are read as they are)
  faust's table manager   `prompt_table_manager` (no second's sleep before its recovery
                          service starts; a stop waits for `before_leave` first: faust stops
                          its tables after the streams' acks and before the consumer leaves
                          the group), `replace_table_rebalance` (a step between an
                          assignment and faust's recovery, which resumes the partitions). The
                          worker declares no faust table: its state has its own owner
                          (workers.stream.state_owner)
  faust's consumer        `read_committed_consumer`, `use_consumer`; `membership`,
                          `request_rejoin`
  faust's assignor        `warm_assignor` (standbys reported only when warm; moves to a member
                          without a warm standby held back: workers.core.warmup)
  mode's Worker           `on_first_stop_signal`
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

log = logging.getLogger("transcript_owner.adapter")


@dataclass(frozen=True)
class Membership:
    """Where a consumer stands in its group now."""

    generation_id: int
    member_id: str


def membership(app: Any) -> Membership:
    """The faust app's consumer's current generation and member id. faust keeps the generation
    (`app.consumer_generation_id`) but not the member id, which only aiokafka's coordinator
    knows: faust's Consumer -> its ConsumerThread (`_thread`) -> AIOKafkaConsumer
    (`_ensure_consumer()`) -> GroupCoordinator (`_coordinator`)."""
    coordinator = app.consumer._thread._ensure_consumer()._coordinator
    return Membership(coordinator.generation, coordinator.member_id)


def warm_assignor(input_topic: str, copartitioned: tuple[str, ...],
                  warm: Callable[[], set[int]]) -> type:
    """faust's partition assignor (the `PartitionAssignor` setting) with KIP-441's warm-up.

    faust's assignor already places standbys of co-partitioned topics (the input and
    transcript.control; `table_standby_replicas`): never on the active's member, spread by
    count, sticky, and an active that must move goes first to a member holding its standby. The
    worker keeps those standbys warm (workers.stream.standby). Here:
    - a member reports (`_metadata`, its subscription's user data) only the standbys of the
      input that are warm (`warm()`), so the leader knows which moves would be warm;
    - the leader (`_perform_assignment` keeps what each member reported; `_protocol_assignments`
      is handed faust's proposal before it is encoded) holds back each move to a member
      without a warm standby while the partition's last owner is in the group
      (workers.core.warmup.hold_back): the partition stays, and the member gets its standby,
      marked under the pseudo-topic `warm_up_topic(input)`, which faust never reads (it adds
      standbys to the Kafka assignment only for its tables' changelogs). The member asks for a
      new assignment once those are warm (`request_rejoin`)."""
    from faust.assignor import PartitionAssignor
    from faust.assignor.client_assignment import ClientAssignment, ClientMetadata

    from workers.core.warmup import hold_back

    topics = tuple(dict.fromkeys((input_topic, *copartitioned)))
    marker = warm_up_topic(input_topic)

    class WarmAssignor(PartitionAssignor):
        reported: dict[str, Any] = {}  # noqa: RUF012  (the leader's: each member's report)

        @property
        def _metadata(self) -> Any:
            md = super()._metadata
            hot = warm()
            standbys = {t: [p for p in ps if p in hot] if t in topics else list(ps)
                        for t, ps in md.assignment.standbys.items() if t != marker}
            return ClientMetadata(
                assignment=ClientAssignment(actives=dict(md.assignment.actives),
                                            standbys=standbys),
                url=md.url, changelog_distribution=md.changelog_distribution,
                external_topic_distribution=md.external_topic_distribution,
                topic_groups=md.topic_groups)

        def _perform_assignment(self, cluster: Any, member_metadata: Any) -> Any:
            self.reported = {m: self._get_client_metadata(md).assignment
                             for m, md in member_metadata.items()}
            return super()._perform_assignment(cluster, member_metadata)

        def _protocol_assignments(self, assignments: Any, *args: Any) -> Any:
            proposed = {m: set(a.actives.get(input_topic, ())) for m, a in assignments.items()}
            previous = {m: set(r.actives.get(input_topic, ())) for m, r in self.reported.items()}
            warm_of = {m: set(r.standbys.get(input_topic, ())) for m, r in self.reported.items()}
            actives, warming = hold_back(proposed, previous, warm_of)
            for m, a in assignments.items():
                for t in topics:
                    if t in a.actives:
                        a.actives[t] = sorted(actives[m])
                        a.standbys[t] = sorted((set(a.standbys.get(t, ())) | warming[m])
                                               - actives[m])
                a.standbys[marker] = sorted(warming[m])
            held = {m: sorted(ps) for m, ps in warming.items() if ps}
            if held:
                log.info("held back moves to members without a warm standby (they warm up "
                         "first): %s", held)
            return super()._protocol_assignments(assignments, *args)

    return WarmAssignor


def warm_up_topic(input_topic: str) -> str:
    """The pseudo-topic under which a member's assignment lists the standbys it warms up to
    take over (no such topic exists; faust never reads it)."""
    return f"{input_topic}#warm-up"


def request_rejoin(app: Any) -> None:
    """Ask the group for a new assignment (a probing rebalance: workers.stream.standby), from
    any thread: aiokafka's coordinator lives on faust's consumer thread's loop."""
    thread = app.consumer._thread
    coordinator = thread._ensure_consumer()._coordinator
    thread.thread_loop.call_soon_threadsafe(coordinator.request_rejoin)


# --- faust's RocksDB store layout (faust.stores.rocksdb.Store) ------------------------------

# The key under which faust's store kept, in each partition's RocksDB, the offset of the last
# changelog record it applied (`Store.offset_key`), and the prefix of its own keys. The worker's
# state owner keeps this layout (workers.stream.state_owner): stores written while a faust table
# held them are used as they are.
STORE_OFFSET_KEY = b"__faust\0offset__"
STORE_OWN_KEYS = b"__faust"


# --- faust's table manager (faust.tables.TableManager) --------------------------------------

def prompt_table_manager() -> type:
    """faust's TableManager with faust's own `on_start` less its sleep: it registers the tables'
    changelog channels (`TableManager._update_channels`, which has no public caller; there are
    none) and starts its recovery service at once, which resumes the assigned partitions after
    each rebalance. (faust is imported when the app is built.)"""
    from faust.tables import TableManager

    class PromptTableManager(TableManager):
        """faust's TableManager, without the second it sleeps before starting recovery (for
        tables declared after the app starts, and the worker declares none): every start,
        restart and rebalance test runs through this."""

        # awaited as faust stops, before its consumer leaves the group (App._stop_consumer
        # stops the tables after waiting for the streams' acks, then the consumer)
        before_leave: Callable[[], Awaitable[None]] | None = None

        async def on_start(self) -> None:
            if not self.should_stop:
                await self._update_channels()
                await self.recovery.start()

        async def on_stop(self) -> None:
            if self.before_leave is not None:
                await self.before_leave()
            await super().on_stop()

    return PromptTableManager


def replace_table_rebalance(app: Any, on_rebalance: Callable[..., Awaitable[None]]
                            ) -> Callable[..., Awaitable[None]]:
    """Make `on_rebalance(assigned, revoked, newly_assigned, generation_id)` what faust awaits at
    each assignment instead of its TableManager.on_rebalance (which starts the tables'
    recovery), and return faust's, for `on_rebalance` to await when it is done. faust has no
    hook between an assignment and its table recovery; its App looks `self.tables.on_rebalance`
    up at each assignment (`App._on_partitions_assigned`), so the instance's attribute is it."""
    tables = app.tables
    recover = tables.on_rebalance
    tables.on_rebalance = on_rebalance
    return recover


# --- faust's consumer (faust.transport.drivers.aiokafka) ------------------------------------

def read_committed_consumer(*, fetch_max_wait_ms: int, offsets_in_transactions: bool) -> type:
    """faust's aiokafka Consumer, whose AIOKafkaConsumer reads read_committed and long-polls at
    most `fetch_max_wait_ms`, and which, with `offsets_in_transactions`, sends no commit of its
    own (workers.stream.ingest.read_committed says why). faust has a setting for neither: its
    consumer thread builds the AIOKafkaConsumer in `_create_worker_consumer`, and aiokafka hands
    `_isolation_level` and `_fetch_max_wait_ms` to the Fetcher it builds at start, so they are
    set between construction and start. faust's Consumer makes its thread in
    `_new_consumer_thread` and sends a commit in `_commit` (its bookkeeping around it stays)."""
    from faust.transport.drivers import aiokafka as driver

    class ReadCommittedThread(driver.AIOKafkaConsumerThread):
        def _create_worker_consumer(self, transport: Any) -> Any:
            consumer = super()._create_worker_consumer(transport)
            consumer._isolation_level = "read_committed"
            # faust asks for 1.5 s long polls; the broker answers a connection's requests in
            # order, so the offset lookups of a recovery after each rebalance queued behind
            # them (1.5 s each, seen here). Fetches still return as soon as records arrive.
            consumer._fetch_max_wait_ms = fetch_max_wait_ms
            return consumer

    class ReadCommittedConsumer(driver.Consumer):
        def _new_consumer_thread(self) -> Any:
            return ReadCommittedThread(self, loop=self.loop, beacon=self.beacon)

        async def _commit(self, offsets: Mapping[Any, int]) -> bool:
            if offsets_in_transactions:
                return True  # committed already, in the transaction of their batch
            return await super()._commit(offsets)

    return ReadCommittedConsumer


def use_consumer(app: Any, consumer_class: type) -> None:
    """Make the app's consumer a `consumer_class`: faust's Transport builds its consumer from
    its `Consumer` class attribute (`Transport.create_consumer`), set here on the app's
    transport; before the app creates its consumer."""
    app.transport.Consumer = consumer_class


# --- mode's Worker (mode.worker.Worker) -----------------------------------------------------

def on_first_stop_signal(worker: Any, callback: Callable[[], None]) -> None:
    """Call `callback()` when mode's Worker gets its first stop signal (SIGTERM, SIGINT), just
    before it schedules its shutdown. mode has no hook for it: its signal handlers call
    `self._schedule_shutdown(signal)` (looked up on the instance, so wrapped here), which sets
    `_signal_stop_time` at the first signal only."""
    schedule = worker._schedule_shutdown

    def on_signal(signum):  # noqa: ANN001, ANN202
        if not worker._signal_stop_time:
            callback()
        schedule(signum)

    worker._schedule_shutdown = on_signal
