"""A departed owner's open transaction, ended by the new owner of its partitions.

Without this, the new owner of a killed worker's partitions waits for that worker's open
transaction to time out (TRANSCRIPT_TRANSACTION_TIMEOUT_S) and for the broker's check that
aborts it (transaction.abort.timed.out.transaction.cleanup.interval.ms, 10 s by default):
up to 20 s in which its chats get no entries. The decision is workers.core.fencing.departed;
this is the shell: ListTransactions (KIP-664: the ids with a transaction open, the group's kept),
DescribeGroups for the live members, and, for each departed id, one
InitProducerId under that id, which bumps its epoch and aborts the transaction, as that
worker's own restart would. A zombie woken later finds its producer fenced and exits (70).

Cost: one ListTransactions per broker at each exactly-once assignment (and a DescribeGroups
when it finds a transaction of another worker open), plus an InitProducerId and the abort's
markers per departed id. It needs Describe and Write on the group's transactional ids
(the worker's own ACLs cover `<group>-` as a prefix); refused, or failing, it is skipped with a
warning, and the new owner waits for the transaction timeout as before.
"""

from __future__ import annotations

import logging
import time

from workers.core.fencing import departed
from workers.settings import KafkaSettings
from workers.stream import group_view

log = logging.getLogger("transcript_owner.fencing")


def end_departed(ks: KafkaSettings, group: str, own: str) -> list[str]:
    """End every transaction a departed worker of `group` left open (blocking: the takeover
    runs it in an executor, before it waits for the last owners' transactions). Returns the
    transactional ids fenced; never raises."""
    from kafka.admin import KafkaAdminClient

    began = time.monotonic()
    try:
        admin = KafkaAdminClient(**ks.kafka_python_kwargs(), client_id=f"{group}-fencing",
                                 request_timeout_ms=10_000)
    except Exception as exc:  # noqa: BLE001  (skipped: the transaction timeout still ends it)
        log.warning("could not look for departed workers' transactions (%s)",
                    type(exc).__name__)
        return []
    try:
        # filtered here, not by the broker's pattern (ListTransactions v2: Kafka 4.1 and later)
        listed = admin.list_transactions(state_filters=["Ongoing"])
        ids = sorted({t.transactional_id for found in listed.values() for t in found
                      if t.transactional_id.startswith(f"{group}-")} - {own})
        if not ids:
            return []
        view = group_view.describe(admin, group)
        if view.state != "Stable":  # members are joining or leaving: ask again next time
            return []
        gone = departed(ids, view.members, own, group)
    except Exception as exc:  # noqa: BLE001
        log.warning("could not look for departed workers' transactions (%s: %s); waiting for "
                    "them to time out", type(exc).__name__, exc)
        return []
    finally:
        admin.close()
    fenced = [tid for tid in gone if _fence(ks, tid)]
    if fenced:
        log.info("ended the open transactions of departed workers %s in %.2fs", fenced,
                 time.monotonic() - began)
    return fenced


def _fence(ks: KafkaSettings, transactional_id: str) -> bool:
    """InitProducerId under `transactional_id`: the broker aborts its open transaction and
    answers once the abort is complete."""
    from kafka import KafkaProducer

    producer = None
    try:
        producer = KafkaProducer(**ks.kafka_python_kwargs(), transactional_id=transactional_id,
                                 client_id=f"{transactional_id}-fence", max_block_ms=30_000)
        producer.init_transactions()
        return True
    except Exception as exc:  # noqa: BLE001
        log.warning("could not end the open transaction of departed worker %s (%s: %s); "
                    "waiting for it to time out", transactional_id, type(exc).__name__, exc)
        return False
    finally:
        if producer is not None:
            producer.close(timeout=5)
