"""workers/core/decide.py: every rule of DESIGN.md and its exceptions, case by case.

Most cases run wire lines through parse and the fold (tests/unit/wire.py), whose clock
(`now`) is WRITTEN_AT, a month after the records' times. The clock rules (a record dated
ahead of the worker's clock) are in tests/unit/test_hostile_core.py.
"""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta
from typing import Any

import pytest
from transcript_connector.chain import link, root
from transcript_connector.parse import Invalid

from schemas import TranscriptEntry
from tests.unit.wire import (
    DELETE,
    T0,
    WRITTEN_AT,
    confirmation,
    dumps,
    kinds,
    parsed,
    reset,
    run,
    run_records,
    with_,
)
from workers.commands.forget import erase_record
from workers.core import (
    CLOCK_SKEW_ALLOWANCE,
    EMPTY_HEAD,
    ENTRY_ID_NAMESPACE,
    UNKNOWN_FINGERPRINT,
    Decision,
    Seen,
    SessionHead,
    dead_letter,
    decide,
    posted_by,
    session_key_of,
)

KEY = "agent:ops:telegram:group:-100123"
OTHER_CHAT = "agent:ops:slack:channel:c0general"


def at(minutes: float = 0, days: float = 0) -> str:
    t = datetime.fromisoformat(T0) + timedelta(minutes=minutes, days=days)
    return t.isoformat().replace("+00:00", "Z")


def turn_reply(turn_key: str, **kw: Any) -> dict[str, Any]:
    origin = {"kind": "turn_reply", "turn": {"session_key": turn_key, "turn_id": "t1"}}
    return confirmation(origin=origin, **kw)


# --- one record from an empty state: (case, record, outcome, diagnostic codes) -------------

SINGLE: list[tuple[str, dict[str, Any], str, list[str]]] = [
    ("automation result", confirmation(), "written", []),
    ("failure alert", confirmation(**{"origin.kind": "failure_alert"}), "written", []),
    (
        "message-tool send",
        confirmation(
            origin={"kind": "message_tool", "turn": {"session_key": OTHER_CHAT, "turn_id": "t"}}
        ),
        "written",
        [],
    ),
    (
        "subagent announcement",
        confirmation(
            origin={
                "kind": "subagent_announcement",
                "subagent": {"run_id": "r", "agent_id": "scout"},
            }
        ),
        "written",
        [],
    ),
    ("reply of a turn in this chat", turn_reply(KEY), "skipped_same_turn", []),
    (
        "reply of a turn in this chat, spelled bare",
        turn_reply("telegram:GROUP:-100123"),
        "skipped_same_turn",
        [],
    ),
    ("reply of a turn in another chat", turn_reply(OTHER_CHAT), "written", []),
    ("reply of a turn whose key is empty: main", turn_reply(""), "written", []),
    (
        "message tool run by a turn in this chat",
        confirmation(origin={"kind": "message_tool", "turn": {"session_key": KEY, "turn_id": "t"}}),
        "written",
        [],
    ),
    (
        "destination bound to another agent",
        confirmation(destination_agent_id="sales"),
        "other_agent",
        ["destination_bound_to_other_agent"],
    ),
    ("destination bound to the sender", confirmation(destination_agent_id="ops"), "written", []),
    (
        "native-only payload",
        confirmation(payload={"native": [{"kind": "embed", "title": "Build #42"}]}),
        "native_only",
        ["native_only_payload"],
    ),
    (
        "empty text, no media",
        confirmation(payload={"text": ""}),
        "native_only",
        ["native_only_payload"],
    ),
    (
        "whitespace text, no media",
        confirmation(payload={"text": " \n\t"}),
        "native_only",
        ["native_only_payload"],
    ),
    ("nothing at all", confirmation(payload={}), "native_only", ["native_only_payload"]),
    (
        "media only",
        confirmation(payload={"media": [{"kind": "image", "name": "a.png"}]}),
        "written",
        [],
    ),
    (
        "rule 4 before rule 5",
        confirmation(destination_agent_id="sales", payload={}),
        "other_agent",
        ["destination_bound_to_other_agent"],
    ),
    (
        "rule 5 before rule 6",
        turn_reply(KEY, payload={"native": [{"kind": "card"}]}),
        "native_only",
        ["native_only_payload"],
    ),
    (
        "rule 4 before rule 6",
        turn_reply(KEY, destination_agent_id="sales"),
        "other_agent",
        ["destination_bound_to_other_agent"],
    ),
    (
        "in-chat job delivering elsewhere",
        confirmation(**{"origin.job.mode": "in_chat", "origin.job.session_key": OTHER_CHAT}),
        "written",
        ["in_chat_job_delivered_elsewhere"],
    ),
    (
        "in-chat job delivering to its own chat, spelled differently",
        confirmation(
            **{"origin.job.mode": "in_chat", "origin.job.session_key": "Telegram:Group:-100123"}
        ),
        "written",
        [],
    ),
    (
        "in-chat job without a session key",
        confirmation(**{"origin.job.mode": "in_chat"}),
        "written",
        [],
    ),
    (
        "background job with a creating chat elsewhere",
        confirmation(**{"origin.job.session_key": OTHER_CHAT}),
        "written",
        [],
    ),
    (
        "sender's key not canonical",
        confirmation(session_key="agent:ops:Telegram:Group:-100123"),
        "written",
        ["session_key_mismatch"],
    ),
    (
        "both write diagnostics, in rule order",
        confirmation(
            session_key="telegram:group:-100123",
            **{"origin.job.mode": "in_chat", "origin.job.session_key": OTHER_CHAT},
        ),
        "written",
        ["in_chat_job_delivered_elsewhere", "session_key_mismatch"],
    ),
    ("reset", reset(), "reset", []),
]


@pytest.mark.parametrize(
    ("record", "kind", "codes"), [c[1:] for c in SINGLE], ids=[c[0] for c in SINGLE]
)
def test_one_record(record: dict[str, Any], kind: str, codes: list[str]) -> None:
    (outcome,) = run_records([record])
    assert outcome.kind == kind
    assert [d.code for d in outcome.diagnostics] == codes
    assert outcome.session_key == KEY
    assert (outcome.entry is not None) == (kind == "written")
    assert outcome.error is None


LEVELS = {
    "clock_skew": "warn",
    "destination_bound_to_other_agent": "warn",
    "native_only_payload": "warn",
    "in_chat_job_delivered_elsewhere": "warn",
    "session_key_mismatch": "info",
    "conflicting_duplicate": "error",
}


@pytest.mark.parametrize(
    "record", [c[1] for c in SINGLE if c[3]], ids=[c[0] for c in SINGLE if c[3]]
)
def test_diagnostics_carry_level_key_send_id_and_the_record_time(record: dict[str, Any]) -> None:
    record = with_(record, confirmed_at="2025-03-01T14:00:00+02:00")
    if record["payload"].get("text", "").strip():
        record["payload"]["text"] = "TOP-SECRET text"
    record["payload"]["native"] = [{"kind": "embed", "url": "https://x.example/?token=1"}]
    (outcome,) = run_records([record])
    assert outcome.diagnostics
    for diag in outcome.diagnostics:
        assert diag.schema_ == "diagnostic/1"
        assert diag.level == LEVELS[diag.code]
        assert diag.session_key == KEY
        assert diag.send_id == record["send_id"]
        assert diag.at == datetime.fromisoformat("2025-03-01T12:00:00+00:00")
        assert "TOP-SECRET" not in diag.detail and "http" not in diag.detail


def test_the_in_chat_job_diagnostic_names_the_job_and_the_doctor() -> None:
    record = confirmation(**{"origin.job.mode": "in_chat", "origin.job.session_key": OTHER_CHAT})
    (outcome,) = run_records([record])
    (diag,) = outcome.diagnostics
    assert "job-1" in diag.detail and "daily digest" in diag.detail
    assert "run `transcript-owner doctor` to migrate it to a background job" in diag.detail
    assert OTHER_CHAT in diag.detail and KEY in diag.detail


# --- dead letters the core decides (the key names no agent) -------------------------------

CORE_DEAD_LETTERS: list[tuple[str, dict[str, Any], str]] = [
    (
        "malformed session key",
        confirmation(session_key="agent::x"),
        "session_key: malformed agent key",
    ),
    (
        "malformed turn key of a turn reply",
        turn_reply("agent:Not Valid:main"),
        "origin.turn.session_key: malformed agent key",
    ),
    (
        "turn reply without its turn (rule 1, at the edge)",
        confirmation(origin={"kind": "turn_reply"}),
        "origin.turn: field required when origin.kind is turn_reply",
    ),
    (
        "malformed key of an in-chat job",
        confirmation(**{"origin.job.mode": "in_chat", "origin.job.session_key": "agent::x"}),
        "origin.job.session_key: malformed agent key",
    ),
    (
        "reset with a bare key",
        reset(session_key="telegram:group:-100123"),
        "session_key: a reset needs a full",
    ),
    (
        "reset with a malformed key",
        reset(session_key="agent::main"),
        "session_key: malformed agent key",
    ),
]


@pytest.mark.parametrize(
    ("record", "reason"), [c[1:] for c in CORE_DEAD_LETTERS], ids=[c[0] for c in CORE_DEAD_LETTERS]
)
def test_core_dead_letters(record: dict[str, Any], reason: str) -> None:
    (outcome,) = run_records([record])
    assert outcome.kind == "dead_letter"
    assert outcome.error is not None and outcome.error.startswith(reason), outcome.error
    assert outcome.entry is None and outcome.diagnostics == ()


def test_core_dead_letters_carry_key_and_send_id() -> None:
    (outcome,) = run_records([turn_reply("agent:Not Valid:main")])
    assert (outcome.session_key, outcome.send_id) == (KEY, "outbound-delivery:d1:0")
    (outcome,) = run_records([confirmation(session_key="agent::x")])
    assert (outcome.session_key, outcome.send_id) == (None, "outbound-delivery:d1:0")


@pytest.mark.parametrize(
    "origin",
    [
        {"kind": "message_tool", "turn": {"session_key": "agent::x", "turn_id": "t"}},
        {"kind": "automation_result", "job": {"id": "j", "mode": "background",
                                              "session_key": "agent::x"}},
    ],
    ids=["turn of a message-tool send", "creating chat of a background job"],
)
def test_an_unused_malformed_key_does_not_block_the_write(origin: dict[str, Any]) -> None:
    record = confirmation(origin=origin)
    assert kinds(run_records([record, record])) == ["written", "duplicate"]


def test_invalid_bytes_are_dead_letters_with_the_parse_reason() -> None:
    (outcome,) = run([b"{not json"])
    assert outcome == dead_letter(outcome.error or "")
    assert outcome.session_key is None and outcome.send_id is None
    assert outcome.error is not None and outcome.error.startswith("not JSON: ")


def test_session_key_of() -> None:
    assert session_key_of(parsed(confirmation(session_key="Main"))) == "agent:ops:main"
    assert session_key_of(parsed(reset(session_key="Agent:Ops:Main"))) == "agent:ops:main"
    assert not isinstance(session_key_of(parsed(reset(session_key="main"))), str)


def test_a_reset_or_an_erase_is_keyed_by_the_agent_its_key_names() -> None:
    """They carry no agent id: canonical_session_key, which refuses an invalid one, is given a
    valid stand-in that a full key never uses."""
    assert session_key_of(parsed(reset(session_key=" Agent:Kate:Direct:U1"))) == (
        "agent:kate:direct:u1"
    )
    erase = erase_record("agent:Kate:Matrix:Direct:!Rm:S.org", "gdpr", WRITTEN_AT)
    assert not isinstance(erase, Invalid)
    assert erase.session_key == "agent:kate:matrix:direct:!Rm:S.org"
    assert isinstance(session_key_of(parsed(reset(session_key="agent:a!:main"))), Invalid)


@pytest.mark.parametrize("agent", ["OPS", "", "-ops", " ops", "ops\n", "a" * 65])
def test_a_record_whose_agent_id_is_none_is_a_dead_letter(agent: str) -> None:
    (outcome,) = run_records([confirmation(agent_id=agent, session_key="main")])
    assert outcome.kind == "dead_letter"
    assert outcome.error is not None and outcome.error.startswith("agent_id: "), outcome.error


def test_session_key_of_gives_a_reason_for_an_invalid_agent_id_never_an_exception() -> None:
    """The parser refuses such a record first; one that reached session_key_of anyway is a
    dead letter's reason (the owner's path), not a ValueError out of the worker."""
    record = parsed(confirmation(session_key="main")).model_copy(update={"agent_id": "OPS"})
    got = session_key_of(record)
    assert isinstance(got, Invalid)
    assert got.reason.startswith("session_key: invalid agent_id 'OPS': an agent id matches ^")


# --- the entry ----------------------------------------------------------------------------


def test_the_written_entry() -> None:
    record = confirmation(
        confirmed_at="2025-03-01T14:00:00+02:00",
        payload={
            "text": "  Digest:\n3 new tickets  ",
            "media": [
                {
                    "kind": "image",
                    "name": "chart.png",
                    "url": "https://cdn.example/c.png?token=s3cr3t",
                    "mime": "image/png",
                },
                {"kind": "file", "name": "report.pdf"},
            ],
            "native": [{"kind": "card"}],
        },
        receipt={"platform_message_ids": ["4711", "4712"], "sent_at": "2025-03-01T12:00:01Z"},
    )
    (outcome,) = run_records([record])
    entry = outcome.entry
    assert entry is not None
    assert entry.schema_ == "transcript-entry/1"
    assert (entry.session_key, entry.epoch, entry.seq) == (KEY, 0, 1)
    assert entry.entry_id == str(uuid.uuid5(ENTRY_ID_NAMESPACE, "outbound-delivery:d1:0"))
    assert entry.send_id == outcome.send_id == "outbound-delivery:d1:0"
    assert entry.role == "assistant" and entry.agent_id == "ops"
    assert entry.text == "  Digest:\n3 new tickets  "  # exactly as shown
    assert [m.model_dump() for m in entry.media] == [
        {"kind": "image", "name": "chart.png"},
        {"kind": "file", "name": "report.pdf"},
    ]
    assert entry.source == "automation_result"
    assert entry.delivered_at == datetime.fromisoformat("2025-03-01T12:00:00+00:00")
    assert entry.delivered_at.utcoffset() == timedelta(hours=2)
    assert entry.written_at == WRITTEN_AT
    assert entry.platform_message_ids == ("4711", "4712")
    wire = entry.model_dump_json()
    assert "https://" not in wire and "token" not in wire and "mime" not in wire
    assert TranscriptEntry.model_validate_json(wire) == entry


def test_a_media_only_send_is_written_with_empty_text_and_no_urls() -> None:
    media = [{"kind": "image", "name": "a.png", "url": "https://x.example/a.png?sig=abc"}]
    (outcome,) = run_records([confirmation(payload={"media": media})])
    assert outcome.entry is not None
    assert outcome.entry.text == ""
    assert "x.example" not in outcome.entry.model_dump_json()


POSTERS: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
    (
        "job",
        {
            "kind": "automation_result",
            "job": {"id": "job-1", "name": "digest", "run_id": "r1", "mode": "background"},
        },
        {"kind": "job", "id": "job-1", "name": "digest", "run_id": "r1"},
    ),
    (
        "job without name or run",
        {"kind": "failure_alert", "job": {"id": "job-2", "mode": "in_chat"}},
        {"kind": "job", "id": "job-2", "name": None, "run_id": None},
    ),
    (
        "sub-agent",
        {
            "kind": "subagent_announcement",
            "subagent": {"run_id": "sr1", "agent_id": "scout", "label": "research"},
        },
        {"kind": "subagent", "id": "scout", "name": "research", "run_id": "sr1"},
    ),
    (
        "job wins over sub-agent",
        {
            "kind": "subagent_announcement",
            "job": {"id": "j", "mode": "background"},
            "subagent": {"run_id": "s", "agent_id": "scout"},
        },
        {"kind": "job", "id": "j", "name": None, "run_id": None},
    ),
    (
        "the agent itself",
        {"kind": "message_tool"},
        {"kind": "agent", "id": "ops", "name": None, "run_id": None},
    ),
]


@pytest.mark.parametrize(
    ("origin", "poster"), [c[1:] for c in POSTERS], ids=[c[0] for c in POSTERS]
)
def test_posted_by(origin: dict[str, Any], poster: dict[str, Any]) -> None:
    record = confirmation(origin=origin)
    (outcome,) = run_records([record])
    assert outcome.entry is not None
    assert outcome.entry.posted_by.model_dump() == poster
    assert posted_by(parsed(record)) == outcome.entry.posted_by  # type: ignore[arg-type]
    assert outcome.entry.source == origin["kind"]


# --- Rule 3: dedupe -----------------------------------------------------------------------


def test_a_redelivered_confirmation_is_a_duplicate() -> None:
    assert kinds(run_records([confirmation(), confirmation()])) == ["written", "duplicate"]


def test_a_retry_with_new_receipt_and_time_is_a_duplicate() -> None:
    retry = confirmation(confirmed_at=at(minutes=5), receipt={"platform_message_ids": ["9999"]})
    assert kinds(run_records([confirmation(), retry])) == ["written", "duplicate"]


def test_a_retry_spelled_with_another_key_is_a_duplicate() -> None:
    retry = confirmation(session_key="  Telegram:Group:-100123 ")
    assert kinds(run_records([confirmation(), retry])) == ["written", "duplicate"]


def test_the_same_send_id_in_another_session_is_another_send() -> None:
    elsewhere = confirmation(session_key=OTHER_CHAT)
    assert kinds(run_records([confirmation(), elsewhere])) == ["written", "written"]


def test_a_conflicting_duplicate_is_an_error_and_writes_nothing() -> None:
    original = confirmation()
    changed = with_(original, **{"payload.text": "something else"})
    outcomes = run_records([original, changed, original, changed])
    assert kinds(outcomes) == ["written", "conflict", "duplicate", "conflict"]
    conflict = outcomes[1]
    assert conflict.entry is None
    (diag,) = conflict.diagnostics
    assert (diag.level, diag.code, diag.send_id) == (
        "error",
        "conflicting_duplicate",
        "outbound-delivery:d1:0",
    )
    assert "something else" not in diag.detail


@pytest.mark.parametrize(
    ("change", "second"),
    [
        ({"origin.job.run_id": "run-2"}, "conflict"),
        ({"payload.text": "Digest: 3 new tickets "}, "conflict"),
        ({"payload.media": [{"kind": "image", "name": "a.png"}]}, "conflict"),
        ({"payload.media": [{"kind": "image", "name": "a.png"}], "payload.text": ""}, "conflict"),
        ({"origin.kind": "failure_alert"}, "conflict"),
        ({"origin.job.name": "weekly digest"}, "conflict"),
        ({"origin.job.mode": "in_chat"}, "conflict"),
        ({"origin.job.session_key": OTHER_CHAT}, "conflict"),
        ({"agent_id": "sales", "session_key": "telegram:group:-100123"}, "written"),  # other chat
        ({"payload.native": [{"kind": "card"}]}, "duplicate"),  # native items are not content
        ({"payload.media": [], "payload.native": []}, "duplicate"),
        ({"route.account_id": "bot2"}, "duplicate"),  # the route is not content
        ({"session_key": "TELEGRAM:group:-100123"}, "duplicate"),
        ({"destination_agent_id": "sales"}, "conflict"),
        ({"destination_agent_id": "ops"}, "duplicate"),  # bound to the sender, said explicitly
        ({"payload.media": []}, "duplicate"),  # a default, said explicitly
        ({"receipt.platform_message_ids": ["1", "2"]}, "duplicate"),
        ({"route.thread_id": None}, "duplicate"),
        ({"confirmed_at": "2025-03-01T13:00:00+01:00"}, "duplicate"),
    ],
    ids=str,
)
def test_what_counts_as_different_content(change: dict[str, Any], second: str) -> None:
    original = confirmation()
    assert kinds(run_records([original, with_(original, **change)])) == ["written", second]


def test_unknown_fields_and_key_order_do_not_change_content() -> None:
    original = confirmation()
    reordered = dict(reversed(list(original.items())), extra={"x": 1})
    assert kinds(run_records([original, reordered])) == ["written", "duplicate"]


@pytest.mark.parametrize(
    ("first", "outcome"),
    [
        (turn_reply(KEY), "skipped_same_turn"),
        (confirmation(destination_agent_id="sales"), "other_agent"),
        (confirmation(payload={"native": [{"kind": "embed"}]}), "native_only"),
    ],
)
def test_records_that_write_nothing_are_remembered_too(first: dict[str, Any], outcome: str) -> None:
    changed = with_(first, **{"payload.text": "now with text"}, destination_agent_id=DELETE)
    outcomes = run_records([first, first, changed])
    assert kinds(outcomes) == [outcome, "duplicate", "conflict"]


def test_dedupe_window_measured_on_the_session_clock() -> None:
    original = confirmation(send_id="s1", confirmed_at=at())
    later = confirmation(send_id="s2", confirmed_at=at(days=7))  # exactly one window later
    much_later = confirmation(send_id="s3", confirmed_at=at(days=7, minutes=1))
    outcomes = run_records([original, later, original, much_later, original])
    # at days=7, first_seen == clock - window: still remembered; a minute later: forgotten
    assert kinds(outcomes) == ["written", "written", "duplicate", "written", "written"]
    assert [o.entry.seq for o in outcomes if o.entry] == [1, 2, 3, 4]


def test_the_dedupe_window_is_a_parameter() -> None:
    original = confirmation(send_id="s1", confirmed_at=at())
    later = confirmation(send_id="s2", confirmed_at=at(minutes=61))
    outcomes = run_records([original, later, original], dedupe_window=timedelta(hours=1))
    assert kinds(outcomes) == ["written", "written", "written"]


def test_a_late_record_is_remembered_from_when_it_was_seen() -> None:
    """first_seen is the session clock, not the record's old time: its redelivery is a
    duplicate even when it arrives more than a window after it was confirmed."""
    now = confirmation(send_id="s1", confirmed_at=at(days=10))
    late = confirmation(send_id="s2", confirmed_at=at())
    assert kinds(run_records([now, late, late])) == ["written", "written", "duplicate"]


# --- Rule 2: resets -----------------------------------------------------------------------


def test_resets_between_sends_increment_the_epoch_and_seq_keeps_counting() -> None:
    records = [
        confirmation(send_id="a", confirmed_at=at(1)),
        reset(reset_at=at(2)),
        confirmation(send_id="b", confirmed_at=at(3)),
        confirmation(send_id="c", confirmed_at=at(4)),
        reset(reset_at=at(5)),
        confirmation(send_id="d", confirmed_at=at(6)),
    ]
    outcomes = run_records(records)
    assert kinds(outcomes) == ["written", "reset", "written", "written", "reset", "written"]
    entries = [o.entry for o in outcomes if o.entry]
    assert [(e.epoch, e.seq) for e in entries] == [(0, 1), (1, 2), (1, 3), (2, 4)]
    assert outcomes[1].session_key == KEY and outcomes[1].send_id is None


def test_a_reset_chat_is_the_same_chat_for_late_results() -> None:
    """After a reset, a job result confirmed before it still lands in the chat (new epoch)."""
    records = [reset(reset_at=at(10)), confirmation(send_id="late", confirmed_at=at(5))]
    outcomes = run_records(records)
    assert kinds(outcomes) == ["reset", "written"]
    assert outcomes[1].entry is not None and outcomes[1].entry.epoch == 1


def test_a_redelivered_or_older_reset_changes_nothing() -> None:
    records = [
        reset(reset_at=at(5)),
        reset(reset_at=at(5)),
        reset(reset_at=at(1)),
        confirmation(confirmed_at=at(6)),
    ]
    outcomes = run_records(records)
    assert kinds(outcomes) == ["reset", "duplicate", "duplicate", "written"]
    assert outcomes[3].entry is not None and outcomes[3].entry.epoch == 1


def test_a_reset_spelled_differently_resets_the_canonical_session() -> None:
    outcomes = run_records([reset(session_key=" AGENT:ops:Telegram:Group:-100123"), confirmation()])
    assert outcomes[0].session_key == KEY
    assert outcomes[1].entry is not None and outcomes[1].entry.epoch == 1


def test_sessions_are_independent() -> None:
    records = [
        confirmation(send_id="a"),
        reset(session_key=OTHER_CHAT),
        confirmation(send_id="b", session_key=OTHER_CHAT),
        confirmation(send_id="c"),
    ]
    entries = [o.entry for o in run_records(records) if o.entry]
    assert [(e.session_key, e.epoch, e.seq) for e in entries] == [
        (KEY, 0, 1),
        (OTHER_CHAT, 1, 1),
        (KEY, 0, 2),
    ]


# --- decide itself: a pure function of (head, prior, record) ------------------------------


def _decide(head: SessionHead, prior: Seen | None, wire: dict[str, Any], **kw: Any) -> Decision:
    record = parsed(wire)
    key = session_key_of(record)
    assert isinstance(key, str)
    kw.setdefault("now", WRITTEN_AT)
    kw.setdefault("written_at", WRITTEN_AT)
    return decide(head, prior, record, key, **kw)


def test_decide_never_modifies_its_input() -> None:
    d1 = _decide(EMPTY_HEAD, None, confirmation())
    before = d1.head.to_bytes()
    d2 = _decide(d1.head, None, confirmation(send_id="b"))
    d3 = _decide(d1.head, None, confirmation(send_id="c"))  # a branch from the same head
    assert d1.head.to_bytes() == before and EMPTY_HEAD == SessionHead()
    assert d2.outcome.entry is not None and d3.outcome.entry is not None
    assert d2.outcome.entry.seq == d3.outcome.entry.seq == 2
    assert d2.head._replace(chain=None) == d3.head._replace(chain=None) == SessionHead(
        0, 3, d1.head.clock, None, chain_from=1, live_from=1)
    assert d2.head.chain != d3.head.chain  # two branches, two chains


def test_decide_is_deterministic() -> None:
    assert _decide(EMPTY_HEAD, None, confirmation()) == _decide(EMPTY_HEAD, None, confirmation())


def test_now_and_written_at_must_be_aware() -> None:
    with pytest.raises(ValueError, match="UTC offset"):
        _decide(EMPTY_HEAD, None, confirmation(), written_at=datetime(2025, 4, 1))
    with pytest.raises(ValueError, match="UTC offset"):
        _decide(EMPTY_HEAD, None, reset(), now=datetime(2025, 4, 1))


def test_a_written_decision_moves_the_head_and_remembers_the_send() -> None:
    t0 = datetime.fromisoformat(T0)
    d = _decide(SessionHead(2, 5, None, t0), None, confirmation())
    assert d.head == SessionHead(2, 6, t0, t0, chain=d.outcome.chain, chain_from=5, live_from=1)
    assert d.outcome.chain == link(root(KEY, 2), d.outcome.entry_json or b"")
    assert d.seen is not None and d.seen.first_seen == t0 and len(d.seen.fingerprint) == 32
    assert d.outcome.entry is not None and (d.outcome.entry.epoch, d.outcome.entry.seq) == (2, 5)


@pytest.mark.parametrize(
    ("wire", "kind"),
    [
        (turn_reply(KEY), "skipped_same_turn"),
        (confirmation(destination_agent_id="sales"), "other_agent"),
        (confirmation(payload={}), "native_only"),
    ],
)
def test_a_decision_that_writes_nothing_remembers_the_send_and_moves_only_the_clock(
    wire: dict[str, Any], kind: str
) -> None:
    head = SessionHead(1, 7, datetime.fromisoformat(T0) - timedelta(days=1), None)
    d = _decide(head, None, wire)
    assert d.outcome.kind == kind and d.seen is not None
    assert d.head == SessionHead(1, 7, datetime.fromisoformat(T0), None)
    # nothing moved at all: the very head object comes back
    later = _decide(d.head, None, with_(wire, send_id="other"))
    assert later.head is d.head and later.seen is not None


def test_a_duplicate_or_conflict_remembers_nothing_new() -> None:
    first = _decide(EMPTY_HEAD, None, confirmation())
    assert first.seen is not None
    dup = _decide(first.head, first.seen, confirmation())
    assert dup.outcome.kind == "duplicate" and dup.seen is None and dup.head is first.head
    conflict = _decide(first.head, first.seen, confirmation(**{"payload.text": "x"}))
    assert conflict.outcome.kind == "conflict" and conflict.seen is None
    assert conflict.head is first.head
    # a retry that moves the clock moves it, but the send stays remembered as first seen
    later = _decide(first.head, first.seen, confirmation(confirmed_at=at(minutes=3)))
    assert later.outcome.kind == "duplicate" and later.seen is None
    assert later.head.clock == datetime.fromisoformat(at(minutes=3))


def test_the_conflict_names_when_the_send_was_first_seen_and_both_fingerprints() -> None:
    first = _decide(EMPTY_HEAD, None, confirmation(confirmed_at="2025-03-01T14:00:00+02:00"))
    assert first.seen is not None
    conflict = _decide(first.head, first.seen, confirmation(**{"payload.text": "x"}))
    (diag,) = conflict.outcome.diagnostics
    assert "first seen at 2025-03-01T12:00:00Z (session clock)" in diag.detail
    assert first.seen.fingerprint in diag.detail


def test_a_send_id_migrated_from_format_1_is_a_duplicate_whatever_it_holds() -> None:
    """Format 1's fingerprints are not comparable (the definition changed): no false
    conflict after an upgrade."""
    prior = Seen(datetime.fromisoformat(T0), UNKNOWN_FINGERPRINT)
    head = SessionHead(0, 2, datetime.fromisoformat(T0), None)
    for wire in (confirmation(), confirmation(**{"payload.text": "other"}), turn_reply(KEY)):
        d = _decide(head, prior, wire)
        assert d.outcome.kind == "duplicate" and d.seen is None


def test_an_expired_send_is_forgotten_and_remembered_anew() -> None:
    t0 = datetime.fromisoformat(T0)
    prior = Seen(t0, "f" * 32)
    window = timedelta(days=1)
    head = SessionHead(0, 2, t0 + window, None)
    kept = _decide(head, prior, confirmation(), dedupe_window=window)
    assert kept.outcome.kind == "conflict"  # exactly one window behind: still remembered
    head = SessionHead(0, 2, t0 + window + timedelta(microseconds=1), None)
    gone = _decide(head, prior, confirmation(), dedupe_window=window)
    assert gone.outcome.kind == "written"
    assert gone.seen is not None and gone.seen.first_seen == head.clock  # the session clock


def test_the_session_clock_is_the_latest_confirmed_at_and_never_goes_back() -> None:
    t0 = datetime.fromisoformat(T0)
    d1 = _decide(EMPTY_HEAD, None, confirmation(send_id="a", confirmed_at=at(minutes=10)))
    assert d1.head.clock == t0 + timedelta(minutes=10)
    d2 = _decide(d1.head, None, confirmation(send_id="b", confirmed_at=at(minutes=1)))
    assert d2.head.clock == t0 + timedelta(minutes=10)
    assert d2.seen is not None and d2.seen.first_seen == t0 + timedelta(minutes=10)
    reset_at = _decide(d2.head, None, reset(reset_at=at(minutes=20)))
    assert reset_at.head.clock == d2.head.clock  # a reset does not move the dedupe clock


def test_the_skew_allowance_is_five_minutes_of_the_workers_clock() -> None:
    assert CLOCK_SKEW_ALLOWANCE == timedelta(minutes=5)
    now = datetime.fromisoformat(T0)
    edge = _decide(EMPTY_HEAD, None, confirmation(confirmed_at=at(minutes=5)), now=now)
    assert [d.code for d in edge.outcome.diagnostics] == []
    assert edge.head.clock == now + timedelta(minutes=5)  # within the allowance: it moves
    past = confirmation(confirmed_at="2025-03-01T12:05:00.000001Z")
    ahead = _decide(EMPTY_HEAD, None, past, now=now)
    assert [d.code for d in ahead.outcome.diagnostics] == ["clock_skew"]
    assert ahead.head.clock == now  # counts as made at the worker's clock, not at its own time
    assert ahead.seen is not None and ahead.seen.first_seen == now  # no clock yet: now


def test_one_outcome_for_every_input_of_a_mixed_batch() -> None:
    lines = [dumps(confirmation()), b"", b"junk", dumps(reset()), dumps(confirmation())]
    outcomes = run(lines)
    assert kinds(outcomes) == ["written", "dead_letter", "dead_letter", "reset", "duplicate"]
