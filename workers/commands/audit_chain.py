"""The hash chain, as `audit` checks it (DESIGN 1.2, "Tamper evidence"): every session's chain
over the whole compacted entries topic, and against the worker's state.

It needs no input: an entry whose content was changed, one removed, inserted or moved, is a
finding naming session and seq, at any age. The check itself is
`transcript_connector.chain.verify_checked` (the connectors' too); this module feeds it.

- **Compaction's view**: per partition, the latest record of each entry key. A partition may
  hold more live entries than the audit should keep in memory, so no value is kept: as an
  entry is read, its chain is checked against the chain of its predecessor (seq - 1) as it is
  known then (its live record so far, or, with none, the root of the entry's epoch), and the
  answer is kept with that predecessor's chain (`_Read`). At the end the check asks whether
  an entry chains from its predecessor's final chain: from the one it was checked against,
  the answer kept; from any other, no (SHA-256 collisions aside). The worker writes a
  session's entries in seq order, so an honest predecessor is always read first.
- **The state**: the worker's head of each session, the latest `["h",<session>]` of the
  state changelog (its last chain and next seq, where its chain starts and the lowest seq that
  may be live: an unchained entry from `chain_from` on, or any entry below `live_from`, is a
  finding), and the heads of the checkpoint the audit started from: its chain at its next
  seq - 1 must still be there, unless erased since.
- **Headers** are read by the one rule of `transcript_connector.chain.header_text`, the sink's
  and `show`'s: a record with two, a null or a non-ASCII one is a finding there too.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import NamedTuple

from transcript_connector.chain import (
    CHAIN_HEADER,
    Checked,
    Head,
    header_text,
    link,
    parse_chain,
    read_entry,
    root,
    verify_checked,
)

from workers.core.outputs import entry_key, parse_entry_key
from workers.core.state import SessionHead, UnreadableState

HEAD_KEYS = b'["h",'


class _Read(NamedTuple):
    """An entry as read: what the check needs, without its value."""

    session: str
    seq: int
    epoch: int | str
    header: str | None  # by the one rule (transcript_connector.chain.header_text)
    chain: bytes | None  # the header's 32 bytes (None: absent or not 64 lowercase hex digits)
    checked_from: bytes  # the previous chain it was checked against
    chains: bool  # whether its chain follows from `checked_from`
    written_at: int | None  # the value's written_at, seconds since 1970 UTC


class ChainCheck:
    """One partition of the entries topic, read in offset order (`read`), then checked per
    session (`findings`)."""

    def __init__(self) -> None:
        self.latest: dict[bytes, _Read | None] = {}  # entry key -> its live entry (None: gone)

    def read(self, key: bytes, value: bytes | None, headers: Iterable[tuple[str, bytes]] | None
             ) -> None:
        at = parse_entry_key(key)
        if at is None:
            return  # not an entry key (audit reports the record as malformed)
        if value is None:
            self.latest[key] = None
            return
        session, seq = at
        header = header_text(v for name, v in headers or () if name == CHAIN_HEADER)
        epoch, written = read_entry(value, session, seq)
        before = self.latest.get(entry_key(session, seq - 1)) if seq > 1 else None
        previous = None if before is None else before.chain
        if previous is None:  # no chained predecessor: this entry starts the chain
            previous = root(session, epoch) if isinstance(epoch, int) else b""
        chain = parse_chain(header)
        self.latest[key] = _Read(session, seq, epoch, header, chain, previous,
                                 chain is not None and link(previous, value) == chain, written)

    def live(self) -> dict[bytes, _Read]:
        return {k: r for k, r in self.latest.items() if r is not None}

    def findings(self, heads: dict[str, SessionHead | str] | None,
                 anchors: dict[str, SessionHead]) -> Iterator[str]:
        """What is wrong with each session's chain: `heads`, the state's head of each session
        of the partition (a text: the head is unreadable; None: there is no state changelog);
        `anchors`, the heads of the checkpoint the audit started from."""
        sessions: dict[str, list[Checked]] = {}
        live = self.live()
        for r in live.values():
            sessions.setdefault(r.session, []).append(Checked(
                r.seq, r.epoch, r.header,
                lambda previous, r=r: r.chains and previous == r.checked_from, r.written_at))
        chained = any(r.header is not None for r in live.values())
        if chained and not heads:  # None: no changelog; empty: none of this partition's heads
            yield ("the state changelog holds no session head of this partition (is "
                   "TRANSCRIPT_APP_ID the worker's?): where each session's chain ends is not "
                   "checked")
            heads = None
        for session in sorted(set(sessions) | {s for s, h in (heads or {}).items()
                                              if isinstance(h, SessionHead) and h.chain}):
            head = None if heads is None else heads.get(session)
            if isinstance(head, str):
                yield f"{session}: the state's head is unreadable ({head})"
            elif heads is not None and head is None and any(
                    e.chain is not None for e in sessions.get(session, ())):
                yield f"{session}: chained entries and no head in the state"
            state = Head(head.next_seq, head.chain, head.chain_from, head.live_from) \
                if isinstance(head, SessionHead) else None
            for finding in verify_checked(session, sessions.get(session, ()), state).findings:
                yield f"{session} {finding}"
        for session, head in sorted(anchors.items()):
            key = entry_key(session, head.next_seq - 1)
            r = live.get(key)
            if head.chain is not None and r is not None and r.chain != head.chain:
                yield (f"{session} seq {head.next_seq - 1}: differs from the chain the "
                       "checkpoint holds: the entry was changed since")


def state_heads(records: Iterable[tuple[bytes | None, bytes | None]]
                ) -> dict[str, SessionHead | str]:
    """The latest head of each session among changelog records (key, value) in offset order;
    a text for one that cannot be decoded."""
    import json

    out: dict[str, SessionHead | str] = {}
    for key, value in records:
        if key is None or not key.startswith(HEAD_KEYS):
            continue
        try:
            doc = json.loads(key)
            session = doc[1] if type(doc) is list and len(doc) == 2 else None
        except (ValueError, RecursionError):
            session = None
        if type(session) is not str:
            continue
        if value is None:
            out.pop(session, None)
            continue
        try:
            out[session] = SessionHead.from_bytes(value)
        except UnreadableState as exc:
            out[session] = str(exc)
    return out

