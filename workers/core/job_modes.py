"""Rule 2 for stored jobs: the mode each job runs in, and what the doctor changes. Pure.

A job runs in a chat, or in the background, never both. The gateway's session targets map:

    main                 in chat (the agent's main session)
    isolated, current    background (its own session; current keeps a snapshot of the
                         creating chat)
    session:<key>        in chat when it delivers to <key>; otherwise it must become a
                         background job with its own session
    (absent)             legacy: `isolated: true` is background, else the gateway's default
                         `main`, in chat

Whether a `session:<key>` job delivers to <key>: compare canonical keys. <key> is
canonicalised for the job's agent; the delivery target's key is built with
`session_key_for_route` from {channel, to, accountId, threadId} and the agent's DM scope.
A `to` that is itself a spelling of <key> (case, `dm`/`direct`, no `agent:` prefix, a
`session:` prefix) is the same chat; a full key (`agent:…`, `session:…`) of another chat is
elsewhere. Channel `last` (the chat the job last talked to) and an
announce without a `to` are the job's own chat. Delivery `none`, `webhook` or no delivery
reach no chat: the job stays in chat. The failure destination and failure alerts are the
gateway's own sends, not the job's run: they do not decide the mode. A legacy job without a
`delivery` object delivers as its `agentTurn` payload says (`deliver`, `channel`/`provider`,
`to`).

Reading `to` (a send target, not a key): an optional `<channel>:` prefix; a kind prefix
`user:`/`dm:`/`direct:` (direct), `group:`, `channel:`; a `:thread:<id>`/`:topic:<id>`
suffix (`threadId` wins over it). Without a kind prefix, the channel's conventions decide
(Telegram: negative ids are groups; WhatsApp: `…@g.us` is a group; Slack: `C…` channels,
`U…`/`W…` users), else the peer id is compared under every kind: a platform id names one
chat per channel. A Slack `D…` id names a DM channel, not the user the chat is keyed by: it
cannot be resolved, and neither can a target without a channel; such a job is kept in chat
and flagged for review, never migrated on a guess.

Migration (the doctor's --fix): `sessionTarget` becomes `isolated` in place and a
`migratedFrom` object follows it: {sessionTarget: <former>, at, by, reason}. Every other
field, known or not, keeps its value and its position.

Only a row Rule 2 cannot handle is quarantined (moved out of `jobs`, never dropped): not an
object, no usable id (absent, not a string, blank), an id used by an earlier row that was
kept, an unusable session target. Every other problem is a warning: the row is kept exactly
as it is (a migration still changes its session target). Rule 2 reads a row as `JobTarget`;
a field of it that does not validate is left out, and when the mode depends on that field
(`isolated` of a legacy row; agentId, delivery or a legacy payload delivery of a
`session:<key>` job) the job is kept, unchanged, and flagged for review. The rest of the
row is checked as `ScheduledJob` (`enabled: "true"`, a float `createdAtMs`, a schedule kind
this file does not know): each problem is a warning.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import ValidationError
from transcript_connector.records import JobMode
from transcript_connector.session_keys import DmScope, canonical_session_key, session_key_for_route

from schemas.jobs import (
    DEFAULT_AGENT_ID,
    STORE_VERSION,
    JobTarget,
    ScheduledJob,
    TurnDelivery,
    problem_field,
    problem_list,
)

DOCTOR = "transcript-owner doctor"
Action = Literal["kept", "migrated", "quarantined"]
Reach = Literal["own_chat", "no_chat", "elsewhere", "unknown"]

_KIND_PREFIXES = {
    "user": "direct",
    "dm": "direct",
    "direct": "direct",
    "group": "group",
    "channel": "channel",
}
_ALL_KINDS = ("direct", "group", "channel")
_CHAT_KINDS = frozenset(_ALL_KINDS)


# --- one job --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Route:
    """A delivery target read as a chat identity (satisfies session_keys.RouteLike)."""

    channel: str
    account_id: str | None
    peer_kind: str
    peer_id: str
    thread_id: str | None


@dataclass(frozen=True, slots=True)
class Reached:
    """Which chat a job's result reaches, relative to the chat it runs in."""

    reach: Reach
    target: str | None  # the chat it reaches, when there is one and it is known
    why: str


@dataclass(frozen=True, slots=True)
class Classification:
    mode: JobMode | None  # None: it depends on a field that cannot be read (review)
    migrate: bool
    reason: str
    review: bool = False  # kept, but its mode or delivery could not be resolved: check by hand


@dataclass(frozen=True, slots=True)
class _Delivery:
    mode: str
    channel: str
    to: str
    account_id: str | None
    thread_id: str | None
    legacy: bool


def classify(
    job: JobTarget,
    dm_scope: DmScope,
    default_agent: str = DEFAULT_AGENT_ID,
    unreadable: Mapping[str, str] | None = None,
) -> Classification:
    """The job's mode under Rule 2 and whether it must migrate.

    `unreadable`: fields of the row (as it spells them) left out of `job` because they do
    not validate, each with its problem. When the mode depends on one, the job is kept for
    review, never migrated on a guess. Raises ValueError when a `session:<key>` target names
    no usable session.
    """
    unreadable = unreadable or {}
    target = job.session_target
    if target is None:
        if "isolated" in unreadable:
            return Classification(
                None,
                False,
                f"no sessionTarget (legacy) and {unreadable['isolated']}: its mode cannot be "
                "read, kept as it is, check it by hand",
                review=True,
            )
        if job.isolated is True:
            return Classification("background", False, "legacy isolated: true: its own session")
        return Classification(
            "in_chat", False, "no sessionTarget (legacy): the gateway's default, main"
        )
    if target == "main":
        return Classification("in_chat", False, "runs in the agent's main session")
    if target == "isolated":
        reason = "runs in its own session"
        if job.migrated_from is not None:
            former = job.migrated_from
            reason += f" (migrated from {former.session_target} at {former.at})"
        return Classification("background", False, reason)
    if target == "current":
        return Classification(
            "background", False, "runs in its own session with a snapshot of the creating chat"
        )
    agent = job.agent_id or default_agent
    key = target.removeprefix("session:").strip()
    chat = canonical_session_key(key, agent)
    needed = ["agentId", "delivery"] + (["payload"] if job.delivery is None else [])
    blind = [unreadable[f] for f in needed if f in unreadable]
    if blind:
        return Classification(
            "in_chat",
            False,
            f"runs in {chat}; its delivery cannot be read ({'; '.join(blind)}): kept in chat, "
            "check its delivery by hand",
            review=True,
        )
    reached = delivery_reach(job, chat, agent, dm_scope)
    if reached.reach == "elsewhere":
        return Classification(
            "background",
            True,
            f"runs in {chat} but {reached.why}: becomes a background job with its own "
            f"session and loses the {chat} conversation as context",
        )
    if reached.reach == "unknown":
        return Classification(
            "in_chat",
            False,
            f"runs in {chat}; {reached.why}: kept in chat, check its delivery by hand",
            review=True,
        )
    return Classification("in_chat", False, f"runs in {chat}; {reached.why}")


def delivery_reach(job: JobTarget, chat: str, agent: str, dm_scope: DmScope) -> Reached:
    """Where the job's result goes, compared with `chat` (canonical) the job runs in."""
    d = _effective_delivery(job)
    if d is None:
        return Reached("no_chat", None, "no delivery: its result reaches no other chat")
    via = " (legacy payload delivery)" if d.legacy else ""
    if d.mode == "none":
        return Reached("no_chat", None, f"delivery none{via}: its result reaches no other chat")
    if d.mode == "webhook":
        return Reached("no_chat", None, "delivery webhook: an HTTP POST reaches no chat")
    if d.channel.lower() == "last":
        return Reached("own_chat", chat, f"delivers to channel last{via}: its own chat")
    if not d.to:
        return Reached("own_chat", chat, f"announces without a target{via}: to its own chat")
    if _spells(d.to, chat, agent):
        return Reached("own_chat", chat, f"delivers to {d.to!r}{via}, a spelling of its key")
    named = _full_key(d.to, agent)
    if named is not None:
        return Reached("elsewhere", named, f"delivers to {named}{via}")
    channel = d.channel.lower() or _channel_of(chat)
    if not channel:
        return Reached("unknown", None, f"delivery to {d.to!r} names no channel")
    routes = _routes(channel, d.to, d.account_id, d.thread_id)
    if isinstance(routes, str):
        return Reached("unknown", None, routes)
    built = [session_key_for_route(agent, r, dm_scope) for r in routes]
    if chat in built:
        return Reached("own_chat", chat, f"delivers to {channel} {d.to!r}{via}: its own chat")
    shown = built[0] if len(built) == 1 else f"{channel} {d.to!r}"
    return Reached("elsewhere", shown, f"delivers to {shown}{via}")


def _effective_delivery(job: JobTarget) -> _Delivery | None:
    if job.delivery is not None:
        d = job.delivery
        thread = None if d.thread_id is None else str(d.thread_id).strip() or None
        return _Delivery(
            d.mode, (d.channel or "").strip(), (d.to or "").strip(), d.account_id, thread, False
        )
    p = job.payload
    if not isinstance(p, TurnDelivery):
        return None
    if p.deliver is False or (p.deliver is None and not p.to):
        return None if p.deliver is None else _Delivery("none", "", "", None, None, True)
    channel = (p.channel or p.provider or "").strip()
    return _Delivery("announce", channel, (p.to or "").strip(), None, None, True)


def _spells(to: str, chat: str, agent: str) -> bool:
    """Is `to` a spelling of the session key `chat` (not a send target)?"""
    raw = to[len("session:") :] if to.lower().startswith("session:") else to
    if ":" not in raw:
        return False  # a bare id is a peer, never a key
    try:
        return canonical_session_key(raw, agent) == chat
    except ValueError:
        return False


def _full_key(to: str, agent: str) -> str | None:
    """The canonical key `to` names when it is a full key (`agent:…` or `session:…`)."""
    raw = to[len("session:") :] if to.lower().startswith("session:") else to
    if not (to.lower().startswith("session:") or raw.lower().startswith("agent:")):
        return None
    try:
        return canonical_session_key(raw, agent)
    except ValueError:
        return None


def _channel_of(chat: str) -> str:
    """The channel segment of a canonical chat key, or "" (main, per-peer DMs, sources)."""
    rest = chat.split(":")[2:]
    if len(rest) >= 3 and rest[1] in _CHAT_KINDS:
        return rest[0]
    if len(rest) >= 4 and rest[2] == "direct":
        return rest[0]
    return ""


def _routes(
    channel: str, to: str, account_id: str | None, thread_id: str | None
) -> tuple[Route, ...] | str:
    """The chat(s) a send target names (several when its kind is unknown), or why none."""
    segs = [s.strip() for s in to.split(":")]
    if len(segs) > 1 and segs[0].lower() == channel:
        segs = segs[1:]
    suffix_thread = None
    if len(segs) >= 3 and segs[-2].lower() in ("thread", "topic"):
        suffix_thread, segs = segs[-1], segs[:-2]
    kind = None
    if len(segs) >= 2 and segs[0].lower() in _KIND_PREFIXES:
        kind, segs = _KIND_PREFIXES[segs[0].lower()], segs[1:]
    peer = ":".join(segs).strip()
    if not peer:
        return f"delivery target {to!r} names no peer"
    if kind is None:
        if channel == "slack" and peer[:1].upper() == "D":
            return f"slack target {to!r} is a DM channel id, not the user its chat is keyed by"
        kind = _conventional_kind(channel, peer)
    thread = thread_id or suffix_thread or None
    kinds = (kind,) if kind else _ALL_KINDS
    return tuple(Route(channel, account_id, k, peer, thread) for k in kinds)


def _conventional_kind(channel: str, peer: str) -> str | None:
    if channel == "telegram":
        if peer.startswith("-"):
            return "group"
        return "direct" if peer.lstrip("+").isdigit() else None
    if channel == "whatsapp":
        return "group" if peer.lower().endswith("@g.us") else "direct"
    if channel == "slack":
        first = peer[:1].upper()
        return {"C": "channel", "U": "direct", "W": "direct"}.get(first)
    return None


# --- the store ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Verdict:
    """One row of the report: what the doctor decides for one job.

    `warnings`: the problems of a kept or migrated row that Rule 2 does not need solved
    (the row keeps them; the gateway may reject or ignore those fields).
    """

    index: int
    job_id: str | None
    name: str | None
    mode: JobMode | None
    action: Action
    reason: str
    review: bool = False
    warnings: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Change:
    """One ledger line: the fields of one job before and after (after None: quarantined)."""

    index: int
    job_id: str | None
    action: Literal["migrated", "quarantined"]
    reason: str
    before: Mapping[str, Any]
    after: Mapping[str, Any] | None


@dataclass(frozen=True, slots=True)
class Plan:
    """What the doctor found and would write. `store` is the whole rewritten store."""

    verdicts: tuple[Verdict, ...]
    changes: tuple[Change, ...]
    store: Mapping[str, Any]
    quarantine: tuple[Mapping[str, Any], ...]  # entries for the quarantine file

    @property
    def needs_changes(self) -> bool:
        return bool(self.changes)

    def counts(self) -> dict[str, int]:
        v = self.verdicts
        return {
            "total": len(v),
            "in_chat": sum(x.mode == "in_chat" for x in v),
            "background": sum(x.mode == "background" for x in v),
            "kept": sum(x.action == "kept" for x in v),
            "migrated": sum(x.action == "migrated" for x in v),
            "quarantined": sum(x.action == "quarantined" for x in v),
            "review": sum(x.review for x in v),
            "warned": sum(bool(x.warnings) for x in v),
        }


def store_problem(doc: Any) -> str | None:
    """Why `doc` (parsed JSON) is not a job store, naming the field; None when it is one."""
    if not isinstance(doc, dict):
        return f"top level: must be a JSON object {{version, jobs}}, not {_json_type(doc)}"
    version = doc.get("version", STORE_VERSION)  # very old stores have no version
    if type(version) is not int or version != STORE_VERSION:
        return f"version: must be {STORE_VERSION} (found {version!r}): unknown store format"
    if "jobs" not in doc:
        return "jobs: field required"
    if not isinstance(doc["jobs"], list):
        return f"jobs: must be a JSON array, not {_json_type(doc['jobs'])}"
    return None


def plan_store(
    doc: Mapping[str, Any],
    *,
    dm_scope: DmScope,
    at: datetime,
    default_agent: str = DEFAULT_AGENT_ID,
) -> Plan:
    """Classify every job of a valid store (see store_problem) and plan the rewrite.

    `at` is the time the doctor runs (recorded in migratedFrom and the quarantine).
    """
    stamp = at.astimezone(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
    verdicts: list[Verdict] = []
    changes: list[Change] = []
    rows: list[Any] = []
    quarantine: list[Mapping[str, Any]] = []
    first_seen: dict[str, int] = {}

    def quarantined(i: int, row: Any, problem: str) -> None:
        job_id = row.get("id") if isinstance(row, dict) else None
        job_id = job_id if isinstance(job_id, str) else None
        name = row.get("name") if isinstance(row, dict) else None
        reason = f"jobs[{i}]: {problem}"
        verdicts.append(
            Verdict(i, job_id, name if isinstance(name, str) else None, None, "quarantined", reason)
        )
        changes.append(Change(i, job_id, "quarantined", reason, {"job": row}, None))
        quarantine.append({"job": row, "reason": reason, "index": i, "at": stamp, "by": DOCTOR})

    for i, row in enumerate(doc["jobs"]):
        if not isinstance(row, dict):
            quarantined(i, row, f"not a JSON object ({_json_type(row)})")
            continue
        read = read_target(row)
        if isinstance(read, str):
            quarantined(i, row, read)
            continue
        job, unreadable = read
        if job.id in first_seen:
            quarantined(i, row, f"duplicate id {job.id!r}: jobs[{first_seen[job.id]}] has it")
            continue
        try:
            c = classify(job, dm_scope, default_agent, unreadable)
        except ValueError as exc:
            quarantined(i, row, f"sessionTarget: {exc}")
            continue
        first_seen[job.id] = i
        name = row.get("name")
        name = name if isinstance(name, str) else None
        warnings = row_warnings(row)
        if not c.migrate:
            rows.append(row)
            verdicts.append(Verdict(i, job.id, name, c.mode, "kept", c.reason, c.review, warnings))
            continue
        new = migrated_row(row, reason=c.reason, at=stamp)
        rows.append(new)
        verdicts.append(Verdict(i, job.id, name, c.mode, "migrated", c.reason, False, warnings))
        fields = ("sessionTarget", "migratedFrom")
        changes.append(
            Change(
                i,
                job.id,
                "migrated",
                c.reason,
                {k: row[k] for k in fields if k in row},
                {k: new[k] for k in fields},
            )
        )
    store = {k: (rows if k == "jobs" else v) for k, v in doc.items()}
    return Plan(tuple(verdicts), tuple(changes), store, tuple(quarantine))


_MUST_READ = ("id", "sessionTarget")  # without these, Rule 2 cannot handle the row
# JobTarget's field names -> the row's spelling (camelCase); a row may use either
_SPELLING = {name: field.alias or name for name, field in JobTarget.model_fields.items()}


def read_target(row: Mapping[str, Any]) -> tuple[JobTarget, dict[str, str]] | str:
    """What Rule 2 reads of `row`, and the fields left out of it (camelCase) with their
    problems; or why the row cannot be handled at all (no usable id or session target)."""
    try:
        return JobTarget.model_validate(row), {}
    except ValidationError as exc:
        by_field = {_SPELLING.get(f, f): p for f, p in problem_field(exc).items()}
    fatal = [p for f in _MUST_READ for p in by_field.get(f, ())]
    if fatal:
        return "; ".join(fatal)
    unreadable = {f: "; ".join(problems) for f, problems in by_field.items()}
    rest = {k: v for k, v in row.items() if _SPELLING.get(k, k) not in unreadable}
    try:
        return JobTarget.model_validate(rest), unreadable
    except ValidationError as exc:  # not expected: every field left is optional
        return "; ".join(problem_list(exc))


def row_warnings(row: Mapping[str, Any]) -> tuple[str, ...]:
    """The row's problems as a whole job (ScheduledJob), one per field: never a reason to
    change or quarantine it."""
    try:
        ScheduledJob.model_validate(row)
    except ValidationError as exc:
        return tuple(problem_list(exc))
    return ()


def migrated_row(row: Mapping[str, Any], *, reason: str, at: str) -> dict[str, Any]:
    """`row` as a background job: sessionTarget isolated, followed by migratedFrom.

    A new dict; every other field keeps its value and position (an earlier migratedFrom is
    replaced: the ledger keeps the history).
    """
    record = {"sessionTarget": row["sessionTarget"], "at": at, "by": DOCTOR, "reason": reason}
    out: dict[str, Any] = {}
    for k, v in row.items():
        if k == "migratedFrom":
            continue
        if k == "sessionTarget":
            out[k] = "isolated"
            out["migratedFrom"] = record
        else:
            out[k] = v
    return out


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "an object"


def quarantine_key(entry: Mapping[str, Any]) -> Any:
    """Entries with the same job and reason are one quarantine (a re-run adds none)."""
    return (repr(entry.get("job")), entry.get("reason"))


def merge_quarantine(
    existing: Sequence[Mapping[str, Any]], new: Sequence[Mapping[str, Any]]
) -> list[Mapping[str, Any]]:
    """`existing` followed by the entries of `new` it does not already hold."""
    have = {quarantine_key(e) for e in existing}
    return [*existing, *(e for e in new if quarantine_key(e) not in have)]


__all__ = [
    "DOCTOR",
    "Action",
    "Change",
    "Classification",
    "Plan",
    "Reach",
    "Reached",
    "Route",
    "Verdict",
    "classify",
    "delivery_reach",
    "merge_quarantine",
    "migrated_row",
    "plan_store",
    "quarantine_key",
    "read_target",
    "row_warnings",
    "store_problem",
]
