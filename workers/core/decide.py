"""The decision function: (session state, input record) -> (new state, exactly one outcome).

Rules 2-7 of DESIGN.md are in this file, in the order they apply (Rule 1, invalid bytes, is
decided at the edge: schemas/parse.py). The worker, `replay` and `audit` all call `decide`,
so an audit compares the pipeline against these rules, not against a second
implementation. Pure: no I/O, no clock (`written_at` is passed in).
"""

from __future__ import annotations

import hashlib
import uuid
from datetime import UTC, datetime, timedelta

from schemas import (
    DeliveryConfirmation,
    Diagnostic,
    Invalid,
    PostedBy,
    SessionReset,
    TranscriptEntry,
)
from schemas.records import InputRecord, Payload
from workers.core.fingerprint import fingerprint
from workers.core.outcomes import (
    CONFLICTING_DUPLICATE,
    DESTINATION_BOUND_TO_OTHER_AGENT,
    IN_CHAT_JOB_DELIVERED_ELSEWHERE,
    NATIVE_ONLY_PAYLOAD,
    SESSION_KEY_MISMATCH,
    Outcome,
    OutcomeKind,
    dead_letter,
    diagnostic,
)
from workers.core.seen import Seen, SeenMap
from workers.core.session_keys import canonical_session_key
from workers.core.state import SessionState

DEFAULT_DEDUPE_WINDOW = timedelta(days=7)

# entry_id = uuid5(ENTRY_ID_NAMESPACE, send_id). Fixed forever: changing it would give every
# re-derived entry a new id, and an audit would report the whole topic as different.
ENTRY_ID_NAMESPACE = uuid.UUID("5f0c3a52-8f3e-4d5e-9b8a-6c1d2e7f4a90")
_NAMESPACE_BYTES = ENTRY_ID_NAMESPACE.bytes
_ENTRY = TranscriptEntry.__pydantic_validator__


def session_key_of(record: InputRecord) -> str | Invalid:
    """The canonical key of the session `record` belongs to (the partition key).

    A reset carries no agent id, so its key must already be a full `agent:<id>:…` key.
    """
    if isinstance(record, SessionReset):
        head, sep, _ = record.session_key.partition(":")
        if not sep or head.strip().lower() != "agent":
            return Invalid("session_key: a reset needs a full agent:<agent_id>:… key")
        return _canonical_or_invalid("session_key", record.session_key, "")
    return _canonical_or_invalid("session_key", record.session_key, record.agent_id)


def decide(
    state: SessionState,
    record: InputRecord,
    *,
    written_at: datetime,
    dedupe_window: timedelta = DEFAULT_DEDUPE_WINDOW,
) -> tuple[SessionState, Outcome]:
    """Apply the rules to one valid record of the session whose state is `state`.

    Rule 1 (invalid bytes) is decided at the edge by schemas.parse_input; a record whose
    session key names no agent is a dead letter here. The input state is never modified.
    """
    key = session_key_of(record)
    if isinstance(key, Invalid):
        return state, dead_letter(key.reason, send_id=getattr(record, "send_id", None))
    return decide_keyed(state, record, key, written_at=written_at, dedupe_window=dedupe_window)


def decide_keyed(
    state: SessionState,
    record: InputRecord,
    key: str,
    *,
    written_at: datetime,
    dedupe_window: timedelta = DEFAULT_DEDUPE_WINDOW,
) -> tuple[SessionState, Outcome]:
    """`decide` for a caller that already has `key == session_key_of(record)` (to look the
    state up) and should not pay for it twice."""
    if written_at.tzinfo is None:
        raise ValueError("written_at needs a UTC offset")
    if isinstance(record, SessionReset):
        return _reset(state, record, key)
    return _confirmation(state, record, key, written_at, dedupe_window)


# --- Rule 2: resets -----------------------------------------------------------------------


def _reset(state: SessionState, record: SessionReset, key: str) -> tuple[SessionState, Outcome]:
    """A reset chat is the same chat: later sends land in it, in the next epoch.

    A reset no later than the last one applied is that reset redelivered: nothing changes.
    """
    if state.last_reset_at is not None and record.reset_at <= state.last_reset_at:
        return state, Outcome("duplicate", key, None)
    new = SessionState(state.epoch + 1, state.next_seq, state.clock, record.reset_at, state.seen)
    return new, Outcome("reset", key, None)


# --- Rules 3-7: confirmations -------------------------------------------------------------


def _confirmation(
    state: SessionState,
    record: DeliveryConfirmation,
    key: str,
    written_at: datetime,
    window: timedelta,
) -> tuple[SessionState, Outcome]:
    send_id, at, origin = record.send_id, record.confirmed_at, record.origin
    # Keys a rule compares must name an agent, or the record is a dead letter.
    turn_key = job_key = None
    if origin.kind == "turn_reply" and origin.turn is not None:
        turn_key = _canonical_or_invalid(
            "origin.turn.session_key", origin.turn.session_key, record.agent_id
        )
        if isinstance(turn_key, Invalid):
            return state, dead_letter(turn_key.reason, key, send_id=send_id)
    job = origin.job
    if job is not None and job.mode == "in_chat" and job.session_key is not None:
        job_key = _canonical_or_invalid("origin.job.session_key", job.session_key, record.agent_id)
        if isinstance(job_key, Invalid):
            return state, dead_letter(job_key.reason, key, send_id=send_id)

    # Rule 3: dedupe. The window is measured on the session clock (latest confirmed_at), and
    # an entry's first_seen is that clock, so first_seen only grows and pruning is cheap.
    # A send_id older than the window is treated as new.
    fp = fingerprint(record, key)
    clock = at if state.clock is None or at > state.clock else state.clock
    seen = state.seen_map.pruned(clock - window)
    prior = seen.get(send_id)
    if prior is not None:
        unchanged = seen is state.seen and clock is state.clock
        kept = (
            state
            if unchanged
            else SessionState(state.epoch, state.next_seq, clock, state.last_reset_at, seen)
        )
        if prior.fingerprint == fp:
            return kept, Outcome("duplicate", key, send_id)
        # In UTC: the stored state keeps instants, not the offsets they were written with.
        first_seen = prior.first_seen.astimezone(UTC).isoformat().replace("+00:00", "Z")
        detail = (
            f"send_id was first seen at {first_seen} (session clock) with "
            f"different content (fingerprint {prior.fingerprint}, now {fp}); nothing written"
        )
        conflict = diagnostic("error", CONFLICTING_DUPLICATE, key, send_id, detail, at)
        return kept, Outcome("conflict", key, send_id, diagnostics=(conflict,))
    # Every processed confirmation is remembered, whatever rule below decides it.
    seen = seen.with_entry(send_id, Seen(clock, fp))

    # Rule 4: the destination chat is bound to another agent (Rule 1 exception).
    dest = record.destination_agent_id
    if dest is not None and dest != record.agent_id:
        detail = (
            f"destination chat is bound to agent {dest}, not the sender {record.agent_id}; "
            "the message was sent and is written to no agent's transcript"
        )
        diag = diagnostic("warn", DESTINATION_BOUND_TO_OTHER_AGENT, key, send_id, detail, at)
        return _kept(state, clock, seen), Outcome("other_agent", key, send_id, diagnostics=(diag,))

    # Rule 5: native-only payload (Rule 1 exception): no honest text to write.
    if is_native_only(record.payload):
        n = len(record.payload.native)
        detail = (
            f"payload has no text and no media ({n} channel-native item{'s' if n != 1 else ''}); "
            "the message was sent and nothing is written"
        )
        diag = diagnostic("warn", NATIVE_ONLY_PAYLOAD, key, send_id, detail, at)
        return _kept(state, clock, seen), Outcome("native_only", key, send_id, diagnostics=(diag,))

    # Rule 6: the reply of a turn running in this very chat: that turn already wrote it.
    if origin.kind == "turn_reply" and turn_key == key:
        return _kept(state, clock, seen), Outcome("skipped_same_turn", key, send_id)

    # Rule 7: append one entry with the next seq (seq never restarts, not even on reset).
    entry = _entry(state, record, key, written_at)
    new = SessionState(state.epoch, state.next_seq + 1, clock, state.last_reset_at, seen)
    return new, Outcome("written", key, send_id, entry, _write_diagnostics(record, key, job_key))


def is_native_only(payload: Payload) -> bool:
    """No text (absent, empty or only whitespace) and no media: nothing honest to write."""
    return not payload.media and not (payload.text and not payload.text.isspace())


def _kept(state: SessionState, clock: datetime, seen: SeenMap) -> SessionState:
    """The state after a confirmation that writes nothing: only the dedupe memory moves."""
    return SessionState(state.epoch, state.next_seq, clock, state.last_reset_at, seen)


def _entry(
    state: SessionState, record: DeliveryConfirmation, key: str, written_at: datetime
) -> TranscriptEntry:
    payload = record.payload
    # Validated (in pydantic-core, faster than model_construct): a built entry always
    # satisfies its own schema. The validator itself: model_validate adds a Python layer.
    return _ENTRY.validate_python(
        {
            "schema": "transcript-entry/1",
            "session_key": key,
            "epoch": state.epoch,
            "seq": state.next_seq,
            "entry_id": entry_id(record.send_id),
            "send_id": record.send_id,
            "role": "assistant",
            "agent_id": record.agent_id,
            "text": payload.text or "",  # exactly what was shown; never trimmed
            "media": [{"kind": m.kind, "name": m.name} for m in payload.media],  # no URLs
            "source": record.origin.kind,
            "posted_by": _poster(record),
            "delivered_at": record.confirmed_at,
            "written_at": written_at,
            "platform_message_ids": record.receipt.platform_message_ids,
        }
    )


def entry_id(send_id: str) -> str:
    """uuid5(ENTRY_ID_NAMESPACE, send_id) as a string (inlined: uuid.uuid5 is slow)."""
    digest = bytearray(hashlib.sha1(_NAMESPACE_BYTES + send_id.encode()).digest()[:16])
    digest[6] = (digest[6] & 0x0F) | 0x50  # version 5
    digest[8] = (digest[8] & 0x3F) | 0x80  # RFC 4122 variant
    x = digest.hex()
    return f"{x[:8]}-{x[8:12]}-{x[12:16]}-{x[16:20]}-{x[20:]}"


def posted_by(record: DeliveryConfirmation) -> PostedBy:
    """Who the model sees as the poster: the job, else the sub-agent, else the agent itself."""
    return PostedBy.model_validate(_poster(record))


def _poster(record: DeliveryConfirmation) -> dict[str, str | None]:
    job, sub = record.origin.job, record.origin.subagent
    if job is not None:
        return {"kind": "job", "id": job.id, "name": job.name, "run_id": job.run_id}
    if sub is not None:
        return {"kind": "subagent", "id": sub.agent_id, "name": sub.label, "run_id": sub.run_id}
    return {"kind": "agent", "id": record.agent_id}


def _write_diagnostics(
    record: DeliveryConfirmation, key: str, job_key: str | None
) -> tuple[Diagnostic, ...]:
    """Rule 7's non-blocking diagnostics. Details name keys and jobs, never text or URLs."""
    out: list[Diagnostic] = []
    job = record.origin.job
    if job is not None and job_key is not None and job_key != key:
        named = f"{job.id} ({job.name})" if job.name else job.id
        detail = (
            f"in-chat job {named} delivered to {key}, outside its chat {job_key}; an in-chat "
            "job cannot deliver elsewhere: run `transcript-owner doctor` to migrate it to a "
            "background job"
        )
        out.append(
            diagnostic(
                "warn",
                IN_CHAT_JOB_DELIVERED_ELSEWHERE,
                key,
                record.send_id,
                detail,
                record.confirmed_at,
            )
        )
    if record.session_key != key:
        detail = f"sender's session key {record.session_key!r} is not canonical; canonical: {key!r}"
        out.append(
            diagnostic(
                "info", SESSION_KEY_MISMATCH, key, record.send_id, detail, record.confirmed_at
            )
        )
    return tuple(out)


def _canonical_or_invalid(field: str, raw: str, agent_id: str) -> str | Invalid:
    try:
        return canonical_session_key(raw, agent_id)
    except ValueError as exc:
        return Invalid(f"{field}: {exc}")


__all__ = [
    "DEFAULT_DEDUPE_WINDOW",
    "ENTRY_ID_NAMESPACE",
    "OutcomeKind",
    "decide",
    "decide_keyed",
    "entry_id",
    "is_native_only",
    "posted_by",
    "session_key_of",
]
