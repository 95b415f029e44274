"""The session keys a record names, as the worker reads them: the one place that says which
key a record belongs to (its Kafka key and partition) and which of its keys must name an agent.

The worker's rules (workers/core/decide.py) and the connector's builders both call these, so
a builder refuses exactly the keys the worker would dead-letter, with the same reason.
"""

from __future__ import annotations

from typing import cast

from transcript_connector.parse import Invalid
from transcript_connector.records import CONFIRMATION, RESET, DeliveryConfirmation, InputRecord
from transcript_connector.session_keys import canonical_session_key
from transcript_connector.unicode_text import py_lower, py_strip

# An erase on the input topic is the worker's own forwarded copy or history, never a
# connector's record (DESIGN 1.2, the trust boundary).
ONLY_ON_CONTROL = "session-erase/1 is accepted only on transcript.control"
# A reset or an erase has no sender, and its full `agent:<id>:…` key names its own agent, so
# canonical_session_key never uses the agent id it is given for one: any valid id will do.
_NO_SENDER = "a"


def canonical_or_invalid(field: str, raw: str, agent_id: str) -> str | Invalid:
    """`raw` canonicalised, or why it names no session (the reason names `field`)."""
    try:
        return canonical_session_key(raw, agent_id)
    except ValueError as exc:
        return Invalid(f"{field}: {exc}")


def session_key_of(record: InputRecord) -> str | Invalid:
    """The canonical key of the session `record` belongs to (the partition key).

    A reset or an erase carries no agent id, so its key must already be a full
    `agent:<id>:…` key.
    """
    if record.schema_ != CONFIRMATION:
        head, sep, _ = record.session_key.partition(":")
        if not sep or py_lower(py_strip(head)) != "agent":
            what = "a reset" if record.schema_ == RESET else "an erase"
            return Invalid(f"session_key: {what} needs a full agent:<agent_id>:… key")
        return canonical_or_invalid("session_key", record.session_key, _NO_SENDER)
    return canonical_or_invalid("session_key", record.session_key,
                                cast(DeliveryConfirmation, record).agent_id)


def origin_key_problem(record: DeliveryConfirmation) -> Invalid | None:
    """Why a key a rule compares names no agent: a turn reply's turn key (the reply of a turn
    in the same conversation is skipped), an in-chat job's key (delivered elsewhere: a
    diagnostic); such a record is a dead letter. Other keys of the origin are compared by no
    rule, so they never make one."""
    origin = record.origin
    if origin.kind == "turn_reply" and origin.turn is not None:
        turn = canonical_or_invalid("origin.turn.session_key", origin.turn.session_key,
                                    record.agent_id)
        if isinstance(turn, Invalid):
            return turn
    job = origin.job
    if job is not None and job.mode == "in_chat" and job.session_key is not None:
        key = canonical_or_invalid("origin.job.session_key", job.session_key, record.agent_id)
        if isinstance(key, Invalid):
            return key
    return None


__all__ = ["ONLY_ON_CONTROL", "canonical_or_invalid", "origin_key_problem", "session_key_of"]
