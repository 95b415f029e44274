"""Canonical session keys: the one implementation outbound and inbound both use.

A transcript write must land in the exact session an inbound reply uses. Two functions:

- `session_key_for_route` builds the key from a chat's identity (channel, account, peer,
  thread) and the agent's DM scope. Inbound producers, connectors and the doctor call it,
  so both directions spell a chat the same way by construction.
- `canonical_session_key` normalises a key someone already built. It can repair spelling:
  whitespace, case (outside case-preserving peer ids), the legacy `dm` segment, a missing
  `agent:<id>:` prefix, `main`/empty, Telegram `thread` vs `topic`. It cannot repair a key
  built from the wrong identity (Slack `D…` channel id vs `U…` user id, `direct` vs `group`,
  a folded Matrix room id, the wrong DM scope, an X post id vs the conversation id): that
  information is not in the key, and guessing would merge different chats. Only the
  builder prevents those.

Both refuse an `agent_id` argument that is not an agent id (ValueError), as the worker refuses
a record whose agent id is none: lowercasing "OPS" would make a key for an agent no record can
name. Case and whitespace come from pinned Unicode tables (unicode_text), not the running
interpreter's str.lower()/str.strip(), so a key does not change with the Python version.

Key shapes (DESIGN.md, field-notes):
    agent:<a>:main                                         DM scope main
    agent:<a>:direct:<peer>                                DM scope per-peer
    agent:<a>:<channel>:direct:<peer>                      DM scope per-channel-peer
    agent:<a>:<channel>:<account>:direct:<peer>            DM scope per-account-channel-peer
    agent:<a>:<channel>:<group|channel>:<peer>             groups and channels (no account)
    … + :thread:<id>   (Telegram: :topic:<id>)             a thread is its own session
    agent:<a>:cron:<job>[:run:<run>], …:subagent:…, …:hook:<uuid>   other sources
"""

from __future__ import annotations

import re
from typing import Literal, Protocol, get_args

from transcript_connector.unicode_text import py_lower, py_strip

DmScope = Literal["main", "per-peer", "per-channel-peer", "per-account-channel-peer"]
DM_SCOPES: tuple[DmScope, ...] = get_args(DmScope)
DEFAULT_ACCOUNT_ID = "default"

# records.AGENT_ID_PATTERN, the worker's rule for a record's agent id (a test holds them equal)
AGENT_ID_PATTERN = r"^[a-z0-9][a-z0-9_-]{0,63}$"
_AGENT_ID = re.compile(AGENT_ID_PATTERN.removeprefix("^").removesuffix("$"))
_PEER_KINDS = frozenset({"direct", "dm", "group", "channel"})
_DIRECT_KINDS = frozenset({"direct", "dm"})
_SUFFIX_MARKERS = frozenset({"thread", "topic"})
# First segments that name a source, not a channel: their keys have no peer structure.
_SOURCES = frozenset({"main", "cron", "subagent", "hook", "acp", "agent"})


class RouteLike(Protocol):
    """A chat's identity as a channel reports it (schemas.Route satisfies this)."""

    @property
    def channel(self) -> str: ...
    @property
    def account_id(self) -> str | None: ...
    @property
    def peer_kind(self) -> str: ...
    @property
    def peer_id(self) -> str: ...
    @property
    def thread_id(self) -> str | None: ...


def canonical_session_key(raw: str, agent_id: str) -> str:
    """The canonical form of `raw`, a key the sending agent `agent_id` computed.

    Raises ValueError when `agent_id` is not an agent id (refused, not repaired: the worker
    dead-letters a record whose agent id is none), or when `raw` is an `agent:` key whose agent
    segment is not one (the key names no agent, so no session can be chosen for it). Cached:
    pure, and called for every record.
    """
    if ":" in agent_id:  # never in an agent id; the cache's key below relies on it
        raise _invalid_agent(agent_id)
    agent_and_raw = f"{agent_id}:{raw}"
    key = _cache.get(agent_and_raw)
    if key is None:
        if not _AGENT_ID.fullmatch(agent_id):
            raise _invalid_agent(agent_id)
        key = raw if _UNCHANGED.fullmatch(raw) else _by_rules(raw, agent_id)
        # the vectors' coverage test is of the rules: no vector fills the cache, and
        # tests/unit/test_session_keys.py covers the line
        if len(_cache) >= _CACHE_SIZE:
            _cache.clear()  # pragma: no cover
        _cache[agent_and_raw] = key
    return key


# The keys canonicalised lately, by "<agent_id>:<raw>" (unambiguous: an agent id has no colon).
# A plain dict, emptied when full, not functools.lru_cache: with a million sessions nearly every
# lookup misses, and a miss costs 0.91-0.94 µs here against 1.70-1.72 with lru_cache and each
# segment tested apart (docs/performance.md); with a few thousand sessions every key stays.
# Keyed and valued by strings, the collector never tracks it (a dict of tuple keys was
# traversed after each batch: workers/stream/heap.py).
_CACHE_SIZE = 1 << 14
_cache: dict[str, str] = {}
canonical_session_key.cache_clear = _cache.clear  # type: ignore[attr-defined]


def _invalid_agent(agent_id: str) -> ValueError:
    return ValueError(f"invalid agent_id {agent_id!r}: an agent id matches {AGENT_ID_PATTERN}")


# A key no rule below changes, taken as it is (most keys a worker reads: connectors send
# canonical keys): a full `agent:<id>:…` key of printable ASCII without spaces or capitals, no
# empty segment, and no `dm` or `thread` segment (the only segments a rule renames), so trimming
# and lowercasing leave it as it is and the segments are joined again as they were. One regular
# expression (0.47 µs a key here) where splitting and testing the segments took 0.74;
# tests/unit/test_session_keys.py holds it to that definition. A segment's characters: printable
# ASCII but the colon, the space and A-Z.
_UNCHANGED = re.compile(
    r"agent:(?!(?:dm|thread):)[a-z0-9][a-z0-9_-]{0,63}"
    r"(?::(?!(?:dm|thread)(?::|\Z))[!-9;-@\[-~]+)+")


def _by_rules(raw: str, agent_id: str) -> str:
    """canonical_session_key by its rules, for a valid `agent_id`."""
    # Whitespace around a segment is never part of an id: trim the key and every segment.
    parts = [py_strip(p) for p in raw.split(":")]
    if len(parts) >= 2 and py_lower(parts[0]) == "agent":
        agent = py_lower(parts[1])
        if not _AGENT_ID.fullmatch(agent):
            raise ValueError(f"malformed agent key: {parts[1]!r} is not an agent id")
        rest = parts[2:]
    else:
        agent, rest = agent_id, parts
    if not rest or (len(rest) == 1 and py_lower(rest[0]) in ("", "main")):
        return f"agent:{agent}:main"
    return f"agent:{agent}:{_canonical_rest(rest)}"


def _canonical_rest(rest: list[str]) -> str:
    """Lowercase everything but a case-preserving peer id; `dm` -> `direct`; Telegram topics."""
    lower = [py_lower(p) for p in rest]
    kind_at = _peer_kind_index(lower)
    if kind_at is None:
        return ":".join(lower)
    channel = lower[0] if kind_at > 0 else None  # None: a per-peer DM key names no channel
    kind = "direct" if lower[kind_at] == "dm" else lower[kind_at]
    # The peer id runs from after the kind up to the last thread/topic marker (a Matrix
    # room id `!Room:server.org[:port]` contains colons, so it can be several segments).
    suffix_at = len(rest)
    for j in range(len(rest) - 2, kind_at + 1, -1):
        if lower[j] in _SUFFIX_MARKERS:
            suffix_at = j
            break
    peer = ":".join(rest[kind_at + 1 : suffix_at])
    if not _preserves_case(channel, kind, peer):
        peer = py_lower(peer)
    out = lower[:kind_at] + [kind, peer]
    if suffix_at < len(rest):
        marker = "topic" if channel == "telegram" else lower[suffix_at]
        out += [marker, ":".join(lower[suffix_at + 1 :])]
    return ":".join(out)


def _peer_kind_index(lower: list[str]) -> int | None:
    """Where the peer-kind segment is: `direct:…`, `<ch>:<kind>:…`, `<ch>:<acct>:direct:…`."""
    n = len(lower)
    if n >= 2 and lower[0] in _DIRECT_KINDS:
        return 0
    if lower[0] in _SOURCES:
        return None
    if n >= 3 and lower[1] in _PEER_KINDS:
        return 1
    if n >= 4 and lower[2] in _DIRECT_KINDS:
        return 2
    return None


def _preserves_case(channel: str | None, kind: str, peer: str) -> bool:
    """Signal group ids and Matrix room ids (`!opaque:server[:port]`) are case-sensitive.

    A per-peer DM key (`direct:<peer>`, `channel` None) names no channel, so a room id is known
    by its `!`: no other channel's peer ids start with one (Matrix user ids start with `@`). Any
    `direct:!…` key is therefore a Matrix DM room, and the builder and the canonicaliser keep
    its case alike, so canonical(canonical(k)) == canonical(k).
    """
    if channel == "signal":
        return kind == "group"
    if channel in ("matrix", None):
        return peer.startswith("!")
    return False


def session_key_for_route(agent_id: str, route: RouteLike, dm_scope: DmScope) -> str:
    """The canonical key of the chat `route` names, for `agent_id` with DM scope `dm_scope`.

    Build keys from the identity inbound messages carry (the Slack user id, the X
    conversation id, the chat type the inbound side sees), never from a send target. Raises
    ValueError for an unknown DM scope or an `agent_id` that is not an agent id.
    """
    if dm_scope not in DM_SCOPES:
        raise ValueError(f"unknown DM scope {dm_scope!r}; expected one of {', '.join(DM_SCOPES)}")
    channel = py_lower(py_strip(route.channel))
    peer = py_strip(route.peer_id)
    if route.peer_kind == "direct":
        if dm_scope == "main":
            base = "main"
        elif dm_scope == "per-peer":
            base = f"direct:{peer}"
        elif dm_scope == "per-channel-peer":
            base = f"{channel}:direct:{peer}"
        else:
            account = py_lower(py_strip(route.account_id or "")) or DEFAULT_ACCOUNT_ID
            base = f"{channel}:{account}:direct:{peer}"
    else:
        base = f"{channel}:{route.peer_kind}:{peer}"
    thread = py_strip(route.thread_id or "")
    if thread:
        base += f":{'topic' if channel == 'telegram' else 'thread'}:{thread}"
    return canonical_session_key(f"agent:{agent_id}:{base}", agent_id)


__all__ = [
    "AGENT_ID_PATTERN",
    "DEFAULT_ACCOUNT_ID",
    "DM_SCOPES",
    "DmScope",
    "RouteLike",
    "canonical_session_key",
    "session_key_for_route",
]
