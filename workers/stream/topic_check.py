"""Whether the cluster has the topics the worker needs, partitioned as it must read them."""

from __future__ import annotations

from workers.core.outputs import (
    CONFIRMATIONS,
    CONTROL,
    DIAGNOSTICS,
    DLQ,
    ENTRIES,
    ERASURES,
    SESSIONS,
    changelog_topic,
)
from workers.settings import KafkaSettings, WorkerSettings


def check_topics(ks: KafkaSettings, ws: WorkerSettings) -> dict[str, int] | str:
    """Each topic's partition count, or why the worker must refuse to start (co-partitioning
    depends on the count; the session table's changelog is partitioned like the input)."""
    from kafka import KafkaConsumer
    from kafka.errors import KafkaError

    try:
        consumer = KafkaConsumer(**ks.kafka_python_kwargs(), request_timeout_ms=30000,
                                 enable_auto_commit=False)
    except KafkaError as exc:
        return f"cannot reach Kafka at {ks.bootstrap}: {exc}"
    changelog = changelog_topic(ks.topic_prefix, ws.app_id, SESSIONS)
    counts = {}
    try:
        for name in (*(ks.topic(n) for n in (CONFIRMATIONS, CONTROL, ENTRIES, DIAGNOSTICS, DLQ,
                                              ERASURES)),
                     changelog):
            parts = consumer.partitions_for_topic(name)
            if not parts:
                if ks.sasl_username:  # with ACLs, a topic one may not Describe looks absent
                    return (f"topic {name} does not exist, or KAFKA_SASL_USERNAME="
                            f"{ks.sasl_username!r} may not describe it: run `transcript-owner "
                            "topics apply` as an admin (topics.yaml: topics and acls)")
                return f"topic {name} does not exist: run `transcript-owner topics apply`"
            if name in (ks.topic(CONFIRMATIONS), ks.topic(CONTROL), ks.topic(ENTRIES), changelog) \
                    and len(parts) != ws.partitions:
                return (f"topic {name} has {len(parts)} partitions, "
                        f"TRANSCRIPT_PARTITIONS is {ws.partitions}")
            counts[name] = len(parts)
    finally:
        consumer.close()
    return counts
