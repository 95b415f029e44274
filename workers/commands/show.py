"""`transcript-owner show SESSION_KEY [--at latest|P:O [--timeout S]] [--db PATH] [--verify]`:
one session's transcript.

With `--db PATH` it reads the session from a database that `transcript-owner sink sqlite PATH`
keeps (one indexed query; as fresh as the sink's last batch).

Without it, it reads the session's partition of `transcript.entries` from its start to its end,
read_committed. It must: the compacted topic has no index by session. A session's entries lie
anywhere in its partition (compaction keeps the oldest records at the front, interleaved with
every other session of the partition), and a tombstone that erases one can come at any later
offset, so only the whole partition gives compaction's view of one session. That is a tool for
an operator, not for a gateway: a reader that needs sessions per request runs the sink (or
`transcript_connector.reader`). The partition is the session's home under the topic's own
partition count, read from the cluster's metadata (never TRANSCRIPT_PARTITIONS: a stale count
reads another partition and prints nothing); while the input and the entries topic have
different counts, a repartition is in progress, and show says so and exits 2.

Either way, what it prints may not hold a send confirmed a moment ago: the worker (or the sink)
may not have got there yet. `--at` binds the read to a position (DESIGN 1.3): `latest` (every
confirmation whose transaction was decided when show started: the input partition's last
stable offset) or `P:O` (the delivery at input partition P, offset O, as a publisher's
acknowledgement names it). It reads through the gateways' reader
(`transcript_connector.reader.BlockingSessionReader`: the topic, or with `--db` the sink
database, whose positions need sink format 4) and waits for the position up to `--timeout`
seconds (default 10); when it is not reached by then it prints the stale-read line (partition,
offset reached, offset needed, how old the worker's last position is) on stderr and exits 3,
printing no transcript.

Either way a session is its exact entry keys (`<session_key>#<10 digits>`, parsed by
`parse_entry_key`) or its rows' `session_key`, never a key prefix: session `K#1` is not part of
`K` (DESIGN 1.2). From the topic, a live value the sink would skip (not a valid entry of its key)
is not shown either, so both sources print the same. The table view shows control and bidi
characters of any field escaped (`\\x1b`, `\\u202e`), so transcript text cannot drive the
terminal; `--json` prints each entry's JSON exactly as stored.

`--verify` checks the session's hash chain (DESIGN 1.2, "Tamper evidence";
`transcript_connector.chain.verify_session`) over what was read: with `--db`, from the database
alone (each row's `entry_json`, encoded UTF-8, is the value the chain covers; its `chain`
column the header); from the topic, over compaction's view (each key's latest value with its
`chain` header), where a live value the sink would skip is verified too (a finding) while the
database simply lacks it (a gap, found at the next entry). Entries written before the chain
(no header, before any chained entry, and a `written_at` before the chain began:
`transcript_connector.chain.CHAIN_SINCE`) are counted, not checked: a sink database of format 1
or 2 has only such rows. An entry without a header written at or after it is a finding (its
header was stripped), as is a header given twice, null or not ASCII (the sink stores it as an
empty chain, the same rule as `audit`'s). It finds an entry changed, removed, inserted or moved
before the session's last chained entry, and headers stripped since the chain began: corruption,
not a writer of the topic, who can change entries and chain them again (the hash has no key),
cut off the end, append forgeries, or date an unchained entry before the chain. Those need
`transcript-owner audit`, which checks the worker's head: the tamper check. After the
transcript it prints `chain: verified N entries (M written before the chain)`, or one
`chain: seq S: problem` line per finding (to stderr with `--json`, so stdout stays JSON lines);
exit 0 clean, 1 on any finding, 2 when it cannot verify (no entry of the session read: nothing
verified is never "verified"; no sink database at PATH, one the sink did not make or newer, one
still reading its partitions again after the migration to format 3).
A bound read is verified the same way, over what it returned.

Exit codes: 0 shown, 1 a chain finding (`--verify`), 2 cannot read (a malformed `--at`, no such
database, a repartition in progress, Kafka refused: one line naming it), 3 a stale read.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import sys
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple, TextIO

from workers.topics import format_table

if TYPE_CHECKING:
    from transcript_connector.reader import ReaderOptions, SessionRead
    from transcript_connector.reader_plan import Bound

    from workers.settings import KafkaSettings

STALE = 3  # the exit code of a read that did not reach its bound by its deadline
MAX_TIMEOUT_S = 600.0

# C0, DEL and C1 (CSI is \x9b), the line and paragraph separators, and the bidi formatting
# characters (embeddings, overrides, isolates, marks): each shown as its escape
_UNSAFE = [*range(0x20), *range(0x7F, 0xA0), 0x061C, 0x200E, 0x200F, 0x2028, 0x2029,
           *range(0x202A, 0x202F), *range(0x2066, 0x206A)]
_VISIBLE = {c: f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}" for c in _UNSAFE} | {
    0x09: "\\t", 0x0A: "\\n", 0x0D: "\\r"}


def visible(text: object) -> str:
    """`text` for a terminal: no character in it can move the cursor, set a title, ring or
    reorder the line; each such character is shown as its escape, one line per field."""
    return str(text).translate(_VISIBLE)


class Stored(NamedTuple):
    """One entry of the session as its source holds it: seq (from its key or row), value bytes
    (the record's value; a row's `entry_json` encoded UTF-8) and `chain` header text (None:
    none)."""

    seq: int
    value: bytes
    chain: str | None

    @property
    def text(self) -> str:
        return self.value.decode("utf-8", "replace")


def bound(text: str) -> Bound:
    """`--at`'s value (argparse names the option in front of the reason)."""
    from transcript_connector.reader_plan import parse_at

    try:
        return parse_at(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc).removeprefix("--at ")) from None


def seconds(text: str) -> float:
    """`--timeout`'s value: seconds, more than 0, at most MAX_TIMEOUT_S."""
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 < value <= MAX_TIMEOUT_S:  # also NaN
        raise argparse.ArgumentTypeError(f"{text!r}: expected seconds, more than 0 and at most "
                                         f"{MAX_TIMEOUT_S:.0f}")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("session_key", metavar="SESSION_KEY",
                        help="canonical key, e.g. agent:ops:telegram:direct:42")
    parser.add_argument("--json", action="store_true", help="print entries as JSON lines")
    parser.add_argument(
        "--at", type=bound, metavar="latest|P:O",
        help="bind the read to a position: `latest` (every confirmation decided when show "
             "starts) or P:O (the delivery at input partition P, offset O); wait for it, and "
             "exit 3 with the reason when it is not reached by --timeout")
    parser.add_argument(
        "--timeout", type=seconds, metavar="S",
        help="with --at: seconds to wait for the position (default 10)")
    parser.add_argument(
        "--db", metavar="PATH",
        help="read from a sink database (transcript-owner sink sqlite PATH) instead of "
             "reading the session's whole partition of the topic")
    parser.add_argument(
        "--verify", action="store_true",
        help="check the session's hash chain over what was read (with --db: the database "
             "alone): exit 1 on an entry changed, removed, inserted or moved before the last "
             "chained one, or one without a chain written since the chain began, naming its "
             "seq (to stderr with --json). It finds corruption, not a writer of the topic "
             "(who can chain changed entries again, cut off the end or append): "
             "`transcript-owner audit` checks those against the worker's state")


class Shown(NamedTuple):
    """What show prints: the entries (seq order), the live values that are no valid entry of
    their key (from the topic: not shown, but verified), how many rows have a seq that is not a
    whole number (--db: left out), and where it read."""

    stored: list[Stored]
    invalid: list[Stored]
    odd: int
    where: str


def run(args: argparse.Namespace) -> int:
    from transcript_connector.errors import ConnectorError, StaleReadError

    if args.at is None and args.timeout is not None:
        print("show: --timeout applies to a read bound by --at", file=sys.stderr)
        return 2
    try:
        shown = read_shown(args)
    except StaleReadError as exc:  # nothing printed as if it were the whole session
        print(visible(exc), file=sys.stderr)
        return STALE
    except (ConnectorError, LookupError) as exc:
        print(f"show: {visible(exc)}", file=sys.stderr)
        return 2
    if shown.odd:
        print(f"show: {shown.odd} rows of the session have a seq that is not a whole number "
              "(not shown)", file=sys.stderr)
    if shown.invalid:
        print(f"show: {len(shown.invalid)} live records of the session are not valid entries of "
              "their key (not shown; the sink skips them too)", file=sys.stderr)
    if args.json:
        for s in shown.stored:
            print(s.text)
    elif not shown.stored:
        print(visible(f"no entries for {args.session_key} ({shown.where})"))
    else:
        print(format_table(
            [tuple(visible(cell) for cell in _cells(s)) for s in shown.stored],
            ("epoch", "seq", "delivered_at", "source", "posted by", "text"),
        ))
    if not args.verify:
        return 0
    return report(args.session_key, [*shown.stored, *shown.invalid], shown.odd,
                  sys.stderr if args.json else sys.stdout)


def read_shown(args: argparse.Namespace) -> Shown:
    """The session as the arguments ask: bound (--at), from the database, or from the topic.
    Raises LookupError or ConnectorError (StaleReadError: not reached)."""
    if args.at is not None:
        return shown_bound(args)
    if args.db is not None:
        stored, odd = from_db(args.db, args.session_key, verify=args.verify)
        return Shown(stored, [], odd, args.db)
    stored, partition, invalid = from_topic(args.session_key)
    return Shown(stored, invalid, 0, f"partition {partition}")


def shown_bound(args: argparse.Namespace) -> Shown:
    """A read bound by --at, through the gateways' reader. From the database, every row is
    shown (one that is no entry as such), as without --at."""
    from workers.settings import kafka_settings

    ks = kafka_settings()  # a SettingsError is reported by the CLI (exit 2)
    if args.db is not None and args.verify:
        check_verifiable(args.db)
    read = read_bound(ks, args.session_key, args.at, args.timeout, args.db)
    entries = [Stored(e.seq, e.value, e.chain) for e in read.entries]
    unreadable = [Stored(u.seq, u.value, u.chain) for u in read.unreadable]
    if args.db is not None:
        return Shown(sorted(entries + unreadable), [], 0, args.db)
    return Shown(entries, unreadable, 0, f"partition {read.partition}")


def read_bound(ks: KafkaSettings, session_key: str, at: Bound, timeout_s: float | None,
               database: str | None) -> SessionRead:
    """One read bound by `at` (transcript_connector.reader), from the topic or `database`."""
    from transcript_connector.reader import BlockingSessionReader

    with BlockingSessionReader(reader_options(ks), database=database) as reader:
        return reader.read(session_key, at=at, timeout_s=timeout_s)


def reader_options(ks: KafkaSettings) -> ReaderOptions:
    """The worker's Kafka settings as a reader's options (the same variables)."""
    from transcript_connector.reader import ReaderOptions

    return ReaderOptions(
        bootstrap=ks.bootstrap, topic_prefix=ks.topic_prefix, client_id="transcript-owner-show",
        security_protocol=ks.security_protocol, sasl_mechanism=ks.sasl_mechanism or "PLAIN",
        sasl_username=ks.sasl_username, sasl_password=ks.sasl_password,
        ssl_cafile=ks.ssl_cafile, ssl_certfile=ks.ssl_certfile, ssl_keyfile=ks.ssl_keyfile)


def topic_counts(ks: KafkaSettings) -> tuple[int, int]:
    """The partition counts of the input and the entries topic, from the cluster's metadata
    (ReadError: a topic missing or not described to this principal)."""
    from transcript_connector.reader_kafka import Cluster

    options = reader_options(ks)
    cluster = Cluster(options, options.kafka_kwargs())
    try:
        return cluster.counts()
    finally:
        cluster.close()


def _cells(s: Stored) -> tuple[object, ...]:
    """A row of the table view; a value that is no transcript entry (a database changed by
    hand: the sink stores only valid ones) is shown as such, not as a traceback."""
    try:
        e = json.loads(s.value)
        return (e["epoch"], e["seq"], e["delivered_at"], e["source"],
                f"{e['posted_by']['kind']}:{e['posted_by'].get('name') or e['posted_by']['id']}",
                e["text"] or "[" + ", ".join(m["name"] for m in e["media"]) + "]")
    except (ValueError, RecursionError, LookupError, TypeError, AttributeError):
        return ("?", s.seq, "", "", "", "[not a transcript entry]")


def report(session_key: str, entries: list[Stored], odd: int, out: TextIO) -> int:
    """`--verify`: the chain over `entries`, one line per finding or one line when clean, on
    `out`; the exit code (1: a finding; 2: nothing to verify, never "verified")."""
    from transcript_connector.chain import verify_session

    if not entries and not odd:
        print("chain: nothing verified: no entry of the session was read (an unknown or "
              "erased session, or the wrong deployment)", file=out)
        return 2
    verified = verify_session(session_key, entries)
    for finding in verified.findings:
        print(visible(f"chain: {finding}"), file=out)
    if odd:
        print(f"chain: {odd} rows of the session have a seq that is not a whole number: the "
              "database was changed", file=out)
    if verified.findings or odd:
        return 1
    print(f"chain: verified {verified.chained} entries ({verified.unchained} written before "
          "the chain)", file=out)
    return 0


def from_db(path: str, session_key: str, *, verify: bool = False) -> tuple[list[Stored], int]:
    """The session's entries (their JSON, as the topic holds it, and chain) in seq order, from
    a sink database of any format this version knows, opened read-only (format 1 and 2 rows
    have no chain); and how many of its rows have a seq that is not a whole number (left out).
    LookupError when PATH is no sink database, a newer one, or (`verify`) one still reading
    its partitions again after its migration to format 3 (rows without their chain yet)."""
    from workers.commands.sink import SCHEMA_VERSION, sink_format

    p = Path(path)
    if not p.is_file():
        raise LookupError(f"no sink database at {path}")
    try:
        db = sqlite3.connect(f"{p.resolve().as_uri()}?mode=ro", uri=True)
        try:
            found = sink_format(db)
            if not found:  # None: not the sink's; 0: empty
                raise LookupError(f"{path} is not a sink database")
            if found > SCHEMA_VERSION:
                raise LookupError(f"{path}: sink database version {found}, this version reads "
                                  f"versions up to {SCHEMA_VERSION}")
            if verify and found >= 3:
                _rechained(db, path)
            chain = "chain" if found >= 3 else "NULL"  # formats 1 and 2: no chain column
            db.text_factory = bytes  # entry_json as stored, also bytes that are not UTF-8
            rows = db.execute(f"SELECT seq, entry_json, {chain} FROM entries "
                              "WHERE session_key = ? ORDER BY seq", (session_key,)).fetchall()
        finally:
            db.close()
    except sqlite3.DatabaseError as exc:
        raise LookupError(f"{path} is not a sink database ({exc})") from None
    stored = [Stored(seq, _bytes(text), _text(chain)) for seq, text, chain in rows
              if type(seq) is int]
    return stored, len(rows) - len(stored)


def _rechained(db: sqlite3.Connection, path: str) -> None:
    """LookupError while the sink still reads partitions again after the migration to format
    3 (rows without their chain yet: a verify would report them)."""
    pending = db.execute("SELECT count(*) FROM rechain").fetchone()[0]
    if pending:
        raise LookupError(
            f"cannot verify: {path} was migrated to sink format 3 and its sink is still reading "
            f"{pending} partitions again, giving the rows their chain; verify once it has "
            "caught up")


def check_verifiable(path: str) -> None:
    """`_rechained` before a bound read of a database (which the reader checks otherwise)."""
    p = Path(path)
    if not p.is_file():
        return  # the reader names it
    try:
        db = sqlite3.connect(f"{p.resolve().as_uri()}?mode=ro", uri=True)
        try:
            if db.execute("SELECT count(*) FROM sqlite_master WHERE type = 'table' "
                          "AND name = 'rechain'").fetchone()[0]:
                _rechained(db, path)
        finally:
            db.close()
    except sqlite3.DatabaseError:
        return  # not a database: the reader names it


def _bytes(cell: object) -> bytes:
    """A row's `entry_json` as the value bytes (TEXT, read as bytes; anything else only by
    hand)."""
    if isinstance(cell, bytes | str):
        return cell if isinstance(cell, bytes) else cell.encode()
    return str(cell).encode()


def _text(cell: object) -> str | None:
    """A row's `chain` as header text (TEXT or NULL; anything else only by hand)."""
    if cell is None or isinstance(cell, str):
        return cell
    return bytes(cell).decode("ascii", "replace") if isinstance(cell, bytes) else str(cell)


def from_topic(session_key: str) -> tuple[list[Stored], int, list[Stored]]:
    """The session's live entries (compaction's view: the latest value per key, with its
    `chain` header) in seq order, read from the whole of its partition (its home under the
    topic's own count); the partition; and the live values that are not valid entries of their
    key (the sink skips them). ReadError while a repartition is in progress."""
    from transcript_connector.entries_topic import Upsert, chain_header, classify
    from transcript_connector.errors import ReadError
    from transcript_connector.partitioning import partition_for
    from transcript_connector.reader_plan import repartition_reason

    from workers.core.outputs import ENTRIES, parse_entry_key
    from workers.kafka_io import read
    from workers.settings import kafka_settings

    ks = kafka_settings()  # a SettingsError is reported by the CLI (exit 2)
    inputs, entries = topic_counts(ks)  # the topic's count: TRANSCRIPT_PARTITIONS may be stale
    if inputs != entries:
        raise ReadError("cannot tell the session's partition: "
                        f"{repartition_reason(inputs, entries)}; show it once the move is over")
    latest: dict[int, tuple[bytes, bytes | None, object]] = {}  # seq -> compaction's view
    partition = partition_for(session_key, inputs)
    for r in read(ks, ks.topic(ENTRIES), partitions=[partition]):
        parsed = parse_entry_key(r.key)
        if parsed is not None and parsed[0] == session_key:
            latest[parsed[1]] = (r.key, r.value, r.headers)
    shown, invalid = [], []
    for seq in sorted(latest):
        key, value, headers = latest[seq]
        if value is None:
            continue
        change = classify(key, value, headers)  # the sink's rule: a valid entry of this key
        if isinstance(change, Upsert):
            shown.append(Stored(seq, value, change.chain))
        else:
            invalid.append(Stored(seq, value, chain_header(headers)))
    return shown, partition, invalid
