"""The session state a step reads and writes, and the decision over it.

The worker, `replay` and `audit` run one step (`workers/core/owner.py`: `Owner.handle`, then
`apply`) and differ only in the store behind `StateStore`: the worker's RocksDB partition
stores (workers/stream/session_store.py), or `MemoryState` here (`replay`, `audit`, tests).
Nothing raises out of a decision but a failure of the store itself (`StoreFailure`): a record
whose handling fails for any other reason, including a stored state that cannot be decoded, is
a dead letter whose reason is the error's class and message (DESIGN rule 1).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Protocol, cast

from transcript_connector.records import CONFIRMATION, DeliveryConfirmation, InputRecord

from workers.core.control import with_ticket
from workers.core.decide import DEFAULT_DEDUPE_WINDOW, Decision, decide
from workers.core.errors import OwnerError
from workers.core.outcomes import HANDLING_FAILED, Outcome, dead_letter
from workers.core.state import EMPTY_HEAD, Seen, SessionHead, UnreadableState

_MAX_REASON_CHARS = 300


class StoreFailure(OwnerError):
    """The state store itself failed (I/O, a closed database): infrastructure, not a record.
    The only exception a step lets through: the worker stops rather than guess."""


class StateView(Protocol):
    """Read access to the session state a step needs."""

    def head(self, key: str) -> SessionHead: ...

    def seen(self, key: str, send_id: str) -> Seen | None: ...

    def ticket(self, key: str, control_offset: int) -> str | None:
        """The ticket of an erase forwarded from transcript.control (workers/core/control.py)."""
        ...

    def cutover(self) -> int | None:
        """The current partition's erase cut-over (workers/core/control.py); None: unknown."""
        ...


class StateStore(StateView, Protocol):
    """A view a step's changes are stored into (`workers.core.owner.apply`)."""

    def erase(self, key: str) -> None:
        """Forget the session's stored state: its head and every remembered send_id."""
        ...

    def remember(self, key: str, head: SessionHead | None, seen: tuple[str, Seen] | None
                 ) -> None:
        """Store a new head (None: unchanged) and a send_id with what to remember of it."""
        ...

    def hold(self, key: str, control_offset: int, digest: str, keep: bool) -> None:
        """Keep a forwarded erase's ticket (`keep`), or spend it: one of those held at the
        offset, by its digest (workers/core/control.py)."""
        ...


@dataclass
class MemoryState:
    """Session state in dicts: replay's and audit's store, and the tests'."""

    heads: dict[str, SessionHead] = field(default_factory=dict)
    seens: dict[tuple[str, str], Seen] = field(default_factory=dict)
    tickets: dict[tuple[str, int], str] = field(default_factory=dict)  # as stored (control.py)
    partition_cutover: int | None = None  # one partition's state (audit), or none (replay)

    def head(self, key: str) -> SessionHead:
        return self.heads.get(key, EMPTY_HEAD)

    def seen(self, key: str, send_id: str) -> Seen | None:
        return self.seens.get((key, send_id))

    def ticket(self, key: str, control_offset: int) -> str | None:
        return self.tickets.get((key, control_offset))

    def cutover(self) -> int | None:
        return self.partition_cutover

    def hold(self, key: str, control_offset: int, digest: str, keep: bool) -> None:
        """Keep a forwarded erase's ticket, or spend it (workers/core/control.py)."""
        held = with_ticket(self.tickets.get((key, control_offset)), digest, keep)
        if held is None:
            self.tickets.pop((key, control_offset), None)
        else:
            self.tickets[(key, control_offset)] = held

    def erase(self, key: str) -> None:
        """Forget the session's state (`forget`): its head and every remembered send_id. The
        step then stores the head the erasure leaves (`remember`)."""
        self.heads.pop(key, None)
        for k in [k for k in self.seens if k[0] == key]:
            del self.seens[k]

    def remember(self, key: str, head: SessionHead | None, seen: tuple[str, Seen] | None) -> None:
        """Store a step's changes: a new head, and a send_id with what to remember of it."""
        if head is not None:
            self.heads[key] = head
        if seen is not None:
            self.seens[(key, seen[0])] = seen[1]


def decide_in(
    view: StateView,
    record: InputRecord,
    key: str,
    *,
    now: datetime,
    written_at: datetime,
    dedupe_window: timedelta = DEFAULT_DEDUPE_WINDOW,
) -> tuple[SessionHead, Decision]:
    """(the head read, the decision) for `record` of session `key`; never raises but
    StoreFailure. A failed decision leaves the head as it was and remembers nothing."""
    head = EMPTY_HEAD
    send_id = cast(DeliveryConfirmation, record).send_id if record.schema_ == CONFIRMATION \
        else None
    try:
        head = view.head(key)
        prior = None if send_id is None else view.seen(key, send_id)
        decision = decide(
            head, prior, record, key, now=now, written_at=written_at, dedupe_window=dedupe_window
        )
    except StoreFailure:
        raise
    except UnreadableState as unreadable:  # a name of its own: compiled, a name has one type
        reason = f"stored state of the session is unreadable: {unreadable}"
        return head, Decision(head, None, dead_letter(_bounded(reason), key, send_id=send_id))
    except Exception as exc:  # noqa: BLE001  (no record may stop the worker: Rule 1)
        return head, Decision(head, None, failed(exc, key, send_id))
    return head, decision


def failed(exc: BaseException, key: str | None = None, send_id: str | None = None) -> Outcome:
    """The dead letter of a record whose handling raised `exc`."""
    return dead_letter(_bounded(f"{HANDLING_FAILED}: {type(exc).__name__}: {exc}"), key,
                       send_id=send_id)


def _bounded(reason: str) -> str:
    return reason if len(reason) <= _MAX_REASON_CHARS else reason[: _MAX_REASON_CHARS - 1] + "…"


__all__ = ["MemoryState", "StateStore", "StateView", "StoreFailure", "decide_in", "failed"]
