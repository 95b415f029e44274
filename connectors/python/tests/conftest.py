"""Shared inputs of the connector's suite: a valid confirmation's keyword arguments."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest


def pytest_sessionstart(session: pytest.Session) -> None:
    """The worker's `make compile` builds the partitioner beside its source, and this install
    imports that build: one older than its source would test old code (workers/compiled.py)."""
    import transcript_connector

    package = Path(transcript_connector.__file__).parent
    stale = [so.name for so in sorted(package.glob("*.cpython-*.so"))
             if (py := so.with_name(so.name.split(".", 1)[0] + ".py")).exists()
             and py.stat().st_mtime > so.stat().st_mtime]
    if stale:
        pytest.exit(f"builds older than their sources in {package}: {', '.join(stale)}; run "
                    "`make compile` (or `make uncompile` to test the sources)", returncode=2)


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
