"""The pure core: canonical session keys and the decision function. No I/O, no clock.

Connectors and inbound producers build session keys with `session_key_for_route` and
normalise given keys with `canonical_session_key`: the same code the worker uses, so the
two directions agree by construction. The worker, replay and audit fold `decide` (via
`step`/`fold`) over the input.
"""

from workers.core.decide import (
    DEFAULT_DEDUPE_WINDOW,
    ENTRY_ID_NAMESPACE,
    decide,
    decide_keyed,
    entry_id,
    is_native_only,
    posted_by,
    session_key_of,
)
from workers.core.fingerprint import fingerprint
from workers.core.fold import States, fold, step
from workers.core.outcomes import OUTCOME_KINDS, Outcome, OutcomeKind, dead_letter
from workers.core.seen import Seen, SeenMap
from workers.core.session_keys import (
    DM_SCOPES,
    DmScope,
    RouteLike,
    canonical_session_key,
    session_key_for_route,
)
from workers.core.state import EMPTY_STATE, SessionState

__all__ = [
    "DEFAULT_DEDUPE_WINDOW",
    "DM_SCOPES",
    "EMPTY_STATE",
    "ENTRY_ID_NAMESPACE",
    "OUTCOME_KINDS",
    "DmScope",
    "Outcome",
    "OutcomeKind",
    "RouteLike",
    "Seen",
    "SeenMap",
    "SessionState",
    "States",
    "canonical_session_key",
    "dead_letter",
    "decide",
    "decide_keyed",
    "entry_id",
    "fingerprint",
    "fold",
    "is_native_only",
    "posted_by",
    "session_key_for_route",
    "session_key_of",
    "step",
]
