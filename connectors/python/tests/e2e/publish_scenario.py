"""End to end on the real broker, run with the connector's own virtualenv by
tests/integration/test_python_connector.py (beside a running worker): the demo scenario
(workers/scenario.py, passed as JSON) built with the builders and published through
ConfirmationPublisher, plain and in transactions (one aborted, one committed). Writes what
was published (published.jsonl) and what was aborted (aborted.jsonl) to E2E_OUT; the worker's
suite compares the worker's output with `replay` of exactly the published bytes.

Environment: KAFKA_BOOTSTRAP, TRANSCRIPT_TOPIC_PREFIX (the test's topics), E2E_SCENARIO (the
scenario as JSON), E2E_OUT (a directory).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import uuid
from dataclasses import asdict
from pathlib import Path
from typing import Any

from transcript_connector import (
    BuiltRecord,
    ConfirmationPublisher,
    Delivery,
    InvalidRecordError,
    build_confirmation,
    build_reset,
)


class ChannelDidNotConfirm(Exception):
    """The gateway learns, inside the transaction, that the send was not shown after all."""


def build(value: str) -> BuiltRecord:
    """A scenario step's record, through the typed builders (as a gateway would build it)."""
    fields: dict[str, Any] = json.loads(value)
    schema = fields.pop("schema")
    return build_reset(**fields) if schema == "session-reset/1" else build_confirmation(**fields)


def refusal(value: str) -> str:
    """The field the builders name for a step the worker dead-letters ("" when none)."""
    try:
        BuiltRecord(value.encode())
    except InvalidRecordError as exc:
        return exc.field
    raise AssertionError("a dead-letter step was accepted")


def lines(pairs: list[tuple[BuiltRecord, Delivery]]) -> str:
    return "".join(json.dumps({**asdict(d), "value": r.value.decode()}) + "\n" for r, d in pairs)


async def main() -> None:
    steps = json.loads(Path(os.environ["E2E_SCENARIO"]).read_text(encoding="utf-8"))
    out = Path(os.environ["E2E_OUT"])
    records = [build(s["value"]) for s in steps if s["expect"] != "dead_letter"]
    refused = [refusal(s["value"]) for s in steps if s["expect"] == "dead_letter"]
    assert refused == ["", "confirmed_at"], refused  # not JSON; no confirmed_at

    first_reset = next(i for i, r in enumerate(records) if r.record.schema_ == "session-reset/1")
    ghost_fields = json.loads(records[0].value)
    del ghost_fields["schema"]
    ghost = build_confirmation(**{**ghost_fields, "send_id": "aborted-ghost",
                                  "payload": {"text": "this was never shown"}})

    published: list[tuple[BuiltRecord, Delivery]] = []
    aborted: list[tuple[BuiltRecord, Delivery]] = []
    plain = ConfirmationPublisher.from_env(os.environ, client_id="e2e-plain")
    txn = ConfirmationPublisher.from_env(os.environ, client_id="e2e-txn",
                                         transactional_id=f"e2e-{uuid.uuid4()}")
    async with plain, txn:
        # before the reset: one by one (the connector's retry of step 1 included)
        for record in records[:first_reset]:
            published.append((record, await plain.publish(record)))
        # an aborted transaction: never confirmed, so the worker gives it no outcome
        try:
            async with txn.transaction() as tx:
                aborted.append((ghost, await tx.publish(ghost)))
                raise ChannelDidNotConfirm
        except ChannelDidNotConfirm:
            pass
        # the reset and everything after it in one committed transaction
        rest = records[first_reset:]
        async with txn.transaction() as tx:
            published.extend(zip(rest, await tx.publish_all(rest), strict=True))

    (out / "published.jsonl").write_text(lines(published), encoding="utf-8")
    (out / "aborted.jsonl").write_text(lines(aborted), encoding="utf-8")
    print(f"published {len(published)}, aborted {len(aborted)}", file=sys.stderr)


if __name__ == "__main__":
    asyncio.run(main())
