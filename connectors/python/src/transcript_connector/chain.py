"""The hash chain of a session's transcript entries (DESIGN 1.2, "Tamper evidence").

Every entry carries the Kafka header `chain`: the lowercase hex SHA-256 of the previous
entry's chain (32 raw bytes) followed by this entry's value bytes, exactly as written. A
chain starts at the root `SHA-256("transcript-chain/1\\n" + session_key + "\\n" + epoch)`,
with the epoch of its first entry: a new session's first entry (epoch 0 unless reset
first), the first entry after an erasure (which ends the chain), and the first entry a
session written before 1.2 gets (its older entries have no header). A reset continues it.

`verify_session` checks one session from its live entries alone (a sink database, the
compacted topic) and, given the worker's head for the session, that none was removed from
or added at the end. What it proves, and what not: docs/audit-and-erasure.md.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable
from typing import NamedTuple, NoReturn

CHAIN_HEADER = "chain"
ROOT_PREFIX = b"transcript-chain/1\n"


def root(session_key: str, epoch: int) -> bytes:
    """Where a session's chain starts in `epoch` (32 bytes)."""
    return hashlib.sha256(b"%b%b\n%d" % (ROOT_PREFIX, session_key.encode(), epoch)).digest()


def link(previous: bytes, value: bytes) -> bytes:
    """The chain of an entry whose value is `value`, after the chain `previous` (32 bytes)."""
    return hashlib.sha256(previous + value).digest()


def parse_chain(header: bytes | str | None) -> bytes | None:
    """A `chain` header's 32 bytes; None when it is not 64 lowercase hex digits."""
    text = header.decode("ascii", "replace") if isinstance(header, bytes) else header
    if text is None or len(text) != 64 or text.strip("0123456789abcdef"):
        return None
    return bytes.fromhex(text)


class Link(NamedTuple):
    """One live entry of a session: its seq (from its key), value bytes and `chain` header
    (None: the entry has none)."""

    seq: int
    value: bytes
    chain: bytes | str | None


class Head(NamedTuple):
    """What the worker's state holds of the session: its next seq and last chain (None: no
    entry chained since the chain began or was ended by an erasure)."""

    next_seq: int
    chain: bytes | None


class Finding(NamedTuple):
    seq: int
    problem: str

    def __str__(self) -> str:
        return f"seq {self.seq}: {self.problem}"


class Verified(NamedTuple):
    findings: list[Finding]
    chained: int  # entries whose chain was checked
    unchained: int  # entries written before the chain began (before 1.2): not covered

    @property
    def ok(self) -> bool:
        return not self.findings


class Checked(NamedTuple):
    """An entry as the check reads it: its seq, its epoch (or what is wrong with its value),
    its `chain` header, and whether that chain follows from a given previous chain. A reader
    that cannot keep every value (audit, over a whole partition) answers `chains_from` from
    what it computed as it read the entry."""

    seq: int
    epoch: int | str
    chain: bytes | str | None
    chains_from: Callable[[bytes], bool]


def checked(session_key: str, seq: int, value: bytes, header: bytes | str | None) -> Checked:
    """One entry of the session, from its value bytes and `chain` header."""
    chain = None if header is None else parse_chain(header)
    return Checked(seq, epoch_of(value, session_key, seq), header,
                   lambda previous: chain is not None and link(previous, value) == chain)


def verify_session(session_key: str,
                   entries: Iterable[Link | tuple[int, bytes, bytes | str | None]],
                   head: Head | None = None) -> Verified:
    """Check the chain over a session's live entries (any order; one per seq). Each entry
    must chain from the previous live one, or from the root of its epoch where the chain
    starts; with `head`, the last chained entry must be seq `head.next_seq - 1` holding
    `head.chain`. Each problem is a finding naming the seq where it shows."""
    return verify_checked(session_key, (checked(session_key, *e) for e in entries), head)


def verify_checked(session_key: str, entries: Iterable[Checked], head: Head | None = None
                   ) -> Verified:
    """`verify_session` over entries as `checked` reads them (the one rule)."""
    findings: list[Finding] = []
    previous: bytes | None = None  # the last chained entry's chain (None: the chain starts)
    unknown = False  # the last entry's chain cannot be read (reported): no link to check
    last_seq = chained_seq = 0  # the last entry's seq; the last chained entry's
    chained = unchained = 0
    for seq, epoch, header, chains_from in sorted(entries, key=lambda e: e.seq):
        chain = None if header is None else parse_chain(header)
        problem = epoch if isinstance(epoch, str) else None
        if header is None and previous is None and not unknown:
            unchained += 1  # written before the chain began
        elif header is None:
            problem = "no chain header after chained entries: the entry was rewritten"
        elif chain is None:
            problem = "the chain header is not 64 lowercase hex digits"
        else:
            chained += 1
        if chain is not None and problem is None and not unknown:
            if previous is None and not chains_from(root(session_key, epoch)):  # type: ignore[arg-type]
                problem = ("does not chain from the session's root: this entry was changed, "
                           "or entries before it removed")
            elif previous is not None and not chains_from(previous):
                gap = f"; seq {last_seq + 1}..{seq - 1} missing" if seq > last_seq + 1 else ""
                problem = (f"does not chain from seq {last_seq}: this entry was changed, or "
                           f"one before it removed, inserted or moved{gap}")
        if problem is not None:
            findings.append(Finding(seq, problem))
        if header is not None or previous is not None or unknown:
            unknown = chain is None
            previous = chain if chain is not None else previous
            chained_seq = seq if chain is not None else chained_seq
        last_seq = seq
    if head is not None:
        findings.extend(_against_head(head, previous, chained_seq))
    return Verified(findings, chained, unchained)


def _against_head(head: Head, last: bytes | None, last_seq: int) -> list[Finding]:
    """The last chained entry against the worker's head for the session."""
    end = head.next_seq - 1
    if head.chain is None:
        if last is not None:
            return [Finding(last_seq, "chained entries the worker's state does not know of "
                                      "(the state's head has no chain): inserted")]
        return []
    if last is None:
        return [Finding(end, "the worker's state holds a chain through this seq, and no "
                             "chained entry is left: removed")]
    if last_seq < end:
        return [Finding(end, f"the worker's state has entries through this seq; they end at "
                             f"seq {last_seq}: removed")]
    if last_seq > end:
        return [Finding(last_seq, f"after the worker's last entry (seq {end}): inserted")]
    if last != head.chain:
        return [Finding(end, "differs from the chain the worker's state holds: entries were "
                             "rewritten (and chained again)")]
    return []


def epoch_of(value: bytes, session_key: str, seq: int) -> int | str:
    """The entry's epoch, or what is wrong with the value (a finding). The value is JSON in
    UTF-8 (no BOM, UTF-16 or NaN: json.loads would take them from bytes); seq and epoch are
    integers (not 2.0 or true, which equal 2 and 1 in Python)."""
    try:
        doc = json.loads(str(value, "utf-8"), parse_constant=_not_json)
    except (ValueError, RecursionError):
        return "the value is not JSON"
    if not isinstance(doc, dict):
        return "the value is not a transcript entry"
    named = doc.get("seq")
    if doc.get("session_key") != session_key or type(named) is not int or named != seq:
        return "the value names another session or seq than its key"
    epoch = doc.get("epoch")
    if type(epoch) is not int or epoch < 0:
        return "the value's epoch is not a whole number"
    return epoch


def _not_json(constant: str) -> NoReturn:
    raise ValueError(f"{constant} is not JSON")


__all__ = ["CHAIN_HEADER", "Checked", "Finding", "Head", "Link", "Verified", "checked", "epoch_of",
           "link", "parse_chain", "root", "verify_checked", "verify_session"]
