"""Session-key parity: the write lands in the exact session an inbound reply uses.

field-notes.md lists the parity failures seen in the gateway. For each, keys built with the
one exported builder from the inbound identity agree; and the mismatched spelling is NOT
made equal by the canonicaliser, because the information is not in the key (merging on a
guess would join different chats). What the canonicaliser can repair is spelling only:
case outside case-preserving peers, `dm` -> `direct`, the missing `agent:` prefix,
whitespace, `main`/empty, Telegram `thread` -> `topic`.
"""

from __future__ import annotations

import pytest

from schemas import Route
from tests.unit.wire import confirmation, kinds, run_records
from workers.core import DmScope, canonical_session_key, session_key_for_route


def _route(channel: str, kind: str, peer: str, account: str | None = None) -> Route:
    return Route(channel=channel, account_id=account, peer_kind=kind, peer_id=peer)


# (failure, agent's DM scope, the inbound identity, the identity the broken sender used)
FAILURES: list[tuple[str, DmScope, Route, Route]] = [
    (
        "Slack DM sent to the D… channel id; inbound uses the U… user id",
        "per-channel-peer",
        _route("slack", "direct", "U07ABCDEF", "T0WORK"),
        _route("slack", "direct", "D024BE91L", "T0WORK"),
    ),
    (
        "WeChat chat typed direct outbound but group inbound",
        "per-channel-peer",
        _route("wechat", "group", "wxid_family"),
        _route("wechat", "direct", "wxid_family"),
    ),
    (
        "Feishu chat typed direct outbound but group inbound",
        "per-account-channel-peer",
        _route("feishu", "group", "oc_5ad11d72b830411d72b836c20", "tenant1"),
        _route("feishu", "direct", "oc_5ad11d72b830411d72b836c20", "tenant1"),
    ),
    (
        "Matrix room id case-folded by the sender",
        "per-channel-peer",
        _route("matrix", "group", "!AbCdEfGh:matrix.org"),
        _route("matrix", "group", "!abcdefgh:matrix.org"),
    ),
    (
        "X reply addressed to the post id; inbound keys the conversation id",
        "per-channel-peer",
        _route("x", "direct", "1790000000000000001"),
        _route("x", "direct", "1790000000000000777"),
    ),
]


@pytest.mark.parametrize(
    ("scope", "inbound", "broken"), [f[1:] for f in FAILURES], ids=[f[0] for f in FAILURES]
)
def test_one_builder_from_the_inbound_identity_agrees(
    scope: DmScope, inbound: Route, broken: Route
) -> None:
    inbound_key = session_key_for_route("ops", inbound, scope)  # what the inbound producer uses
    outbound_key = session_key_for_route("ops", inbound, scope)  # what the connector must use
    assert outbound_key == inbound_key
    assert canonical_session_key(outbound_key, "ops") == inbound_key


@pytest.mark.parametrize(
    ("scope", "inbound", "broken"), [f[1:] for f in FAILURES], ids=[f[0] for f in FAILURES]
)
def test_the_canonicaliser_does_not_merge_a_key_built_from_the_wrong_identity(
    scope: DmScope, inbound: Route, broken: Route
) -> None:
    inbound_key = session_key_for_route("ops", inbound, scope)
    broken_key = session_key_for_route("ops", broken, scope)
    assert canonical_session_key(broken_key, "ops") != inbound_key


def test_a_resolver_ignoring_the_dm_scope_is_not_repaired() -> None:
    chat = _route("telegram", "direct", "12345", "bot1")
    inbound_key = session_key_for_route("ops", chat, "per-account-channel-peer")
    for wrong_scope in ("main", "per-peer", "per-channel-peer"):
        wrong = session_key_for_route("ops", chat, wrong_scope)  # type: ignore[arg-type]
        assert canonical_session_key(wrong, "ops") != inbound_key
    assert session_key_for_route("ops", chat, "per-account-channel-peer") == inbound_key


# Spellings of the same key the canonicaliser does repair: (inbound key, sender's spelling)
REPAIRABLE: list[tuple[str, str]] = [
    ("agent:ops:slack:channel:c0general", "agent:OPS:Slack:Channel:C0GENERAL"),  # case
    ("agent:ops:slack:channel:c0general", "slack:channel:c0general"),  # no agent prefix
    ("agent:ops:slack:channel:c0general", "  agent:ops:slack:channel:c0general\n"),  # whitespace
    ("agent:ops:telegram:direct:12345", "agent:ops:telegram:dm:12345"),  # legacy dm
    ("agent:ops:direct:u1", "dm:U1"),  # legacy dm, bare, case
    ("agent:ops:main", ""),
    ("agent:ops:main", "Main"),
    ("agent:ops:telegram:group:-100123:topic:42", "telegram:group:-100123:thread:42"),
    ("agent:ops:matrix:direct:@alice:matrix.org", "agent:ops:matrix:direct:@Alice:Matrix.org"),
    ("agent:ops:signal:group:AbC=", "SIGNAL:GROUP:AbC="),  # case around a preserved id
]


@pytest.mark.parametrize(("inbound_key", "spelling"), REPAIRABLE)
def test_spelling_differences_are_repaired(inbound_key: str, spelling: str) -> None:
    assert canonical_session_key(spelling, "ops") == inbound_key


def test_a_send_spelled_differently_lands_in_the_inbound_session_with_an_info_diagnostic() -> None:
    inbound_key = session_key_for_route("ops", _route("slack", "channel", "C0GENERAL"), "main")
    records = [
        confirmation(send_id="a", session_key=inbound_key),
        confirmation(send_id="b", session_key="Slack:Channel:C0GENERAL"),
    ]
    first, second = run_records(records)
    assert kinds([first, second]) == ["written", "written"]
    assert first.entry is not None and second.entry is not None
    assert first.entry.session_key == second.entry.session_key == inbound_key
    assert (first.entry.seq, second.entry.seq) == (1, 2)
    assert first.diagnostics == ()
    (info,) = second.diagnostics
    assert (info.level, info.code) == ("info", "session_key_mismatch")
    assert "Slack:Channel:C0GENERAL" in info.detail and inbound_key in info.detail


def test_a_send_built_from_the_wrong_identity_lands_elsewhere() -> None:
    """Documented limit: the worker trusts the key; only the builder prevents this split."""
    inbound = _route("slack", "direct", "U07ABCDEF", "T0WORK")
    broken = _route("slack", "direct", "D024BE91L", "T0WORK")
    good_key = session_key_for_route("ops", inbound, "per-channel-peer")
    bad_key = session_key_for_route("ops", broken, "per-channel-peer")
    outcomes = run_records(
        [
            confirmation(send_id="a", session_key=good_key),
            confirmation(send_id="b", session_key=bad_key),
        ]
    )
    assert [o.session_key for o in outcomes] == [good_key, bad_key]
