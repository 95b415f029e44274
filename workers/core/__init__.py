"""The pure core: canonical session keys and the decision function. No I/O, no clock.

Connectors and inbound producers build session keys with `session_key_for_route` and
normalise given keys with `canonical_session_key`: the same code the worker uses, so the
two directions agree by construction. The worker, replay and audit decide every record
through one step: `workers.core.owner` (`Owner.handle`, then `apply`).
"""

from transcript_connector.session_keys import (
    DM_SCOPES,
    DmScope,
    RouteLike,
    canonical_session_key,
    session_key_for_route,
)

from workers.core.decide import (
    CLOCK_SKEW_ALLOWANCE,
    DEFAULT_DEDUPE_WINDOW,
    ENTRY_ID_NAMESPACE,
    Decision,
    decide,
    entry_id,
    is_native_only,
    posted_by,
    session_key_of,
    skewed,
)
from workers.core.errors import OwnerError
from workers.core.fingerprint import fingerprint
from workers.core.outcomes import OUTCOME_KINDS, Outcome, OutcomeKind, dead_letter
from workers.core.state import (
    EMPTY_HEAD,
    UNKNOWN_FINGERPRINT,
    Seen,
    SessionHead,
    UnreadableState,
    decode_v1,
    head_key,
    parse_seen_key,
    seen_key,
)
from workers.core.store import (
    MemoryState,
    StateStore,
    StateView,
    StoreFailure,
    decide_in,
    failed,
)

__all__ = [
    "CLOCK_SKEW_ALLOWANCE",
    "DEFAULT_DEDUPE_WINDOW",
    "DM_SCOPES",
    "EMPTY_HEAD",
    "ENTRY_ID_NAMESPACE",
    "OUTCOME_KINDS",
    "UNKNOWN_FINGERPRINT",
    "Decision",
    "DmScope",
    "MemoryState",
    "Outcome",
    "OutcomeKind",
    "OwnerError",
    "RouteLike",
    "Seen",
    "SessionHead",
    "StateStore",
    "StateView",
    "StoreFailure",
    "UnreadableState",
    "canonical_session_key",
    "dead_letter",
    "decide",
    "decide_in",
    "decode_v1",
    "entry_id",
    "failed",
    "fingerprint",
    "head_key",
    "is_native_only",
    "parse_seen_key",
    "posted_by",
    "seen_key",
    "session_key_for_route",
    "session_key_of",
    "skewed",
]
