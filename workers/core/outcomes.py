"""What the decision function returns for one input record: exactly one Outcome.

An audit checks that every input record has exactly one outcome; the kinds below are all
there are. A shell turns an outcome into Kafka writes: `entry` to transcript.entries,
`diagnostics` to transcript.diagnostics, a dead letter to the DLQ with `error`.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal, NamedTuple, get_args

from schemas import Diagnostic, DiagnosticLevel, SessionErasure, TranscriptEntry

OutcomeKind = Literal[
    "written",
    "duplicate",
    "conflict",
    "skipped_same_turn",
    "other_agent",
    "native_only",
    "reset",
    "dead_letter",
    "erased",  # a session-erase: the session's entries and state tombstoned
    "erased_send",  # a confirmation confirmed at or before its session's erasure: not written
]
OUTCOME_KINDS: tuple[OutcomeKind, ...] = get_args(OutcomeKind)

# Diagnostic codes the core emits (level, when).
CONFLICTING_DUPLICATE = "conflicting_duplicate"  # error: a send_id came back with other content
DESTINATION_BOUND_TO_OTHER_AGENT = "destination_bound_to_other_agent"  # warn: Rule 1 exception
NATIVE_ONLY_PAYLOAD = "native_only_payload"  # warn: Rule 1 exception, no honest text
IN_CHAT_JOB_DELIVERED_ELSEWHERE = "in_chat_job_delivered_elsewhere"  # warn: breaks Rule 2
SESSION_KEY_MISMATCH = "session_key_mismatch"  # info: the sender's key was not canonical
CLOCK_SKEW = "clock_skew"  # warn: a record's time was ahead of the worker's clock
CONFIRMED_BEFORE_ERASURE = "confirmed_before_erasure"  # info: a send of erased history
HANDLING_FAILED = "handling failed"  # dead-letter reason prefix: the step raised
NULL_VALUE = "no value: a tombstone is not a record"  # dead-letter reason

_DIAGNOSTIC = Diagnostic.__pydantic_validator__  # model_validate without its Python layer
_ENTRY = TranscriptEntry.__pydantic_validator__


class Outcome(NamedTuple):
    """The single result of deciding one input record.

    A written entry is carried as the bytes written (made once, in the core: the worker sends
    them, replay prints them, audit compares them); `entry` reads them back as a model.
    """

    kind: OutcomeKind
    session_key: str | None  # canonical; None only for dead letters that could not be keyed
    send_id: str | None
    entry_json: bytes | None = None  # the transcript-entry/1 record; exactly when "written"
    diagnostics: tuple[Diagnostic, ...] = ()
    error: str | None = None  # the reason, for dead letters
    erasure: SessionErasure | None = None  # set exactly when kind == "erased"
    seq: int = 0  # the entry's seq, when written (its key: `<session_key>#<seq>`)
    chain: bytes | None = None  # the entry's chain (its `chain` header), when written

    @property
    def entry(self) -> TranscriptEntry | None:
        """The written entry as a model (for readers and tests; parsed on each call)."""
        return None if self.entry_json is None else _ENTRY.validate_json(self.entry_json)


def dead_letter(
    reason: str, session_key: str | None = None, *, send_id: str | None = None
) -> Outcome:
    """The outcome of a record that cannot be processed (DESIGN.md Rule 1)."""
    return Outcome("dead_letter", session_key, send_id, error=reason)


def diagnostic(
    level: DiagnosticLevel,
    code: str,
    session_key: str,
    send_id: str | None,
    detail: str,
    at: datetime,
) -> Diagnostic:
    """A diagnostic/1 record. `at` is the record's own time, so replays reproduce it."""
    return _DIAGNOSTIC.validate_python(
        {
            "schema": "diagnostic/1",
            "level": level,
            "code": code,
            "session_key": session_key,
            "send_id": send_id,
            "detail": detail,
            "at": at,
        }
    )


__all__ = [
    "CLOCK_SKEW",
    "CONFIRMED_BEFORE_ERASURE",
    "CONFLICTING_DUPLICATE",
    "HANDLING_FAILED",
    "NULL_VALUE",
    "DESTINATION_BOUND_TO_OTHER_AGENT",
    "IN_CHAT_JOB_DELIVERED_ELSEWHERE",
    "NATIVE_ONLY_PAYLOAD",
    "OUTCOME_KINDS",
    "SESSION_KEY_MISMATCH",
    "Outcome",
    "OutcomeKind",
    "dead_letter",
    "diagnostic",
]
