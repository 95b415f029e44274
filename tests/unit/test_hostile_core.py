"""Issue 12 against the pure core and the one step: no input may stop the owner or put a
message in the wrong transcript (DESIGN rules 1, 3, 4 and 7, "amended 1.1").

Each finding is a test that failed on 746aef0 (noted where so), run through `replay` (the
CLI's function, whose signature did not change) or the worker's step, `Owner.handle`. Then a
property: random records, hostile ones among them, give the same outcomes through `replay`
and through the worker's step over its real state store (batches, sweeps, restarts), and
nothing raises out of either. And a busy session: no state record grows with its history.
"""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from transcript_connector.partitioning import partition_for

from schemas import parse_input
from tests.unit.test_owner import PARTITIONS, source
from tests.unit.test_properties import INPUTS
from tests.unit.test_session_store import FakeStores
from tests.unit.wire import WRITTEN_AT, confirmation, dumps, reset, run, with_
from workers.commands.replay import render, replay
from workers.core import (
    EMPTY_HEAD,
    MemoryState,
    Seen,
    SessionHead,
    StoreFailure,
    UnreadableState,
    decide,
    decide_in,
    session_key_of,
)
from workers.core.outcomes import NULL_VALUE
from workers.core.outputs import DLQ, Source
from workers.core.owner import Owner, apply
from workers.core.state import SEEN_KEYS_FROM, parse_seen_key
from workers.stream.session_store import SessionStore

KEY = "agent:ops:telegram:group:-100123"
WINDOW = timedelta(days=7)
NOW = datetime(2026, 1, 1, 12, tzinfo=UTC)  # the worker's clock in the findings below


def replayed(records: list[dict[str, Any] | bytes], written_at: datetime = NOW,
             window: timedelta = WINDOW) -> list[dict[str, Any]]:
    """`replay` of these records (one per line), its output parsed."""
    lines = [r if isinstance(r, bytes) else dumps(r) for r in records]
    out = io.BytesIO()
    replay(lines, out, written_at=written_at, dedupe_window=window)
    return [json.loads(line) for line in out.getvalue().splitlines()]


def outcomes(out: list[dict[str, Any]]) -> list[str]:
    return [o["outcome"] for o in out]


def codes(o: dict[str, Any]) -> list[tuple[str, str]]:
    return [(d["level"], d["code"]) for d in o.get("diagnostics", [])]


# --- finding 3: a skewed clock disables dedupe --------------------------------------------


def test_a_confirmation_dated_2099_is_written_flagged_and_forgets_nothing() -> None:
    """746aef0: the 2099 record moved the session clock 73 years ahead, every earlier send_id
    fell out of the window, and the retry of s1 was written a second time."""
    out = replayed([
        confirmation(send_id="s1", confirmed_at="2026-01-01T11:00:00Z"),
        confirmation(send_id="s2", confirmed_at="2099-01-01T00:00:00Z"),
        confirmation(send_id="s1", confirmed_at="2026-01-01T11:00:00Z"),  # a retry, earlier
        confirmation(send_id="s2", confirmed_at="2099-01-01T00:00:00Z"),  # a retry, skewed
        confirmation(send_id="s3", confirmed_at="2026-01-01T11:30:00Z"),
    ])
    assert outcomes(out) == ["written", "written", "duplicate", "duplicate", "written"]
    skewed = out[1]
    assert skewed["entry"]["delivered_at"] == "2099-01-01T00:00:00Z"  # written as shown
    assert codes(skewed) == [("warn", "clock_skew")]
    (diag,) = skewed["diagnostics"]
    assert diag["send_id"] == "s2" and diag["at"] == "2099-01-01T00:00:00Z"
    assert "ahead of the worker's clock" in diag["detail"]
    assert [o["entry"]["seq"] for o in out if "entry" in o] == [1, 2, 3]
    assert "diagnostics" not in out[0] and "diagnostics" not in out[4]


def test_a_skewed_record_moves_the_session_clock_only_to_the_workers_clock() -> None:
    record = confirmation(confirmed_at="2999-12-31T23:59:59Z")
    parsed_record = parse_input(dumps(record))
    head = SessionHead(0, 5, NOW - timedelta(hours=1), None)
    decision = decide(head, None, parsed_record, KEY, now=NOW, written_at=NOW)  # type: ignore[arg-type]
    assert decision.outcome.kind == "written"
    assert decision.head._replace(chain=None) == SessionHead(
        0, 6, NOW, None, chain_from=5, live_from=1)
    assert decision.seen == Seen(NOW, decision.seen.fingerprint)  # type: ignore[union-attr]


def test_the_worker_clock_moves_on_and_the_window_with_it() -> None:
    """Through the worker's step, whose `now` advances: a skewed record stays flagged while it
    is ahead; once the worker's clock has caught up, the record is no longer skewed."""
    owner, state = Owner(None, WINDOW, lambda: NOW), MemoryState()

    def handle(record: dict[str, Any], now: datetime) -> str:
        s = owner.handle(Source("in", 0, 0, None, dumps(record)), state, now)
        apply(state, s)
        assert s.decided is not None
        return s.decided.kind + "".join(f"+{d.code}" for d in s.decided.diagnostics)

    ahead = "2026-01-02T12:00:00Z"
    assert handle(confirmation(send_id="a", confirmed_at=ahead), NOW) == "written+clock_skew"
    # nine days on, the record is in the worker's past: it moves the session clock (to its
    # own time), and "a" is remembered from NOW, when it was first seen
    assert handle(confirmation(send_id="a", confirmed_at=ahead), NOW + timedelta(days=9)) \
        == "duplicate"
    assert handle(confirmation(send_id="b", confirmed_at=ahead), NOW + timedelta(days=1)) \
        == "written"
    assert state.head(KEY).clock == datetime(2026, 1, 2, 12, tzinfo=UTC)


def test_a_reset_dated_2999_counts_as_made_now() -> None:
    """746aef0: last_reset_at became 2999 and every later reset was a `duplicate` forever."""
    owner, state = Owner(None, WINDOW, lambda: NOW), MemoryState()
    steps = []
    for record, now in [
        (reset(reset_at="2999-12-31T23:59:59Z"), NOW),
        (reset(reset_at="2026-01-01T13:00:00Z"), NOW + timedelta(hours=2)),  # a real one
        (confirmation(confirmed_at="2026-01-01T14:00:00Z"), NOW + timedelta(hours=3)),
    ]:
        s = owner.handle(Source("in", 0, 0, None, dumps(record)), state, now)
        apply(state, s)
        steps.append(s)
    first, second, written = (s.decided for s in steps)
    assert first is not None and second is not None and written is not None
    assert (first.kind, second.kind) == ("reset", "reset")
    assert [(d.level, d.code, d.send_id) for d in first.diagnostics] == [
        ("warn", "clock_skew", None)]
    assert first.diagnostics[0].at == datetime(2999, 12, 31, 23, 59, 59, tzinfo=UTC)
    assert steps[0].head is not None and steps[0].head.last_reset_at == NOW
    assert written.entry is not None and written.entry.epoch == 2


def test_state_at_the_end_of_the_range_is_readable() -> None:
    """746aef0: a write dated 9999 stored a state no later load could read (finding 1)."""
    end = datetime(2999, 12, 31, 23, 59, 59, tzinfo=UTC)
    record = parse_input(dumps(confirmation(confirmed_at="2999-12-31T23:59:59Z")))
    decision = decide(EMPTY_HEAD, None, record, KEY, now=end, written_at=end)  # type: ignore[arg-type]
    assert decision.head.clock == end
    assert SessionHead.from_bytes(decision.head.to_bytes()) == decision.head
    assert decision.seen is not None and Seen.from_bytes(decision.seen.to_bytes()) == decision.seen


# --- finding 4: an agent writing into another agent's transcript --------------------------


@pytest.mark.parametrize(
    "overrides",
    [
        {},
        {"destination_agent_id": "ops"},  # "bound to me", says the sender: rule 4 still holds
        {"session_key": " Agent:Sales:Telegram:Group:-100123"},
        {"destination_agent_id": "sales"},
    ],
    ids=["key of sales", "and destination ops", "spelled otherwise", "and destination sales"],
)
def test_an_agent_cannot_write_into_another_agents_transcript(overrides: dict[str, Any]) -> None:
    """746aef0: written into the sales transcript, without a diagnostic."""
    record = confirmation(agent_id="ops", session_key="agent:sales:telegram:group:-100123")
    out = replayed([{**record, **overrides}, {**record, **overrides}])
    assert outcomes(out) == ["other_agent", "duplicate"]
    o = out[0]
    assert "entry" not in o and o["session_key"] == "agent:sales:telegram:group:-100123"
    assert codes(o) == [("warn", "destination_bound_to_other_agent")]
    assert "bound to agent sales, not the sender ops" in o["diagnostics"][0]["detail"]


def test_a_bare_key_is_the_senders_own_chat() -> None:
    out = replayed([confirmation(agent_id="sales", session_key="telegram:group:-100123")])
    assert outcomes(out) == ["written"]
    assert out[0]["session_key"] == "agent:sales:telegram:group:-100123"


# --- finding 6: false conflicts ------------------------------------------------------------

MEDIA = {"kind": "image", "name": "chart.png", "url": "https://cdn.example/c.png?sig=AAA"}
DM_KEY = "agent:ops:telegram:direct:12345"
TURN_IN_DM = {"kind": "message_tool", "turn": {"session_key": DM_KEY, "turn_id": "t7"}}


@pytest.mark.parametrize(
    ("retry", "kind"),
    [
        ({"payload.media": [{**MEDIA, "url": "https://cdn.example/c.png?sig=BBB"}]}, "duplicate"),
        ({"payload.media": [{**MEDIA, "mime": "image/png"}]}, "duplicate"),
        ({"payload.media": [{"kind": "image", "name": "chart.png"}]}, "duplicate"),
        ({"origin.turn.session_key": DM_KEY.upper()}, "duplicate"),
        ({"origin.turn.session_key": "agent:ops:telegram:dm:12345"}, "duplicate"),
        ({"origin.turn.session_key": "telegram:dm:12345"}, "duplicate"),
        ({"origin.turn.session_key": f"  {DM_KEY} "}, "duplicate"),
        ({"payload.native": [{"kind": "card", "url": "https://x.example/?t=2"}]}, "duplicate"),
        ({"payload.text": "Digest: 4 new tickets"}, "conflict"),
        ({"payload.media": [{**MEDIA, "name": "other.png"}]}, "conflict"),
        ({"origin.turn.turn_id": "t8"}, "conflict"),
        ({"origin.turn.session_key": "agent:ops:telegram:direct:54321"}, "conflict"),
    ],
    ids=["re-signed url", "added mime", "url dropped", "turn key upper-case",
         "turn key legacy dm", "turn key bare", "turn key padded", "native items changed",
         "other text", "other media name", "other turn", "other turn chat"],
)
def test_what_a_retry_may_change(retry: dict[str, Any], kind: str) -> None:
    """746aef0: each of the "duplicate" rows was an error-level conflicting_duplicate."""
    original = confirmation(origin=TURN_IN_DM, **{"payload.media": [MEDIA]})
    out = replayed([original, with_(original, **retry)])
    assert outcomes(out) == ["written", kind]
    if kind == "conflict":
        assert codes(out[1]) == [("error", "conflicting_duplicate")]


# --- finding 1, the mechanism: a step never raises but for the store ----------------------


class View:
    """A StateView that fails as told."""

    def __init__(self, head: Any = EMPTY_HEAD, seen: Any = None) -> None:
        self._head, self._seen = head, seen

    def head(self, key: str) -> SessionHead:
        if isinstance(self._head, BaseException):
            raise self._head
        return self._head  # type: ignore[no-any-return]

    def seen(self, key: str, send_id: str) -> Seen | None:
        if isinstance(self._seen, BaseException):
            raise self._seen
        return self._seen  # type: ignore[no-any-return]


def handled(view: Any, record: dict[str, Any] | None = None) -> Any:
    owner = Owner(PARTITIONS, WINDOW, lambda: WRITTEN_AT)
    line = dumps(record or confirmation())
    return owner.handle(source(7, line), view)


@pytest.mark.parametrize(
    ("view", "reason"),
    [
        (View(head=RuntimeError("boom")), "handling failed: RuntimeError: boom"),
        (View(seen=KeyError("k")), "handling failed: KeyError: 'k'"),
        # junk: an AttributeError where it is used, interpreted; compiled (deploy/compile), a
        # TypeError where it enters (mypyc checks a NamedTuple's type): a dead letter either way
        (View(head=None), "handling failed: "),
        (View(seen="not a Seen"), "handling failed: "),
        (View(head=RecursionError("deep")), "handling failed: RecursionError: deep"),
        (View(head=UnreadableState("epoch: not an integer >= 0")),
         "stored state of the session is unreadable: epoch: not an integer >= 0"),
        (View(seen=UnreadableState("not a seen record")),
         "stored state of the session is unreadable: not a seen record"),
    ],
    ids=["head raises", "seen raises", "head is junk", "seen is junk", "recursion",
         "head unreadable", "seen unreadable"],
)
def test_a_record_whose_handling_fails_is_a_dead_letter(view: View, reason: str) -> None:
    s = handled(view)
    assert s.outcome == "dead_letter" and s.decided is not None
    assert s.decided.error is not None and s.decided.error.startswith(reason), s.decided.error
    assert (s.decided.session_key, s.decided.send_id) == (KEY, "outbound-delivery:d1:0")
    assert (s.head, s.seen) == (None, None)  # nothing stored
    (dlq,) = s.sends
    assert dlq.topic == DLQ and dict(dlq.headers)["error"] == s.decided.error.encode()
    assert dlq.value == dumps(confirmation())  # the original bytes
    # the same from the core's own step
    record = parse_input(dumps(confirmation()))
    head, decision = decide_in(view, record, KEY, now=WRITTEN_AT, written_at=WRITTEN_AT)  # type: ignore[arg-type]
    assert decision.outcome == s.decided and decision.seen is None and decision.head is head


def test_a_failure_reason_is_bounded() -> None:
    s = handled(View(head=ValueError("x" * 10_000)))
    assert s.decided.error.startswith("handling failed: ValueError: xxx")
    assert len(s.decided.error) <= 300 and s.decided.error.endswith("…")


def test_a_reset_reads_no_seen_record() -> None:
    s = handled(View(seen=RuntimeError("not asked")), reset())
    assert s.outcome == "reset"


def test_a_store_failure_stops_the_step() -> None:
    with pytest.raises(StoreFailure, match="disk"):
        handled(View(head=StoreFailure("disk")))
    with pytest.raises(StoreFailure):
        handled(View(seen=StoreFailure("disk")))
    with pytest.raises(StoreFailure):
        decide_in(View(head=StoreFailure("disk")), parse_input(dumps(reset())), KEY,  # type: ignore[arg-type]
                  now=WRITTEN_AT, written_at=WRITTEN_AT)


def test_base_exceptions_are_not_swallowed() -> None:
    with pytest.raises(KeyboardInterrupt):
        handled(View(head=KeyboardInterrupt()))


# --- finding 10: replay and the worker are one step ---------------------------------------

HOSTILE_DEAD_LETTERS: list[bytes] = [
    b"{not json",
    b'{"schema":"delivery-confirmation/1","send_id":"s","payload":{"native":[{"kind":"e","x":NaN}]}}',
    dumps(confirmation(send_id="m1", session_key="agent::x")),
    dumps(confirmation(send_id="m2", origin={"kind": "turn_reply"})),
    dumps(confirmation(send_id="m3", confirmed_at="0001-01-01T00:00:00Z")),
    dumps(confirmation(send_id="m4", confirmed_at="9999-12-31T23:00:00-05:00")),
    dumps(confirmation(send_id="m5", **{"receipt.sent_at": "3000-01-01T00:00:00Z"})),
    dumps(confirmation(send_id="m6", origin={"kind": "turn_reply", "turn": {
        "session_key": "agent:Not Valid:main", "turn_id": "t"}})),
    dumps(reset(session_key="telegram:group:-100123")),
    dumps(reset(reset_at="0001-01-01T00:00:00Z")),
    dumps(confirmation(send_id="m7", payload={"native": [{"kind": "e", "v": 1e400}]})),
]


def test_replay_and_the_workers_step_give_the_same_dead_letters() -> None:
    """746aef0: the worker's dead letters of records with a bad key dropped send_id (and the
    step returned no outcome to compare); replay did no re-keying."""
    out = replayed(list(HOSTILE_DEAD_LETTERS), written_at=WRITTEN_AT)
    assert outcomes(out) == ["dead_letter"] * len(HOSTILE_DEAD_LETTERS)
    owner = Owner(PARTITIONS, WINDOW, lambda: WRITTEN_AT)
    for offset, (line, expected) in enumerate(zip(HOSTILE_DEAD_LETTERS, out, strict=True)):
        s = owner.handle(source(offset, line), MemoryState())
        assert s.decided is not None
        got = json.loads(render(expected["line"], s.decided))
        assert got == expected
        (dlq,) = s.sends
        assert dict(dlq.headers)["error"] == expected["error"].encode()
    send_ids = [o["send_id"] for o in out]
    assert send_ids == [None, None, "m1", None, None, None, None, "m6", None, None, None]
    assert out[2]["error"].startswith("session_key: malformed agent key")
    assert out[3]["error"] == "origin.turn: field required when origin.kind is turn_reply"
    assert out[4]["error"].startswith("confirmed_at: timestamp outside")
    assert out[1]["error"] == out[10]["error"] == "not JSON: NaN/Infinity are not JSON"


# --- the property: replay == the worker's step over its store ------------------------------


@settings(max_examples=60)
@given(INPUTS, st.data())
def test_replay_and_the_workers_step_agree_on_everything(lines: list[bytes],
                                                         data: st.DataObject) -> None:
    # windows shorter than the inputs' three days, so that send_ids expire and sweeps matter
    window = data.draw(st.sampled_from([timedelta(minutes=30), timedelta(hours=6),
                                        timedelta(days=1), WINDOW]))
    out = io.BytesIO()
    replay(lines, out, written_at=WRITTEN_AT, dedupe_window=window)
    expected = [json.loads(line) for line in out.getvalue().splitlines()]

    stores = FakeStores(PARTITIONS)
    cache = data.draw(st.sampled_from([1, 3, 100_000]))

    def new_store() -> SessionStore:
        return SessionStore(stores.db_for, window, cache_size=cache)

    store, owner = new_store(), Owner(PARTITIONS, window, lambda: WRITTEN_AT)
    got, decided_lines = [], []
    for number, line in enumerate(lines, 1):
        raw = line.rstrip(b"\r\n")
        if not raw.strip():
            continue  # replay's line framing: a blank line is no record
        decided_lines.append(raw)
        src = source(number, raw)
        store.partition = src.partition
        s = owner.handle(src, store)
        assert s.outcome != "rekeyed" and s.decided is not None
        apply(store, s)
        got.append(json.loads(render(number, s.decided)))
        action = data.draw(st.integers(0, 9), label="after")
        if action <= 2:  # the batch ends
            stores.apply(store.take_writes())
        elif action <= 5:
            store.sweep(list(range(PARTITIONS)), data.draw(st.integers(1, 50), label="budget"))
        elif action == 6:  # the batch ends, and a rebalance (or a restart) follows
            stores.apply(store.take_writes())
            store = new_store()
    assert got == expected
    # and the core's fold agrees too
    assert [json.loads(render(o["line"], x)) for o, x in
            zip(expected, run(decided_lines, dedupe_window=window), strict=True)] == expected

    # what the store holds is what the fold remembers, less expired send_ids
    stores.apply(store.take_writes())
    memory = MemoryState()
    run(decided_lines, memory, dedupe_window=window)
    fresh = new_store()
    for key, head in memory.heads.items():
        fresh.partition = partition_for(key, PARTITIONS)
        assert fresh.head(key) == head
    stored_seen = {}
    for p, db in enumerate(stores.dbs):
        for k, v in db.items(from_key=SEEN_KEYS_FROM):
            parts = parse_seen_key(k)
            if parts is not None:
                assert partition_for(parts[0], PARTITIONS) == p
                stored_seen[parts] = Seen.from_bytes(v)
    for (key, send_id), seen in memory.seens.items():
        if (key, send_id) in stored_seen:
            assert stored_seen[key, send_id] == seen
        else:  # swept: expired on its session's clock
            clock = memory.head(key).clock
            assert clock is not None and clock - seen.first_seen > window
    assert set(stored_seen) <= set(memory.seens)


# --- finding 2: a busy chat no longer outgrows the changelog ------------------------------

SENDS = 12_000


def test_a_busy_session_writes_only_small_records() -> None:
    """12,000 sends, one a minute, 80-character send_ids, in one session (746aef0: one value
    holding every send_id of the window, re-encoded on every write, 1.4 MB at its largest):
    every record the worker writes is small, the head does not grow with the sends, and
    dedupe still works."""
    stores = FakeStores(PARTITIONS)
    store = SessionStore(stores.db_for, WINDOW, cache_size=1000)
    owner = Owner(PARTITIONS, WINDOW, lambda: WRITTEN_AT)
    start = datetime(2025, 3, 1, tzinfo=UTC)
    base = confirmation()
    send_id = "outbound-delivery:{:062d}".format
    assert len(send_id(0)) == 80

    def line(i: int) -> bytes:
        at = (start + timedelta(minutes=i)).isoformat().replace("+00:00", "Z")
        return dumps({**base, "send_id": send_id(i), "confirmed_at": at})

    key = session_key_of(parse_input(line(0)))  # type: ignore[arg-type]
    assert key == KEY
    partition = partition_for(KEY, PARTITIONS)
    values, keys, head_sizes, kinds = [], [], set(), []

    def handle(raw: bytes) -> str:
        store.partition = partition
        s = owner.handle(Source("in", partition, 0, KEY.encode(), raw), store)
        store.remember(KEY, s.head, s.seen)
        return s.outcome

    for i in range(SENDS):
        kinds.append(handle(line(i)))
        if i == 10_080:  # exactly one window after the first send: still remembered
            assert handle(line(0)) == "duplicate"
        if i % 100 == 99:  # a batch
            store.sweep([partition], budget=2_000)
            writes = store.take_writes()
            stores.apply(writes)
            for _, k, v in writes:
                keys.append(len(k))
                if v is not None:
                    values.append(len(v))
                if k == f'["h",{json.dumps(KEY)}]'.encode() and v is not None:
                    head = SessionHead.from_bytes(v)
                    head_sizes.add(len(v) - len(str(head.next_seq)))
    assert kinds == ["written"] * SENDS
    assert max(values) < 200 and max(keys) < 200
    assert len(head_sizes) == 1  # the head's size depends on no count but its digits
    # expired send_ids leave the store: what is left is one window's worth
    for _ in range(2):  # from the cursor to the end, then round from the start
        store.sweep([partition], budget=100_000)
        stores.apply(store.take_writes())
    remembered = [k for k in stores.dbs[partition].data if parse_seen_key(k) is not None]
    assert len(remembered) == 10_081  # minutes 1919..11999: the clock minus 7 days, and on
    assert max(len(v) for v in stores.dbs[partition].data.values()) < 200
    # a retry of the first send, more than a window later, is a new send (DESIGN rule 3)
    assert handle(line(0)) == "written"


def test_a_connector_with_a_fast_clock_does_not_make_state_grow_without_bound() -> None:
    """A connector whose host clock runs 10 minutes fast: every record is `clock_skew` (rule
    7) and, by rule 3, does not move the session clock. The session then never forgets a
    send_id: the sweep frees nothing, one seen record per send, for ever (SessionStore)."""
    window = timedelta(days=1)
    stores = FakeStores(PARTITIONS)
    store = SessionStore(stores.db_for, window)
    owner = Owner(PARTITIONS, window, lambda: WRITTEN_AT)
    partition = partition_for(KEY, PARTITIONS)
    start, base = datetime(2025, 3, 1, tzinfo=UTC), confirmation()
    sends = 3 * 24 * 60  # three windows, one a minute
    for i in range(sends):
        now = start + timedelta(minutes=i)
        at = (now + timedelta(minutes=10)).isoformat()
        store.partition = partition
        s = owner.handle(Source("in", partition, i, KEY.encode(),
                                dumps({**base, "send_id": f"s{i}", "confirmed_at": at})),
                         store, now)
        assert s.outcome == "written"
        store.remember(KEY, s.head, s.seen)
        if i % 100 == 99:
            store.sweep([partition], budget=10_000)
            stores.apply(store.take_writes())
    remembered = [k for k in stores.dbs[partition].data if parse_seen_key(k) is not None]
    assert len(remembered) <= 24 * 60 + 200  # about one window's worth


def test_a_tombstone_is_a_dead_letter_with_its_reason() -> None:
    """Kafka's null value (a tombstone) on the input: compiled or not, a dead letter that names
    it, kept as it came (no value), and nothing stored."""
    owner = Owner(PARTITIONS, WINDOW, lambda: WRITTEN_AT)
    store = MemoryState()
    s = owner.handle(Source("in", 3, 41, b"agent:ops:telegram:direct:u1", None), store)
    assert s.outcome == "dead_letter" and s.decided is not None
    assert s.decided.error == NULL_VALUE
    (dlq,) = s.sends
    assert (dlq.topic, dlq.key, dlq.value) == (DLQ, b"agent:ops:telegram:direct:u1", None)
    assert dict(dlq.headers)["source.offset"] == b"41"
    apply(store, s)
    assert (store.heads, store.seens) == ({}, {})
