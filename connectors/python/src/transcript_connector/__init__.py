"""transcript-owner's contract for a Python gateway: canonical session keys, the partitioner,
the records and the worker's own parser, typed builders validated by that parser, an asyncio
publisher, and a session reader bound to a position (reply turns). The worker imports the
contract's modules too: one implementation on both sides of the topic. (The publisher and the
reader, on kafka-python, are loaded only by whoever uses them.)"""

from transcript_connector.builders import (
    BuiltRecord,
    build_confirmation,
    build_reset,
    record_key,
)
from transcript_connector.errors import (
    ConnectorError,
    InvalidRecordError,
    PublishError,
    ReadError,
    StaleReadError,
)
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
    "BlockingSessionReader",
    "BuiltRecord",
    "ConfirmationPublisher",
    "ConnectorError",
    "DEFAULT_ACCOUNT_ID",
    "DM_SCOPES",
    "Delivery",
    "DmScope",
    "InvalidRecordError",
    "LATEST",
    "At",
    "PublishError",
    "PublisherOptions",
    "ReadEntry",
    "ReadError",
    "ReaderOptions",
    "RouteLike",
    "SessionRead",
    "SessionReader",
    "StaleReadError",
    "Transaction",
    "build_confirmation",
    "build_reset",
    "canonical_session_key",
    "partition_for",
    "publisher_options_from_env",
    "reader_options_from_env",
    "record_key",
    "session_key_for_route",
]

# name -> the module that defines it, imported on first use
_LAZY = {
    **dict.fromkeys(("ConfirmationPublisher", "Delivery", "PublisherOptions", "Transaction",
                     "publisher_options_from_env"), "publisher"),
    **dict.fromkeys(("BlockingSessionReader", "ReaderOptions", "reader_options_from_env"),
                    "reader"),
    "SessionReader": "reader_async",
    **dict.fromkeys(("LATEST", "At", "ReadEntry", "SessionRead"), "reader_plan"),
}


def __getattr__(name: str) -> object:
    """The publisher's and the reader's names, imported on first use: the worker imports this
    package for the contract alone and runs its own clients, so it never loads theirs."""
    module = _LAZY.get(name)
    if module is not None:
        import importlib

        return getattr(importlib.import_module(f"transcript_connector.{module}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
