"""Rule 2 for stored jobs (workers/core/job_modes.py): table-driven, no I/O, no mocks."""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from transcript_connector.session_keys import DmScope

from schemas.jobs import JobTarget
from workers.core.job_modes import (
    DOCTOR,
    classify,
    merge_quarantine,
    migrated_row,
    plan_store,
    store_problem,
)

AT = datetime(2026, 1, 15, 9, 30, tzinfo=UTC)
CHAT = "agent:main:telegram:group:-1001234567890"


def job(**fields: Any) -> dict[str, Any]:
    """A valid gateway job row; `fields` override (None deletes a field)."""
    row: dict[str, Any] = {
        "id": "job-1",
        "agentId": "main",
        "name": "digest",
        "enabled": True,
        "schedule": {"kind": "cron", "expr": "0 8 * * *", "tz": "UTC"},
        "sessionTarget": f"session:{CHAT}",
        "wakeMode": "now",
        "payload": {"kind": "agentTurn", "message": "Summarize."},
        "delivery": {"mode": "announce", "channel": "telegram", "to": "-1001234567890"},
        "state": {},
    }
    for k, v in fields.items():
        if v is None:
            row.pop(k, None)
        else:
            row[k] = v
    return row


def announce(channel: str | None, to: str | None = None, **more: Any) -> dict[str, Any]:
    d: dict[str, Any] = {"mode": "announce", **more}
    if channel is not None:
        d["channel"] = channel
    if to is not None:
        d["to"] = to
    return d


def classified(row: dict[str, Any], dm_scope: DmScope = "per-channel-peer") -> Any:
    return classify(JobTarget.model_validate(row), dm_scope)


def planned(*rows: Any) -> Any:
    return plan_store({"version": 1, "jobs": list(rows)}, dm_scope="per-channel-peer", at=AT)


# --- every session-target form ---------------------------------------------------------------

TARGETS: list[tuple[str, dict[str, Any], str, str]] = [
    ("main", job(sessionTarget="main", delivery=None), "in_chat", "main session"),
    ("isolated", job(sessionTarget="isolated"), "background", "its own session"),
    ("current", job(sessionTarget="current"), "background", "snapshot of the creating chat"),
    ("legacy: no sessionTarget", job(sessionTarget=None), "in_chat", "default, main"),
    (
        "legacy: isolated true",
        job(sessionTarget=None, isolated=True),
        "background",
        "legacy isolated",
    ),
    ("session, delivers to its chat", job(), "in_chat", "its own chat"),
]


@pytest.mark.parametrize(
    ("row", "mode", "says"), [t[1:] for t in TARGETS], ids=[t[0] for t in TARGETS]
)
def test_each_session_target_form_has_one_mode(row: dict[str, Any], mode: str, says: str) -> None:
    c = classified(row)
    assert (c.mode, c.migrate, c.review) == (mode, False, False)
    assert says in c.reason


# --- session:<key>: does it deliver to <key>? -----------------------------------------------

SAME_CHAT: list[tuple[str, str, dict[str, Any] | None]] = [
    ("route: group id", CHAT, announce("telegram", "-1001234567890")),
    ("route: channel-prefixed target", CHAT, announce("telegram", "telegram:-1001234567890")),
    ("route: explicit kind prefix", CHAT, announce("telegram", "group:-1001234567890")),
    ("route: channel name in another case", CHAT, announce("Telegram", "-1001234567890")),
    (
        "key spelled in upper case",
        "AGENT:Main:Telegram:Group:-1001234567890",
        announce("telegram", "-1001234567890"),
    ),
    (
        "key without agent prefix",
        "telegram:group:-1001234567890",
        announce("telegram", "-1001234567890"),
    ),
    (
        "to is the key, other case",
        CHAT,
        announce("telegram", "Agent:main:TELEGRAM:group:-1001234567890"),
    ),
    ("to is the key without prefix", CHAT, announce("telegram", "telegram:group:-1001234567890")),
    ("to is session:<key>", CHAT, announce("telegram", f"session:{CHAT}")),
    (
        "dm vs direct in the key",
        "agent:main:telegram:dm:42",
        announce("telegram", "42"),
    ),
    (
        "dm spelling in to",
        "agent:main:telegram:direct:42",
        announce("telegram", "agent:main:telegram:dm:42"),
    ),
    ("user: prefix", "agent:main:telegram:direct:42", announce("telegram", "user:42")),
    (
        "forum topic from threadId",
        f"{CHAT}:topic:7",
        announce("telegram", "-1001234567890", threadId=7),
    ),
    ("forum topic in to", f"{CHAT}:topic:7", announce("telegram", "-1001234567890:topic:7")),
    ("channel last", CHAT, announce("last")),
    ("channel last with a to", CHAT, announce("last", "99")),
    ("announce without a target", CHAT, announce("telegram")),
    ("no channel: the chat's own", CHAT, announce(None, "-1001234567890")),
    (
        "slack channel id by convention",
        "agent:main:slack:channel:c024be91l",
        announce("slack", "C024BE91L"),
    ),
    (
        "slack user id by convention",
        "agent:main:slack:direct:u012ab3cd",
        announce("slack", "U012AB3CD"),
    ),
    (
        "whatsapp group by convention",
        "agent:main:whatsapp:group:12036304@g.us",
        announce("whatsapp", "12036304@g.us"),
    ),
    (
        "discord bare id: any kind",
        "agent:main:discord:channel:1122334455",
        announce("discord", "1122334455"),
    ),
    (
        "matrix room id keeps its case",
        "agent:main:matrix:channel:!AbC:example.org",
        announce("matrix", "channel:!AbC:example.org"),
    ),
]


@pytest.mark.parametrize(
    ("key", "delivery"), [t[1:] for t in SAME_CHAT], ids=[t[0] for t in SAME_CHAT]
)
def test_a_session_job_delivering_to_its_own_chat_stays_in_chat(
    key: str, delivery: dict[str, Any]
) -> None:
    c = classified(job(sessionTarget=f"session:{key}", delivery=delivery))
    assert (c.mode, c.migrate, c.review) == ("in_chat", False, False), c.reason


NO_CHAT: list[tuple[str, dict[str, Any], str]] = [
    ("no delivery", job(delivery=None), "no delivery"),
    ("delivery none", job(delivery={"mode": "none"}), "delivery none"),
    (
        "webhook",
        job(delivery={"mode": "webhook", "to": "https://hooks.example.com/cron"}),
        "webhook",
    ),
    (
        "legacy payload deliver false",
        job(delivery=None, payload={"kind": "agentTurn", "message": "m", "deliver": False}),
        "legacy payload delivery",
    ),
]


@pytest.mark.parametrize(("row", "says"), [t[1:] for t in NO_CHAT], ids=[t[0] for t in NO_CHAT])
def test_a_session_job_reaching_no_chat_stays_in_chat_and_says_why(
    row: dict[str, Any], says: str
) -> None:
    c = classified(row)
    assert (c.mode, c.migrate) == ("in_chat", False)
    assert says in c.reason and "reaches no" in c.reason


ELSEWHERE: list[tuple[str, str, dict[str, Any], str]] = [
    (
        "another DM",
        "agent:main:telegram:direct:42",
        announce("telegram", "43"),
        "agent:main:telegram:direct:43",
    ),
    ("another group", CHAT, announce("telegram", "-1009999"), "agent:main:telegram:group:-1009999"),
    ("the group, not its topic", f"{CHAT}:topic:7", announce("telegram", "-1001234567890"), CHAT),
    ("another channel", CHAT, announce("discord", "channel:1"), "agent:main:discord:channel:1"),
    ("a DM from a group", CHAT, announce("telegram", "42"), "agent:main:telegram:direct:42"),
    (
        "a named session",
        "project-alpha",
        announce("slack", "channel:C0LEADS"),
        "agent:main:slack:channel:c0leads",
    ),
    (
        "to is another key",
        CHAT,
        announce("telegram", "agent:main:telegram:group:-1"),
        "agent:main:telegram:group:-1",
    ),
    (
        "discord bare id, other chat",
        "agent:main:discord:channel:1",
        announce("discord", "2"),
        "discord '2'",
    ),
]


@pytest.mark.parametrize(
    ("key", "delivery", "target"), [t[1:] for t in ELSEWHERE], ids=[t[0] for t in ELSEWHERE]
)
def test_a_session_job_delivering_elsewhere_must_become_a_background_job(
    key: str, delivery: dict[str, Any], target: str
) -> None:
    c = classified(job(sessionTarget=f"session:{key}", delivery=delivery))
    assert (c.mode, c.migrate) == ("background", True)
    chat = key if key.startswith("agent:") else f"agent:main:{key}"
    assert f"delivers to {target}" in c.reason
    assert f"loses the {chat} conversation as context" in c.reason


def test_legacy_payload_delivery_counts_as_the_delivery() -> None:
    payload = {
        "kind": "agentTurn",
        "message": "m",
        "deliver": True,
        "provider": "telegram",
        "to": "7",
    }
    c = classified(job(delivery=None, payload=payload))
    assert c.migrate and "legacy payload delivery" in c.reason
    payload = {
        "kind": "agentTurn",
        "message": "m",
        "deliver": True,
        "channel": "telegram",
        "to": "-1001234567890",
    }
    assert not classified(job(delivery=None, payload=payload)).migrate


def test_the_dm_scope_decides_direct_message_keys() -> None:
    row = job(sessionTarget="session:main", delivery=announce("telegram", "42"))
    assert not classified(row, "main").migrate  # every DM is the main session
    assert classified(row, "per-channel-peer").migrate
    per_peer = job(sessionTarget="session:direct:42", delivery=announce("whatsapp", "42"))
    assert not classified(per_peer, "per-peer").migrate
    acct = job(
        sessionTarget="session:agent:main:telegram:bot2:direct:42",
        delivery=announce("telegram", "42", accountId="bot2"),
    )
    assert not classified(acct, "per-account-channel-peer").migrate
    other_acct = job(
        sessionTarget="session:agent:main:telegram:bot2:direct:42",
        delivery=announce("telegram", "42"),  # the default account
    )
    assert classified(other_acct, "per-account-channel-peer").migrate


def test_the_job_agent_builds_the_keys() -> None:
    row = job(
        agentId="ops",
        sessionTarget="session:slack:channel:c0ops",
        delivery=announce("slack", "C0OPS"),
    )
    assert not classified(row).migrate
    # the same key under another agent is another chat
    row = job(
        agentId="ops",
        sessionTarget="session:agent:main:slack:channel:c0ops",
        delivery=announce("slack", "C0OPS"),
    )
    assert classified(row).migrate


@pytest.mark.parametrize(
    ("key", "delivery", "says"),
    [
        ("agent:main:slack:direct:u1", announce("slack", "D024BE91L"), "DM channel id"),
        ("agent:main:main", announce(None, "42"), "names no channel"),
        (CHAT, announce("telegram", "group:"), "names no peer"),
    ],
)
def test_an_unresolvable_delivery_is_kept_in_chat_for_review_never_migrated_on_a_guess(
    key: str, delivery: dict[str, Any], says: str
) -> None:
    c = classified(job(sessionTarget=f"session:{key}", delivery=delivery))
    assert (c.mode, c.migrate, c.review) == ("in_chat", False, True)
    assert says in c.reason and "by hand" in c.reason


def test_failure_alerts_do_not_decide_the_mode() -> None:
    row = job(
        delivery=announce(
            "telegram", "-1001234567890", failureDestination={"channel": "slack", "to": "U1"}
        ),
        failureAlert={"after": 2, "channel": "slack", "to": "U9"},
    )
    assert not classified(row).migrate


# --- migration --------------------------------------------------------------------------------


def test_migration_changes_only_the_target_and_records_the_former_one_in_place() -> None:
    row = job(delivery=announce("telegram", "42"), customField={"kept": [1, 2.5, None]})
    keys = list(row)
    new = migrated_row(row, reason="r", at="2026-01-15T09:30:00Z")
    assert new is not row and row["sessionTarget"] == f"session:{CHAT}"  # input untouched
    assert list(new) == [
        *keys[: keys.index("sessionTarget") + 1],
        "migratedFrom",
        *keys[keys.index("sessionTarget") + 1 :],
    ]
    assert new["sessionTarget"] == "isolated"
    assert new["migratedFrom"] == {
        "sessionTarget": f"session:{CHAT}",
        "at": "2026-01-15T09:30:00Z",
        "by": DOCTOR,
        "reason": "r",
    }
    assert {k: v for k, v in new.items() if k not in ("sessionTarget", "migratedFrom")} == {
        k: v for k, v in row.items() if k != "sessionTarget"
    }
    c = classified(new)
    assert (c.mode, c.migrate) == ("background", False)
    assert f"migrated from session:{CHAT}" in c.reason


def test_a_plan_migrates_quarantines_and_keeps_with_ledger_changes() -> None:
    rows = [
        job(id="a", sessionTarget="main", delivery=None),
        job(id="b", delivery=announce("telegram", "42")),
        job(id="c"),
        "not a job",
        {
            "name": "no id",
            "schedule": {"kind": "every", "everyMs": 1000},
            "payload": {"kind": "systemEvent", "text": "t"},
        },
        job(id="d", enabled="yes"),
        job(id="e", sessionTarget="sometimes"),
        job(id="a", name="duplicate of a"),
        job(id="f", sessionTarget="session:agent:Not An Agent!:x"),
        job(id="g", schedule={"kind": "weekly"}),
    ]
    doc = {"version": 1, "jobs": copy.deepcopy(rows), "extraTopLevel": {"kept": True}}
    plan = plan_store(doc, dm_scope="per-channel-peer", at=AT)
    assert doc["jobs"] == rows  # the input is never mutated
    assert [(v.index, v.job_id, v.action) for v in plan.verdicts] == [
        (0, "a", "kept"),
        (1, "b", "migrated"),
        (2, "c", "kept"),
        (3, None, "quarantined"),
        (4, None, "quarantined"),
        (5, "d", "kept"),  # enabled "yes": Rule 2 does not read it, a warning
        (6, "e", "quarantined"),
        (7, "a", "quarantined"),
        (8, "f", "quarantined"),
        (9, "g", "kept"),  # an unknown schedule kind: a warning
    ]
    reasons = {v.index: v.reason for v in plan.verdicts}
    assert reasons[3] == "jobs[3]: not a JSON object (a string)"
    assert reasons[4] == "jobs[4]: id: field required"
    assert reasons[6] == "jobs[6]: sessionTarget: must be main, isolated, current or session:<key>"
    assert reasons[7] == "jobs[7]: duplicate id 'a': jobs[0] has it"
    assert reasons[8].startswith("jobs[8]: sessionTarget: malformed agent key")
    warnings = {v.index: v.warnings for v in plan.verdicts if v.warnings}
    assert warnings == {
        5: ("enabled: input should be a valid boolean",),
        9: ("schedule: unknown kind 'weekly'; expected 'at', 'every', 'cron'",),
    }
    assert list(plan.store) == ["version", "jobs", "extraTopLevel"]
    assert [r["id"] for r in plan.store["jobs"]] == ["a", "b", "c", "d", "g"]
    assert plan.store["jobs"][3] == rows[5] and plan.store["jobs"][4] == rows[9]
    assert [q["index"] for q in plan.quarantine] == [3, 4, 6, 7, 8]
    assert [q["job"] for q in plan.quarantine] == [rows[i] for i in (3, 4, 6, 7, 8)]
    assert all(q["at"] == "2026-01-15T09:30:00Z" and q["by"] == DOCTOR for q in plan.quarantine)
    (migrated,) = [c for c in plan.changes if c.action == "migrated"]
    assert migrated.before == {"sessionTarget": f"session:{CHAT}"}
    assert migrated.after is not None and migrated.after["sessionTarget"] == "isolated"
    assert plan.counts() == {
        "total": 10,
        "in_chat": 4,
        "background": 1,
        "kept": 4,
        "migrated": 1,
        "quarantined": 5,
        "review": 0,
        "warned": 2,
    }


def test_a_duplicate_of_a_quarantined_row_is_not_a_duplicate() -> None:
    plan = planned(job(id="a", sessionTarget="sometimes"), job(id="a"))
    assert [v.action for v in plan.verdicts] == ["quarantined", "kept"]
    # a row kept with warnings holds its id: a later row with it is the duplicate
    plan = planned(job(id="a", enabled="yes"), job(id="a"))
    assert [v.action for v in plan.verdicts] == ["kept", "quarantined"]


# --- what Rule 2 does not read: kept as it is, with a warning --------------------------------

UNRELATED: list[tuple[str, dict[str, Any], str]] = [
    ('enabled "true"', {"enabled": "true"}, "enabled: input should be a valid boolean"),
    ("a float createdAtMs", {"createdAtMs": 1767250800000.5}, "createdAtMs: input should be a"),
    ("createdAtMs 1e400", {"createdAtMs": float("inf")}, "createdAtMs: input should be a"),
    ("an unknown schedule kind", {"schedule": {"kind": "weekly"}}, "schedule: unknown kind"),
    ("no schedule", {"schedule": None}, "schedule: field required"),
    (
        "a bad schedule field",
        {"schedule": {"kind": "every", "everyMs": 0}},
        "schedule.everyMs: input should be greater than 0",
    ),
    (
        "a payload message that is not text",
        {"payload": {"kind": "agentTurn", "message": 7}},
        "payload.message: input should be a valid string",
    ),
    ("no payload", {"payload": None}, "payload: field required"),
    ("a name that is not text", {"name": ["x"]}, "name: input should be a valid string"),
    (
        "a state counter that is not a number",
        {"state": {"consecutiveErrors": "2"}},
        "state.consecutiveErrors: input should be a valid integer",
    ),
    ("failureAlert not an object", {"failureAlert": "yes"}, "failureAlert: input should be"),
    (
        "delivery bestEffort not a boolean",
        {"delivery": announce("telegram", "-1001234567890", bestEffort="yes")},
        "delivery.bestEffort: input should be a valid boolean",
    ),
    ("migratedFrom not an object", {"migratedFrom": "by hand"}, "migratedFrom: input should be"),
]


@pytest.mark.parametrize(
    ("fields", "warning"), [u[1:] for u in UNRELATED], ids=[u[0] for u in UNRELATED]
)
def test_a_problem_rule_2_does_not_read_keeps_the_job_as_it_is_with_a_warning(
    fields: dict[str, Any], warning: str
) -> None:
    row = job(**fields)  # None deletes the field
    (verdict,) = (plan := planned(row)).verdicts
    assert (verdict.action, verdict.mode, verdict.review) == ("kept", "in_chat", False)
    assert any(w.startswith(warning) for w in verdict.warnings), verdict.warnings
    assert plan.store["jobs"] == [row] and plan.store["jobs"][0] is row
    assert not plan.needs_changes and plan.quarantine == ()


def test_a_job_with_warnings_still_migrates_and_keeps_its_other_fields() -> None:
    row = job(enabled="true", createdAtMs=1.5, delivery=announce("telegram", "42"))
    (verdict,) = (plan := planned(row)).verdicts
    assert (verdict.action, verdict.mode) == ("migrated", "background")
    assert len(verdict.warnings) == 2
    (new,) = plan.store["jobs"]
    assert new["sessionTarget"] == "isolated" and new["migratedFrom"]["by"] == DOCTOR
    assert {k: v for k, v in new.items() if k not in ("sessionTarget", "migratedFrom")} == {
        k: v for k, v in row.items() if k != "sessionTarget"
    }


REVIEW: list[tuple[str, dict[str, Any], Any, str]] = [
    (
        "legacy isolated not a boolean",
        job(sessionTarget=None, isolated="true"),
        None,
        "isolated: input should be a valid boolean: its mode cannot be read",
    ),
    (
        "session job, unknown delivery mode",
        job(delivery={"mode": "email", "to": "a@example.com"}),
        "in_chat",
        "its delivery cannot be read (delivery.mode: must be one of",
    ),
    (
        "session job, delivery to not text",
        job(delivery={"mode": "announce", "channel": "telegram", "to": 42}),
        "in_chat",
        "(delivery.to: input should be a valid string)",
    ),
    (
        "session job, bad agentId",
        job(agentId="Not An Agent"),
        "in_chat",
        "(agentId: does not match",
    ),
    (
        "session job, legacy payload delivery unreadable",
        job(delivery=None, payload={"kind": "agentTurn", "message": "m", "deliver": "yes"}),
        "in_chat",
        "(payload.deliver: input should be a valid boolean)",
    ),
]


@pytest.mark.parametrize(
    ("row", "mode", "says"), [r[1:] for r in REVIEW], ids=[r[0] for r in REVIEW]
)
def test_a_mode_that_depends_on_an_unreadable_field_is_kept_for_review(
    row: dict[str, Any], mode: Any, says: str
) -> None:
    (verdict,) = (plan := planned(row)).verdicts
    assert (verdict.action, verdict.mode, verdict.review) == ("kept", mode, True)
    assert says in verdict.reason and "by hand" in verdict.reason
    assert verdict.warnings  # the same problem, as the whole row's
    assert plan.store["jobs"] == [row] and not plan.needs_changes


def test_an_unreadable_field_the_mode_does_not_depend_on_is_only_a_warning() -> None:
    rows = [
        job(id="m", sessionTarget="main", delivery={"mode": "email"}),
        job(id="i", sessionTarget="isolated", agentId="Not An Agent"),
        job(id="s", isolated="yes"),  # sessionTarget decides, not the legacy field
        job(id="p", payload={"kind": "agentTurn", "deliver": "yes"}),  # delivery decides
    ]
    plan = planned(*rows)
    assert [(v.action, v.review, bool(v.warnings)) for v in plan.verdicts] == [
        ("kept", False, True)
    ] * 4
    assert plan.store["jobs"] == rows


QUARANTINED: list[tuple[str, Any, str]] = [
    ("not an object", ["a", "list"], "not a JSON object (an array)"),
    ("no id", job(id=None), "id: field required"),
    ("a number id", job(id=5), "id: input should be a valid string"),
    ("a blank id", job(id="  "), "id: must not be blank"),
    ("a session target of another kind", job(sessionTarget=3), "sessionTarget: input should"),
    ("an unknown session target", job(sessionTarget="chat"), "sessionTarget: must be main"),
    ("a session without a key", job(sessionTarget="session: "), "sessionTarget: must be main"),
]


@pytest.mark.parametrize(
    ("row", "reason"), [q[1:] for q in QUARANTINED], ids=[q[0] for q in QUARANTINED]
)
def test_a_row_rule_2_cannot_handle_is_quarantined(row: Any, reason: str) -> None:
    (verdict,) = (plan := planned(row)).verdicts
    assert verdict.action == "quarantined"
    assert verdict.reason.startswith(f"jobs[0]: {reason}"), verdict.reason
    assert plan.store["jobs"] == [] and [q["job"] for q in plan.quarantine] == [row]


def test_unknown_payload_kinds_and_state_values_of_a_newer_gateway_are_not_invalid() -> None:
    row = job(
        payload={"kind": "command", "argv": ["sh", "-c", "true"]},
        state={"lastRunStatus": "timeout", "lastDeliveryStatus": "queued", "newCounter": 3},
        failureAlert=False,
    )
    plan = plan_store({"version": 1, "jobs": [row]}, dm_scope="per-channel-peer", at=AT)
    assert [v.action for v in plan.verdicts] == ["kept"]


@pytest.mark.parametrize(
    ("doc", "problem"),
    [
        ([], "top level: must be a JSON object {version, jobs}, not an array"),
        ({"version": 1}, "jobs: field required"),
        ({"version": 1, "jobs": {}}, "jobs: must be a JSON array, not an object"),
        ({"version": 2, "jobs": []}, "version: must be 1 (found 2): unknown store format"),
        ({"version": True, "jobs": []}, "version: must be 1 (found True): unknown store format"),
        ({"version": "1", "jobs": []}, "version: must be 1 (found '1'): unknown store format"),
    ],
)
def test_store_problem_names_the_field(doc: Any, problem: str) -> None:
    assert store_problem(doc) == problem


def test_a_store_without_version_is_a_legacy_store() -> None:
    assert store_problem({"jobs": []}) is None


def test_merge_quarantine_adds_no_entry_twice() -> None:
    a = {"job": {"id": "x"}, "reason": "r", "index": 1, "at": "t1", "by": DOCTOR}
    again = {**a, "index": 4, "at": "t2"}
    b = {"job": {"id": "y"}, "reason": "r", "index": 2, "at": "t1", "by": DOCTOR}
    assert merge_quarantine([a], [again, b]) == [a, b]


# --- properties: nothing is lost, a second run changes nothing -------------------------------

_deliveries = st.sampled_from(
    [
        None,
        {"mode": "none"},
        {"mode": "webhook", "to": "https://h.example/x"},
        announce("last"),
        announce("telegram"),
        announce("telegram", "-1001234567890"),
        announce("telegram", "42"),
        announce("slack", "channel:C1"),
        announce("slack", "D1"),
        announce("discord", "7"),
    ]
)
_targets = st.sampled_from(
    [
        None,
        "main",
        "isolated",
        "current",
        f"session:{CHAT}",
        "session:agent:main:telegram:direct:42",
        "session:discord:channel:7",
        "session:nope:agent:x",
        "session:agent:Not An Agent!:x",
        "bogus",
    ]
)
_rows = st.one_of(
    st.builds(
        lambda i, t, d, extra: job(id=f"j{i}", sessionTarget=t, delivery=d, **extra),
        st.integers(0, 6),
        _targets,
        _deliveries,
        st.dictionaries(st.sampled_from(["x", "lightContext", "owner"]), st.integers(), max_size=2),
    ),
    st.sampled_from([None, 3, "row", [], {"id": ""}, {"id": "j1"}]),
)


@given(st.lists(_rows, max_size=12), st.sampled_from(["main", "per-peer", "per-channel-peer"]))
def test_nothing_is_lost_and_a_second_plan_changes_nothing(rows: list[Any], scope: DmScope) -> None:
    plan = plan_store({"version": 1, "jobs": rows}, dm_scope=scope, at=AT)
    assert len(plan.verdicts) == len(rows)
    assert len(plan.store["jobs"]) + len(plan.quarantine) == len(rows)
    kept_ids = [r["id"] for r in plan.store["jobs"]]
    assert len(kept_ids) == len(set(kept_ids))
    for v in plan.verdicts:
        if v.action == "kept":
            assert rows[v.index] in plan.store["jobs"]
        elif v.action == "quarantined":
            assert any(q["job"] is rows[v.index] for q in plan.quarantine)
    again = plan_store(plan.store, dm_scope=scope, at=AT)
    assert not again.needs_changes
    assert again.store == plan.store
