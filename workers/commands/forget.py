"""`transcript-owner forget SESSION_KEY --reason TEXT`: erase a session.

Erasure is the operator's act (DESIGN 1.2, the trust boundary): this command publishes a
`session-erase/1` record to transcript.control, which only the operator principal may write
(run it with the operator's credentials: KAFKA_SASL_USERNAME/PASSWORD), keyed by the canonical
session key, to the session's partition. The worker owns a session's state, so the erasure
goes through it, ordered with the session's confirmations: it forwards the record into the
session's input partition and decides it there (workers/core/control.py), in the partition's
transaction: a tombstone for every entry key
`<session>#<seq>` (seq 1..next_seq-1) on transcript.entries, tombstones for the session's
state (head and every remembered send_id) on the changelog, a head without content (the next
epoch, next_seq, `erased_at`), and a `session-erasure/1` record (key, when, reason, epoch,
seqs tombstoned; no content) on the compacted transcript.erasures. `replay` and `audit` run
the same step, so an audit stays clean after an erasure.

Later records of the session: a confirmation confirmed at or before the erasure is a send of
the erased history and is not written again (outcome `erased_send`, an info diagnostic
`confirmed_before_erasure`); later ones start clean in the new epoch, at the next seq.

The session's partition is its partition under the topics' own count: TRANSCRIPT_PARTITIONS,
when set, must say the same (a stale count exits 2 naming the topics' count: an erase keyed
for it would be dead-lettered by the worker, and the session never erased); while a
repartition is in progress (the topics' counts differ, or transcript.layout holds a move not
done) it exits 2 saying to complete the move first. Before
publishing, the session's partition of transcript.entries is read (read_committed): a
session without a live entry is unknown or erased already, and exits 2 unless --force (which
also erases a session that has state but no entry). The reason is never printed or logged.
Exit 0 published (with --wait: recorded by the worker), 1 --wait timed out, 2 cannot run.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from datetime import UTC, datetime

from schemas import Invalid, SessionErase, parse_input
from workers.core import session_key_of

MAX_REASON_CHARS = 1000


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("session_key", metavar="SESSION_KEY",
                        help="a full session key, agent:<agent_id>:… (canonicalised)")
    parser.add_argument("--reason", required=True, metavar="TEXT",
                        help="why (a ticket, a request id); kept in transcript.erasures, "
                             f"never logged; at most {MAX_REASON_CHARS} characters")
    parser.add_argument("--force", action="store_true",
                        help="publish the erasure even when the session has no live entry")
    parser.add_argument("--wait", type=float, default=0.0, metavar="SECONDS",
                        help="wait until the worker has recorded the erasure in "
                             "transcript.erasures (exit 1 if not within SECONDS)")


def erase_record(session_key: str, reason: str, at: datetime) -> SessionErase | Invalid:
    """The session-erase/1 record for `session_key` (canonicalised), or why it cannot be."""
    raw = json.dumps({"schema": "session-erase/1", "session_key": session_key,
                      "erased_at": at.isoformat(), "reason": reason}).encode()
    record = parse_input(raw)
    if isinstance(record, Invalid):
        return record
    assert isinstance(record, SessionErase)
    key = session_key_of(record)
    if isinstance(key, Invalid):
        return key
    return record.model_copy(update={"session_key": key})


def run(args: argparse.Namespace) -> int:
    from workers.settings import kafka_settings, worker_settings

    ks, ws = kafka_settings(), worker_settings()  # a SettingsError is reported by the CLI (exit 2)
    if not args.reason.strip():
        print("forget: --reason must not be empty", file=sys.stderr)
        return 2
    at = datetime.now(UTC)
    record = erase_record(args.session_key, args.reason, at)
    if isinstance(record, Invalid):
        print(f"forget: {record.reason}", file=sys.stderr)
        return 2
    key = record.session_key
    if key != args.session_key:
        print(f"forget: erasing the canonical key {key}")

    from kafka.errors import KafkaError
    from transcript_connector.partitioning import partition_for

    from workers.core.outputs import CONTROL
    from workers.partition_count import current_count

    try:
        count = current_count(ks)  # the topics' own, never a stale TRANSCRIPT_PARTITIONS
        if isinstance(count, str):
            print(f"forget: {count}", file=sys.stderr)
            return 2
        if os.environ.get("TRANSCRIPT_PARTITIONS", "").strip() and count != ws.partitions:
            # the operator's count is wrong: an erase keyed for it would go where the worker
            # does not look for it (unset, the topics' count is taken)
            print(f"forget: the topics have {count} partitions, TRANSCRIPT_PARTITIONS says "
                  f"{ws.partitions} (stale after a repartition?): set "
                  f"TRANSCRIPT_PARTITIONS={count}, or unset it", file=sys.stderr)
            return 2
        partition = partition_for(key, count)
        live = live_entries(ks, key, partition)
        if not live and not args.force:
            print(f"forget: no live entry of session {key} in transcript.entries (partition "
                  f"{partition}): an unknown session, or erased already; --force publishes "
                  "the erasure anyway", file=sys.stderr)
            return 2
        offset = publish(ks, ks.topic(CONTROL), key, partition,
                         record.model_dump_json(by_alias=True).encode())
    except KafkaError as exc:
        print(f"forget: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    print(f"forget: session-erase of {key} ({live} live entries) published to "
          f"{ks.topic(CONTROL)} partition {partition} offset {offset}")
    if args.wait <= 0:
        return 0
    try:
        found = wait_recorded(ks, key, at, args.wait)
    except KafkaError as exc:
        print(f"forget: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    if found is None:
        print(f"forget: the worker has not recorded the erasure within {args.wait:g} s (is it "
              "running and caught up?); it will when it reaches the record", file=sys.stderr)
        return 1
    print(f"forget: erased: entries seq 1..{found['through_seq']} tombstoned, the session "
          f"goes on in epoch {found['epoch']}")
    return 0


def live_entries(ks, key: str, partition: int) -> int:  # noqa: ANN001
    """How many entries of session `key` are live (compaction's view) in its partition: its
    exact entry keys, never a key prefix (session `K#1` is not part of `K`)."""
    from workers.core.outputs import ENTRIES, parse_entry_key
    from workers.kafka_io import read

    entries: dict[int, bool] = {}  # seq -> live
    for r in read(ks, ks.topic(ENTRIES), partitions=[partition]):
        parsed = parse_entry_key(r.key)
        if parsed is not None and parsed[0] == key:
            entries[parsed[1]] = r.value is not None
    return sum(entries.values())


def publish(ks, topic: str, key: str, partition: int, value: bytes) -> int:  # noqa: ANN001
    from workers.kafka_io import producer

    p = producer(ks)
    try:
        return p.send(topic, key=key.encode(), value=value, partition=partition) \
            .get(timeout=30).offset
    finally:
        p.close()


def wait_recorded(ks, key: str, at: datetime, timeout: float) -> dict | None:  # noqa: ANN001
    """The worker's session-erasure/1 record of this erasure (erased_at >= at), or None."""
    from workers.core.outputs import ERASURES
    from workers.kafka_io import read

    want = key.encode()
    try:
        for r in read(ks, ks.topic(ERASURES), until_end=False, timeout=timeout):
            if r.key == want and r.value is not None:
                doc = json.loads(r.value)
                if datetime.fromisoformat(doc["erased_at"]) >= at:
                    return doc
    except TimeoutError:
        pass
    return None
