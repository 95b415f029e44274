"""Content fingerprint of a confirmation, to tell a retry from a different send (Rule 3).

Covers who sent what where: agent_id, the canonical session key, destination_agent_id,
origin and payload. Not the receipt or confirmed_at: a connector's retry may carry a new
receipt and a new time for the same visible send.

The hashed form is canonical JSON in the contract's field order (fixed by the models,
whatever order the sender used), defaults left out (adding an optional field to the
contract does not change the fingerprint of records that omit it), and the free-form
keys of channel-native items sorted. Serialised by pydantic-core: this runs per record.
"""

from __future__ import annotations

import hashlib
from typing import Any

import pydantic_core

from schemas import DeliveryConfirmation
from schemas.records import Origin, Payload

FINGERPRINT_HEX_CHARS = 32  # 128 bits: ample to tell two sends of one send_id apart

_ORIGIN = Origin.__pydantic_serializer__
_PAYLOAD = Payload.__pydantic_serializer__


def fingerprint(record: DeliveryConfirmation, session_key: str) -> str:
    """sha256 (hex, shortened) of the canonical JSON of the record's content."""
    dest = record.destination_agent_id
    # "bound to the sender" is said two ways (absent, or the sender's id): one content.
    dest = None if dest == record.agent_id else dest
    # JSON never holds a raw NUL, so the parts cannot run together. exclude_none is
    # exclude_defaults for Origin (every field that has a default defaults to None; none is
    # nullable otherwise: tested), without pydantic comparing nested models in Python.
    parts = (
        pydantic_core.to_json((record.agent_id, session_key, dest)),
        _ORIGIN.to_json(record.origin, exclude_none=True),
        _payload_json(record.payload),
    )
    return hashlib.sha256(b"\x00".join(parts)).hexdigest()[:FINGERPRINT_HEX_CHARS]


def _payload_json(payload: Payload) -> bytes:
    if not payload.native:
        return _PAYLOAD.to_json(payload, exclude_defaults=True)
    # Native items keep the sender's key order (they are free-form): sort them.
    return pydantic_core.to_json(_sorted(payload.model_dump(mode="json", exclude_defaults=True)))


def _sorted(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _sorted(value[k]) for k in sorted(value)}
    if isinstance(value, list):
        return [_sorted(v) for v in value]
    return value


__all__ = ["FINGERPRINT_HEX_CHARS", "fingerprint"]
