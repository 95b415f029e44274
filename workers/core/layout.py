"""A deployment's partition layout over time: the moves `repartition` made, and what follows.

The input is decided under one partition count at a time. A move from P to N partitions is
made with the workers stopped: its record holds, per old partition, the group's committed
offset of the input and of transcript.control at that moment. Below it a partition's records
were decided under P; from it on, under N (a record still keyed for its old partition is
re-keyed to its new one, as any stray record is). N is a multiple of P, so a session's new
partition `h mod N` is one of `p, p+P, p+2P, …` for its old one `p = h mod P`: the sessions of
old partition p stay among its descendants, a family (`family`), and `audit` replays a family
as one unit, epoch by epoch (`segments`).

Records of the topic `transcript.layout` (compacted, one partition; an addition to the contract
that no connector reads: docs/capacity.md, "Growing it"):
- `move/<P>-<N>`: partition-move/1, written when the move begins and again when it is done;
- `move/<P>-<N>/<p>`: partition-moved/1, written in the transaction that moved old partition
  p's state and entries (so a rerun after kill -9 knows what is done).
Decoding is strict (errors are values): an admin may write the topic, a connector may not.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from transcript_connector.partitioning import key_hash, partition_for

from workers.core.outputs import parse_entry_key

LAYOUT = "transcript.layout"
MOVE = "partition-move/1"
MOVED = "partition-moved/1"
MAX_PARTITIONS = 10_000  # as the connectors' TRANSCRIPT_PARTITIONS
_MOVE_KEY = re.compile(rb"move/([0-9]{1,5})-([0-9]{1,5})")
_MOVED_KEY = re.compile(rb"move/([0-9]{1,5})-([0-9]{1,5})/([0-9]{1,5})")
_OFFSET_MAX = 2**63 - 1


@dataclass(frozen=True)
class Move:
    """One move from `old` to `new` partitions; offsets: the group's committed offsets of the
    old partitions when it began (input and control), where `new` starts deciding."""

    old: int
    new: int
    input_offsets: tuple[int, ...]
    control_offsets: tuple[int, ...]
    begun_at: str
    done_at: str | None = None
    moved: frozenset[int] = frozenset()  # old partitions whose state and entries moved
    entries_ends: dict[int, int] = field(default_factory=dict, compare=False)  # p -> offset


@dataclass(frozen=True)
class Layout:
    """The moves in order (each from the last one's count); at most the last is not done."""

    moves: tuple[Move, ...] = ()

    @property
    def pending(self) -> Move | None:
        last = self.moves[-1] if self.moves else None
        return last if last is not None and last.done_at is None else None

    def counts(self, first: int) -> list[int]:
        """The partition counts the deployment ran with, from `first` (no move: [first])."""
        return [self.moves[0].old, *(m.new for m in self.moves)] if self.moves else [first]


def check_move(old: int, new: int) -> str | None:
    """Why a move from `old` to `new` partitions cannot be made, or None."""
    if not 1 <= new <= MAX_PARTITIONS:
        return f"--partitions {new}: expected 1 to {MAX_PARTITIONS}"
    if new <= old:
        return (f"--partitions {new}: the topics have {old} partitions; Kafka can only add "
                "partitions, so a move goes to a larger count")
    if new % old:
        return (f"--partitions {new}: not a multiple of {old}; with a multiple, every session "
                "of old partition p moves to p, p+P, p+2P, … and no two old partitions mix")
    return None


# --- records --------------------------------------------------------------------------------


def move_key(old: int, new: int) -> bytes:
    return b"move/%d-%d" % (old, new)


def moved_key(old: int, new: int, partition: int) -> bytes:
    return b"move/%d-%d/%d" % (old, new, partition)


def encode_move(m: Move) -> bytes:
    return json.dumps({"schema": MOVE, "from": m.old, "to": m.new,
                       "input_offsets": list(m.input_offsets),
                       "control_offsets": list(m.control_offsets),
                       "begun_at": m.begun_at, "done_at": m.done_at},
                      separators=(",", ":")).encode()


def encode_moved(old: int, new: int, partition: int, entries_end: int, entries: int,
                 state_keys: int) -> bytes:
    return json.dumps({"schema": MOVED, "from": old, "to": new, "partition": partition,
                       "entries_end": entries_end, "entries": entries,
                       "state_keys": state_keys}, separators=(",", ":")).encode()


def _offset_list(doc: dict, name: str, n: int) -> tuple[int, ...] | str:
    value = doc.get(name)
    if type(value) is not list or len(value) != n or not all(
            type(o) is int and 0 <= o <= _OFFSET_MAX for o in value):
        return f"{name}: expected {n} offsets"
    return tuple(value)


def _move(key: bytes, value: bytes) -> Move | str:
    m = _MOVE_KEY.fullmatch(key)
    try:
        doc = json.loads(value)
    except (ValueError, RecursionError):
        return "not JSON"
    if type(doc) is not dict or doc.get("schema") != MOVE or m is None:
        return f"not a {MOVE} record under a move/<from>-<to> key"
    old, new = doc.get("from"), doc.get("to")
    if type(old) is not int or type(new) is not int or (old, new) != (int(m[1]), int(m[2])) \
            or not 1 <= old < new <= MAX_PARTITIONS or new % old:
        return "from, to: not the key's counts, or not a move to a multiple"
    ins, ctl = _offset_list(doc, "input_offsets", old), _offset_list(doc, "control_offsets", old)
    if isinstance(ins, str) or isinstance(ctl, str):
        return ins if isinstance(ins, str) else str(ctl)
    begun, done = doc.get("begun_at"), doc.get("done_at")
    if type(begun) is not str or not (done is None or type(done) is str):
        return "begun_at, done_at: expected text"
    return Move(old, new, ins, ctl, begun, done)


def decode_layout(records: Iterable[tuple[bytes | None, bytes | None]]) -> Layout | str:
    """The layout from transcript.layout's records (key, value) in offset order, or what is
    wrong with them (a move that does not follow the last, a record of another shape)."""
    moves: dict[tuple[int, int], Move] = {}
    marks: dict[tuple[int, int], dict[int, int]] = {}
    for key, value in records:
        if key is None:
            return "a record without a key"
        if value is None:
            return f"{key[:40]!r}: a tombstone (a move is never undone)"
        if (m := _MOVED_KEY.fullmatch(key)) is not None:
            try:
                doc = json.loads(value)
            except (ValueError, RecursionError):
                return f"{key.decode()}: not JSON"
            end = doc.get("entries_end") if type(doc) is dict else None
            if type(doc) is not dict or doc.get("schema") != MOVED or type(end) is not int \
                    or end < 0 or doc.get("partition") != int(m[3]) \
                    or (doc.get("from"), doc.get("to")) != (int(m[1]), int(m[2])):
                return f"{key.decode()}: not a {MOVED} record of its key"
            marks.setdefault((int(m[1]), int(m[2])), {})[int(m[3])] = end
            continue
        move = _move(key, value)
        if isinstance(move, str):
            return f"{key[:40]!r}: {move}"
        moves[(move.old, move.new)] = move
    chain: list[Move] = []
    for (old, new), move in sorted(moves.items()):
        if chain and (old != chain[-1].new or chain[-1].done_at is None):
            return f"move {old}->{new} does not follow move {chain[-1].old}->{chain[-1].new}"
        ends = marks.get((old, new), {})
        chain.append(Move(move.old, move.new, move.input_offsets, move.control_offsets,
                          move.begun_at, move.done_at, frozenset(ends), dict(ends)))
    return Layout(tuple(chain))


# --- what the layout means for a reader ------------------------------------------------------


def family(layout: Layout, root: int) -> list[int]:
    """The partitions (of the last count) holding the sessions of partition `root` of the
    first count: root, root + first, root + 2·first, …"""
    if not layout.moves:
        return [root]
    first, last = layout.moves[0].old, layout.moves[-1].new
    return list(range(root, last, first))


def segments(layout: Layout, partition: int, end: int, current: int, control: bool = False
             ) -> list[tuple[int, int, int]]:
    """(count, start, end) of each epoch of input partition `partition` (transcript.control's
    with `control`) whose records were decided under `count`, oldest first; `end`: the
    partition's end offset; `current`: the count without a move. A partition born in a move
    starts at 0 in that move's epoch."""
    if not layout.moves:
        return [(current, 0, end)] if end > 0 else []
    out: list[tuple[int, int, int]] = []
    start, count = 0, layout.moves[0].old
    for move in layout.moves:
        if partition < move.old:
            cut = (move.control_offsets if control else move.input_offsets)[partition]
            if cut > start:
                out.append((move.old, start, cut))
            start = max(start, cut)
        count = move.new
    if end > start:
        out.append((count, start, end))
    return out


# --- what a move copies ----------------------------------------------------------------------


# The shapes the worker writes (workers/core/state.py: head, seen and ticket keys) with a session
# that needs no JSON escape: nearly every key. Read without json.loads (a third of its time, and a
# move reads every live key); any other key takes the general path, which gives the same answer.
_PLAIN_STATE_KEY = re.compile(
    rb'\["[hse]","([^"\\\x00-\x1f]*)"(?:\]|,"[^"\\\x00-\x1f]*"\]|,(?:0|[1-9][0-9]{0,18})\])')


def state_session(key: bytes) -> str | None:
    """The session a state (changelog) key belongs to, or None for a key of the partition's
    own (the erase cut-over): heads ["h",s], send_ids ["s",s,id], tickets ["e",s,offset], and
    format 1's bare session key."""
    plain = _PLAIN_STATE_KEY.fullmatch(key)
    if plain is not None:
        try:
            return plain[1].decode("utf-8")
        except UnicodeDecodeError:
            pass  # json.loads reads surrogates that strict UTF-8 refuses: its answer
    return state_session_parsed(key)


def state_session_parsed(key: bytes) -> str | None:
    """state_session without its shortcut for the plain keys: every key parsed as JSON."""
    if key.startswith(b"["):
        try:
            doc = json.loads(key)
        except (ValueError, RecursionError):
            doc = None
        if type(doc) is list and len(doc) >= 2 and doc[0] in ("h", "s", "e") \
                and type(doc[1]) is str:
            return doc[1]
        if type(doc) is list:
            return None
    try:
        return key.decode("utf-8")
    except UnicodeDecodeError:
        return None


class Homes:
    """Each session's partition under `count`, computed once per session: a move asks for every
    state key and entry of a partition, and at a million sessions partition_for's cache (65,536
    sessions) misses nearly every time, paying murmur2 in Python (microseconds) again."""

    def __init__(self, count: int) -> None:
        self.count = count
        self._homes: dict[str, int] = {}

    def __call__(self, session: str) -> int:
        home = self._homes.get(session)
        if home is None:  # the contract's partitioner, without its cache
            home = self._homes[session] = key_hash(session) % self.count
        return home


def split_state(latest: dict[bytes, bytes], partition: int, new: int,
                homes: Homes | None = None) -> dict[int, dict[bytes, bytes]]:
    """The live state keys of old partition `partition` that move, by their new partition
    (`homes`: a cache of the sessions' partitions under `new`, shared with the entries' move)."""
    home_of = homes if homes is not None and homes.count == new else Homes(new)
    out: dict[int, dict[bytes, bytes]] = {}
    for key, value in latest.items():
        session = state_session(key)
        if session is None:
            continue
        home = home_of(session)
        if home != partition:
            out.setdefault(home, {})[key] = value
    return out


def entry_home(key: bytes | None, partition: int, new: int, homes: Homes | None = None) -> int:
    """Where an entry record of old partition `partition` goes under `new` partitions: its
    session's; a record whose key names no session stays where it is (audit reports it)."""
    named = parse_entry_key(key)
    if named is None:
        return partition
    return homes(named[0]) if homes is not None and homes.count == new \
        else partition_for(named[0], new)


__all__ = [
    "LAYOUT",
    "MOVE",
    "MOVED",
    "Homes",
    "Layout",
    "Move",
    "check_move",
    "decode_layout",
    "encode_move",
    "encode_moved",
    "entry_home",
    "family",
    "move_key",
    "moved_key",
    "segments",
    "split_state",
    "state_session",
    "state_session_parsed",
]
