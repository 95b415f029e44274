"""(a2) A librdkafka ceiling: confluent-kafka consume -> produce passthrough, at-least-once.

The loop of bench/ceiling.py (the aiokafka ceiling) with librdkafka's client: the producer is
idempotent with acks=all and linger.ms 5; each batch (at most 2,000 records) is produced to
the same partition of `--dst`, the producer is flushed (every record acked), and only then are
the batch's offsets committed (synchronously). Timed from the first batch received to the
last commit, as the aiokafka ceiling.

Run as its own process by bench/run.py, in the bench virtualenv (var/venv-bench):

    var/venv-bench/bin/python bench/librdkafka_passthrough.py --src T --dst T --group G -n N

Prints one JSON line: events, seconds, events_per_s, startup_s (process start -> first batch),
confluent_kafka and librdkafka versions. Imports nothing from workers/ or bench/.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

STARTED = time.time()


def run(bootstrap: str, src: str, dst: str, group: str, n: int, timeout: float,
        batch: int = 2000) -> dict:
    import confluent_kafka
    from confluent_kafka import Consumer, Producer

    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
        "auto.offset.reset": "earliest", "max.partition.fetch.bytes": 4 * 1024 * 1024,
        "fetch.max.bytes": 16 * 1024 * 1024,
    })
    producer = Producer({
        "bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
        "linger.ms": 5, "batch.size": 512 * 1024, "message.max.bytes": 4 * 1024 * 1024,
    })
    failed: list[str] = []

    def on_delivery(err, _msg) -> None:  # noqa: ANN001
        if err is not None:
            failed.append(str(err))

    consumer.subscribe([src])
    seen, first, last = 0, None, None
    deadline = time.monotonic() + timeout
    try:
        while seen < n and time.monotonic() < deadline:
            msgs = consumer.consume(num_messages=batch, timeout=0.5)
            if not msgs:
                continue
            if first is None:
                first = time.time()
            produce = producer.produce
            for m in msgs:
                if m.error():
                    raise RuntimeError(f"consume: {m.error()}")
                while True:
                    try:
                        produce(dst, m.value(), m.key(), m.partition(), on_delivery=on_delivery)
                        break
                    except BufferError:  # local queue full: serve delivery reports
                        producer.poll(0.05)
            seen += len(msgs)
            if producer.flush(60) != 0 or failed:
                raise RuntimeError(f"produce failed: {failed[:3] or 'flush timed out'}")
            consumer.commit(asynchronous=False)
            last = time.time()
    finally:
        consumer.close()
    elapsed = (last - first) if first and last else float("nan")
    return {"events": seen, "seconds": elapsed, "events_per_s": seen / elapsed if seen else 0.0,
            "startup_s": (first - STARTED) if first else None,
            "confluent_kafka": confluent_kafka.__version__,
            "librdkafka": confluent_kafka.libversion()[0]}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--bootstrap", default="127.0.0.1:9092")
    p.add_argument("--src", required=True)
    p.add_argument("--dst", required=True)
    p.add_argument("--group", required=True)
    p.add_argument("-n", type=int, required=True, help="records to pass through")
    p.add_argument("--timeout", type=float, default=180)
    args = p.parse_args(argv)
    result = run(args.bootstrap, args.src, args.dst, args.group, args.n, args.timeout)
    print(json.dumps(result), flush=True)
    return 0 if result["events"] >= args.n else 1


if __name__ == "__main__":
    sys.exit(main())
