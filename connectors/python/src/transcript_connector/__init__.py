"""transcript-owner's contract for a Python gateway: canonical session keys, the partitioner,
the records and the worker's own parser. The worker imports these modules too: one
implementation on both sides of the topic."""

from transcript_connector.partitioning import partition_for
from transcript_connector.session_keys import (
    DEFAULT_ACCOUNT_ID,
    DM_SCOPES,
    DmScope,
    RouteLike,
    canonical_session_key,
    session_key_for_route,
)

__all__ = [
    "DEFAULT_ACCOUNT_ID",
    "DM_SCOPES",
    "DmScope",
    "RouteLike",
    "canonical_session_key",
    "partition_for",
    "session_key_for_route",
]
