"""The content fingerprint is stored in every session's state: it must never change.

A different value for the same content would turn every retry of an already-seen send into a
`conflicting_duplicate` after an upgrade. Pinned values, and a reference implementation (the
plain form of the rules in workers/core/fingerprint.py) it must agree with.
"""

from __future__ import annotations

import hashlib
import json
import types
from typing import Any, Union, get_args, get_origin

import pydantic_core
import pytest
from hypothesis import given
from pydantic import BaseModel

from schemas import DeliveryConfirmation
from schemas.records import Origin
from tests.unit.test_properties import confirmations
from tests.unit.wire import confirmation, parsed, with_
from workers.core import fingerprint, session_key_of

BASE = confirmation()
TURN = {"kind": "turn_reply", "turn": {"session_key": "agent:ops:main", "turn_id": "t1"}}
SUBAGENT = {"run_id": "r1", "agent_id": "scout", "label": None}
IN_CHAT_JOB = {"id": "j", "mode": "in_chat", "session_key": "agent:ops:main", "name": None}
MEDIA = {"kind": "image", "name": "a.png", "url": "https://x/y?t=1", "mime": "image/png"}
NATIVE = {"title": "t", "kind": "embed", "fields": {"b": 1, "a": [2, {"d": None, "c": "é"}]}}
CASES: dict[str, tuple[dict[str, Any], str]] = {
    "job": (BASE, "e31eae0405f4267627c160457cace4b9"),
    "turn": (with_(BASE, origin=TURN), "cd3db234839db8d772dbd190a733d6c8"),
    "subagent": (
        with_(BASE, origin={"kind": "subagent_announcement", "subagent": SUBAGENT}),
        "f27c18555e0bb2d1b456f6c2aa3b986c",
    ),
    "in_chat_job": (
        with_(BASE, **{"origin.job": IN_CHAT_JOB}),
        "9b02a8ca56450c1992d46c8552eb79e6",
    ),
    "media": (
        with_(BASE, payload={"text": "", "media": [MEDIA]}),
        "090a444ccfc661b910eb4b5d00980c2e",
    ),
    "native": (with_(BASE, payload={"native": [NATIVE]}), "211df2479c3ae33560c0f520128d572a"),
    "dest_self": (with_(BASE, destination_agent_id="ops"), "e31eae0405f4267627c160457cace4b9"),
    "dest_other": (with_(BASE, destination_agent_id="sales"), "4a081e9c932d69b0f27c9f11cabfe50e"),
    "unicode": (
        with_(BASE, **{"payload.text": 'größe 東京 👍 "q" \\ \n\t\u0001'}),
        "96eb8854f1ea72238763ae664dc10103",
    ),
}


def reference(record: DeliveryConfirmation, session_key: str) -> str:
    """The fingerprint as its module doc defines it, written the plain way."""
    dest = None if record.destination_agent_id == record.agent_id else record.destination_agent_id
    payload = record.payload.model_dump(mode="json", exclude_defaults=True)
    payload_json = (
        pydantic_core.to_json(json.loads(json.dumps(payload, sort_keys=True)))
        if record.payload.native
        else record.payload.__pydantic_serializer__.to_json(record.payload, exclude_defaults=True)
    )
    h = hashlib.sha256(pydantic_core.to_json((record.agent_id, session_key, dest)))
    h.update(b"\x00")
    h.update(record.origin.__pydantic_serializer__.to_json(record.origin, exclude_defaults=True))
    h.update(b"\x00")
    h.update(payload_json)
    return h.hexdigest()[:32]


@pytest.mark.parametrize("name", CASES)
def test_pinned_fingerprints(name: str) -> None:
    wire, expected = CASES[name]
    record = parsed(wire)
    assert isinstance(record, DeliveryConfirmation)
    key = session_key_of(record)
    assert isinstance(key, str)
    assert fingerprint(record, key) == reference(record, key) == expected


@given(confirmations())
def test_fingerprint_matches_the_reference(wire: dict[str, Any]) -> None:
    record = parsed(wire)
    assert isinstance(record, DeliveryConfirmation)
    key = session_key_of(record)
    assert isinstance(key, str)
    assert fingerprint(record, key) == reference(record, key)


def _models(model: type[BaseModel]) -> list[type[BaseModel]]:
    out = [model]
    for field in model.model_fields.values():
        for arg in (field.annotation, *get_args(field.annotation)):
            if isinstance(arg, type) and issubclass(arg, BaseModel) and arg not in out:
                out += _models(arg)
    return out


def _nullable(annotation: Any) -> bool:
    return get_origin(annotation) in (Union, types.UnionType) and type(None) in get_args(annotation)


@pytest.mark.parametrize("model", _models(Origin), ids=lambda m: m.__name__)
def test_origin_exclude_none_is_exclude_defaults(model: type[BaseModel]) -> None:
    """fingerprint serialises Origin with exclude_none, which is exclude_defaults only while
    every field with a default defaults to None and no required field is nullable."""
    for name, field in model.model_fields.items():
        if field.is_required():
            assert not _nullable(field.annotation), f"{model.__name__}.{name}"
        else:
            assert field.default is None, f"{model.__name__}.{name}"
