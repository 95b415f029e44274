"""Who may erase: the trust boundary of DESIGN 1.2, as one pure rule.

A connector confirms sends and resets chats; it cannot destroy history. An erasure is the
operator's act: `forget` writes `session-erase/1` to `transcript.control`, which only the
operator principal may write. The worker reads partition p of the control topic with input
partition p and, in p's transaction, *forwards* each erase into input partition p with the
header `control.offset` and remembers a ticket (the SHA-256 of its bytes) in the session's
state, under that control offset. A session may hold several tickets at one offset: after a
`repartition` its erases come from another control partition, whose offsets start again at 0,
so two erases of one session can share an offset; each is kept, and spent, by its digest
(`audit` replays every control range of a family before its input, so it holds both too). The
erase takes effect when the forwarded copy comes round on the input: so it has one place in
the session's order, the input partition, which `audit` replays exactly as the worker decided
it. A forwarded copy without its ticket (forged, or sent again) is a dead letter.

On the input topic, an erase is obeyed only:
- as a forwarded copy whose ticket the session holds (and the ticket is then spent), or
- below the partition's cut-over: the input offset from which a worker of format 1.2 took the
  partition over. Every offset below it was decided by a 1.1 worker (which obeyed any erase
  on the input: `forget` published there), so those erases are replayed as they were decided;
  none at or above it ever erases. The cut-over is the partition's committed offset when a
  1.2 worker first processes it, so the worker itself never sees an offset below it: only
  `audit` and checkpoints replay history from before it. No cut-over known (no 1.2 worker has
  processed the partition yet): everything in it is history, decided as before.
"""

from __future__ import annotations

import hashlib
from datetime import datetime
from typing import Any, NamedTuple

from transcript_connector.record_keys import ONLY_ON_CONTROL

CONTROL_OFFSET_HEADER = "control.offset"  # on a forwarded erase: its offset in transcript.control
CONTROL_TAKES_ERASES = "transcript.control takes session-erase/1 records only"
NOT_ITS_PARTITION = ("session-erase/1 on transcript.control must be keyed by its canonical "
                     "session key, in its session's partition (forget does both)")
NO_TICKET = ("a forwarded session-erase/1 without its ticket (not forwarded by the worker, or "
             "forwarded before): " + ONLY_ON_CONTROL)


class Admit(NamedTuple):
    """An erase on the input topic that is obeyed; `ticket`: the control offset to spend."""

    ticket: int | None


def ticket(value: bytes) -> str:
    """What the session remembers of a control record it forwarded: the digest of its bytes."""
    return hashlib.sha256(value).hexdigest()


def control_offset(headers: Any) -> int | None:
    """The `control.offset` header of a record (a forwarded erase), or None."""
    for name, value in headers or ():
        if name == CONTROL_OFFSET_HEADER:
            try:
                text = value.decode("ascii")
            except (AttributeError, UnicodeDecodeError):
                return -1
            return int(text) if text.isdigit() and len(text) <= 19 else -1
    return None


def held_tickets(raw: str | None) -> list[str]:
    """The tickets a session holds at one control offset, as stored: digests joined by `,`
    (one alone before several could be held: the same bytes)."""
    return [] if not raw else raw.split(",")


def with_ticket(raw: str | None, digest: str, keep: bool) -> str | None:
    """The stored tickets at one offset after keeping (or spending) `digest`: one occurrence
    spent, never another's; None when none is left (the key is deleted)."""
    held = held_tickets(raw)
    if keep:
        held.append(digest)
    elif digest in held:
        held.remove(digest)
    return ",".join(held) or None


def admit_erase(offset: int, value: bytes, at: int | None, held: str | None,
                cutover: int | None) -> Admit | str:
    """Whether an erase read from the input topic at `offset` is obeyed, or the dead-letter
    reason. `at`: its `control_offset` header; `held`: the tickets the session holds at that
    control offset, as stored (None: none); `cutover`: the partition's cut-over (None: not
    known)."""
    if at is not None and at >= 0 and ticket(value) in held_tickets(held):
        return Admit(at)
    if cutover is None or offset < cutover:
        return Admit(None)  # history, decided by a 1.1 worker: as it was
    return NO_TICKET if at is not None else ONLY_ON_CONTROL


def clamped(erased_at: datetime, now: datetime) -> datetime:
    """An operator's erase counts as made no later than the worker's clock: a time ahead
    would turn every send confirmed until then into erased history (DESIGN 1.2)."""
    return now if erased_at > now else erased_at


__all__ = [
    "CONTROL_OFFSET_HEADER",
    "CONTROL_TAKES_ERASES",
    "NOT_ITS_PARTITION",
    "NO_TICKET",
    "ONLY_ON_CONTROL",
    "Admit",
    "admit_erase",
    "clamped",
    "control_offset",
    "held_tickets",
    "ticket",
    "with_ticket",
]
