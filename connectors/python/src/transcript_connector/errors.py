"""Every error the connector raises derives from ConnectorError (as connectors/typescript's
errors.ts):

    ConnectorError
    ├── InvalidRecordError   a builder's input breaks the contract; `.field` names the field
    └── PublishError         the publisher cannot deliver (not connected, topic, broker)

A key that names no agent or an unknown DM scope is an InvalidRecordError here: in Python the
canonicaliser raises ValueError, and the builder turns it into the worker's dead-letter reason.
"""

from __future__ import annotations


class ConnectorError(Exception):
    """Root of the connector's errors: catch it to catch them all."""


class InvalidRecordError(ConnectorError, ValueError):
    """A record the worker would dead-letter. `str(error)` is the worker's reason, word for
    word; `field` is its path (`origin.turn`, `payload.media[0].kind`), "" when the reason
    names none (not JSON, oversize)."""

    def __init__(self, field: str, problem: str) -> None:
        self.field = field
        self.problem = problem
        super().__init__(f"{field}: {problem}" if field else problem)


class PublishError(ConnectorError):
    """Publishing failed; `__cause__` holds kafka-python's error when there is one."""


__all__ = ["ConnectorError", "InvalidRecordError", "PublishError"]
