"""transcript-owner's contract for a Python gateway: canonical session keys, the partitioner,
the records and the worker's own parser, typed builders validated by that parser, and an
asyncio publisher. The worker imports the contract's modules too: one implementation on both
sides of the topic. (The publisher, on kafka-python, is loaded only by whoever imports it.)"""

from transcript_connector.builders import (
    BuiltRecord,
    build_confirmation,
    build_reset,
    record_key,
)
from transcript_connector.errors import ConnectorError, InvalidRecordError, PublishError
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
    "BuiltRecord",
    "ConfirmationPublisher",
    "ConnectorError",
    "DEFAULT_ACCOUNT_ID",
    "DM_SCOPES",
    "Delivery",
    "DmScope",
    "InvalidRecordError",
    "PublishError",
    "PublisherOptions",
    "RouteLike",
    "Transaction",
    "build_confirmation",
    "build_reset",
    "canonical_session_key",
    "partition_for",
    "publisher_options_from_env",
    "record_key",
    "session_key_for_route",
]

_PUBLISHER = frozenset({"ConfirmationPublisher", "Delivery", "PublisherOptions", "Transaction",
                        "publisher_options_from_env"})


def __getattr__(name: str) -> object:
    """The publisher's names, imported on first use: the worker imports this package for the
    contract alone and runs its own producers, so it never loads the publisher's."""
    if name in _PUBLISHER:
        from transcript_connector import publisher

        return getattr(publisher, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
