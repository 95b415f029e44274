"""workers/core/decide.py: every rule of DESIGN.md and its exceptions, case by case."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta
from typing import Any

import pytest

from schemas import DeliveryConfirmation, TranscriptEntry
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
from workers.core import (
    ENTRY_ID_NAMESPACE,
    SessionState,
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
    ("turn reply without turn info", confirmation(origin={"kind": "turn_reply"}), "written", []),
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


def test_an_unused_malformed_key_does_not_block_the_write() -> None:
    record = confirmation(
        origin={"kind": "message_tool", "turn": {"session_key": "agent::x", "turn_id": "t"}}
    )
    assert kinds(run_records([record])) == ["written"]


def test_invalid_bytes_are_dead_letters_with_the_parse_reason() -> None:
    (outcome,) = run([b"{not json"])
    assert outcome == dead_letter(outcome.error or "")
    assert outcome.session_key is None and outcome.send_id is None
    assert outcome.error is not None and outcome.error.startswith("not JSON: ")


def test_session_key_of() -> None:
    assert session_key_of(parsed(confirmation(session_key="Main"))) == "agent:ops:main"
    assert session_key_of(parsed(reset(session_key="Agent:Ops:Main"))) == "agent:ops:main"
    assert not isinstance(session_key_of(parsed(reset(session_key="main"))), str)


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
        ({"payload.native": [{"kind": "card"}]}, "conflict"),
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


# --- purity of decide ---------------------------------------------------------------------


def test_decide_never_modifies_its_input_state() -> None:
    state = SessionState()
    record = parsed(confirmation())
    assert isinstance(record, DeliveryConfirmation)
    s1, _ = decide(state, record, written_at=WRITTEN_AT)
    before = s1.to_bytes()
    s2, o2 = decide(s1, parsed(confirmation(send_id="b")), written_at=WRITTEN_AT)
    s3, o3 = decide(s1, parsed(confirmation(send_id="c")), written_at=WRITTEN_AT)  # branch
    assert s1.to_bytes() == before and state == SessionState()
    assert "b" in s2.seen and "c" not in s2.seen
    assert "c" in s3.seen and "b" not in s3.seen
    assert o2.entry is not None and o3.entry is not None and o2.entry.seq == o3.entry.seq == 2


def test_decide_is_deterministic() -> None:
    record = parsed(confirmation())
    assert decide(SessionState(), record, written_at=WRITTEN_AT) == decide(
        SessionState(), record, written_at=WRITTEN_AT
    )


def test_written_at_must_be_aware() -> None:
    with pytest.raises(ValueError, match="UTC offset"):
        decide(SessionState(), parsed(confirmation()), written_at=datetime(2025, 4, 1))


def test_one_outcome_for_every_input_of_a_mixed_batch() -> None:
    lines = [dumps(confirmation()), b"", b"junk", dumps(reset()), dumps(confirmation())]
    outcomes = run(lines)
    assert kinds(outcomes) == ["written", "dead_letter", "dead_letter", "reset", "duplicate"]
