"""Every error the connector raises derives from ConnectorError (as connectors/typescript's
errors.ts):

    ConnectorError
    ├── InvalidRecordError   a builder's input breaks the contract; `.field` names the field
    ├── PublishError         the publisher cannot deliver (not connected, topic, broker)
    ├── ReadError            a reader cannot read (no such database, broker, credentials)
    └── StaleReadError       a bound read did not reach its position by its deadline

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


class ReadError(ConnectorError):
    """A session reader cannot read at all: the source is missing, unreadable or refused (the
    message names it); `__cause__` holds the client's error when there is one."""


class StaleReadError(ConnectorError):
    """A read bound to a position (DESIGN 1.3) did not reach it by its deadline: what the
    reader holds may lack an entry, so it returns nothing. `partition` is the entries (and
    input) partition, `reached` the input offset the reader's position covers, `needed` the
    one the bound asks for; `age_s` how long ago the worker wrote the last position the reader
    saw (None: none seen), i.e. how long the position has not moved; `reason` a sentence, when
    something other than waiting stands in the way (a repartition in progress)."""

    def __init__(self, partition: int, reached: int, needed: int, age_s: float | None,
                 reason: str | None = None) -> None:
        self.partition, self.reached, self.needed = partition, reached, needed
        self.age_s, self.reason = age_s, reason
        age = ("the worker has written no position there" if age_s is None
               else f"the worker's last position there is {age_s:.1f}s old")
        super().__init__(
            f"stale read: partition {partition} reached input offset {reached}, needed "
            f"{needed}; {age}" + (f"; {reason}" if reason else ""))


__all__ = ["ConnectorError", "InvalidRecordError", "PublishError", "ReadError",
           "StaleReadError"]
