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
    legacy = [(s, json.dumps({"session_key": KEY, "seq": s, "epoch": 2}).encode(), None)
              for s in range(1, 7)]
    result = verify_session(KEY, [*legacy, (7, value, c.hex())], Head(8, c))  # type: ignore[arg-type, union-attr]
    assert result.ok and (result.chained, result.unchained) == (1, 6)


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
