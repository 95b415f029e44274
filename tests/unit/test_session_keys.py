"""transcript_connector/session_keys.py: every canonicalisation rule, every key it builds."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from transcript_connector import session_keys
from transcript_connector.records import AGENT_ID_PATTERN

from schemas import Route
from workers.core import DM_SCOPES, canonical_session_key, session_key_for_route

# (raw key as a sender spelled it, sending agent, canonical key)
CANONICAL: list[tuple[str, str, str]] = [
    # main / empty / prefix / whitespace
    ("", "ops", "agent:ops:main"),
    ("   ", "ops", "agent:ops:main"),
    ("main", "ops", "agent:ops:main"),
    (" MAIN\n", "ops", "agent:ops:main"),
    ("agent:ops:main", "ops", "agent:ops:main"),
    ("Agent:OPS:Main", "ops", "agent:ops:main"),
    ("agent:ops", "ops", "agent:ops:main"),
    ("agent:ops:", "ops", "agent:ops:main"),
    ("agent:other:main", "ops", "agent:other:main"),  # a full key keeps its own agent
    ("telegram:group:-100123", "ops", "agent:ops:telegram:group:-100123"),
    (" agent : ops : slack : direct : U1 ", "ops", "agent:ops:slack:direct:u1"),
    # direct messages, every DM scope, and the legacy `dm`
    ("agent:ops:direct:U1", "ops", "agent:ops:direct:u1"),
    ("dm:U1", "ops", "agent:ops:direct:u1"),
    ("agent:ops:Slack:Direct:U1", "ops", "agent:ops:slack:direct:u1"),
    ("agent:ops:slack:dm:U1", "ops", "agent:ops:slack:direct:u1"),
    ("agent:ops:slack:T0WORK:direct:U1", "ops", "agent:ops:slack:t0work:direct:u1"),
    ("agent:ops:slack:T0WORK:DM:U1", "ops", "agent:ops:slack:t0work:direct:u1"),
    ("agent:ops:direct:dm", "ops", "agent:ops:direct:dm"),  # a peer called "dm" stays
    # groups and channels, threads and topics
    ("agent:ops:Discord:Channel:123", "ops", "agent:ops:discord:channel:123"),
    ("agent:ops:slack:channel:C1:Thread:1700.1", "ops", "agent:ops:slack:channel:c1:thread:1700.1"),
    ("agent:ops:slack:channel:C1:thread:AbC", "ops", "agent:ops:slack:channel:c1:thread:abc"),
    (
        "agent:ops:telegram:group:-100123:topic:42",
        "ops",
        "agent:ops:telegram:group:-100123:topic:42",
    ),
    (
        "agent:ops:telegram:group:-100123:thread:42",
        "ops",
        "agent:ops:telegram:group:-100123:topic:42",
    ),
    ("agent:ops:discord:channel:1:topic:7", "ops", "agent:ops:discord:channel:1:topic:7"),
    # case-preserving peers: Signal group ids, Matrix room ids (which contain colons)
    ("agent:ops:signal:group:AbC+/dE=", "ops", "agent:ops:signal:group:AbC+/dE="),
    ("AGENT:OPS:SIGNAL:GROUP:AbC+/dE=", "ops", "agent:ops:signal:group:AbC+/dE="),
    ("signal:group:AbC=", "ops", "agent:ops:signal:group:AbC="),
    ("agent:ops:signal:direct:+4915Abc", "ops", "agent:ops:signal:direct:+4915abc"),
    ("agent:ops:matrix:group:!AbC:Matrix.org", "ops", "agent:ops:matrix:group:!AbC:Matrix.org"),
    (
        "agent:ops:Matrix:Channel:!AbC:example.org:8448",
        "ops",
        "agent:ops:matrix:channel:!AbC:example.org:8448",
    ),
    (
        "agent:ops:matrix:group:!AbC:matrix.org:Thread:$EvT",
        "ops",
        "agent:ops:matrix:group:!AbC:matrix.org:thread:$evt",
    ),
    ("agent:ops:matrix:direct:!DmRoom:m.org", "ops", "agent:ops:matrix:direct:!DmRoom:m.org"),
    (
        "agent:ops:matrix:direct:@Alice:Example.org",
        "ops",
        "agent:ops:matrix:direct:@alice:example.org",
    ),
    # other sources have no peer structure: lowercased, prefixed
    ("cron:Job-1", "ops", "agent:ops:cron:job-1"),
    ("agent:ops:cron:Job-1:run:R-9", "ops", "agent:ops:cron:job-1:run:r-9"),
    ("cron:dm:run:x", "ops", "agent:ops:cron:dm:run:x"),
    ("subagent:Research:1", "ops", "agent:ops:subagent:research:1"),
    (
        "hook:0F8FAD5B-D9CB-469F-A165-70867728950E",
        "ops",
        "agent:ops:hook:0f8fad5b-d9cb-469f-a165-70867728950e",
    ),
]


@pytest.mark.parametrize(("raw", "agent", "canonical"), CANONICAL)
def test_canonical_session_key(raw: str, agent: str, canonical: str) -> None:
    assert canonical_session_key(raw, agent) == canonical


@pytest.mark.parametrize(("raw", "agent", "canonical"), CANONICAL)
def test_canonical_keys_are_fixed_points(raw: str, agent: str, canonical: str) -> None:
    assert canonical_session_key(canonical, agent) == canonical
    assert canonical_session_key(canonical, "someone-else") == canonical


@pytest.mark.parametrize(
    "raw", ["agent::main", "agent:Not An Id:main", "agent:-x:main", " agent: :x"]
)
def test_an_agent_key_that_names_no_agent_is_rejected(raw: str) -> None:
    with pytest.raises(ValueError, match="malformed agent key"):
        canonical_session_key(raw, "ops")


_segment = st.text(alphabet="abcXYZ019-_.!@+=/ :", max_size=8)


@settings(max_examples=300)
@given(st.lists(_segment, min_size=0, max_size=7).map(":".join), st.sampled_from(["ops", "a-1"]))
def test_canonicalisation_is_idempotent(raw: str, agent: str) -> None:
    try:
        once = canonical_session_key(raw, agent)
    except ValueError:
        return
    assert canonical_session_key(once, agent) == once
    assert once.startswith("agent:") and once == once.strip()


_word = st.one_of(
    st.sampled_from(["agent", "ops", "main", "direct", "dm", "group", "channel", "thread",
                     "topic", "telegram", "signal", "matrix", "slack", "cron", "run", "!room",
                     "default", ""]),
    st.text(alphabet="abz09-_.!@+=/", max_size=6))


@settings(max_examples=2000)
@given(st.lists(_word, min_size=1, max_size=8).map(":".join), st.sampled_from(["ops", "a-1"]))
def test_a_key_taken_as_it_is_is_what_the_rules_give(raw: str, agent: str) -> None:
    """The shortcut for keys no rule changes (most keys at a million sessions, where the cache
    misses) gives exactly what the rules give."""
    raw = "agent:" + raw if not raw.startswith("agent:") and len(raw) % 2 else raw
    if taken_as_it_is(raw):
        assert session_keys._by_rules(raw, agent) == raw


def taken_as_it_is(raw: str) -> bool:
    return session_keys._UNCHANGED.fullmatch(raw) is not None


def unchanged_by_definition(raw: str) -> bool:
    """What the shortcut's one regular expression stands for, segment by segment."""
    if not (raw.isascii() and raw.isprintable()) or " " in raw or raw.lower() != raw:
        return False
    parts = raw.split(":")
    return (len(parts) >= 3 and parts[0] == "agent"
            and re.fullmatch(AGENT_ID_PATTERN, parts[1]) is not None
            and "" not in parts and "dm" not in parts and "thread" not in parts)


_any_word = st.one_of(
    _word,
    st.sampled_from(["DM", "Thread", "dmx", "xdm", "threads", "a" * 64, "a" * 65, "-a", "_",
                     "a\n", "\n", "\t", "Σ", "é", "\x7f", "\x00", " ", "a b", "[", "@", "~"]),
    st.text(max_size=4))


@settings(max_examples=5000)
@given(st.lists(_any_word, min_size=0, max_size=7).map(":".join), st.booleans())
def test_the_shortcut_is_its_definition(raw: str, prefixed: bool) -> None:
    raw = "agent:" + raw if prefixed else raw
    assert taken_as_it_is(raw) == unchanged_by_definition(raw)


@pytest.mark.parametrize("raw", [
    "agent:ops:main", "agent:a-1:slack:channel:c1:thread2:1700.1", "agent:0:x:!room;a@b[c]~",
    "agent:" + "a" * 64 + ":main", "agent:ops:direct:dmx", "agent:ops:telegram:topic:7"])
def test_canonical_keys_are_taken_as_they_are(raw: str) -> None:
    assert taken_as_it_is(raw) and unchanged_by_definition(raw)


@pytest.mark.parametrize("raw", [
    "agent:ops:telegram:group:-100:thread:7", "agent:ops:slack:dm:u1", "agent:ops:x:group:Ab",
    "agent:ops: slack:group:g", "agent:ops::main", "agent:ops", "slack:group:g",
    "agent:OPS:main", "agent:ops:signal:group:\tg", "agent:ops:main\n", "agent:ops:main:",
    "agent:dm:main", "agent:thread:main", "agent:ops:x:dm", "agent:ops:x:thread",
    "agent:" + "a" * 65 + ":main", "agent:-a:main", "agent:ops:caf\u00e9", "Agent:ops:main"])
def test_keys_a_rule_changes_are_not_taken_as_they_are(raw: str) -> None:
    assert not taken_as_it_is(raw)


# --- the cache ------------------------------------------------------------------------------


def test_a_full_cache_is_emptied_and_answers_as_before() -> None:
    canonical_session_key.cache_clear()
    keys = [f"agent:ops:Slack:channel:C{i}" for i in range(session_keys._CACHE_SIZE + 10)]
    first = [canonical_session_key(k, "ops") for k in keys]
    assert len(session_keys._cache) <= session_keys._CACHE_SIZE
    assert first[0] == "agent:ops:slack:channel:c0"
    assert [canonical_session_key(k, "ops") for k in keys] == first  # hits and misses alike
    assert canonical_session_key("", "ops") == canonical_session_key("main", "ops")


@pytest.mark.parametrize(("raw", "agent"), [("agent:BAD!:main", "ops"), ("main", "OPS")])
def test_a_refused_key_is_refused_every_time(raw: str, agent: str) -> None:
    """Nothing is cached for a key that names no agent: it raises again, it never becomes a key."""
    canonical_session_key.cache_clear()
    for _ in range(2):
        with pytest.raises(ValueError):
            canonical_session_key(raw, agent)
    assert session_keys._cache == {}


def test_the_sending_agent_is_part_of_the_cached_key() -> None:
    canonical_session_key.cache_clear()
    assert canonical_session_key("main", "ops") == "agent:ops:main"
    assert canonical_session_key("main", "a-1") == "agent:a-1:main"
    assert canonical_session_key("ops:main", "a") == "agent:a:ops:main"


# --- the builder --------------------------------------------------------------------------


def route(
    channel: str, kind: str, peer: str, account: str | None = None, thread: str | None = None
) -> Route:
    return Route(
        channel=channel, account_id=account, peer_kind=kind, peer_id=peer, thread_id=thread
    )


# (route, DM scope, key); field-notes "Session keys in the gateway"
BUILT: list[tuple[Route, str, str]] = [
    (route("telegram", "direct", "12345", "bot1"), "main", "agent:ops:main"),
    (route("telegram", "direct", "12345", "bot1"), "per-peer", "agent:ops:direct:12345"),
    (
        route("telegram", "direct", "12345", "bot1"),
        "per-channel-peer",
        "agent:ops:telegram:direct:12345",
    ),
    (
        route("telegram", "direct", "12345", "bot1"),
        "per-account-channel-peer",
        "agent:ops:telegram:bot1:direct:12345",
    ),
    (
        route("Slack", "direct", "U07AB", None),
        "per-account-channel-peer",
        "agent:ops:slack:default:direct:u07ab",
    ),
    (route("Slack", "direct", "U07AB", "T0WORK"), "per-peer", "agent:ops:direct:u07ab"),
    # groups and channels carry no account and ignore the DM scope
    (route("telegram", "group", "-100123", "bot1"), "main", "agent:ops:telegram:group:-100123"),
    (
        route("telegram", "group", "-100123", "bot1"),
        "per-account-channel-peer",
        "agent:ops:telegram:group:-100123",
    ),
    (
        route("slack", "channel", "C0GENERAL", "T0WORK"),
        "per-peer",
        "agent:ops:slack:channel:c0general",
    ),
    (route("discord", "channel", "1234567890"), "main", "agent:ops:discord:channel:1234567890"),
    # threads, and Telegram forum topics
    (
        route("slack", "channel", "C0GENERAL", thread="1700000000.000100"),
        "main",
        "agent:ops:slack:channel:c0general:thread:1700000000.000100",
    ),
    (
        route("telegram", "group", "-100123", thread="42"),
        "main",
        "agent:ops:telegram:group:-100123:topic:42",
    ),
    (
        route("discord", "channel", "1", thread="ThreadX"),
        "main",
        "agent:ops:discord:channel:1:thread:threadx",
    ),
    (
        route("slack", "direct", "U1", thread="1700.1"),
        "per-channel-peer",
        "agent:ops:slack:direct:u1:thread:1700.1",
    ),
    # case-preserving peer ids
    (route("signal", "group", "AbC+/dE="), "main", "agent:ops:signal:group:AbC+/dE="),
    (route("matrix", "group", "!AbC:matrix.org"), "main", "agent:ops:matrix:group:!AbC:matrix.org"),
    (
        route("matrix", "channel", "!AbC:matrix.org:8448", thread="$Ev"),
        "main",
        "agent:ops:matrix:channel:!AbC:matrix.org:8448:thread:$ev",
    ),
    (
        route("matrix", "direct", "@Alice:matrix.org"),
        "per-channel-peer",
        "agent:ops:matrix:direct:@alice:matrix.org",
    ),
    (
        route("matrix", "direct", "!DmRoom:matrix.org"),
        "per-channel-peer",
        "agent:ops:matrix:direct:!DmRoom:matrix.org",
    ),
    # whitespace around identity fields is not part of them
    (route(" WhatsApp ", "group", " 1203@g.us "), "main", "agent:ops:whatsapp:group:1203@g.us"),
]


@pytest.mark.parametrize(("chat", "scope", "key"), BUILT)
def test_session_key_for_route(chat: Route, scope: str, key: str) -> None:
    assert session_key_for_route("ops", chat, scope) == key  # type: ignore[arg-type]


@pytest.mark.parametrize(("chat", "scope", "key"), BUILT)
def test_built_keys_are_canonical(chat: Route, scope: str, key: str) -> None:
    assert canonical_session_key(key, "ops") == key


def test_every_dm_scope_gives_a_distinct_key_shape() -> None:
    chat = route("telegram", "direct", "12345", "bot1")
    keys = {session_key_for_route("ops", chat, scope) for scope in DM_SCOPES}
    assert len(keys) == len(DM_SCOPES) == 4


def test_two_topics_of_one_group_are_two_sessions() -> None:
    one = session_key_for_route("ops", route("telegram", "group", "-100123", thread="1"), "main")
    two = session_key_for_route("ops", route("telegram", "group", "-100123", thread="2"), "main")
    whole = session_key_for_route("ops", route("telegram", "group", "-100123"), "main")
    assert len({one, two, whole}) == 3


def test_an_unknown_dm_scope_is_an_error() -> None:
    with pytest.raises(ValueError, match="unknown DM scope"):
        session_key_for_route("ops", route("slack", "direct", "U1"), "per-sender")  # type: ignore[arg-type]


# --- Matrix room ids keep their case in every DM scope (issue 26) -------------------------

MATRIX_ROOM = "!DmRoom:Matrix.org:8448"


@pytest.mark.parametrize("scope", DM_SCOPES)
@pytest.mark.parametrize("kind", ["direct", "group", "channel"])
def test_a_matrix_room_id_keeps_its_case_in_every_dm_scope(kind: str, scope: str) -> None:
    chat = route("matrix", kind, MATRIX_ROOM, "bot1", thread="$Ev")  # type: ignore[arg-type]
    key = session_key_for_route("ops", chat, scope)  # type: ignore[arg-type]
    if kind == "direct" and scope == "main":
        assert key == "agent:ops:main:thread:$ev"  # the main session holds no peer id
    else:
        assert f":{MATRIX_ROOM}:thread:$ev" in key, key
    assert canonical_session_key(key, "ops") == key  # the canonicaliser agrees with the builder


def test_a_per_peer_key_is_a_matrix_room_by_its_bang_alone() -> None:
    """No other channel's peer ids start with "!": an un-channelled `direct:!…` keeps its case,
    a channelled one only on Matrix, and an `@user` id is folded."""
    assert canonical_session_key("Direct:!DmRoom:M.org", "ops") == "agent:ops:direct:!DmRoom:M.org"
    assert canonical_session_key("slack:direct:!AbC", "ops") == "agent:ops:slack:direct:!abc"
    assert canonical_session_key("direct:@Alice:M.org", "ops") == "agent:ops:direct:@alice:m.org"


@settings(max_examples=300)
@given(st.text(alphabet="abXY!:8.Σ ", max_size=12).filter(str.strip), st.sampled_from(DM_SCOPES))
def test_matrix_dm_keys_are_idempotent_and_agree_with_the_builder(peer: str, scope: str) -> None:
    key = session_key_for_route("ops", route("matrix", "direct", peer), scope)  # type: ignore[arg-type]
    assert canonical_session_key(key, "ops") == key
    assert canonical_session_key(canonical_session_key(key.upper(), "ops"), "ops") == (
        canonical_session_key(key.upper(), "ops")
    )


# --- the agent id given is checked, never repaired -----------------------------------------

BAD_AGENT_IDS = ["OPS", "Ops", "", "a" * 65, "-ops", "_ops", " ops", "ops ", "ops\n", "a:b", "öps"]


@pytest.mark.parametrize("agent", BAD_AGENT_IDS)
def test_an_invalid_agent_id_is_refused_by_both_functions(agent: str) -> None:
    message = f"invalid agent_id {agent!r}: an agent id matches"
    with pytest.raises(ValueError, match=re.escape(message)):
        canonical_session_key("main", agent)
    with pytest.raises(ValueError, match=re.escape(message)):
        canonical_session_key("agent:ops:main", agent)  # even when the key names its agent
    with pytest.raises(ValueError, match=re.escape(message)):
        session_key_for_route(agent, route("slack", "direct", "U1"), "per-peer")


@pytest.mark.parametrize("agent", ["a" * 64, "0", "ops_x-1"])
def test_every_agent_id_the_worker_accepts_is_accepted(agent: str) -> None:
    assert re.fullmatch(AGENT_ID_PATTERN, agent)
    assert canonical_session_key("main", agent) == f"agent:{agent}:main"
    assert session_key_for_route(agent, route("slack", "direct", "U1"), "main") == (
        f"agent:{agent}:main"
    )


def test_the_agent_id_rule_is_the_records_rule() -> None:
    assert session_keys.AGENT_ID_PATTERN == AGENT_ID_PATTERN
