"""The Python connector on the secured broker (SASL_SSL, SCRAM-SHA-512, ACLs), run with the
connector's own virtualenv by tests/integration/test_secure_python_connector.py: it connects
with nothing but the worker's variables (KAFKA_BOOTSTRAP, KAFKA_SECURITY_PROTOCOL,
KAFKA_SASL_*, KAFKA_SSL_CAFILE, TRANSCRIPT_TOPIC_PREFIX: a principal's env file of
`make kafka-up-secure`) and publishes confirmations made by build_confirmation.

    secure_publish.py transactions   three transactions of one session: two records committed,
                                     one aborted (the gateway learnt the send failed), one
                                     committed; needs E2E_TRANSACTIONAL_ID
    secure_publish.py publish        one record (in a transaction of its own when
                                     E2E_TRANSACTIONAL_ID is set)

Environment besides the connection's: E2E_PEER (the Telegram peer of the session: the test's
own), E2E_TOPIC (another topic than <prefix>delivery.confirmations), E2E_TRANSACTIONAL_ID.

Prints one JSON line on stdout: {"module": the transcript_connector imported, "published":
[...], "aborted": [...]}, each a Delivery with the record's value. When the connector refuses
(ConnectorError, PublishError among them), prints `refused: <class>: <message>` on stderr and
exits 3: what a gateway would log, nothing else.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from dataclasses import asdict
from typing import Any

import transcript_connector
from transcript_connector import (
    BuiltRecord,
    ConfirmationPublisher,
    ConnectorError,
    Delivery,
    build_confirmation,
)

REFUSED = 3


class ChannelDidNotConfirm(Exception):
    """The gateway learns, inside the transaction, that the send was not shown after all."""


def confirmation(peer: str, n: int, send_id: str | None = None) -> BuiltRecord:
    return build_confirmation(
        send_id=send_id or f"sec-{n}",
        confirmed_at=f"2026-05-01T12:{n:02d}:00Z",
        agent_id="ops",
        session_key=f"agent:ops:telegram:direct:{peer}",
        route={"channel": "telegram", "peer_kind": "direct", "peer_id": peer},
        origin={"kind": "message_tool"},
        payload={"text": f"text {n}"},
        receipt={"platform_message_ids": [str(n)]},
    )


def row(record: BuiltRecord, delivery: Delivery) -> dict[str, Any]:
    return {**asdict(delivery), "value": record.value.decode()}


async def transactions(publisher: ConfirmationPublisher, peer: str) -> dict[str, list]:
    """Committed [1, 2], aborted [ghost], committed [3]: one session, so one partition, and
    the worker reaches 3 only by reading past the aborted record."""
    published, aborted = [], []
    first = [confirmation(peer, 1), confirmation(peer, 2)]
    async with publisher.transaction() as tx:
        published += map(row, first, await tx.publish_all(first))
    ghost = confirmation(peer, 9, send_id="sec-aborted-ghost")
    try:
        async with publisher.transaction() as tx:
            aborted.append(row(ghost, await tx.publish(ghost)))
            raise ChannelDidNotConfirm
    except ChannelDidNotConfirm:
        pass
    third = confirmation(peer, 3)
    async with publisher.transaction() as tx:
        published.append(row(third, await tx.publish(third)))
    return {"published": published, "aborted": aborted}


async def main(mode: str) -> dict[str, Any]:
    peer = os.environ.get("E2E_PEER", "sec-peer")
    overrides: dict[str, Any] = {"client_id": f"e2e-secure-{mode}"}
    if os.environ.get("E2E_TOPIC"):
        overrides["topic"] = os.environ["E2E_TOPIC"]
    if os.environ.get("E2E_TRANSACTIONAL_ID"):
        overrides["transactional_id"] = os.environ["E2E_TRANSACTIONAL_ID"]
    async with ConfirmationPublisher.from_env(os.environ, **overrides) as publisher:
        if mode == "transactions":
            return await transactions(publisher, peer)
        record = confirmation(peer, 1)
        return {"published": [row(record, await publisher.publish(record))], "aborted": []}


if __name__ == "__main__":
    if len(sys.argv) != 2 or sys.argv[1] not in ("transactions", "publish"):
        sys.exit(f"usage: {sys.argv[0]} transactions|publish")
    try:
        result = asyncio.run(main(sys.argv[1]))
    except ConnectorError as exc:
        print(f"refused: {type(exc).__name__}: {exc}", file=sys.stderr)
        sys.exit(REFUSED)
    print(json.dumps({"module": transcript_connector.__file__, **result}))
