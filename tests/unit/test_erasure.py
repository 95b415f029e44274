"""Erasure (`transcript-owner forget`): session-erase/1 through the core, the owner and the
worker's session store.

An erase tombstones every entry the session had (seq 1..next_seq-1) and its state (head and
every remembered send_id, in the store and in the batch), records a session-erasure/1 without
content, and leaves a head with the next epoch, next_seq and erased_at. Later: a confirmation
confirmed at or before erased_at is not written (`erased_send`, no state kept); later ones are
written in the new epoch at the next seq. replay/audit (MemoryState) and the worker's store
(SessionStore) end in the same state.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

from transcript_connector.partitioning import partition_for

from schemas import SessionErase
from tests.unit.test_session_store import FakeStores, store_over
from tests.unit.wire import WRITTEN_AT, confirmation, dumps, reset, run
from workers.core import EMPTY_HEAD, MemoryState, SessionHead, head_key, seen_key
from workers.core.outcomes import CONFIRMED_BEFORE_ERASURE
from workers.core.outputs import DIAGNOSTICS, ENTRIES, ERASURES, Source, entry_key
from workers.core.owner import Owner, Step, apply

KEY = "agent:ops:telegram:group:-100123"
OTHER = "agent:ops:slack:channel:c0general"
T0 = datetime(2025, 3, 1, 12, tzinfo=UTC)
NOW = datetime(2025, 3, 2, tzinfo=UTC)


def erase(session_key: str = KEY, erased_at: str = "2025-03-01T13:00:00Z",
          reason: str | None = "GDPR request 42") -> dict[str, Any]:
    return {"schema": "session-erase/1", "session_key": session_key, "erased_at": erased_at,
            "reason": reason}


def at(minutes: int) -> str:
    return (T0 + timedelta(minutes=minutes)).isoformat().replace("+00:00", "Z")


class Worker:
    """The processor's loop over fake partition stores: handle, erase, remember, commit."""

    def __init__(self, partitions: int = 8) -> None:
        self.stores = FakeStores(partitions)
        self.store = store_over(self.stores)
        self.owner = Owner(partitions, timedelta(days=7), lambda: WRITTEN_AT)
        self.partitions = partitions
        self.offset = 0

    def handle(self, record: dict[str, Any]) -> Step:
        self.offset += 1
        key = record["session_key"]
        p = partition_for(key, self.partitions)
        self.store.partition = p
        step = self.owner.handle(Source("in", p, self.offset, key.encode(), dumps(record)),
                                 self.store, NOW)
        apply(self.store, step)
        return step

    def commit(self) -> None:
        self.stores.apply(self.store.take_writes())

    def stored(self, session: str) -> dict[bytes, bytes]:
        db = self.stores.db_for(partition_for(session, self.partitions)).data
        marks = (head_key(session), seen_key(session, "")[:-3])
        return {k: v for k, v in db.items() if k.startswith(marks)}


def history() -> list[dict[str, Any]]:
    return [confirmation(send_id=f"s{i}", confirmed_at=at(i), **{"payload.text": f"t{i}"})
            for i in range(1, 4)]


def test_an_erase_tombstones_every_entry_and_records_the_erasure_without_content() -> None:
    w = Worker()
    assert [w.handle(r).outcome for r in history()] == ["written"] * 3
    s = w.handle(erase())
    assert s.outcome == "erased" and s.erase and s.seen is None
    home = partition_for(KEY, 8)
    tombstones = [o for o in s.sends if o.topic == ENTRIES]
    assert [(o.key, o.value, o.partition) for o in tombstones] == [
        (entry_key(KEY, seq), None, home) for seq in (1, 2, 3)]
    (record,) = [o for o in s.sends if o.topic == ERASURES]
    assert record.key == KEY.encode()
    assert json.loads(record.value) == {
        "schema": "session-erasure/1", "session_key": KEY, "erased_at": "2025-03-01T13:00:00Z",
        "reason": "GDPR request 42", "epoch": 1, "through_seq": 3}
    assert b"t1" not in record.value and b"s1" not in record.value  # no text, no send_id
    assert s.head == SessionHead(1, 4, T0 + timedelta(minutes=3), None,
                                 datetime(2025, 3, 1, 13, tzinfo=UTC), chain_from=4, live_from=4)


def test_the_store_keeps_only_a_head_without_content_after_an_erase() -> None:
    w = Worker()
    for r in history():
        w.handle(r)
    w.commit()  # s1..s3 in the store
    w.handle(confirmation(send_id="s4", confirmed_at=at(4)))  # s4 only pending in the batch
    w.handle(erase())
    w.commit()
    stored = w.stored(KEY)
    assert list(stored) == [head_key(KEY)]
    head = SessionHead.from_bytes(stored[head_key(KEY)])
    assert (head.epoch, head.next_seq, head.erased_at) == (
        1, 5, datetime(2025, 3, 1, 13, tzinfo=UTC))
    assert w.store.seen(KEY, "s1") is None and w.store.seen(KEY, "s4") is None


def test_an_erase_leaves_other_sessions_alone() -> None:
    w = Worker(partitions=1)  # both sessions in one store: the prefix scan must stop at KEY's
    prefixed = KEY + "x"  # a key that KEY is a prefix of
    for key in (KEY, OTHER, prefixed):
        w.handle(confirmation(session_key=key, send_id="a", confirmed_at=at(1)))
    w.commit()
    w.handle(erase())
    w.commit()
    assert set(w.stored(OTHER)) == {head_key(OTHER), seen_key(OTHER, "a")}
    assert set(w.stored(prefixed)) == {head_key(prefixed), seen_key(prefixed, "a")}
    assert w.handle(confirmation(session_key=OTHER, send_id="a",
                                 confirmed_at=at(1))).outcome == "duplicate"


def test_sends_of_the_erased_history_are_not_written_again_later_ones_are() -> None:
    w = Worker()
    for r in history():
        w.handle(r)
    w.handle(erase())
    retry = w.handle(history()[0])  # a retry of an erased send
    assert retry.outcome == "erased_send" and retry.head is None and retry.seen is None
    assert [o.topic for o in retry.sends] == [DIAGNOSTICS]
    diag = json.loads(retry.sends[0].value)
    assert (diag["code"], diag["level"], diag["send_id"]) == (CONFIRMED_BEFORE_ERASURE, "info",
                                                              "s1")
    assert "t1" not in diag["detail"]
    late = w.handle(confirmation(send_id="s9", confirmed_at=at(59)))  # before erased_at too
    assert late.outcome == "erased_send"
    new = w.handle(confirmation(send_id="s1", confirmed_at=at(61)))  # after: a new send
    assert new.outcome == "written"
    assert (new.decided.entry.epoch, new.decided.entry.seq) == (1, 4)  # seqs never repeat
    assert w.handle(confirmation(send_id="s1", confirmed_at=at(61))).outcome == "duplicate"


def test_a_second_erase_covers_every_seq_and_erased_at_never_moves_back() -> None:
    w = Worker()
    for r in history():
        w.handle(r)
    w.handle(erase())
    w.handle(confirmation(send_id="n1", confirmed_at=at(70)))
    again = w.handle(erase(erased_at="2025-03-01T12:30:00Z"))  # dated before the first
    erasure = json.loads(next(o for o in again.sends if o.topic == ERASURES).value)
    assert (erasure["epoch"], erasure["through_seq"]) == (2, 4)
    assert erasure["erased_at"] == "2025-03-01T13:00:00Z"
    assert len([o for o in again.sends if o.topic == ENTRIES]) == 4


def test_an_erase_dated_ahead_of_the_worker_counts_as_made_now() -> None:
    w = Worker()
    s = w.handle(erase(erased_at="2999-01-01T00:00:00Z"))
    assert s.outcome == "erased" and s.head is not None and s.head.erased_at == NOW
    assert json.loads(next(o for o in s.sends if o.topic == ERASURES).value)["through_seq"] == 0


def test_an_erase_needs_a_full_key_and_its_reason_is_bounded() -> None:
    w = Worker()
    bare = w.handle(erase(session_key="main"))
    assert bare.outcome == "dead_letter"
    assert "an erase needs a full agent:<agent_id>:… key" in bare.decided.error
    long = w.handle(erase(reason="x" * 1001))
    assert long.outcome == "dead_letter" and "reason" in long.decided.error
    assert "x" * 20 not in long.decided.error  # a reason names the field, never the value
    assert w.handle(erase(reason=None)).outcome == "erased"


def test_memory_state_ends_where_the_worker_store_does() -> None:
    """replay and audit (the one step over a MemoryState) decide like the worker."""
    records = [*history(), reset(reset_at=at(10)), erase(), history()[1],
               confirmation(send_id="z", confirmed_at=at(90))]
    state = MemoryState()
    kinds = [o.kind for o in run([dumps(r) for r in records], state, written_at=NOW)]
    w = Worker()
    assert [w.handle(r).outcome for r in records] == kinds == [
        "written", "written", "written", "reset", "erased", "erased_send", "written"]
    assert set(state.seens) == {(KEY, "z")}
    w.commit()
    stored = SessionHead.from_bytes(w.stored(KEY)[head_key(KEY)])
    # alike but for the chain: replay's written_at is NOW, the worker's its clock
    assert state.head(KEY)._replace(chain=None) == stored._replace(chain=None)
    assert state.head(KEY).chain is not None and stored.chain is not None
    assert state.head(KEY).epoch == 2


def test_a_head_never_erased_keeps_its_bytes() -> None:
    head = SessionHead(2, 5, T0, T0)
    assert b"erased_at" not in head.to_bytes()
    assert SessionHead.from_bytes(head.to_bytes()) == head
    erased = SessionHead(2, 5, T0, None, T0)
    assert SessionHead.from_bytes(erased.to_bytes()) == erased
    assert EMPTY_HEAD.erased_at is None


def test_forget_refuses_an_invalid_key_or_reason_before_it_touches_kafka(capsys) -> None:
    from workers import cli

    assert cli.main(["forget", "main", "--reason", "r-secret"]) == 2
    err = capsys.readouterr().err
    assert "an erase needs a full agent:<agent_id>:… key" in err and "r-secret" not in err
    assert cli.main(["forget", KEY, "--reason", " "]) == 2
    assert "--reason must not be empty" in capsys.readouterr().err
    assert cli.main(["forget", KEY, "--reason", "x" * 1001]) == 2
    assert "reason: longer than 1000 characters" in capsys.readouterr().err


def test_the_forget_record_is_canonical() -> None:
    from workers.commands.forget import erase_record

    record = erase_record(" Agent:Ops:Telegram:DM:42 ", "r", NOW)
    assert isinstance(record, SessionErase)
    assert record.session_key == "agent:ops:telegram:direct:42"
