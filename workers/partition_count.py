"""The deployment's partition count, as its topics have it now, for the commands that address a
session's partition (`forget`): never TRANSCRIPT_PARTITIONS, which can be stale (the default 8
against a larger deployment, or the old count after a `repartition`), so that an erasure is
never published to a partition the worker does not read it from (issue 42).

The input, transcript.control and transcript.entries have one count; while they differ, or
transcript.layout holds a move not yet done, a repartition is in progress and there is no one
count: the caller refuses, saying to complete the move first.
"""

from __future__ import annotations

from workers.core.layout import LAYOUT, decode_layout
from workers.core.outputs import CONFIRMATIONS, CONTROL, ENTRIES
from workers.settings import KafkaSettings


def current_count(ks: KafkaSettings) -> int | str:
    """The count, or why there is none now (a topic missing, a move in progress)."""
    from kafka.admin import KafkaAdminClient

    from workers.kafka_io import end_offsets, read

    names = [ks.topic(t) for t in (CONFIRMATIONS, CONTROL, ENTRIES)]
    admin = KafkaAdminClient(**ks.kafka_python_kwargs())
    try:
        described = {t["name"]: len(t["partitions"]) for t in admin.describe_topics(names)
                     if t.get("error_code", 0) == 0}
    finally:
        admin.close()
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
