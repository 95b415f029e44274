"""The deployment's partition count, as its topics have it now, for the commands that address a
session's partition (`forget`): never TRANSCRIPT_PARTITIONS, which can be stale (the default 8
against a larger deployment, or the old count after a `repartition`), so that an erasure is
never published to a partition the worker does not read it from (issue 42).

The input, transcript.control and transcript.entries have one count; while they differ, or
transcript.layout holds a move not yet done, a repartition is in progress and there is no one
count: the caller refuses, saying to complete the move first. (The input and transcript.control
grow together, in a move's last step, so control and entries are the two asked: the operator's
principal may describe both, not the input.)
"""

from __future__ import annotations

from workers.core.layout import LAYOUT, decode_layout
from workers.core.outputs import CONTROL, ENTRIES
from workers.settings import KafkaSettings


def current_count(ks: KafkaSettings) -> int | str:
    """The count, or why there is none now (a topic missing, a move in progress)."""
    from kafka.admin import KafkaAdminClient
    from kafka.errors import TopicAuthorizationFailedError, for_code

    from workers.kafka_io import end_offsets, read

    # transcript.control and the input grow together, last, so control and entries tell a
    # move in progress (the operator may describe both; not the input)
    names = [ks.topic(t) for t in (CONTROL, ENTRIES)]
    admin = KafkaAdminClient(**ks.kafka_python_kwargs())
    try:
        found = {t["name"]: t for t in admin.describe_topics(names)}
    finally:
        admin.close()
    described = {}
    for name in names:
        topic = found.get(name) or {}
        code = topic.get("error_code", 0)
        if code and for_code(code) is TopicAuthorizationFailedError:
            who = f"KAFKA_SASL_USERNAME={ks.sasl_username!r}" if ks.sasl_username else "this client"
            return (f"TopicAuthorizationFailedError: {who} may not describe topic {name} (an "
                    "erase is the operator's: topics.yaml's operator principal may)")
        if not code and topic.get("partitions"):
            described[name] = len(topic["partitions"])
    missing = [n for n in names if not described.get(n)]
    if missing:
        return f"topic {missing[0]} does not exist (transcript-owner topics apply creates it)"
    counts = [described[n] for n in names]
    if len(set(counts)) > 1:
        have = ", ".join(f"{n} has {c}" for n, c in zip(names, counts, strict=True))
        return (f"a repartition is in progress ({have} partitions): complete it "
                f"(`transcript-owner repartition --partitions {max(counts)}`), then run this "
                "again")
    layout_topic = ks.topic(LAYOUT)
    if end_offsets(ks, layout_topic):
        layout = decode_layout((r.key, r.value) for r in read(ks, layout_topic))
        if isinstance(layout, str):
            return f"{layout_topic}: {layout}"
        if (move := layout.pending) is not None:
            return (f"the repartition {move.old} -> {move.new} is not done: complete it "
                    f"(`transcript-owner repartition --partitions {move.new}`), then run this "
                    "again")
    return counts[0]
