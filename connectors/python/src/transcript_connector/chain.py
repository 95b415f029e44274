"""The hash chain of a session's transcript entries (DESIGN 1.2, "Tamper evidence").

Every entry carries the Kafka header `chain`: the lowercase hex SHA-256 of the previous
entry's chain (32 raw bytes) followed by this entry's value bytes, exactly as written. A
chain starts at the root `SHA-256("transcript-chain/1\\n" + session_key + "\\n" + epoch)`,
with the epoch of its first entry: a new session's first entry (epoch 0 unless reset
first), the first entry after an erasure (which ends the chain), and the first entry a
session written before 1.2 gets (its older entries have no header). A reset continues it.

`verify_session` checks one session from its live entries alone (a sink database, the
compacted topic) and, given the worker's head for the session, that none was removed from
or added at the end, and where its chain starts. What it proves, and what not (entries alone
find corruption, not a writer of the topic; the head is the tamper check):
docs/audit-and-erasure.md.

A record's `chain` headers are read by one rule (`header_text`), the sink's, `show`'s,
`audit`'s and the readers'. An entry without one is "written before the chain" only where
the chain had not begun: before any chained entry of the session and, with the worker's head,
below the seq its chain starts at (`Head.chain_from`), else by its `written_at`, before
`CHAIN_SINCE` (`unchained_problem`).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Iterable
from datetime import UTC, datetime, timedelta
from typing import NamedTuple, NoReturn

CHAIN_HEADER = "chain"
ROOT_PREFIX = b"transcript-chain/1\n"
# When the chain began (1.2): no worker wrote a chain before it. An entry without a `chain`
# header whose `written_at` is at or after it should have one, unless the worker's head says
# where its chain starts (see `unchained_problem`).
CHAIN_SINCE = datetime(2026, 12, 2, tzinfo=UTC)


def root(session_key: str, epoch: int) -> bytes:
    """Where a session's chain starts in `epoch` (32 bytes)."""
    return hashlib.sha256(b"%b%b\n%d" % (ROOT_PREFIX, session_key.encode(), epoch)).digest()


def link(previous: bytes, value: bytes) -> bytes:
    """The chain of an entry whose value is `value`, after the chain `previous` (32 bytes)."""
    return hashlib.sha256(previous + value).digest()


def header_text(values: Iterable[object]) -> str | None:
    """The one rule for a record's `chain` header, given the value of each header of that name
    the record carries (the sink stores what it returns; `show`, `audit` and the readers check
    it): None when there is none (the entry has no chain: written before it, or stripped);
    the text of the one value when there is exactly one, bytes or text, all ASCII (whether it
    is 64 lowercase hex digits is checked by verification); else "" (more than one, a null
    value, one that is not ASCII: never a chain, and a finding wherever it is)."""
    found = list(values)
    if not found:
        return None
    one = found[0] if len(found) == 1 else None
    if isinstance(one, bytes | bytearray):
        return bytes(one).decode("ascii") if bytes(one).isascii() else ""
    return one if isinstance(one, str) and one.isascii() else ""


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
    entry chained since the chain began or was ended by an erasure); the seq its chain starts
    (or, after an erasure, will start) at: an entry there or after without a chain is a
    finding; and the lowest seq that may be live: every one below it was erased, so an entry
    there is a finding, and one between it and `chain_from` without a chain was written
    before the chain. Either None: not known (a head written before it recorded them)."""

    next_seq: int
    chain: bytes | None
    chain_from: int | None = None
    live_from: int | None = None


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
    its `chain` header, whether that chain follows from a given previous chain, and its
    `written_at` in whole seconds since 1970 UTC (None: the value has none that reads). A
    reader that cannot keep every value (audit, over a whole partition) answers `chains_from`
    from what it computed as it read the entry."""

    seq: int
    epoch: int | str
    chain: bytes | str | None
    chains_from: Callable[[bytes], bool]
    written_at: int | None = None


def checked(session_key: str, seq: int, value: bytes, header: bytes | str | None) -> Checked:
    """One entry of the session, from its value bytes and `chain` header."""
    chain = None if header is None else parse_chain(header)
    epoch, written = read_entry(value, session_key, seq)
    return Checked(seq, epoch, header,
                   lambda previous: chain is not None and link(previous, value) == chain,
                   written)


def verify_session(session_key: str,
                   entries: Iterable[Link | tuple[int, bytes, bytes | str | None]],
                   head: Head | None = None, chained_since: datetime = CHAIN_SINCE) -> Verified:
    """Check the chain over a session's live entries (any order; one per seq). Each entry
    must chain from the previous live one, or from the root of its epoch where the chain
    starts; an entry without a chain must be one written before the chain began
    (`unchained_problem`, with `chained_since` for `CHAIN_SINCE`); with `head`, the last
    chained entry must be seq `head.next_seq - 1` holding `head.chain`, and no entry may be
    below `head.live_from`. Each problem is a finding naming the seq where it shows."""
    return verify_checked(session_key, (checked(session_key, *e) for e in entries), head,
                          chained_since)


def verify_checked(session_key: str, entries: Iterable[Checked], head: Head | None = None,
                   chained_since: datetime = CHAIN_SINCE) -> Verified:
    """`verify_session` over entries as `checked` reads them (the one rule)."""
    since = _whole_seconds(chained_since)
    findings: list[Finding] = []
    previous: bytes | None = None  # the last chained entry's chain (None: the chain starts)
    unknown = False  # the last entry's chain cannot be read (reported): no link to check
    last_seq = chained_seq = 0  # the last entry's seq; the last chained entry's
    chained = unchained = 0
    live_from = None if head is None else head.live_from
    for seq, epoch, header, chains_from, written in sorted(entries, key=lambda e: e.seq):
        if live_from is not None and seq < live_from:  # not part of the session any more
            findings.append(Finding(seq, f"the worker's state erased every seq below "
                                         f"{live_from}: this entry was put back"))
            continue
        chain = None if header is None else parse_chain(header)
        problem = epoch if isinstance(epoch, str) else None
        stripped = None  # why an entry without a chain should have one
        if header is None:
            if previous is None:
                stripped = unchained_problem(seq, written, head, since)
            if previous is None and not unknown and stripped is None:
                unchained += 1  # written before the chain began
            else:
                problem = stripped or ("no chain header after chained entries: the entry was "
                                       "rewritten")
        elif chain is None:
            problem = ("the chain header is not 64 lowercase hex digits" if header else
                       "the chain header is empty, repeated, null or not ASCII")
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
        if header is not None or previous is not None or unknown or stripped is not None:
            unknown = chain is None
            previous = chain if chain is not None else previous
            chained_seq = seq if chain is not None else chained_seq
        last_seq = seq
    if head is not None:
        findings.extend(_against_head(head, previous, chained_seq))
    return Verified(findings, chained, unchained)


def unchained_problem(seq: int, written_at: int | None, head: Head | None,
                      since: int) -> str | None:
    """Why an entry without a chain, before any chained entry of its session, should have one
    (None: it was written before the chain began). With the worker's head that knows where
    its chain starts, the head decides: from `chain_from` on, every entry is chained; below it
    (and at or above `live_from`, checked before) entries were written before the chain.
    Otherwise the entry's `written_at` decides: before `since` (seconds since 1970 UTC:
    CHAIN_SINCE) no worker chained; at or after it, or when no `written_at` reads, the entry
    should be chained (a worker before 1.2 run after CHAIN_SINCE wrote such entries too: the
    head tells those apart, the entries cannot)."""
    if head is not None and head.chain_from is not None:
        if seq >= head.chain_from:
            return (f"no chain header at or after seq {head.chain_from}, where the worker's "
                    "state says the chain starts: the header was stripped")
        if head.live_from is not None:
            return None
    if written_at is not None and written_at < since:
        return None
    stamp = datetime.fromtimestamp(since, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return (f"no chain header, and written_at is not before {stamp}, when the chain began: "
            "the header was stripped (or a worker before 1.2 wrote the entry)")


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
    return read_entry(value, session_key, seq)[0]


def read_entry(value: bytes, session_key: str, seq: int) -> tuple[int | str, int | None]:
    """`epoch_of`, and the value's `written_at` (`written_seconds`; None: none that reads)."""
    try:
        doc = json.loads(str(value, "utf-8"), parse_constant=_not_json)
    except (ValueError, RecursionError):
        return "the value is not JSON", None
    if not isinstance(doc, dict):
        return "the value is not a transcript entry", None
    written = written_seconds(doc.get("written_at"))
    named = doc.get("seq")
    if doc.get("session_key") != session_key or type(named) is not int or named != seq:
        return "the value names another session or seq than its key", written
    epoch = doc.get("epoch")
    if type(epoch) is not int or epoch < 0:
        return "the value's epoch is not a whole number", written
    return epoch, written


_WRITTEN_AT = re.compile(r"([0-9]{4})-([0-9]{2})-([0-9]{2})[Tt ]([0-9]{2}):([0-9]{2}):([0-9]{2})"
                         r"(?:\.[0-9]+)?(?:[Zz]|([+-])([0-9]{2}):([0-9]{2}))")


def written_seconds(text: object) -> int | None:
    """An entry's `written_at` (RFC 3339 as the entry schema's pattern has it: a `T`, `t` or
    space between date and time, any fraction, `Z`, `z` or an offset) in whole seconds since
    1970 UTC, the fraction dropped; None for anything else. Plain arithmetic on the fields, as
    the TypeScript port does it: the same number for any text of that form."""
    m = _WRITTEN_AT.fullmatch(text) if isinstance(text, str) else None
    if m is None:
        return None
    y, mo, d, h, mi, s = (int(g) for g in m.groups()[:6])
    offset = 0 if m[7] is None else (int(m[8]) * 60 + int(m[9])) * (1 if m[7] == "+" else -1)
    return _days(y, mo, d) * 86400 + h * 3600 + (mi - offset) * 60 + s


def _days(y: int, m: int, d: int) -> int:
    """Days from 1970-01-01 to the proleptic Gregorian date y-m-d (H. Hinnant's days_from_civil,
    for any month 1..12 and day)."""
    y -= m <= 2
    era = y // 400
    yoe = y - era * 400
    doy = (153 * (m + (-3 if m > 2 else 9)) + 2) // 5 + d - 1
    return era * 146097 + yoe * 365 + yoe // 4 - yoe // 100 + doy - 719468


def _whole_seconds(at: datetime) -> int:
    """`at` in whole seconds since 1970 UTC (the fraction dropped)."""
    if at.tzinfo is None:
        raise ValueError("chained_since needs a UTC offset")
    return (at - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(seconds=1)


def _not_json(constant: str) -> NoReturn:
    raise ValueError(f"{constant} is not JSON")


__all__ = ["CHAIN_HEADER", "CHAIN_SINCE", "Checked", "Finding", "Head", "Link", "Verified",
           "checked", "epoch_of", "header_text", "link", "parse_chain", "read_entry", "root",
           "unchained_problem", "verify_checked", "verify_session", "written_seconds"]
