"""Folding the decision over a stream of records: the worker's step, replay, and audit.

The caller owns the state store (a dict for replay, the faust table for the worker) and
any I/O; this module only looks a session up, decides, and stores the new state.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, MutableMapping
from datetime import datetime, timedelta

from schemas import Invalid
from schemas.records import InputRecord
from workers.core.decide import DEFAULT_DEDUPE_WINDOW, decide_keyed, session_key_of
from workers.core.outcomes import Outcome, dead_letter
from workers.core.state import EMPTY_STATE, SessionState

States = MutableMapping[str, SessionState]


def step(
    states: States,
    item: InputRecord | Invalid,
    *,
    written_at: datetime,
    dedupe_window: timedelta = DEFAULT_DEDUPE_WINDOW,
) -> Outcome:
    """Decide one parsed input (or the Invalid parse_input returned) against `states`.

    The session's state is replaced only when the decision changed it, so a store that
    writes through (the faust table's changelog) is not written for duplicates.
    """
    if isinstance(item, Invalid):
        return dead_letter(item.reason)
    key = session_key_of(item)
    if isinstance(key, Invalid):
        return dead_letter(key.reason, send_id=getattr(item, "send_id", None))
    state = states.get(key, EMPTY_STATE)
    new, outcome = decide_keyed(
        state, item, key, written_at=written_at, dedupe_window=dedupe_window
    )
    if new is not state:
        states[key] = new
    return outcome


def fold(
    states: States,
    items: Iterable[InputRecord | Invalid],
    *,
    written_at: datetime,
    dedupe_window: timedelta = DEFAULT_DEDUPE_WINDOW,
) -> Iterator[Outcome]:
    """One outcome per item, in order, carrying state in `states` (updated as it goes)."""
    for item in items:
        yield step(states, item, written_at=written_at, dedupe_window=dedupe_window)


__all__ = ["States", "fold", "step"]
