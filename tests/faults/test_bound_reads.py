"""A gateway's loop under faults (issue 41; DESIGN 1.3): publish a confirmation, then at once read
its session bound to its delivery and bound to latest, from a sink database kept by a running
sink and from the topic, through kill -9 of the worker, a second worker joining then leaving,
a broker restart, and a `repartition 8 -> 16` run with the loop going (the worker stopped, the
sink running).

Every read either returns the session with the entry just published, or raises StaleReadError
at its deadline naming the session's partition: a read that returns without the entry is the
failure the proposal exists to remove, and the test counts it (it must be 0). Once the fault is
over and a gateway's read succeeded again, each of its later reads must succeed. The figures
(rounds, reads, stale reads per fault, the longest time to recover) go to
var/faults/bound_reads.json; `audit --strict` is clean at the end, its position checks
included.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import subprocess
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from transcript_connector import build_confirmation, partition_for
from transcript_connector.errors import ReadError, StaleReadError
from transcript_connector.publisher import ConfirmationPublisher, PublisherOptions
from transcript_connector.reader_async import SessionReader
from transcript_connector.reader_options import ReaderOptions
from transcript_connector.reader_plan import LATEST

from tests.conftest import ROOT, cli
from tests.integration.harness import (
    CliProcess,
    WorkerProcess,
    group_of,
    poll_until,
    wait_members,
)

pytestmark = [pytest.mark.kafka, pytest.mark.faults]

GATEWAYS = 16  # sessions, one per gateway task, spread over the partitions
ROUNDS = 2_000  # per fault
FAULT_AFTER = 300  # rounds of a fault's phase before it is injected
DEADLINE_S = 3.0  # each read's
RECOVERY_LIMIT_S = 180.0
READS = ("topic@delivery", "topic@latest", "db@delivery", "db@latest")


@dataclass
class Phase:
    name: str
    rounds: int = 0
    reads: Counter = field(default_factory=Counter)  # kind -> reads made
    stale: Counter = field(default_factory=Counter)  # kind -> stale reads
    read_errors: list[str] = field(default_factory=list)  # ReadError (the broker away)
    without_entry: list[str] = field(default_factory=list)  # the failure: must stay empty
    wrong: list[str] = field(default_factory=list)  # stale too early, another partition, …
    after_recovery: list[str] = field(default_factory=list)  # failed once recovered
    fault_over: float | None = None  # monotonic: the fault's last step done
    recovered: dict[int, float] = field(default_factory=dict)  # gateway -> first clean round
    injected: asyncio.Event = field(default_factory=asyncio.Event)
    progress: asyncio.Condition = field(default_factory=asyncio.Condition)
    stale_gateways: set[int] = field(default_factory=set)  # gateways that had a stale read

    async def done(self) -> None:
        """One more round; wakes whoever awaits a number of them."""
        self.rounds += 1
        async with self.progress:
            self.progress.notify_all()

    async def reach(self, rounds: int) -> None:
        await self.until(lambda: self.rounds >= rounds)

    async def until(self, holds) -> None:  # noqa: ANN001  (a predicate)
        """Until `holds()` is true after some round (rounds, reads and outcomes counted)."""
        async with self.progress:
            await self.progress.wait_for(holds)

    def figures(self) -> dict:
        longest = max((t - self.fault_over for t in self.recovered.values()), default=None) \
            if self.fault_over is not None else None
        return {"rounds": self.rounds, "reads": sum(self.reads.values()),
                "stale": dict(self.stale), "read_errors": len(self.read_errors),
                "without_entry": len(self.without_entry), "wrong": len(self.wrong),
                "failed_after_recovery": len(self.after_recovery),
                "longest_recovery_s": None if longest is None else round(longest, 2),
                "examples": {k: v[:3] for k, v in (
                    ("read_errors", self.read_errors), ("without_entry", self.without_entry),
                    ("wrong", self.wrong), ("after_recovery", self.after_recovery)) if v}}


class Loop:
    """The gateways: each publishes to its session and reads it four ways, round after round."""

    def __init__(self, env: dict[str, str], db: Path) -> None:
        prefix, bootstrap = env["TRANSCRIPT_TOPIC_PREFIX"], env["KAFKA_BOOTSTRAP"]
        # partitions=None: the topic's count, followed while connected (a repartition)
        self.publisher = ConfirmationPublisher(PublisherOptions(
            bootstrap=bootstrap, topic_prefix=prefix, partitions=None, partitions_check_ms=500,
            delivery_timeout_ms=180_000))
        options = ReaderOptions(bootstrap=bootstrap, topic_prefix=prefix)
        self.topic = SessionReader(options)
        self.db = SessionReader(options, database=str(db))
        self.sessions = [f"agent:ops:telegram:direct:gw{i}" for i in range(GATEWAYS)]
        self.phase: Phase | None = None
        self.sent = 0

    async def __aenter__(self) -> Loop:
        await self.publisher.connect()
        await self.topic.__aenter__()
        await self.db.__aenter__()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.db.__aexit__(None, None, None)
        await self.topic.__aexit__(None, None, None)
        await self.publisher.close()

    async def run(self, phase: Phase, fault) -> None:  # noqa: ANN001  (an async callable)
        """ROUNDS rounds over all gateways; `fault()` once FAULT_AFTER are done."""
        self.phase = phase
        gateways = [asyncio.create_task(self._gateway(g, phase)) for g in range(GATEWAYS)]
        try:
            await phase.reach(FAULT_AFTER)
            await fault(phase)
            phase.fault_over = time.monotonic()
            phase.injected.set()
            await asyncio.gather(*gateways)
        finally:
            for t in gateways:
                t.cancel()
        missing = set(range(GATEWAYS)) - set(phase.recovered)
        assert not missing, f"{phase.name}: gateways {sorted(missing)} never read again"

    async def _gateway(self, g: int, phase: Phase) -> None:
        session = self.sessions[g]
        # past ROUNDS until this gateway has read cleanly after the fault: a fault that outlasts
        # the rounds (a stop held by a batch in flight) must still be recovered from
        while phase.rounds < ROUNDS or phase.fault_over is None or g not in phase.recovered:
            self.sent += 1
            send_id = f"{phase.name}-{g}-{self.sent}"
            record = build_confirmation(
                send_id=send_id, confirmed_at="2026-05-01T12:00:00Z", agent_id="ops",
                session_key=session, route={"channel": "telegram", "peer_kind": "direct",
                                            "peer_id": f"gw{g}"},
                origin={"kind": "message_tool"}, payload={"text": f"message {send_id}"},
                receipt={"platform_message_ids": [send_id]})
            delivery = await self.publisher.publish(record)
            # where a stale read may point: the session's partition under either count (the
            # publisher may not have seen a repartition the reader has), or the one it was
            # published to
            named = {delivery.partition, *(partition_for(session, n) for n in (8, 16))}
            reads = await asyncio.gather(
                self._read(self.topic, session, delivery), self._read(self.topic, session, LATEST),
                self._read(self.db, session, delivery), self._read(self.db, session, LATEST))
            recovered = g in phase.recovered  # before this round
            clean = True
            for kind, (outcome, seconds) in zip(READS, reads, strict=True):
                phase.reads[kind] += 1
                where = f"{kind} {send_id}"
                ok = False
                if isinstance(outcome, StaleReadError):
                    phase.stale[kind] += 1
                    phase.stale_gateways.add(g)
                    if outcome.partition not in named and outcome.reason is None:
                        phase.wrong.append(f"{where}: stale names partition {outcome.partition}"
                                           f", not one of {sorted(named)}")
                    if seconds < DEADLINE_S - 0.05:
                        phase.wrong.append(f"{where}: stale after {seconds:.2f}s, before its "
                                           "deadline")
                elif isinstance(outcome, ReadError):
                    phase.read_errors.append(f"{where}: {outcome}")
                elif isinstance(outcome, BaseException):
                    phase.wrong.append(f"{where}: {type(outcome).__name__}: {outcome}")
                elif not any(e.entry.send_id == send_id for e in outcome.entries):
                    phase.without_entry.append(f"{where}: position {outcome.position}")
                else:
                    ok = True
                if not ok:
                    clean = False
                    if recovered:
                        phase.after_recovery.append(f"{where}: {outcome!r}"[:300])
            if clean and phase.fault_over is not None and not recovered:
                phase.recovered[g] = time.monotonic()
            await phase.done()
            if phase.fault_over is not None and g not in phase.recovered \
                    and time.monotonic() - phase.fault_over > RECOVERY_LIMIT_S:
                raise AssertionError(f"{phase.name}: gateway {g} not reading "
                                     f"{RECOVERY_LIMIT_S}s after the fault")

    async def _read(self, reader: SessionReader, session: str, at) -> tuple:  # noqa: ANN001
        began = time.monotonic()
        try:
            outcome = await reader.read(session, at=at, timeout_s=DEADLINE_S)
        except Exception as exc:  # noqa: BLE001  (sorted by the caller)
            outcome = exc
        return outcome, time.monotonic() - began


def restart_broker() -> None:
    subprocess.run([str(ROOT / "deploy/local/kafka-down.sh")], check=True, capture_output=True)
    subprocess.run([str(ROOT / "deploy/local/kafka-up.sh")], check=True, capture_output=True)


def test_a_gateway_loop_never_reads_a_session_without_what_it_published(env, topics, tmp_path):
    began = time.monotonic()
    state, db = tmp_path / "state", tmp_path / "gateway.db"
    procs: dict[str, CliProcess] = {}

    def worker(name: str = "w", where: Path = state, **extra: str) -> WorkerProcess:
        procs[name] = WorkerProcess(env, where, tmp_path / f"{name}.log",
                                    TRANSCRIPT_INSTANCE_ID=f"{name}-pod", **extra).start()
        return procs[name]  # type: ignore[return-value]

    def sink() -> CliProcess:
        procs["sink"] = CliProcess(["sink", "sqlite", str(db)], env,
                                   tmp_path / "sink.log").start()
        return procs["sink"]

    async def supervise(phase: Phase) -> None:
        """A process that exited non-zero is started again (as an orchestrator would)."""
        while not phase.injected.is_set() or phase.rounds < ROUNDS:
            for name, p in list(procs.items()):
                if not p.alive() and p.proc.returncode not in (0, -9) and name != "w2":
                    procs[name] = CliProcess(p.args, p.env, p.log).start()
            await asyncio.sleep(0.5)

    async def kill_9(phase: Phase) -> None:
        """kill -9; restarted (same state, same instance id) once every gateway's reads have
        ended stale at their deadline: an orchestrator's restart is not instant."""
        procs["w"].kill()
        await phase.until(lambda: len(phase.stale_gateways) == GATEWAYS)
        worker()

    async def join_and_leave(phase: Phase) -> None:
        w2 = worker("w2", tmp_path / "state2")
        await asyncio.to_thread(wait_members, env["KAFKA_BOOTSTRAP"], group_of(env), 2,
                                [procs["w"], w2])
        await phase.reach(phase.rounds + 300)  # w2 decides a share of them
        assert await asyncio.to_thread(w2.stop) == 0

    async def broker(phase: Phase) -> None:
        await asyncio.to_thread(restart_broker)

    async def repartition(phase: Phase) -> None:
        assert await asyncio.to_thread(procs["w"].stop) == 0
        done = await asyncio.to_thread(cli, "repartition", "--partitions", "16",
                                       "--wait-empty", "60", env=env, timeout=600)
        assert done.returncode == 0, done.stdout.decode() + done.stderr.decode()
        worker(TRANSCRIPT_PARTITIONS="16")

    faults = [("kill_9", kill_9), ("join_leave", join_and_leave), ("broker_restart", broker),
              ("repartition", repartition)]
    phases: list[Phase] = []

    def sink_has_positions() -> bool:
        """The sink made its database and holds a position for every partition."""
        if not db.exists():
            return False
        c = sqlite3.connect(f"{db.resolve().as_uri()}?mode=ro", uri=True)
        try:
            return c.execute("SELECT count(*) FROM positions").fetchone()[0] == 8
        except sqlite3.Error:
            return False
        finally:
            c.close()

    async def main() -> None:
        worker()
        sink()
        await asyncio.to_thread(poll_until, sink_has_positions, 120, [procs["w"]],
                                "the sink's positions")
        async with Loop(env, db) as loop:
            for name, fault in faults:
                phase = Phase(name)
                phases.append(phase)
                watch = asyncio.create_task(supervise(phase))
                try:
                    await loop.run(phase, fault)
                finally:
                    watch.cancel()

    try:
        asyncio.run(main())
    except BaseException:
        for p in procs.values():  # a failed run leaves no worker or sink behind
            if p.alive():
                p.kill()
        raise
    finally:
        figures = {p.name: p.figures() for p in phases}
        out = ROOT / "var/faults"
        out.mkdir(parents=True, exist_ok=True)
        (out / "bound_reads.json").write_text(json.dumps(
            {"gateways": GATEWAYS, "rounds_per_fault": ROUNDS, "deadline_s": DEADLINE_S,
             "phases": figures, "test_s": round(time.monotonic() - began, 1)}, indent=1) + "\n")
        print("\nbound reads:", json.dumps(figures))
    for p in phases:
        assert p.without_entry == [], f"{p.name}: reads without the entry: {p.without_entry[:5]}"
        assert p.wrong == [], f"{p.name}: {p.wrong[:5]}"
        assert p.after_recovery == [], f"{p.name}: failed once recovered: {p.after_recovery[:5]}"
        assert p.read_errors == [], f"{p.name}: {p.read_errors[:5]}"
    assert procs["w"].stop() == 0
    assert procs["sink"].stop() == 0
    env16 = {**env, "TRANSCRIPT_PARTITIONS": "16"}
    done = cli("audit", "--strict", "--json", env=env16, timeout=600)
    assert done.returncode == 0, done.stdout.decode()[-4000:]
