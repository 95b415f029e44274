"""The wire contract: every record transcript-owner reads or writes (DESIGN.md, "Records").

Nothing else defines a record's shape. Models are frozen (a record is a fact, not a
buffer) and ignore unknown fields (a newer connector may add some); a missing required
field is an error. Lists are tuples so that a frozen model is frozen all the way down.

The attribute for the JSON field `schema` is `schema_` (pydantic reserves `schema` on
BaseModel); it is read and written as `schema` only: `schema_` in a record is an unknown
field, never a spelling of the tag (a record is read by its JSON names alone).
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Annotated, Literal

from pydantic import (
    AwareDatetime,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictInt,
    StringConstraints,
    ValidationInfo,
    field_validator,
)
from pydantic.json_schema import JsonDict

# --- shared field types -------------------------------------------------------------------

AGENT_ID_PATTERN = r"^[a-z0-9][a-z0-9_-]{0,63}$"

# Every timestamp of the contract lies in this range once converted to UTC (Rule 1), so
# converting one to UTC, comparing or subtracting two never overflows Python's datetime.
MIN_TIMESTAMP = datetime(1970, 1, 1, tzinfo=UTC)
MAX_TIMESTAMP = datetime(2999, 12, 31, 23, 59, 59, tzinfo=UTC)
TIMESTAMP_RANGE = f"{MIN_TIMESTAMP:%Y-%m-%dT%H:%M:%SZ}..{MAX_TIMESTAMP:%Y-%m-%dT%H:%M:%SZ}"

# For the JSON Schema: the local year of an in-range timestamp is 1969..3000 (an offset
# moves the date by less than a day). Looser than the range, never stricter: it stops year
# 0001 or 9999 in a connector; the edge checks the instant exactly.
_YEAR_PATTERN = "^(1969|19[7-9][0-9]|2[0-9]{3}|3000)-"

# RFC 3339's date-time (section 5.6; a space for the T, as its note allows). pydantic-core's
# parser alone also takes a string of digits as a unix time ("1700000000"), minutes without
# seconds, a comma before the fraction and offsets without a colon (+0100): none is RFC 3339.
_DATE_TIME = (r"[0-9]{2}-[0-9]{2}[Tt ][0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]+)?"
              r"([Zz]|[+-][0-9]{2}:[0-9]{2})$")
# the JSON Schema's pattern: the year range too; at the edge the range is checked on the
# instant, so a year out of range gets that reason, not this one
RFC3339_PATTERN = _YEAR_PATTERN + _DATE_TIME
# at the edge the offset may be missing here: the aware check then says so ("needs a UTC offset")
_RFC3339 = re.compile(r"^[0-9]{4}-" + _DATE_TIME.replace(")$", ")?$"))
RFC3339_REASON = "not an RFC 3339 timestamp (YYYY-MM-DDTHH:MM:SS[.fraction] and Z or ±HH:MM)"


def _rfc3339(value: object) -> object:
    """Only text spelled as RFC 3339 is parsed (or a datetime built in Python): never a JSON
    number as a unix time."""
    if isinstance(value, str):
        if _RFC3339.match(value) is None:
            raise ValueError(RFC3339_REASON)
    elif not isinstance(value, datetime):
        raise ValueError(RFC3339_REASON)
    return value


# RFC 3339 with a UTC offset: spelled so (_rfc3339), and aware, so a naive timestamp (no
# offset) is rejected rather than guessed. The range is checked by pydantic-core on the
# instant (offset applied, no Python datetime arithmetic, so no OverflowError); the value
# keeps the offset it was given.
Timestamp = Annotated[
    AwareDatetime,
    Field(
        ge=MIN_TIMESTAMP,
        le=MAX_TIMESTAMP,
        description=f"RFC 3339 timestamp with offset, within {TIMESTAMP_RANGE} once in UTC",
        json_schema_extra={"pattern": RFC3339_PATTERN},
    ),
    BeforeValidator(_rfc3339),  # after the constraints: they stay the datetime's own
]
AgentId = Annotated[str, StringConstraints(pattern=AGENT_ID_PATTERN)]
SendId = Annotated[str, StringConstraints(min_length=1, max_length=512)]
NonEmpty = Annotated[str, StringConstraints(min_length=1)]

PeerKind = Literal["direct", "group", "channel"]
OriginKind = Literal[
    "turn_reply", "message_tool", "automation_result", "failure_alert", "subagent_announcement"
]
JobMode = Literal["in_chat", "background"]
PostedByKind = Literal["job", "subagent", "agent"]
DiagnosticLevel = Literal["info", "warn", "error"]


class Record(BaseModel):
    """Base of every wire model: frozen, unknown fields ignored, `schema` by its JSON name.

    Validated by alias only (no validate_by_name): a field's Python name is no JSON name.
    """

    model_config = ConfigDict(
        frozen=True,
        extra="ignore",
        validate_by_alias=True,
        serialize_by_alias=True,
    )


# --- delivery-confirmation/1 --------------------------------------------------------------


class Route(Record):
    """Where the send went, as the channel names it (serves diagnostics and key builders)."""

    channel: NonEmpty
    account_id: str | None = None
    peer_kind: PeerKind
    peer_id: NonEmpty
    thread_id: str | None = None


class Turn(Record):
    """The agent turn whose reply this send is."""

    session_key: str
    turn_id: str


class Job(Record):
    """The scheduled job that produced the send."""

    id: NonEmpty
    name: str | None = None
    run_id: str | None = None
    mode: JobMode
    session_key: str | None = None


class Subagent(Record):
    """The sub-agent run whose announcement this send is."""

    run_id: str
    agent_id: AgentId
    label: str | None = None


# A turn reply names its turn (Rule 1). Said in the JSON Schema too, for connectors.
_TURN_REPLY_NEEDS_TURN: JsonDict = {
    "if": {"properties": {"kind": {"const": "turn_reply"}}, "required": ["kind"]},
    "then": {"properties": {"turn": {"type": "object"}}, "required": ["turn"]},
}


class Origin(Record):
    """What produced the send; decides Rule 6 and the entry's `posted_by`."""

    model_config = ConfigDict(json_schema_extra=_TURN_REPLY_NEEDS_TURN)

    kind: OriginKind
    # validate_default: the check below runs when `turn` is absent, too.
    turn: Turn | None = Field(default=None, validate_default=True)
    job: Job | None = None
    subagent: Subagent | None = None

    @field_validator("turn")
    @classmethod
    def _turn_reply_names_its_turn(cls, turn: Turn | None, info: ValidationInfo) -> Turn | None:
        if turn is None and info.data.get("kind") == "turn_reply":
            raise ValueError("field required when origin.kind is turn_reply")
        return turn


class Media(Record):
    """A media item as sent. `url` may carry an access token: it is never copied."""

    kind: str
    name: str
    url: str | None = None
    mime: str | None = None


class Native(Record):
    """Channel-native content (embed, card, poll). Kept whole so retries fingerprint alike."""

    model_config = ConfigDict(extra="allow")

    kind: str


class Payload(Record):
    """What the chat showed."""

    text: str | None = None
    media: tuple[Media, ...] = ()
    native: tuple[Native, ...] = ()


class Receipt(Record):
    """The channel's proof of delivery."""

    platform_message_ids: tuple[str, ...]
    sent_at: Timestamp | None = None


class DeliveryConfirmation(Record):
    """A channel confirmed that an outbound message was shown in a chat."""

    schema_: Literal["delivery-confirmation/1"] = Field(alias="schema")
    send_id: SendId
    confirmed_at: Timestamp
    agent_id: AgentId
    session_key: str
    route: Route
    destination_agent_id: AgentId | None = None
    origin: Origin
    payload: Payload
    receipt: Receipt


# --- session-reset/1 ----------------------------------------------------------------------


class SessionReset(Record):
    """The chat was reset: same chat, next epoch."""

    schema_: Literal["session-reset/1"] = Field(alias="schema")
    session_key: str
    reset_at: Timestamp
    reason: str | None = None


# --- session-erase/1 and session-erasure/1 ----------------------------------------------

ReasonText = Annotated[str, StringConstraints(max_length=1000)]


class SessionErase(Record):
    """Erase a session (`transcript-owner forget`): its entries and its state are tombstoned.

    Travels on the input topic, keyed like the session's confirmations, so that it is ordered
    with them. `reason` is the operator's; it is copied into the erasure record, never logged
    above debug.
    """

    schema_: Literal["session-erase/1"] = Field(alias="schema")
    session_key: str
    erased_at: Timestamp
    reason: ReasonText | None = None


class SessionErasure(Record):
    """What an erasure did, as the worker records it in `transcript.erasures` (key: the
    session key), in the transaction that wrote the tombstones. No content of the session.

    Entries `<session_key>#<seq>` for seq 1..`through_seq` were tombstoned; the session goes
    on in `epoch`, and a confirmation confirmed at or before `erased_at` is not written.
    """

    schema_: Literal["session-erasure/1"] = Field(alias="schema")
    session_key: str
    erased_at: Timestamp
    reason: ReasonText | None = None
    epoch: Annotated[int, Field(ge=0)]
    through_seq: Annotated[int, Field(ge=0)]


# --- transcript-entry/1 -------------------------------------------------------------------


class MediaRef(Record):
    """A media item as the transcript records it: what it was, never where it lives."""

    kind: str
    name: str


class PostedBy(Record):
    """Who posted the entry, so the model can tell a job's message from its own reply."""

    kind: PostedByKind
    id: str
    name: str | None = None
    run_id: str | None = None


class TranscriptEntry(Record):
    """One message a chat showed, in the chat's model-visible history."""

    schema_: Literal["transcript-entry/1"] = Field(alias="schema")
    session_key: str
    epoch: Annotated[int, Field(ge=0)]
    seq: Annotated[int, Field(ge=1)]
    entry_id: str
    send_id: SendId
    role: Literal["assistant"]
    agent_id: AgentId
    text: str
    media: tuple[MediaRef, ...]
    source: OriginKind
    posted_by: PostedBy
    delivered_at: Timestamp
    written_at: Timestamp
    platform_message_ids: tuple[str, ...]


# --- input-position/1 (1.3) ----------------------------------------------------------------


class InputPosition(Record):
    """How far the worker's outputs reflect input partition `partition` (DESIGN 1.3, "Reading at
    a position"): written to `transcript.entries` partition `partition`, key `position/<p>`,
    after the entries of every transaction that consumed it. Every input record of that
    partition below `input_offset` (and of `transcript.control`'s below `control_offset`) has
    its outcome before this record in the partition; they are the offsets the same transaction
    commits for the worker's group. `at` is the worker's clock when it wrote it."""

    schema_: Literal["input-position/1"] = Field(alias="schema")
    # strict: a JSON integer, not "100", 1.0 or true (a reader must not guess an offset)
    partition: Annotated[StrictInt, Field(ge=0, le=2**31 - 1)]  # a Kafka partition: an int32
    input_offset: Annotated[StrictInt, Field(ge=0, le=2**63 - 1)]
    control_offset: Annotated[StrictInt, Field(ge=0, le=2**63 - 1)]
    at: Timestamp


# --- diagnostic/1 -------------------------------------------------------------------------


class Diagnostic(Record):
    """A run diagnostic: an exception to Rule 1, a conflict, or a hint for the operator.

    `detail` never holds message text or URLs.
    """

    schema_: Literal["diagnostic/1"] = Field(alias="schema")
    level: DiagnosticLevel
    code: Annotated[str, StringConstraints(pattern=r"^[a-z][a-z0-9_]*$")]
    session_key: str
    send_id: str | None
    detail: str
    at: Timestamp


InputRecord = DeliveryConfirmation | SessionReset | SessionErase
# the `schema` of each input record: how the core tells them apart (`record.schema_`), for a
# pydantic record and a Struct of transcript_connector/structs.py alike
CONFIRMATION = "delivery-confirmation/1"
RESET = "session-reset/1"
ERASE = "session-erase/1"

# record name (file stem under schemas/json/) -> model, for the generator and the docs
RECORDS: dict[str, type[Record]] = {
    "delivery-confirmation": DeliveryConfirmation,
    "session-reset": SessionReset,
    "session-erase": SessionErase,
    "session-erasure": SessionErasure,
    "transcript-entry": TranscriptEntry,
    "diagnostic": Diagnostic,
    "input-position": InputPosition,
}

__all__ = [
    "AGENT_ID_PATTERN",
    "CONFIRMATION",
    "ERASE",
    "RESET",
    "AgentId",
    "DeliveryConfirmation",
    "Diagnostic",
    "DiagnosticLevel",
    "InputPosition",
    "InputRecord",
    "Job",
    "JobMode",
    "MAX_TIMESTAMP",
    "MIN_TIMESTAMP",
    "Media",
    "MediaRef",
    "Native",
    "Origin",
    "OriginKind",
    "Payload",
    "PeerKind",
    "PostedBy",
    "PostedByKind",
    "RECORDS",
    "Receipt",
    "Record",
    "Route",
    "SessionErase",
    "SessionErasure",
    "SessionReset",
    "Subagent",
    "TIMESTAMP_RANGE",
    "Timestamp",
    "TranscriptEntry",
    "Turn",
]
