"""The gateway's scheduled jobs, as its job store holds them (field-notes, "Scheduled jobs").

The store is the gateway's JSON file `{"version": 1, "jobs": [...]}` with camelCase names.
It is not a Kafka record: these models are not in `RECORDS` and get no generated JSON
Schema. `transcript-owner doctor` validates each job row with `ScheduledJob` and classifies
it by Rule 2; it never rewrites a job from the model (it patches the raw row), so fields
this file does not know survive a rewrite untouched.

Validation is strict (JSON types as they are: `"true"` is not a boolean) and unknown fields
are allowed at every level (a newer gateway may add some). Two models read a row:

- `JobTarget`: only what Rule 2 reads (id, sessionTarget, the legacy `isolated`, agentId,
  where the delivery goes, an agentTurn payload's legacy delivery, migratedFrom). A row
  whose id or session target is unusable cannot be handled and is quarantined; any other
  field of it that does not validate is left out of the decision (see job_modes.classify).
- `ScheduledJob`: the whole row (schedule, payload, enabled, timestamps, state, …). Its
  problems are warnings: the job is kept as it is, never rewritten for them.

The run bookkeeping in `state` is typed loosely (`str`, not an enum): a status value the
gateway adds later is no problem at all.

    sessionTarget   main | isolated | current | session:<key>   (absent: legacy, see below)
    schedule        {kind: at, at | atMs} | {kind: every, everyMs, anchorMs?}
                    | {kind: cron, expr, tz?, staggerMs?}
    payload         {kind: systemEvent, text} | {kind: agentTurn, message, …; legacy
                    delivery: deliver, channel (or provider), to, bestEffortDeliver}
                    | {kind: <another kind a newer gateway knows>, …}
    delivery        {mode: announce|webhook|none, channel (a channel id or "last"), to,
                    accountId, threadId, bestEffort, failureDestination}
    failureAlert    {after, cooldownMs, channel, to, accountId, …} or false
    state           {lastRunStatus, lastDeliveryStatus, nextRunAtMs, …}
    migratedFrom    written by the doctor when it migrates a job (see workers/core/job_modes)

Older jobs have no `sessionTarget` (the gateway's default is `main`) and may say
`isolated: true` instead; older `agentTurn` payloads carry the delivery themselves.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Discriminator,
    Field,
    StringConstraints,
    Tag,
    ValidationError,
)
from pydantic.alias_generators import to_camel
from transcript_connector.records import AGENT_ID_PATTERN

STORE_VERSION = 1
DEFAULT_AGENT_ID = "main"  # the gateway's agent when a job names none

SESSION_TARGET_PATTERN = r"^(main|isolated|current|session:.*\S.*)$"
SessionTarget = Annotated[str, StringConstraints(pattern=SESSION_TARGET_PATTERN)]
JobId = Annotated[str, StringConstraints(min_length=1, pattern=r"\S")]
DeliveryMode = Literal["announce", "webhook", "none"]
# Known values of the run bookkeeping (typed as str in JobState, see the module docstring).
RunStatus = Literal["ok", "error", "skipped"]
DeliveryStatus = Literal["delivered", "not-delivered", "unknown", "not-requested"]


class StoreModel(BaseModel):
    """Base of the job-store models: camelCase names, strict JSON types, extras kept."""

    model_config = ConfigDict(
        frozen=True,
        extra="allow",
        strict=True,
        alias_generator=to_camel,
        validate_by_name=True,
        validate_by_alias=True,
        serialize_by_alias=True,
    )


class AtSchedule(StoreModel):
    kind: Literal["at"]
    at: str | None = None
    at_ms: int | None = None


class EverySchedule(StoreModel):
    kind: Literal["every"]
    every_ms: Annotated[int, Field(gt=0)]
    anchor_ms: int | None = None


class CronSchedule(StoreModel):
    kind: Literal["cron"]
    expr: Annotated[str, StringConstraints(min_length=1)]
    tz: str | None = None
    stagger_ms: int | None = None


JobSchedule = Annotated[AtSchedule | EverySchedule | CronSchedule, Field(discriminator="kind")]


class SystemEventPayload(StoreModel):
    """Text injected into the target session as a system event."""

    kind: Literal["systemEvent"]
    text: str | None = None


class TurnDelivery(StoreModel):
    """What Rule 2 reads of an agentTurn payload: the delivery legacy jobs carry there."""

    kind: Literal["agentTurn"]
    deliver: bool | None = None
    channel: str | None = None
    provider: str | None = None  # legacy name of `channel`
    to: str | None = None


class AgentTurnPayload(TurnDelivery):
    """An agent turn; legacy jobs carry their delivery here (deliver/channel/provider/to)."""

    message: str | None = None
    model: str | None = None
    thinking: str | None = None
    timeout_seconds: int | float | None = None
    best_effort_deliver: bool | None = None


class OtherPayload(StoreModel):
    """A payload kind this file does not know (a newer gateway's): kept as it is."""

    kind: Annotated[str, StringConstraints(min_length=1)]


def _payload_tag(value: Any) -> str | None:
    kind = value.get("kind") if isinstance(value, dict) else getattr(value, "kind", None)
    if kind is None:
        return None
    return kind if kind in ("systemEvent", "agentTurn") else "other"


JobPayload = Annotated[
    Annotated[SystemEventPayload, Tag("systemEvent")]
    | Annotated[AgentTurnPayload, Tag("agentTurn")]
    | Annotated[OtherPayload, Tag("other")],
    Discriminator(
        _payload_tag,
        custom_error_type="payload_kind",
        custom_error_message="must be an object with a kind",
    ),
]


class DeliveryTarget(StoreModel):
    """Where a run's result goes. `channel: "last"` is the chat the job's session last used."""

    mode: DeliveryMode
    channel: str | None = None
    to: str | None = None
    account_id: str | None = None
    thread_id: str | int | None = None


class JobDelivery(DeliveryTarget):
    """The whole delivery: its target, and how the gateway handles a failed send."""

    best_effort: bool | None = None
    failure_destination: dict[str, Any] | None = None


class FailureAlert(StoreModel):
    after: int | None = None
    cooldown_ms: int | None = None
    channel: str | None = None
    to: str | None = None
    account_id: str | None = None


class JobState(StoreModel):
    """The gateway's run bookkeeping (RunStatus / DeliveryStatus list the known values)."""

    next_run_at_ms: int | None = None
    running_at_ms: int | None = None
    last_run_at_ms: int | None = None
    last_run_status: str | None = None
    last_status: str | None = None  # older name of last_run_status
    last_error: str | None = None
    last_duration_ms: int | None = None
    consecutive_errors: int | None = None
    last_delivery_status: str | None = None
    last_delivery_error: str | None = None
    last_delivered: bool | None = None


class MigratedFrom(StoreModel):
    """What the doctor changed: the former session target, when, by what."""

    session_target: str
    at: str
    by: str
    reason: str | None = None


def _false_is_none(value: Any) -> Any:
    return None if value is False else value


class ScheduledJob(StoreModel):
    """One job of the store. Absent `sessionTarget`: legacy (`isolated: true`, else main)."""

    id: JobId
    name: str | None = None
    description: str | None = None
    agent_id: Annotated[str, StringConstraints(pattern=AGENT_ID_PATTERN)] | None = None
    session_key: str | None = None  # the creating chat
    enabled: bool = True
    delete_after_run: bool | None = None
    created_at_ms: int | None = None
    updated_at_ms: int | None = None
    schedule: JobSchedule
    session_target: SessionTarget | None = None
    isolated: bool | None = None  # legacy spelling of sessionTarget isolated
    wake_mode: str | None = None
    payload: JobPayload
    delivery: JobDelivery | None = None
    # `false` switches alerts off: read as "no alert settings".
    failure_alert: Annotated[FailureAlert | None, BeforeValidator(_false_is_none)] = None
    state: JobState | None = None
    migrated_from: MigratedFrom | None = None


def _turn_tag(value: Any) -> str:
    kind = value.get("kind") if isinstance(value, dict) else getattr(value, "kind", None)
    return "agentTurn" if kind == "agentTurn" else "other"


# Only an agentTurn payload carries a delivery; Rule 2 reads any other payload as nothing.
TargetPayload = Annotated[
    Annotated[TurnDelivery, Tag("agentTurn")] | Annotated[Any, Tag("other")],
    Discriminator(_turn_tag),
]


class JobTarget(StoreModel):
    """What Rule 2 reads of a job row (the rest of the row is ScheduledJob's business).

    `id` and `sessionTarget` must be usable for the row to be handled at all; a row where
    another of these fields does not validate is read without it (job_modes.plan_store).
    """

    id: JobId
    agent_id: Annotated[str, StringConstraints(pattern=AGENT_ID_PATTERN)] | None = None
    session_target: SessionTarget | None = None
    isolated: bool | None = None  # legacy spelling of sessionTarget isolated
    delivery: DeliveryTarget | None = None
    payload: TargetPayload = None
    migrated_from: MigratedFrom | None = None


_TAGGED = ("schedule", "payload")  # fields that are discriminated unions on `kind`


def job_problems(exc: ValidationError, limit: int = 3) -> str:
    """One line naming each invalid field: `delivery.mode: must be one of …; …`."""
    parts = problem_list(exc)
    shown = parts[:limit]
    extra = len(parts) - len(shown)
    return "; ".join(shown) + (f" (+{extra} more)" if extra > 0 else "")


def problem_list(exc: ValidationError) -> list[str]:
    """Each invalid field and its problem: `delivery.mode: must be one of …` (no values)."""
    return [_describe(err) for err in exc.errors(include_url=False, include_input=False)]


def problem_field(exc: ValidationError) -> dict[str, list[str]]:
    """The problems of `exc` by the top-level field they are in (as the input spells it)."""
    out: dict[str, list[str]] = {}
    for err in exc.errors(include_url=False, include_input=False):
        top = str(err["loc"][0]) if err["loc"] else ""
        out.setdefault(top, []).append(_describe(err))
    return out


def _describe(err: Any) -> str:
    kind: str = err["type"]
    ctx: dict[str, Any] = err.get("ctx") or {}
    loc = list(err["loc"])
    if len(loc) > 1 and loc[0] in _TAGGED:
        del loc[1]  # the discriminated union's tag ("cron", "agentTurn"): not a field
    path = ""
    for part in loc:
        path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
    if kind == "missing":
        problem = "field required"
    elif kind == "union_tag_invalid":
        problem = f"unknown kind {ctx.get('tag')!r}; expected {ctx.get('expected_tags')}"
    elif kind == "union_tag_not_found":
        problem = "kind: field required"
    elif kind == "string_pattern_mismatch" and path == "sessionTarget":
        problem = "must be main, isolated, current or session:<key>"
    elif kind == "string_pattern_mismatch" and ctx.get("pattern") == r"\S":
        problem = "must not be blank"
    elif kind == "string_pattern_mismatch":
        problem = f"does not match {ctx.get('pattern')}"
    elif kind == "string_too_short":
        problem = "must not be empty"
    elif kind == "literal_error":
        problem = f"must be one of {ctx.get('expected')}"
    else:
        problem = err["msg"][:1].lower() + err["msg"][1:]
    return f"{path}: {problem}" if path else problem


__all__ = [
    "DEFAULT_AGENT_ID",
    "SESSION_TARGET_PATTERN",
    "STORE_VERSION",
    "AgentTurnPayload",
    "AtSchedule",
    "CronSchedule",
    "DeliveryMode",
    "DeliveryTarget",
    "DeliveryStatus",
    "EverySchedule",
    "FailureAlert",
    "JobDelivery",
    "JobPayload",
    "JobSchedule",
    "JobState",
    "JobTarget",
    "MigratedFrom",
    "OtherPayload",
    "RunStatus",
    "ScheduledJob",
    "SessionTarget",
    "StoreModel",
    "SystemEventPayload",
    "TurnDelivery",
    "job_problems",
    "problem_field",
    "problem_list",
]
