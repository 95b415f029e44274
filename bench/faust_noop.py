"""(b) A faust noop agent (concurrency=1) over the preloaded input, for context.

Run as its own process by bench/run.py:  python bench/faust_noop.py worker -l warning
Environment: BENCH_APP_ID, BENCH_TOPIC, BENCH_N, BENCH_OUT (result JSON), BENCH_DATADIR.
Writes {"events", "first", "last"} (wall times of the first and the N-th event) to BENCH_OUT.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import faust

N = int(os.environ.get("BENCH_N", "0"))
OUT = Path(os.environ.get("BENCH_OUT", "/dev/null"))

app = faust.App(
    os.environ.get("BENCH_APP_ID", "bench-faust-noop"),
    broker="kafka://" + os.environ.get("KAFKA_BOOTSTRAP", "127.0.0.1:9092"),
    datadir=os.environ.get("BENCH_DATADIR", "var/bench/faust-noop"),
    topic_partitions=8, topic_replication_factor=1, consumer_auto_offset_reset="earliest",
    web_enabled=False, producer_acks=-1, consumer_max_fetch_size=4 * 1024 * 1024,
)
source = app.topic(os.environ.get("BENCH_TOPIC", "delivery.confirmations"), key_type=bytes,
                   value_type=bytes, key_serializer="raw", value_serializer="raw")
state = {"events": 0, "first": None}


@app.agent(source, concurrency=1)
async def noop(stream):  # noqa: ANN001
    async for _ in stream:
        if state["first"] is None:
            state["first"] = time.time()
        state["events"] += 1
        if state["events"] == N:
            OUT.write_text(json.dumps({"events": N, "first": state["first"],
                                       "last": time.time()}))


if __name__ == "__main__":
    app.main()
