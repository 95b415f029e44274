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
    depends on the count; the session table's changelog is partitioned like the input).

    One metadata request naming the seven topics (a consumer's first lookup asks for every
    topic, and waits out the retry backoff after its bootstrap's: 0.1 s of each start)."""
    from kafka.admin import KafkaAdminClient
    from kafka.errors import KafkaError

    changelog = changelog_topic(ks.topic_prefix, ws.app_id, SESSIONS)
    names = (*(ks.topic(n) for n in (CONFIRMATIONS, CONTROL, ENTRIES, DIAGNOSTICS, DLQ,
                                     ERASURES)), changelog)
    try:
        admin = KafkaAdminClient(**ks.kafka_python_kwargs(), request_timeout_ms=30000,
                                 client_id="transcript-owner-topic-check")
    except KafkaError as exc:
        return f"cannot reach Kafka at {ks.bootstrap}: {exc}"
    counts = {}
    try:
        try:
            described = {t.get("name"): t for t in admin.describe_topics(list(names))}
        except KafkaError as exc:
            return f"cannot describe the topics at {ks.bootstrap}: {type(exc).__name__}: {exc}"
        for name in names:
            topic = described.get(name) or {}
            parts = [] if topic.get("error_code") else topic.get("partitions") or []
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
        admin.close()
    return counts
