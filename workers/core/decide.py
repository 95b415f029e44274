"""The decision function: (session head, remembered send_id, input record) -> a Decision.

Rules 2-7 of DESIGN.md are in this file, in the order they apply (Rule 1, invalid bytes, is
decided at the edge: transcript_connector/parse.py). The worker, `replay` and `audit` all call
`decide` (through the one step, `workers.core.owner`), so an audit compares the pipeline against
these rules, not against a second implementation. Pure: no I/O, no clock (`now` and `written_at` are
passed in).
"""

from __future__ import annotations

import hashlib
import uuid
from datetime import UTC, datetime, timedelta
from typing import NamedTuple, cast

import msgspec
from transcript_connector.chain import link as chain_link
from transcript_connector.chain import root as chain_root
from transcript_connector.record_keys import (
    canonical_or_invalid,
    origin_key_problem,
    session_key_of,
)
from transcript_connector.records import (
    ERASE,
    MAX_TIMESTAMP,
    MIN_TIMESTAMP,
    RESET,
    TIMESTAMP_RANGE,
    InputRecord,
    Payload,
)

from schemas import (
    DeliveryConfirmation,
    Diagnostic,
    Invalid,
    PostedBy,
    SessionErase,
    SessionErasure,
    SessionReset,
)
from workers.core.fingerprint import fingerprint, origin_key
from workers.core.outcomes import (
    CLOCK_SKEW,
    CONFIRMED_BEFORE_ERASURE,
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
from workers.core.state import UNKNOWN_FINGERPRINT, Seen, SessionHead

DEFAULT_DEDUPE_WINDOW = timedelta(days=7)
# How far a record's time may be ahead of the worker's clock (rules 3 and 7).
CLOCK_SKEW_ALLOWANCE = timedelta(minutes=5)

# entry_id = uuid5(ENTRY_ID_NAMESPACE, send_id). Fixed forever: changing it would give every
# re-derived entry a new id, and an audit would report the whole topic as different.
ENTRY_ID_NAMESPACE = uuid.UUID("5f0c3a52-8f3e-4d5e-9b8a-6c1d2e7f4a90")
_NAMESPACE_BYTES = ENTRY_ID_NAMESPACE.bytes
# the fields of a transcript entry, in order, as pydantic writes them (a test checks the bytes)
_JSON = msgspec.json.Encoder().encode


class Decision(NamedTuple):
    """One record decided: the session's new head, the send_id to remember, the outcome.

    `head` is the given head object when nothing in it changed; `seen` is None when no
    send_id is to be (re)stored.
    """

    head: SessionHead
    seen: Seen | None
    outcome: Outcome


def decide(
    head: SessionHead,
    prior: Seen | None,
    record: InputRecord,
    key: str,
    *,
    now: datetime,
    written_at: datetime,
    dedupe_window: timedelta = DEFAULT_DEDUPE_WINDOW,
) -> Decision:
    """Apply rules 2-7 to one valid record of session `key` (== session_key_of(record)).

    `head` is the session's head, `prior` what the session remembers of the record's send_id
    (None for a reset, or when it remembers nothing). `now` is the worker's clock for this
    record (the time the broker appended it; replay's --written-at): the skew allowance is
    measured from it. `written_at` goes into the entry. Nothing given is modified.
    """
    if now.tzinfo is None or written_at.tzinfo is None:
        raise ValueError("now and written_at need a UTC offset")
    if not MIN_TIMESTAMP <= written_at <= MAX_TIMESTAMP:
        raise ValueError(f"written_at outside {TIMESTAMP_RANGE}")
    # the tag says which record it is (a pydantic model, or a msgspec Struct of the same shape
    # from the fast parse: isinstance cannot tell)
    if record.schema_ == RESET:
        return _reset(head, cast(SessionReset, record), key, now)
    if record.schema_ == ERASE:
        return _erase(head, cast(SessionErase, record), key, now)
    send = cast(DeliveryConfirmation, record)
    if head.erased_at is not None and send.confirmed_at <= head.erased_at:
        return _erased_send(head, send, key)
    return _confirmation(head, prior, send, key, now, written_at, dedupe_window)


def skewed(at: datetime, now: datetime) -> bool:
    """`at` is further ahead of the worker's clock than a connector's clock may be."""
    return at - now > CLOCK_SKEW_ALLOWANCE


# --- Rule 2: resets -----------------------------------------------------------------------


def _reset(head: SessionHead, record: SessionReset, key: str, now: datetime) -> Decision:
    """A reset chat is the same chat: later sends land in it, in the next epoch.

    A reset no later than the last one applied is that reset redelivered: nothing changes.
    A reset dated ahead of the worker's clock counts as made now, or one reset dated 2999
    would make every later reset look redelivered.
    """
    at, diags = record.reset_at, cast(tuple[Diagnostic, ...], ())
    if skewed(at, now):
        at = now
        diags = (_skew_diagnostic(key, None, record.reset_at, now),)
    last = head.last_reset_at
    if last is not None and skewed(last, now):
        last = None  # stored before resets were clamped (format 1): it proves nothing
    if last is not None and at <= last:
        return Decision(head, None, Outcome("duplicate", key, None))
    new = SessionHead(head.epoch + 1, head.next_seq, head.clock, at, head.erased_at, head.chain,
                      head.chain_from, head.live_from)
    return Decision(new, None, Outcome("reset", key, None, diagnostics=diags))


# --- Rule 2a: erasure (`transcript-owner forget`) ----------------------------------------


def _erase(head: SessionHead, record: SessionErase, key: str, now: datetime) -> Decision:
    """Erase the session: every entry written so far (seq 1..next_seq-1) is tombstoned and
    the session's remembered send_ids are forgotten (the shell tombstones them: they are
    found in the store, not in the head). What stays is a head without content: the next
    epoch, `next_seq` (seqs never repeat, so a later erasure's tombstones cover all), the
    clocks, and `erased_at`, the rule for what comes later: a confirmation confirmed at or
    before it belongs to the erased history and is not written again.

    Every erase erases (a second one tombstones the same keys again: harmless); an erase
    dated ahead of the worker's clock counts as made now, and `erased_at` never moves back.
    The erasure ends the session's chain (the head keeps none): the next entry starts at the
    root of the new epoch, so nothing derived from the erased text survives. The head records
    that the next chain starts at `next_seq` and that every seq below it was erased, so an
    erased entry put back (chained or not) is a finding against the head.
    """
    at = now if skewed(record.erased_at, now) else record.erased_at
    if head.erased_at is not None and head.erased_at > at:
        at = head.erased_at
    new = SessionHead(head.epoch + 1, head.next_seq, head.clock, head.last_reset_at, at, None,
                      head.next_seq, head.next_seq)
    erasure = SessionErasure.model_validate({
        "schema": "session-erasure/1", "session_key": key, "erased_at": at,
        "reason": record.reason, "epoch": new.epoch, "through_seq": head.next_seq - 1,
    })
    return Decision(new, None, Outcome("erased", key, None, erasure=erasure))


def _erased_send(head: SessionHead, record: DeliveryConfirmation, key: str) -> Decision:
    """A confirmation of a send confirmed at or before the session's erasure: a retry (or a
    late copy) of erased history. Not written, not remembered; an info diagnostic says so
    (it names the send_id, never content)."""
    erased = head.erased_at.astimezone(UTC).isoformat().replace("+00:00", "Z")  # type: ignore[union-attr]
    detail = (f"confirmed at or before the session's erasure at {erased}: part of the "
              "erased history, not written again")
    diag = diagnostic("info", CONFIRMED_BEFORE_ERASURE, key, record.send_id, detail,
                      record.confirmed_at)
    return Decision(head, None, Outcome("erased_send", key, record.send_id, diagnostics=(diag,)))


# --- Rules 3-7: confirmations -------------------------------------------------------------


def _confirmation(
    head: SessionHead,
    prior: Seen | None,
    record: DeliveryConfirmation,
    key: str,
    now: datetime,
    written_at: datetime,
    window: timedelta,
) -> Decision:
    send_id, at, origin = record.send_id, record.confirmed_at, record.origin
    # Keys a rule compares must name an agent, or the record is a dead letter.
    problem = origin_key_problem(record)
    if problem is not None:
        return Decision(head, None, dead_letter(problem.reason, key, send_id=send_id))
    turn_key = None if origin.turn is None else _key(origin.turn.session_key, record.agent_id)
    job = origin.job
    job_key = None if job is None or job.session_key is None else \
        _key(job.session_key, record.agent_id)

    # Rule 3: dedupe, on the session clock. A confirmed_at too far ahead of the worker's
    # clock does not move it there (written as shown, flagged by Rule 7): the record counts
    # as made at the worker's clock, so no connector can make the session forget its
    # send_ids, and a connector whose clock runs fast still lets old send_ids expire.
    ahead = skewed(at, now)
    effective = now if ahead else at
    clock = head.clock
    if clock is not None and skewed(clock, now):
        clock = now  # pushed ahead before clocks were clamped (format 1): clamp it
    if clock is None or effective > clock:
        clock = effective
    fp = fingerprint(record, key, turn_key, job_key)
    if prior is not None and clock - prior.first_seen <= window:
        kept = head if clock is head.clock else _with_clock(head, clock)
        if prior.fingerprint == fp or prior.fingerprint == UNKNOWN_FINGERPRINT:
            return Decision(kept, None, Outcome("duplicate", key, send_id))
        # In UTC: the stored state keeps instants, not the offsets they were written with.
        first_seen = prior.first_seen.astimezone(UTC).isoformat().replace("+00:00", "Z")
        detail = (
            f"send_id was first seen at {first_seen} (session clock) with "
            f"different content (fingerprint {prior.fingerprint}, now {fp}); nothing written"
        )
        conflict = diagnostic("error", CONFLICTING_DUPLICATE, key, send_id, detail, at)
        return Decision(kept, None, Outcome("conflict", key, send_id, diagnostics=(conflict,)))
    # Every processed confirmation is remembered, whatever rule below decides it.
    seen = Seen(clock, fp)
    kept = head if clock is head.clock else _with_clock(head, clock)

    # Rule 4: the destination chat is bound to another agent (Rule 1 exception). No agent
    # writes into another agent's transcript, whatever destination_agent_id says.
    dest = record.destination_agent_id
    owner = key.split(":", 2)[1]
    if (dest is not None and dest != record.agent_id) or owner != record.agent_id:
        bound = dest if dest is not None and dest != record.agent_id else owner
        detail = (
            f"destination chat is bound to agent {bound}, not the sender {record.agent_id}; "
            "the message was sent and is written to no agent's transcript"
        )
        diag = diagnostic("warn", DESTINATION_BOUND_TO_OTHER_AGENT, key, send_id, detail, at)
        return Decision(kept, seen, Outcome("other_agent", key, send_id, diagnostics=(diag,)))

    # Rule 5: native-only payload (Rule 1 exception): no honest text to write.
    if is_native_only(record.payload):
        n = len(record.payload.native)
        detail = (
            f"payload has no text and no media ({n} channel-native item{'s' if n != 1 else ''}); "
            "the message was sent and nothing is written"
        )
        diag = diagnostic("warn", NATIVE_ONLY_PAYLOAD, key, send_id, detail, at)
        return Decision(kept, seen, Outcome("native_only", key, send_id, diagnostics=(diag,)))

    # Rule 6: the reply of a turn running in this very chat: that turn already wrote it.
    if origin.kind == "turn_reply" and turn_key == key:
        return Decision(kept, seen, Outcome("skipped_same_turn", key, send_id))

    # Rule 7: append one entry with the next seq (seq never restarts, not even on reset),
    # chained to the session's last one (DESIGN 1.2, "Tamper evidence").
    entry = _entry(head, record, key, written_at)
    chain = chained(head, key, entry)
    chain_from, live_from = head.chain_from, head.live_from
    if head.chain is None and chain is not None:  # this entry starts the session's chain
        chain_from = head.next_seq
        if head.chain_from is None:  # not set by an erasure (which sets live_from too)
            live_from = 1 if head.erased_at is None else None  # erased before heads recorded it
    new = SessionHead(head.epoch, head.next_seq + 1, clock, head.last_reset_at, head.erased_at,
                      chain, chain_from, live_from)
    diags = _write_diagnostics(record, key, job_key if job and job.mode == "in_chat" else None)
    if ahead:
        diags += (_skew_diagnostic(key, send_id, at, now),)
    return Decision(new, seen, Outcome("written", key, send_id, entry, diags, seq=head.next_seq,
                                       chain=chain))


def chained(head: SessionHead, key: str, entry: bytes) -> bytes | None:
    """The chain of the session's next entry: from the head's last chain, or from the root of
    the head's epoch when it has none (a new session, an erased one, or one written before
    the chain, whose older entries stay unchained: the worker never reads them back)."""
    previous = head.chain if head.chain is not None else chain_root(key, head.epoch)
    return chain_link(previous, entry)


def _with_clock(head: SessionHead, clock: datetime) -> SessionHead:
    return SessionHead(head.epoch, head.next_seq, clock, head.last_reset_at, head.erased_at,
                       head.chain, head.chain_from, head.live_from)


def _skew_diagnostic(key: str, send_id: str | None, at: datetime, now: datetime) -> Diagnostic:
    ahead = int((at - now).total_seconds())
    detail = (
        f"the record's time is {ahead} s ahead of the worker's clock (allowance "
        f"{int(CLOCK_SKEW_ALLOWANCE.total_seconds())} s): handled as shown; the session's "
        "dedupe clock counts it as made at the worker's clock"
    )
    return diagnostic("warn", CLOCK_SKEW, key, send_id, detail, at)


def is_native_only(payload: Payload) -> bool:
    """No text (absent, empty or only whitespace) and no media: nothing honest to write."""
    return not payload.media and not (payload.text and not payload.text.isspace())


def _entry(
    head: SessionHead, record: DeliveryConfirmation, key: str, written_at: datetime
) -> bytes:
    """The transcript-entry/1 record, as its bytes: serialised once, here. Every value comes
    from a validated record or the head, so the bytes satisfy the schema (a test checks that
    they are what TranscriptEntry validates and writes); `written_at` is checked by decide."""
    payload = record.payload
    return _JSON(
        {
            "schema": "transcript-entry/1",
            "session_key": key,
            "epoch": head.epoch,
            "seq": head.next_seq,
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
    x = hashlib.sha1(_NAMESPACE_BYTES + send_id.encode()).hexdigest()
    # version 5 in the 13th digit; the RFC 4122 variant (binary 10xx) in the 17th
    return f"{x[:8]}-{x[8:12]}-5{x[13:16]}-{_VARIANT[x[16]]}{x[17:20]}-{x[20:32]}"


_VARIANT = {d: "89ab"[int(d, 16) & 3] for d in "0123456789abcdef"}


def posted_by(record: DeliveryConfirmation) -> PostedBy:
    """Who the model sees as the poster: the job, else the sub-agent, else the agent itself."""
    return PostedBy.model_validate(_poster(record))


def _poster(record: DeliveryConfirmation) -> dict[str, str | None]:
    job, sub = record.origin.job, record.origin.subagent
    if job is not None:
        return {"kind": "job", "id": job.id, "name": job.name, "run_id": job.run_id}
    if sub is not None:
        return {"kind": "subagent", "id": sub.agent_id, "name": sub.label, "run_id": sub.run_id}
    return {"kind": "agent", "id": record.agent_id, "name": None, "run_id": None}


def _write_diagnostics(
    record: DeliveryConfirmation, key: str, job_key: str | None
) -> tuple[Diagnostic, ...]:
    """Rule 7's non-blocking diagnostics. Details name keys and jobs, never text or URLs."""
    out: list[Diagnostic] = []
    job = record.origin.job
    if job is not None and job_key is not None and job_key != key:
        named = f"{job.id} ({job.name})" if job.name else job.id
        detail = (
            f"in-chat job {_short(named)} delivered to {_short(key)}, outside its chat "
            f"{_short(job_key)}; an in-chat "
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
        detail = (
            f"sender's session key {_short(record.session_key)!r} is not canonical; "
            f"canonical: {_short(key)!r}"
        )
        out.append(
            diagnostic(
                "info", SESSION_KEY_MISMATCH, key, record.send_id, detail, record.confirmed_at
            )
        )
    return tuple(out)


def _short(text: str, limit: int = 200) -> str:
    """A key or name as a diagnostic's detail quotes it: bounded (a key can be long)."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _key(raw: str, agent_id: str) -> str:
    """An origin's key as rules and the fingerprint compare it: canonical, or folded as a
    canonical key is when it names no agent (then no rule compares it: origin_key_problem)."""
    key = canonical_or_invalid("", raw, agent_id)
    return origin_key(raw, agent_id) if isinstance(key, Invalid) else key


__all__ = [
    "CLOCK_SKEW_ALLOWANCE",
    "DEFAULT_DEDUPE_WINDOW",
    "Decision",
    "ENTRY_ID_NAMESPACE",
    "OutcomeKind",
    "decide",
    "skewed",
    "entry_id",
    "is_native_only",
    "posted_by",
    "session_key_of",
]
