"""The worker's position records (workers/stream/positions.py) and audit's check of them
(workers/commands/audit_positions.py), without a broker: which partitions are due, what the
gap watch hands the processor, and which claims the audit finds broken."""

from __future__ import annotations

import asyncio
import json
from collections import namedtuple
from datetime import UTC, datetime

import pytest
from faust.types import TP
from transcript_connector.entries_topic import Positioned, classify, position_key

from workers.commands.audit_positions import PositionCheck
from workers.stream.positions import SMALL_GAP, GapWatch, PositionKeeper

T0 = 1_800_000_000.0
WALL = datetime(2026, 12, 4, 10, 0, 0, 250000, tzinfo=UTC)
IN, CTL = "p.delivery.confirmations", "p.transcript.control"


def test_a_new_generation_makes_every_owned_partition_due_and_a_write_settles_it():
    k = PositionKeeper("p.transcript.entries", heartbeat_s=30)
    assert k.due(T0) == set() and k.wait_s(T0) == 30
    k.start(4, [1, 3])
    assert k.due(T0) == {1, 3} and k.wait_s(T0) == 0
    k.written({1: (10, 2)}, T0)
    assert k.due(T0) == {3}
    k.written({3: (0, 0)}, T0 + 5)
    assert k.due(T0 + 29) == set()
    assert k.wait_s(T0 + 20) == pytest.approx(10)
    assert k.due(T0 + 30) == {1}  # the heartbeat: a quiet partition's position stays fresh
    assert k.due(T0 + 35) == {1, 3}
    k.mark(3)
    assert 3 in k.due(T0 + 1)
    k.start(5, [3])  # the next generation forgets what it no longer owns
    assert set(k.last) == {3} and k.due(T0) == {3}


def test_the_records_are_position_records_of_their_partitions():
    k = PositionKeeper("p.transcript.entries")
    records = k.records({2: (100, 7), 0: (0, 0)}, WALL)
    assert [(t, p, key) for t, p, key, _, _ in records] == [
        ("p.transcript.entries", 2, b"position/2"), ("p.transcript.entries", 0, b"position/0")]
    for _, p, key, value, headers in records:
        found = classify(key, value, headers, p)
        assert isinstance(found, Positioned) and found.position.at == WALL
    assert json.loads(records[0][3]) == {"schema": "input-position/1", "partition": 2,
                                         "input_offset": 100, "control_offset": 7,
                                         "at": "2026-12-04T10:00:00.250Z"}


def test_the_lag_is_the_last_stable_offset_less_the_last_position():
    k = PositionKeeper("e")
    k.start(1, [0, 1])
    k.written({0: (10, 0), 1: (20, 0)}, T0)
    k.ends = {0: 14, 1: 20}
    lag = k.lag()
    assert {p: n for p, (n, _) in lag.items()} == {0: 4, 1: 0}


class FakeProbe:
    def __init__(self, empty: set[TP]) -> None:
        self.empty_ones, self.asked = empty, []

    def empty(self, gaps):  # noqa: ANN001, ANN201
        self.asked.append(dict(gaps))
        return {tp for tp in gaps if tp in self.empty_ones}


def watch(standing: dict[TP, int], ends: dict[TP, int], empty: set[TP], generation: int = 7):
    keeper = PositionKeeper("e")
    woken = []

    async def ask(tps):  # noqa: ANN001, ANN202
        return {tp: ends[tp] for tp in tps if tp in ends}

    probe = FakeProbe(empty)
    w = GapWatch(keeper, probe, IN, lambda: (generation, dict(standing)), ask,
                 lambda: woken.append(True))
    return w, keeper, probe, woken


def test_the_gap_watch_hands_over_only_gaps_that_hold_nothing():
    a, b, c = TP(IN, 0), TP(IN, 1), TP(CTL, 0)
    w, keeper, probe, woken = watch({a: 5, b: 9, c: 3}, {a: 7, b: 9, c: 4}, empty={a})
    asyncio.run(w.look())
    assert probe.asked == [{a: (5, 7), c: (3, 4)}]  # b stands at its end: no gap to probe
    assert keeper.advances == {a: (7, 5, 7)} and woken == [True]
    assert keeper.ends == {0: 7, 1: 9}  # the input's, for the lag


def test_a_large_gap_is_probed_only_once_its_partition_stood_still_for_a_look():
    """A partition being drained has a large gap at every look and a record in it: probing
    it would only take the drain's time. One that stood still is probed, however large."""
    a, b = TP(IN, 0), TP(IN, 1)
    standing = {a: 5, b: 9}
    ends = {a: 5 + SMALL_GAP + 1, b: 9 + SMALL_GAP}
    w, keeper, probe, _ = watch(standing, ends, empty={a, b})  # both read as they change
    asyncio.run(w.look())
    assert probe.asked == [{b: (9, 9 + SMALL_GAP)}]  # a small gap at once, the large one not
    standing[a] = 50  # a moved: still draining
    ends[a] = 50 + SMALL_GAP + 1
    asyncio.run(w.look())
    assert probe.asked[-1] == {b: (9, 9 + SMALL_GAP)}
    asyncio.run(w.look())  # a stood still since the last look: its gap is probed
    assert probe.asked[-1] == {a: (50, 50 + SMALL_GAP + 1), b: (9, 9 + SMALL_GAP)}
    assert keeper.advances[a] == (7, 50, 50 + SMALL_GAP + 1)


def test_the_gap_watch_wakes_nobody_when_every_gap_holds_a_record_or_none_is_open():
    a = TP(IN, 0)
    w, keeper, _, woken = watch({a: 5}, {a: 7}, empty=set())
    asyncio.run(w.look())
    assert keeper.advances == {} and woken == []
    w, keeper, probe, woken = watch({}, {a: 7}, empty={a}, generation=None)
    asyncio.run(w.look())
    assert probe.asked == [] and woken == []


# --- audit ---------------------------------------------------------------------------------

Rec = namedtuple("Rec", "partition offset key value")


def pos_rec(p: int, offset: int, input_offset: int, control_offset: int = 0,
            where: int | None = None) -> Rec:
    value = json.dumps({"schema": "input-position/1", "partition": p,
                        "input_offset": input_offset, "control_offset": control_offset,
                        "at": "2026-12-04T10:00:00Z"}).encode()
    return Rec(p if where is None else where, offset, position_key(p), value)


def check(records: list[Rec], origins: dict[bytes, tuple[int, int]],
          located: dict[bytes, tuple[int, int]], erased: set[bytes] = frozenset(),
          ends: dict[int, int] | None = None) -> tuple[list[str], list[str]]:
    c = PositionCheck()
    bad: list[str] = []
    for r in records:
        assert c.read(r, lambda p, o, what: bad.append(f"{p}@{o}: {what}"))
    for key, (p, o) in located.items():
        c.entry(key, p, o)
    for key, (p, io) in origins.items():
        c.expect(key, p, io)
    return [what for _, what in c.findings(set(erased), ends or {0: 100, 1: 100})], bad


def test_a_position_after_the_entries_it_claims_is_clean():
    found, bad = check([pos_rec(0, 5, 3), pos_rec(0, 9, 4)],
                       origins={b"k#1": (0, 0), b"k#2": (0, 2), b"k#3": (0, 3)},
                       located={b"k#1": (0, 1), b"k#2": (0, 4), b"k#3": (0, 8)})
    assert found == [] and bad == []


def test_a_claim_whose_entry_comes_after_it_or_is_missing_is_a_finding():
    found, _ = check([pos_rec(0, 5, 3)], origins={b"k#1": (0, 1), b"k#2": (0, 2)},
                     located={b"k#1": (0, 6)})
    assert found == ["partition 0 offset 5: claims input offset 1, whose entry k#1 is at offset 6",
                     "partition 0 offset 5: claims input offset 2, whose entry k#2 is missing"]


def test_erased_and_moved_entries_and_unclaimed_inputs_are_not_checked():
    found, _ = check([pos_rec(0, 5, 3)],
                     origins={b"e#1": (0, 0), b"m#1": (0, 1), b"later#1": (0, 3)},
                     located={b"m#1": (1, 2), b"later#1": (0, 9)}, erased={b"e#1"})
    assert found == []


def test_positions_never_move_back_nor_past_the_input():
    found, _ = check([pos_rec(1, 3, 10, 2), pos_rec(1, 4, 9, 2), pos_rec(1, 5, 11, 1),
                      pos_rec(1, 6, 200, 2)], origins={}, located={}, ends={1: 150})
    assert found == [
        "partition 1 offset 4: the position moved back, from input offset 10 and control "
        "offset 2 to 9 and 2",
        "partition 1 offset 5: the position moved back, from input offset 9 and control offset "
        "2 to 11 and 1",
        "partition 1 offset 6: claims input offset 200, past the input's last stable offset 150"]


def test_a_position_the_worker_would_not_write_is_malformed_and_claims_nothing():
    found, bad = check([pos_rec(0, 5, 3, where=1), Rec(0, 6, b"position/0", b"{}")],
                       origins={b"k#1": (0, 0)}, located={})
    assert found == []
    assert bad[0] == "1@5: position: key names partition 0, value 0, read from partition 1"
    assert bad[1].startswith("0@6: invalid position: ")
    assert PositionCheck().read(Rec(0, 1, b"k#0000000001", b"{}"), print) is False
