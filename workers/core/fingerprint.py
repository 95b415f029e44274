"""Content fingerprint of a confirmation, to tell a retry from a different send (Rule 3).

"Content" is what an entry would hold (DESIGN rule 3): who sent it where (agent_id, the
canonical session key, the destination agent), the text, the media as (kind, name), and the
canonical origin (its keys in canonical form). Not the receipt, `confirmed_at`, media URLs or
mime types, nor channel-native items: a connector's retry may carry a re-signed URL, an added
mime type, a new receipt, a new time or another spelling of a key for the same visible send.

An origin key no rule compares may name no agent (`agent:<not an id>:…`, on a send that is not
a turn reply, or of a background job): it is folded as a canonical key is (`origin_key`), so
its spellings are one content too.
"""

from __future__ import annotations

import hashlib

import msgspec
from transcript_connector.session_keys import canonical_session_key
from transcript_connector.unicode_text import py_lower, py_strip

from schemas import DeliveryConfirmation

FINGERPRINT_HEX_CHARS = 32  # 128 bits: ample to tell two sends of one send_id apart
# The canonical JSON is pydantic-core's `to_json` of the tuple (as the stored fingerprints were
# made); msgspec writes the same bytes for strings, lists and None, in a third of the time (a
# test compares the two over every code point).
_JSON = msgspec.json.Encoder().encode
_ANY_AGENT = "a"  # an agent id, standing in for a segment that is none while the rest is folded


def origin_key(raw: str, agent_id: str) -> str:
    """An origin key as the fingerprint holds it: its canonical form, or, for a key whose agent
    segment is no agent id, the same folding with that segment trimmed and lower-cased.

    A canonical key is returned unchanged (stored fingerprints stay valid), and so is a key
    that names no agent and is already folded (`agent:bad!:main`).
    """
    try:
        return canonical_session_key(raw, agent_id)
    except ValueError:  # `agent:<segment>:<rest>`, the segment no agent id
        _, segment, *rest = raw.split(":", 2)
        folded = canonical_session_key(":".join(["agent", _ANY_AGENT, *rest]), _ANY_AGENT)
        return f"agent:{py_lower(py_strip(segment))}:{folded.removeprefix(f'agent:{_ANY_AGENT}:')}"


def fingerprint(
    record: DeliveryConfirmation,
    session_key: str,
    turn_key: str | None = None,
    job_key: str | None = None,
) -> str:
    """sha256 (hex, shortened) of the canonical JSON of the record's content.

    `turn_key` and `job_key` are origin.turn.session_key and origin.job.session_key as
    `origin_key` gives them (None where absent).
    """
    dest = record.destination_agent_id
    # "bound to the sender" is said two ways (absent, or the sender's id): one content.
    dest = None if dest == record.agent_id else dest
    origin, payload = record.origin, record.payload
    turn, job, sub = origin.turn, origin.job, origin.subagent
    content = (
        record.agent_id,
        session_key,
        dest,
        payload.text or "",
        [(m.kind, m.name) for m in payload.media],
        origin.kind,
        None if turn is None else (turn_key, turn.turn_id),
        None if job is None else (job.id, job.name, job.run_id, job.mode, job_key),
        None if sub is None else (sub.run_id, sub.agent_id, sub.label),
    )
    return hashlib.sha256(_JSON(content)).hexdigest()[:FINGERPRINT_HEX_CHARS]


__all__ = ["FINGERPRINT_HEX_CHARS", "fingerprint", "origin_key"]
