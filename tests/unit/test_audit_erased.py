"""`audit` past input retention, for sessions erased before the checkpoint it starts from
(workers/commands/audit_start.py `erased_before` and `older`, and their use in
`audit.audit_partition`): the erasure's session-erasure/1 record gives its through_seq; seqs up to
it must be tombstoned, the seqs written after the erasure and before the checkpoint must still be
there. Before this, such a session was not checked at all: an entry missing between its erasure
and the checkpoint went unseen."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace

import pytest

from workers.commands import audit, audit_start
from workers.commands.audit_start import entry_key, erased_before, older
from workers.commands.loadgen import Progress
from workers.core import MemoryState, SessionHead, head_key
from workers.core.checkpoint_format import Checkpoint
from workers.core.outputs import ENTRIES
from workers.core.owner import Owner
from workers.settings import kafka_settings

VICTIM = "agent:ops:telegram:direct:erased"
OTHER = "agent:ops:telegram:direct:kept"
ERASED_AT = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)


def erasure(through: int, at: datetime = ERASED_AT, epoch: int = 1) -> dict:
    return {"schema": "session-erasure/1", "session_key": VICTIM,
            "erased_at": at.isoformat().replace("+00:00", "Z"), "reason": "r", "epoch": epoch,
            "through_seq": through}


def victim_state(next_seq: int = 6, epoch: int = 1) -> MemoryState:
    """A checkpoint's state: VICTIM erased through seq 3, then seqs 4..next_seq-1 written."""
    state = MemoryState()
    state.heads[VICTIM] = SessionHead(epoch, next_seq, ERASED_AT + timedelta(minutes=5),
                                      None, ERASED_AT)
    state.heads[OTHER] = SessionHead(0, 3, ERASED_AT)
    return state


def keys(session: str, *seqs: int) -> set[bytes]:
    return {entry_key(session, s) for s in seqs}


def test_the_erasure_record_gives_through_seq():
    state = victim_state()
    assert erased_before(state, {VICTIM: [erasure(3)]}) == {VICTIM: 3}
    # the latest record of that erasure; records of other erasures explain nothing
    later = erasure(5, ERASED_AT + timedelta(hours=1))
    assert erased_before(state, {VICTIM: [erasure(1, ERASED_AT - timedelta(days=1)),
                                          erasure(3), later]}) == {VICTIM: 3}
    assert erased_before(state, {VICTIM: [later]}) == {VICTIM: None}
    assert erased_before(state, {}) == {VICTIM: None}
    assert erased_before(state, {VICTIM: [erasure(3, epoch=2)]}) == {VICTIM: None}
    assert erased_before(state, {VICTIM: [{"schema": "session-erasure/1"}]}) == {VICTIM: None}


LIVE = keys(VICTIM, 4, 5) | keys(OTHER, 1, 2)  # after the erasure of 1..3, all there


@pytest.mark.parametrize(("live", "found"), [
    (LIVE, []),
    # an entry written after the erasure and before the checkpoint is gone: reported
    (LIVE - keys(VICTIM, 4), [("missing", entry_key(VICTIM, 4))]),
    (LIVE - keys(VICTIM, 5), [("missing", entry_key(VICTIM, 5))]),
    # an erased one holds a value again (the erasure's tombstone undone)
    (LIVE | keys(VICTIM, 2), [("unexpected", entry_key(VICTIM, 2))]),
    (LIVE - keys(OTHER, 1), [("missing", entry_key(OTHER, 1))]),
])
def test_entries_before_the_checkpoint(live, found):
    state = victim_state()
    erased = erased_before(state, {VICTIM: [erasure(3)]})
    assert list(older(audit_start.before(state), erased, set(), live, set())) == found


def test_without_its_erasure_record_a_session_cannot_be_checked():
    state = victim_state()
    erased = erased_before(state, {})
    assert list(older(audit_start.before(state), erased, set(), LIVE, set())) == [
        ("erasures_missing", VICTIM.encode())]
    # erased again after the checkpoint (replayed): that erasure tombstones every seq
    again = keys(VICTIM, 1, 2, 3, 4, 5, 6)
    assert list(older(audit_start.before(state), erased, again, keys(OTHER, 1, 2),
                      {VICTIM})) == []
    assert list(older(audit_start.before(state), erased, again, keys(OTHER, 1, 2) | keys(
        VICTIM, 4), {VICTIM})) == [("unexpected", entry_key(VICTIM, 4))]


def test_a_session_erased_only_after_the_checkpoint():
    """Its older entries are tombstoned by the replayed erasure: not missing (before, every one
    of them was skipped; a live value left now counts as unexpected)."""
    state = MemoryState()
    state.heads[OTHER] = SessionHead(0, 4, ERASED_AT)
    tombstoned = keys(OTHER, 1, 2, 3)
    assert list(older(audit_start.before(state), {}, tombstoned, set(), {OTHER})) == []
    assert list(older(audit_start.before(state), {}, tombstoned, keys(OTHER, 3), {OTHER})) == [
        ("unexpected", entry_key(OTHER, 3))]


# --- audit_partition over stored records (no broker): the checks above as the audit runs them


def entry(session: str, seq: int) -> bytes:
    return json.dumps({"schema": "transcript-entry/1", "session_key": session, "epoch": 1,
                       "seq": seq, "entry_id": f"e{seq}", "send_id": f"s{seq}",
                       "delivered_at": (ERASED_AT + timedelta(minutes=seq)).isoformat(),
                       "written_at": ERASED_AT.isoformat(), "text": f"t{seq}"}).encode()


def run_audit(monkeypatch, entries: list[tuple[bytes, bytes | None]], erasures: dict,
              since: datetime | None = None) -> audit.Report:
    """One partition audited from a checkpoint at input offset 7 (no input after it), its
    entries topic holding `entries`."""
    ks = kafka_settings({"TRANSCRIPT_TOPIC_PREFIX": "t."})
    state = victim_state()
    checkpoint = Checkpoint(0, 0, 1, 7, 0, "", [(head_key(s), h.to_bytes())
                                                for s, h in state.heads.items()])

    def read(ks_, topic, *, partitions=None, start=None, **_):  # noqa: ANN001, ANN202
        if topic != ks.topic(ENTRIES):
            return iter(())
        return (SimpleNamespace(key=k, value=v, offset=i, partition=0, timestamp=0, headers=[])
                for i, (k, v) in enumerate(entries))

    monkeypatch.setattr("workers.kafka_io.read", read)
    report = audit.Report()
    owner = Owner(partitions=8, dedupe_window=timedelta(days=7), clock=lambda: ERASED_AT)
    audit.audit_partition(ks, audit.single(owner, 0, checkpoint), report, since,
                          Progress(0, False), checkpoint, erasures)
    return report


def compacted(*missing: int) -> list[tuple[bytes, bytes | None]]:
    """The entries topic after the log cleaner removed the erased entries 1..3 and their
    tombstones: the victim's 4 and 5 (less `missing`), the other session's 1 and 2."""
    return [(entry_key(VICTIM, s), entry(VICTIM, s)) for s in (4, 5) if s not in missing] + [
        (entry_key(OTHER, s), entry(OTHER, s)) for s in (1, 2)]


def test_the_audit_finds_an_entry_missing_after_an_erasure(monkeypatch):
    erasures = {VICTIM: [erasure(3)]}
    clean = run_audit(monkeypatch, compacted(), erasures)
    # clean, and seq 4 after nothing is no gap: the erasure took 1..3 (compacted away)
    assert dict(clean.counts) == {}
    tombstoned = [*((entry_key(VICTIM, s), entry(VICTIM, s)) for s in (1, 2, 3)),
                  *((entry_key(VICTIM, s), None) for s in (1, 2, 3)), *compacted()]
    assert dict(run_audit(monkeypatch, tombstoned, erasures).counts) == {}

    gone = run_audit(monkeypatch, compacted(4), erasures)
    assert gone.examples["missing"] == [entry_key(VICTIM, 4).decode()]
    assert dict(gone.counts) == {"missing": 1, "order": 1}  # and 5 follows the erased 3
    deleted = run_audit(monkeypatch, [*compacted(), (entry_key(VICTIM, 5), None)], erasures)
    assert deleted.examples == {"missing": [entry_key(VICTIM, 5).decode()]}
    undone = run_audit(monkeypatch, [(entry_key(VICTIM, 2), entry(VICTIM, 2)), *compacted()],
                       erasures)
    assert undone.examples["unexpected"] == [entry_key(VICTIM, 2).decode()]
    # without the erasure record: not checkable, and the gap before 4 not explained
    assert dict(run_audit(monkeypatch, compacted(), {}).counts) == {"erasures_missing": 1,
                                                                   "order": 1}


def test_since_leaves_older_entries_before_it_unchecked(monkeypatch):
    """--since skips entries delivered before it: they are not reported missing either."""
    since = ERASED_AT + timedelta(minutes=4, seconds=30)  # after victim 4, other 1 and 2
    report = run_audit(monkeypatch, compacted(), {VICTIM: [erasure(3)]}, since)
    assert dict(report.counts) == {}
    report = run_audit(monkeypatch, compacted(5), {VICTIM: [erasure(3)]}, since)
    assert report.examples == {"missing": [entry_key(VICTIM, 5).decode()]}
