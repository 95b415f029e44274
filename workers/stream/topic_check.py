"""Whether the cluster has the topics the worker needs, partitioned as it must read them, and
no `repartition` is moving them (a move records itself in transcript.layout before it changes
anything: a worker that took partitions then would decide records whose state the move is
copying, and write entries the move's trim deletes)."""

from __future__ import annotations

import logging

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

log = logging.getLogger("transcript_owner.worker")


def check_topics(ks: KafkaSettings, ws: WorkerSettings, moves: MoveGuard | None = None
                 ) -> dict[str, int] | str:
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
    pending = (moves or MoveGuard()).pending(ks)
    return pending if pending is not None else counts


class MoveGuard:
    """Whether a repartition recorded in transcript.layout is not done: read whole when the
    worker starts; at each assignment its end offset is asked (a move begun since adds a
    record), and it is read again only when that moved. One admin client, kept."""

    def __init__(self) -> None:
        self.end: int | None = None  # the layout's end offset when last read (0: none)
        self._admin = None

    def pending(self, ks: KafkaSettings) -> str | None:
        """Why the worker must not take partitions now; None: no move pending. A layout that
        cannot be read is logged, not a reason: a record only an admin can write must not
        stop every worker (blocking: run it off the event loop)."""
        from kafka.errors import KafkaError

        from workers.core.layout import LAYOUT, decode_layout
        from workers.kafka_io import read

        topic = ks.topic(LAYOUT)
        try:
            end = self._end(ks, topic)
            if end == self.end:
                return None  # nothing recorded since it was read: no move pending then
            layout = decode_layout((r.key, r.value) for r in read(ks, topic)) if end else None
        except KafkaError as exc:
            log.warning("%s not read (%s): a repartition in progress would not be seen", topic,
                        type(exc).__name__)
            return None
        if isinstance(layout, str):
            log.warning("%s: %s (written only by `repartition`; ignored)", topic, layout)
            return None
        move = None if layout is None else layout.pending
        if move is None:
            self.end = end
            return None
        return (f"a repartition {move.old} -> {move.new} is in progress ({topic}): complete it "
                f"(`transcript-owner repartition --partitions {move.new}`), then start the "
                f"workers with TRANSCRIPT_PARTITIONS={move.new}")

    def _end(self, ks: KafkaSettings, topic: str) -> int:
        """The layout's end offset (read_committed); 0 when it does not exist (no move yet)."""
        from kafka import IsolationLevel, OffsetSpec, TopicPartition
        from kafka.admin import KafkaAdminClient

        if self._admin is None:
            self._admin = KafkaAdminClient(**ks.kafka_python_kwargs(),
                                           client_id="transcript-owner-layout-check")
        if topic not in self._admin.list_topics():
            return 0
        tp = TopicPartition(topic, 0)
        found = self._admin.list_partition_offsets(
            {tp: OffsetSpec.LATEST}, isolation_level=IsolationLevel.READ_COMMITTED)
        return int(found[tp].offset)

    def close(self) -> None:
        if self._admin is not None:
            self._admin.close()
            self._admin = None
