"""The hash chain as the worker writes it and `audit` checks it (DESIGN 1.2, "Tamper evidence"):
its roots, resets, erasures, sessions written before it, the head's bytes, and the audit's
streaming check (workers/commands/audit_chain.py) against the connectors' `verify_session`.
The vectors both connector packages run are connectors/python/tests/test_chain.py's."""

from __future__ import annotations

import hashlib
import json
from datetime import datetime, timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from transcript_connector.chain import Head, link, root, verify_session

from tests.unit.wire import T0, confirmation, dumps, parsed, reset
from workers.commands.audit_chain import ChainCheck, state_heads
from workers.commands.forget import erase_record
from workers.core import EMPTY_HEAD, MemoryState, SessionHead, UnreadableState, head_key
from workers.core.decide import decide
from workers.core.outputs import ENTRIES, Source, entry_key
from workers.core.owner import Owner, apply

KEY = "agent:ops:telegram:group:-100123"
AT = datetime.fromisoformat(T0)


def _decide(head: SessionHead, wire: dict) -> tuple[SessionHead, bytes | None, bytes | None]:
    d = decide(head, None, parsed(wire), KEY, now=AT + timedelta(hours=1),
               written_at=AT + timedelta(hours=1))
    return d.head, d.outcome.entry_json, d.outcome.chain


def _send(n: int, text: str = "hi", at: datetime = AT) -> dict:
    return confirmation(send_id=f"s{n}", confirmed_at=(at + timedelta(seconds=n)).isoformat(),
                        **{"payload.text": text})


def test_the_root_is_the_designs() -> None:
    assert root(KEY, 0) == hashlib.sha256(f"transcript-chain/1\n{KEY}\n0".encode()).digest()
    assert root("agent:é:k#1", 12) == hashlib.sha256(
        "transcript-chain/1\nagent:é:k#1\n12".encode()).digest()
    assert link(b"\0" * 32, b"v") == hashlib.sha256(b"\0" * 32 + b"v").digest()


def test_a_new_session_chains_from_its_root_and_each_entry_from_the_last() -> None:
    head, first, c1 = _decide(EMPTY_HEAD, _send(1))
    assert c1 == link(root(KEY, 0), first) and head.chain == c1
    head, second, c2 = _decide(head, _send(2))
    assert c2 == link(c1, second) and head.chain == c2  # type: ignore[arg-type]


def test_a_reset_continues_the_chain_and_a_session_reset_first_roots_in_its_epoch() -> None:
    head, _, c1 = _decide(EMPTY_HEAD, _send(1))
    head, _, none = _decide(head, reset(KEY, (AT + timedelta(seconds=5)).isoformat()))
    assert none is None and head.epoch == 1 and head.chain == c1
    head, value, c2 = _decide(head, _send(6))
    assert json.loads(value)["epoch"] == 1 and c2 == link(c1, value)  # type: ignore[arg-type]
    fresh, _, _ = _decide(EMPTY_HEAD, reset(KEY, T0))
    fresh, value, c = _decide(fresh, _send(7))
    assert c == link(root(KEY, 1), value)  # type: ignore[arg-type]


def test_an_erasure_ends_the_chain_and_the_next_entry_roots_in_the_new_epoch() -> None:
    head, _, _ = _decide(EMPTY_HEAD, _send(1, "erased text"))
    head, _, _ = _decide(head, _send(2, "erased text too"))
    erase = erase_record(KEY, "request", AT + timedelta(minutes=1))
    d = decide(head, None, erase, KEY, now=AT + timedelta(hours=1),  # type: ignore[arg-type]
               written_at=AT + timedelta(hours=1))
    assert d.outcome.kind == "erased" and d.head.chain is None and d.head.epoch == 1
    # the erasure record keeps nothing derived from the erased entries
    assert set(json.loads(d.outcome.erasure.model_dump_json())) == {  # type: ignore[union-attr]
        "schema", "session_key", "erased_at", "reason", "epoch", "through_seq"}
    after, value, c = _decide(d.head, _send(200))
    assert c == link(root(KEY, 1), value)  # type: ignore[arg-type]
    assert after.next_seq == 4 and verify_session(KEY, [(3, value, c.hex())],  # type: ignore[arg-type, union-attr]
                                                  Head(4, c)).ok


def test_a_session_written_before_the_chain_starts_it_at_its_next_entry() -> None:
    """A head of 0.x has no chain: its next entry roots in the head's epoch; its older
    entries stay unchained (the worker never reads them back), counted, not checked."""
    old = SessionHead(2, 7, AT, AT)
    assert b"chain" not in old.to_bytes() and SessionHead.from_bytes(old.to_bytes()) == old
    head, value, c = _decide(old, _send(1))
    assert c == link(root(KEY, 2), value) and head.next_seq == 8  # type: ignore[arg-type]
    assert (head.chain_from, head.live_from) == (7, 1)  # never erased: 1..6 may all be live
    legacy = [(s, json.dumps({"session_key": KEY, "seq": s, "epoch": 2,
                              "written_at": T0}).encode(), None) for s in range(1, 7)]
    result = verify_session(KEY, [*legacy, (7, value, c.hex())],  # type: ignore[union-attr]
                            Head(8, c, head.chain_from, head.live_from))
    assert result.ok and (result.chained, result.unchained) == (1, 6)
    assert verify_session(KEY, [*legacy, (7, value, c.hex())]).ok  # type: ignore[union-attr]


def test_the_head_keeps_its_chain_and_refuses_a_bad_one() -> None:
    head = SessionHead(1, 3, AT, None, None, bytes(range(32)))
    data = head.to_bytes()
    assert data.endswith(b',"chain":"' + bytes(range(32)).hex().encode() + b'"}')
    assert SessionHead.from_bytes(data) == head
    for bad in (b'"' + b"A" * 64 + b'"', b'"00"', b"7", b'"' + b"g" * 64 + b'"'):
        with pytest.raises(UnreadableState, match="chain"):
            SessionHead.from_bytes(data.replace(b'"' + bytes(range(32)).hex().encode() + b'"',
                                                bad))


def test_state_heads_reads_the_latest_head_of_each_session() -> None:
    a, b = SessionHead(0, 2, AT, None, None, b"\1" * 32), SessionHead(0, 5)
    heads = state_heads([(head_key(KEY), EMPTY_HEAD.to_bytes()), (head_key(KEY), a.to_bytes()),
                         (head_key("agent:x:y"), b.to_bytes()), (head_key("agent:x:y"), None),
                         (b'["s","k","x"]', b"[0,\"\"]"), (head_key("agent:z:z"), b"{"),
                         (b'["h",1]', b"{}"), (None, b"x")])
    assert heads[KEY] == a and "agent:x:y" not in heads
    assert isinstance(heads["agent:z:z"], str)


# --- the worker's own output, tampered with ---------------------------------------------------

TEXTS = st.text(st.characters(codec="utf-8"), max_size=40)
SESSION_OPS = st.lists(st.one_of(TEXTS, st.none()), min_size=1, max_size=12)  # None: a reset


def written(ops: list[str | None]) -> list[tuple[bytes, bytes, bytes]]:
    """The entries (key, value, chain header) the worker's step writes for a session: a send
    per text, a reset per None."""
    owner = Owner(partitions=None, dedupe_window=timedelta(days=7),
                  clock=lambda: AT + timedelta(hours=1))
    state, out = MemoryState(), []
    for i, op in enumerate(ops):
        at = AT + timedelta(seconds=i + 1)
        record = reset(KEY, at.isoformat()) if op is None else _send(i, op or "x", AT)
        step = owner.handle(Source("in", 0, i, KEY.encode(), dumps(record)), state, at)
        apply(state, step)
        out += [(o.key, o.value, dict(o.headers)["chain"]) for o in step.sends
                if o.topic == ENTRIES and o.value is not None]
    return out


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=SESSION_OPS, data=st.data())
def test_any_single_byte_changed_in_a_sessions_entries_is_found(ops, data) -> None:
    entries = written(ops)
    if not entries:
        return
    links = [(int(k[-10:]), v, c) for k, v, c in entries]
    head = Head(links[-1][0] + 1, bytes.fromhex(links[-1][2].decode()))
    assert verify_session(KEY, links, head).ok
    i = data.draw(st.integers(0, len(links) - 1))
    seq, value, chain = links[i]
    field = data.draw(st.sampled_from(["value", "chain"]))
    blob = value if field == "value" else chain
    at = data.draw(st.integers(0, len(blob) - 1))
    byte = data.draw(st.integers(0, 255).filter(lambda b: b != blob[at]))
    changed = blob[:at] + bytes([byte]) + blob[at + 1:]
    links[i] = (seq, changed, chain) if field == "value" else (seq, value, changed)
    assert not verify_session(KEY, links, head).ok
    assert not verify_session(KEY, links).ok or (i == len(links) - 1 and field == "chain")


TAMPER = st.sampled_from(["none", "rewrite", "rewrite_rechained", "tombstone", "append",
                          "strip", "move"])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=SESSION_OPS, tamper=TAMPER, data=st.data())
def test_the_audits_streaming_check_finds_what_verify_session_finds(ops, tamper, data) -> None:
    """The audit keeps no values (audit_chain.ChainCheck): over the log as written, then
    tampered with by records appended later, it reports exactly the seqs verify_session
    reports over compaction's view with all values at hand."""
    entries = written(ops)
    if not entries:
        return
    log: list[tuple[bytes, bytes | None, bytes | None]] = [(k, v, c) for k, v, c in entries]
    last = int(entries[-1][0][-10:])
    head = Head(last + 1, bytes.fromhex(entries[-1][2].decode()))
    i = data.draw(st.integers(0, len(entries) - 1))
    key, value, chain = entries[i]
    if tamper == "rewrite":
        log.append((key, value.replace(b'"text":"', b'"text":"!'), chain))
    elif tamper == "rewrite_rechained":  # every entry from i on, chained again
        previous = root(KEY, json.loads(value)["epoch"]) if i == 0 else \
            bytes.fromhex(entries[i - 1][2].decode())
        for k, v, _ in entries[i:]:
            v = v.replace(b'"text":"', b'"text":"!') if k == key else v
            previous = link(previous, v)
            log.append((k, v, previous.hex().encode()))
    elif tamper == "tombstone":
        log.append((key, None, None))
    elif tamper == "append":
        again = json.dumps(dict(json.loads(value), seq=last + 1)).encode()
        log.append((entry_key(KEY, last + 1), again,
                    link(head.chain, again).hex().encode()))  # type: ignore[arg-type]
    elif tamper == "strip":
        log.append((key, value, None))
    elif tamper == "move" and len(entries) > 1:
        j = (i + 1) % len(entries)
        log.append((key, entries[j][1], entries[j][2]))
    check = ChainCheck()
    latest: dict[bytes, tuple[bytes | None, bytes | None]] = {}
    for k, v, c in log:
        check.read(k, v, () if c is None else [("chain", c)])
        latest[k] = (v, c)
    view = [(int(k[-10:]), v, c) for k, (v, c) in latest.items() if v is not None]
    expected = verify_session(KEY, view, head).findings
    found = list(check.findings({KEY: SessionHead(0, head.next_seq, chain=head.chain)}, {}))
    assert sorted(int(f.split(" seq ")[1].split(":")[0]) for f in found) == \
        sorted(f.seq for f in expected)
    moved_nothing = tamper == "move" and len(entries) == 1
    assert bool(found) == (tamper != "none" and not moved_nothing), (tamper, found)


def test_a_checkpoints_head_finds_entries_chained_again_with_a_forged_state_head() -> None:
    """A writer of the entries topic and of the changelog (not of the checkpoints) rewrites
    seq 2 on, chains the rest again and forges the head to match: the chain and the state's
    head agree, the checkpoint's head at seq 2 does not."""
    entries = written(["one", "two", "three", "four"])
    c2 = bytes.fromhex(entries[1][2].decode())
    check = ChainCheck()
    for k, v, c in entries:
        check.read(k, v, [("chain", c)])
    previous = c = bytes.fromhex(entries[0][2].decode())
    for k, v, _ in entries[1:]:
        v = v.replace(b'"text":"', b'"text":"forged ')
        previous = c = link(previous, v)
        check.read(k, v, [("chain", c.hex().encode())])
    forged = {KEY: SessionHead(0, 5, chain=c)}
    assert list(check.findings(forged, {})) == []  # the chain and the forged head agree
    found = list(check.findings(forged, {KEY: SessionHead(0, 3, chain=c2)}))
    assert found == [f"{KEY} seq 2: differs from the chain the checkpoint holds: the entry "
                     "was changed since"]


def test_a_session_whose_head_is_unreadable_is_one_finding_not_two() -> None:
    entries = written(["one", "two"])
    check = ChainCheck()
    for k, v, c in entries:
        check.read(k, v, [("chain", c)])
    other = SessionHead(0, 2, chain=b"\0" * 32)  # another session, so the partition has heads
    assert list(check.findings({KEY: "chain: not 64 lowercase hex digits",
                                "agent:ops:x:y": other}, {})) == [
        f"{KEY}: the state's head is unreadable (chain: not 64 lowercase hex digits)",
        "agent:ops:x:y seq 1: the worker's state holds a chain through this seq, and no "
        "chained entry is left: removed"]
    assert list(check.findings({"agent:ops:x:y": other}, {}))[0] == \
        f"{KEY}: chained entries and no head in the state"


# --- where the chain starts: the head records it (issue 42.4) ---------------------------------


def test_the_head_records_where_its_chain_starts_and_reads_old_heads_as_not_known() -> None:
    """`chain_from` and `live_from` are written only when known: a head written before them
    keeps its bytes and reads them as None (not known: verification falls back to the entries'
    written_at for it)."""
    old = SessionHead(1, 3, AT, None, None, bytes(range(32)))
    data = old.to_bytes()
    assert b"chain_from" not in data and b"live_from" not in data
    assert SessionHead.from_bytes(data) == old and SessionHead.from_bytes(data).chain_from is None
    new = old._replace(chain_from=2, live_from=1)
    assert new.to_bytes() == data[:-1] + b',"chain_from":2,"live_from":1}'
    assert SessionHead.from_bytes(new.to_bytes()) == new
    for bad in (b"0", b'"2"', b"true", b"-1", b"2.0"):
        with pytest.raises(UnreadableState, match="chain_from"):
            SessionHead.from_bytes(new.to_bytes().replace(b'"chain_from":2',
                                                          b'"chain_from":' + bad))
    # a new session's chain starts at 1; an erasure sets where the next starts and what is gone
    head, _, _ = _decide(EMPTY_HEAD, _send(1))
    assert (head.chain_from, head.live_from) == (1, 1)
    head, _, _ = _decide(head, _send(2))
    head, _, _ = _decide(head, reset(KEY, (AT + timedelta(seconds=5)).isoformat()))
    assert (head.chain_from, head.live_from) == (1, 1)
    erased = _erased(head)
    assert (erased.chain, erased.chain_from, erased.live_from) == (None, 3, 3)
    after, _, _ = _decide(erased, _send(200))
    assert (after.chain_from, after.live_from, after.next_seq) == (3, 3, 4)
    # a head erased before heads recorded it: where its entries may start is not known
    unknown, _, _ = _decide(SessionHead(1, 3, AT, None, AT), _send(200))
    assert (unknown.chain_from, unknown.live_from) == (3, None)


def _erased(head: SessionHead) -> SessionHead:
    erase = erase_record(KEY, "request", AT + timedelta(minutes=1))
    return decide(head, None, erase, KEY, now=AT + timedelta(hours=1),  # type: ignore[arg-type]
                  written_at=AT + timedelta(hours=1)).head


def _session_erased_then_written() -> tuple[list[tuple[int, bytes, bytes]], list[tuple[int, bytes,
                                                                                       bytes]],
                                            SessionHead]:
    """Seqs 1..3 written and erased, then 4 and 5 written: (the erased entries, the live ones,
    the worker's head)."""
    head, gone, live = EMPTY_HEAD, [], []
    for n in (1, 2, 3):
        head, value, c = _decide(head, _send(n, f"erased {n}"))
        gone.append((n, value, c.hex().encode()))  # type: ignore[union-attr]
    head = _erased(head)
    for n in (4, 5):
        head, value, c = _decide(head, _send(100 + n))
        live.append((n, value, c.hex().encode()))  # type: ignore[union-attr]
    return gone, live, head  # type: ignore[return-value]


def _audit(entries: list[tuple[int, bytes | None, bytes | None]], head: SessionHead | None
           ) -> list[str]:
    check = ChainCheck()
    for seq, v, c in entries:
        check.read(entry_key(KEY, seq), v, [] if c is None else [("chain", c)])
    return list(check.findings(None if head is None else {KEY: head}, {}))


def test_erased_entries_put_back_without_headers_before_the_new_chain_are_found_with_the_head(
        ) -> None:
    """Before: put back with no header, in front of the new chain, they read as written before
    the chain, with the worker's head too (entries written 2025: their written_at cannot tell)."""
    gone, live, head = _session_erased_then_written()
    put_back = [(s, v, None) for s, v, _ in gone] + live
    state = Head(head.next_seq, head.chain, head.chain_from, head.live_from)
    found = verify_session(KEY, put_back, state).findings
    assert [f.seq for f in found] == [1, 2, 3]
    assert found[0].problem == ("the worker's state erased every seq below 4: this entry was "
                                "put back")
    assert [f.split(": ")[0] for f in _audit(put_back, head)] == [f"{KEY} seq {s}"
                                                                 for s in (1, 2, 3)]
    assert verify_session(KEY, live, state).ok and _audit(live, head) == []  # honest
    # with their old headers too (then the new chain's first entry no longer follows either)
    assert [f.seq for f in verify_session(KEY, gone + live, state).findings] == [1, 2, 3]


def test_unchained_entries_appended_after_an_erasure_are_found_with_the_head() -> None:
    """Erased, nothing written since: the head holds no chain. Unchained entries appended at
    the next seqs passed the head check as written before the chain."""
    gone, _, _ = _session_erased_then_written()
    head = _erased(_decide(_decide(_decide(EMPTY_HEAD, _send(1))[0], _send(2))[0], _send(3))[0])
    forged = [(s + 3, v.replace(b'"seq":%d' % s, b'"seq":%d' % (s + 3)), None)
              for s, v, _ in gone[:2]]
    assert [f.split(": ")[0] for f in _audit(forged, head)] == [f"{KEY} seq 4", f"{KEY} seq 5"]
    assert "where the worker's state says the chain starts" in _audit(forged, head)[0]


ODD = {"twice": lambda c: [("chain", c), ("chain", c)], "null": lambda c: [("chain", None)],
       "not ASCII": lambda c: [("chain", c[:63] + "é".encode())],
       "empty": lambda c: [("chain", b"")], "uppercase": lambda c: [("chain", c.upper())],
       "none": lambda c: []}


@pytest.mark.parametrize("odd", sorted(ODD))
def test_the_sink_show_and_audit_read_odd_headers_by_one_rule(odd: str) -> None:
    """Before: a header given twice, null or not ASCII was stored by the sink (and read by show)
    as none, "written before the chain", while audit reported the same record. The first entry's
    header is the odd one; the entries were written after the chain began (so stripping it,
    "none", is a finding too)."""
    from transcript_connector.entries_topic import Upsert, classify

    owner = Owner(partitions=None, dedupe_window=timedelta(days=7),
                  clock=lambda: datetime.fromisoformat("2026-12-03T10:00:00+00:00"))
    state, records = MemoryState(), []
    for i in range(3):
        step = owner.handle(Source("in", 0, i, KEY.encode(), dumps(_send(i))), state, AT)
        apply(state, step)
        records += [(o.key, o.value, dict(o.headers)["chain"]) for o in step.sends
                    if o.topic == ENTRIES and o.value is not None]
    tampered = [(k, v, ODD[odd](c) if n == 0 else [("chain", c)])
                for n, (k, v, c) in enumerate(records)]
    stored = []  # what the sink stores, as show reads it back
    for k, v, h in tampered:
        change = classify(k, v, h)
        assert isinstance(change, Upsert)
        stored.append((change.seq, v, change.chain))
    shown = [f.seq for f in verify_session(KEY, stored).findings]
    check = ChainCheck()
    for k, v, h in tampered:
        check.read(k, v, h)
    audited = [int(f.split(" seq ")[1].split(":")[0]) for f in check.findings(None, {})
               if f.startswith(f"{KEY} seq ")]
    assert shown == audited == [1]
