"""Builders of wire records (dicts and bytes) for the unit tests: realistic, overridable."""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime, timedelta
from typing import Any

from schemas import DeliveryConfirmation, SessionReset, parse_input
from workers.core import DEFAULT_DEDUPE_WINDOW, MemoryState, Outcome
from workers.core.outputs import Source
from workers.core.owner import Owner, apply

T0 = "2025-03-01T12:00:00Z"


def confirmation(**overrides: Any) -> dict[str, Any]:
    """A valid delivery-confirmation/1 (a cron result to a Telegram group), as a dict.

    Keyword arguments replace top-level fields; use dotted keys via `set_path` for nesting.
    """
    record: dict[str, Any] = {
        "schema": "delivery-confirmation/1",
        "send_id": "outbound-delivery:d1:0",
        "confirmed_at": T0,
        "agent_id": "ops",
        "session_key": "agent:ops:telegram:group:-100123",
        "route": {"channel": "telegram", "peer_kind": "group", "peer_id": "-100123"},
        "origin": {
            "kind": "automation_result",
            "job": {"id": "job-1", "name": "daily digest", "run_id": "run-1", "mode": "background"},
        },
        "payload": {"text": "Digest: 3 new tickets"},
        "receipt": {"platform_message_ids": ["4711"], "sent_at": T0},
    }
    for key, value in overrides.items():
        set_path(record, key, value)
    return record


def reset(
    session_key: str = "agent:ops:telegram:group:-100123", reset_at: str = T0
) -> dict[str, Any]:
    return {"schema": "session-reset/1", "session_key": session_key, "reset_at": reset_at}


def set_path(record: dict[str, Any], dotted: str, value: Any) -> None:
    """Set (or, with value DELETE, remove) a nested field: set_path(r, "origin.turn", {...})."""
    *parents, last = dotted.split(".")
    node = record
    for part in parents:
        node = node.setdefault(part, {})
    if value is DELETE:
        node.pop(last, None)
    else:
        node[last] = value


DELETE = object()


def with_(record: dict[str, Any], **overrides: Any) -> dict[str, Any]:
    """A deep copy of `record` with dotted-path overrides (`with_(r, **{"origin.kind": …})`)."""
    out = copy.deepcopy(record)
    for key, value in overrides.items():
        set_path(out, key, value)
    return out


def dumps(record: dict[str, Any]) -> bytes:
    return json.dumps(record, ensure_ascii=False).encode()


def parsed(record: dict[str, Any]) -> DeliveryConfirmation | SessionReset:
    """The validated model of a wire dict (fails the test if it is invalid)."""
    result = parse_input(dumps(record))
    assert isinstance(result, DeliveryConfirmation | SessionReset), result
    return result


WRITTEN_AT = datetime(2025, 4, 1, tzinfo=UTC)


def run(
    lines: list[bytes],
    states: MemoryState | None = None,
    *,
    dedupe_window: timedelta = DEFAULT_DEDUPE_WINDOW,
    written_at: datetime = WRITTEN_AT,
) -> list[Outcome]:
    """Wire lines through the one step of the worker, `replay` and `audit` (Owner.handle, then
    apply), as `replay` runs it: no partitions, the clock at `written_at`; `states` is updated
    in place. The worker's partitions and store: test_owner, test_hostile_core."""
    states = MemoryState() if states is None else states
    owner = Owner(None, dedupe_window, lambda: written_at)
    outcomes: list[Outcome] = []
    for number, line in enumerate(lines, 1):
        step = owner.handle(Source("wire", 0, number, None, line), states)
        apply(states, step)
        assert step.decided is not None  # nothing is re-keyed without partitions
        outcomes.append(step.decided)
    return outcomes


def run_records(records: list[dict[str, Any]], **kw: Any) -> list[Outcome]:
    return run([dumps(r) for r in records], **kw)


def kinds(outcomes: list[Outcome]) -> list[str]:
    return [o.kind for o in outcomes]
