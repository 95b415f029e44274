"""Shared inputs of the connector's suite: a valid confirmation's keyword arguments."""

from __future__ import annotations

from typing import Any

import pytest


@pytest.fixture
def base() -> dict[str, Any]:
    """build_confirmation's arguments for a message-tool send to a Telegram DM."""
    return {
        "send_id": "s-1",
        "confirmed_at": "2026-05-01T12:00:00+02:00",
        "agent_id": "ops",
        "session_key": "agent:ops:telegram:direct:u1",
        "route": {"channel": "telegram", "peer_kind": "direct", "peer_id": "u1"},
        "origin": {"kind": "message_tool"},
        "payload": {"text": "hello"},
        "receipt": {"platform_message_ids": ["m1"]},
    }
