"""Content fingerprint of a confirmation, to tell a retry from a different send (Rule 3).

"Content" is what an entry would hold (DESIGN rule 3): who sent it where (agent_id, the
canonical session key, the destination agent), the text, the media as (kind, name), and the
canonical origin (its keys in canonical form). Not the receipt, `confirmed_at`, media URLs or
mime types, nor channel-native items: a connector's retry may carry a re-signed URL, an added
mime type, a new receipt, a new time or another spelling of a key for the same visible send.
"""

from __future__ import annotations

import hashlib

import msgspec

from schemas import DeliveryConfirmation

FINGERPRINT_HEX_CHARS = 32  # 128 bits: ample to tell two sends of one send_id apart
# The canonical JSON is pydantic-core's `to_json` of the tuple (as the stored fingerprints were
# made); msgspec writes the same bytes for strings, lists and None, in a third of the time (a
# test compares the two over every code point).
_JSON = msgspec.json.Encoder().encode


def fingerprint(
    record: DeliveryConfirmation,
    session_key: str,
    turn_key: str | None = None,
    job_key: str | None = None,
) -> str:
    """sha256 (hex, shortened) of the canonical JSON of the record's content.

    `turn_key` and `job_key` are the canonical forms of origin.turn.session_key and
    origin.job.session_key (None where absent).
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


__all__ = ["FINGERPRINT_HEX_CHARS", "fingerprint"]
