"""`audit` on records of its worker-owned topics that the worker does not write (whoever may
write the topic can put anything there: an ACL too wide, an admin tool). Each is a `malformed`
finding naming topic, partition and offset and what is wrong (never what it holds), and the
audit goes on: exit 1, never 2. Before, a non-JSON entry, diagnostic or erasure, a dead
letter with a bad `source.partition`, a bad checkpoint key or a string `input_offset` stopped
it with exit 2, and a checkpoint manifest of another partition was used as it stood.

The cluster is a dict here (`Cluster`): the audit's reads go to it (workers.kafka_io)."""

from __future__ import annotations

import argparse
import json
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace

import pytest
from transcript_connector.partitioning import partition_for

from tests.unit.wire import confirmation, dumps
from workers.commands import audit, audit_start
from workers.core import MemoryState, SessionHead, head_key
from workers.core import checkpoint_format as checkpoints
from workers.core.checkpoint_format import CHECKPOINTS, Malformed
from workers.core.outputs import (
    CONFIRMATIONS,
    DIAGNOSTICS,
    DLQ,
    ENTRIES,
    ERASURES,
    SESSIONS,
    Source,
    changelog_topic,
)
from workers.core.owner import Owner, apply
from workers.settings import kafka_settings

PREFIX = "t."
CHANGELOG = changelog_topic("", "transcript-owner", SESSIONS)  # PREFIX is added by Cluster.add
SECRET = "s3cret-text"  # in every garbage record: no finding may repeat it
SESSION = next(k for i in range(1000)
               if partition_for(k := f"agent:ops:telegram:direct:u{i}", 8) == 0)
AT = datetime(2025, 3, 1, 12, 1, tzinfo=UTC)  # the broker's time of the input records


class Cluster:
    """Topics as lists of records per partition, read as workers.kafka_io reads them."""

    def __init__(self) -> None:
        self.logs: dict[str, dict[int, list[SimpleNamespace]]] = {}
        self.first: dict[tuple[str, int], int] = {}  # where a partition's log starts now

    def add(self, topic: str, key: bytes | None, value: bytes | None, partition: int = 0,
            headers: tuple = ()) -> int:
        log = self.logs.setdefault(PREFIX + topic, {}).setdefault(partition, [])
        offset = self.first.get((PREFIX + topic, partition), 0) + len(log)
        log.append(SimpleNamespace(topic=PREFIX + topic, partition=partition, offset=offset,
                                   key=key, value=value, headers=list(headers),
                                   timestamp=int(AT.timestamp() * 1000)))
        return offset

    def read(self, ks, topic, *, partitions=None, start=None, **_):  # noqa: ANN001, ANN202
        for p in sorted(self.logs.get(topic, {}) if partitions is None else partitions):
            for r in self.logs.get(topic, {}).get(p, []):
                if not start or p not in start or r.offset >= start[p]:
                    yield r

    def end_offsets(self, ks, topic) -> dict[int, int]:  # noqa: ANN001
        return {p: self.first.get((topic, p), 0) + len(log)
                for p, log in self.logs.get(topic, {}).items()}

    def log_starts(self, ks, topic, partitions) -> dict[int, int]:  # noqa: ANN001
        return {p: self.first.get((topic, p), 0) for p in partitions}

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setattr("workers.kafka_io.read", self.read)
        monkeypatch.setattr("workers.kafka_io.end_offsets", self.end_offsets)
        monkeypatch.setattr(audit_start, "log_starts", self.log_starts)


def processed(cluster: Cluster, *inputs: dict) -> None:
    """The input records and what the worker writes for them (the same step as the worker's)."""
    owner = Owner(partitions=8, dedupe_window=timedelta(days=7), clock=lambda: AT)
    state = MemoryState()
    for record in inputs:
        offset = cluster.add(CONFIRMATIONS, SESSION.encode(), dumps(record))
        step = owner.handle(Source(PREFIX + CONFIRMATIONS, 0, offset, SESSION.encode(),
                                   dumps(record)), state, AT)
        apply(state, step)
        for out in step.sends:
            cluster.add(out.topic, out.key, out.value, 0, out.headers)
        # the session's head, as the worker's state changelog holds it (the chain's end)
        cluster.add(CHANGELOG, head_key(SESSION), state.head(SESSION).to_bytes())


def scenario(cluster: Cluster) -> None:
    """Two entries, one diagnostic (a send_id again with other text), one dead letter."""
    processed(cluster, confirmation(session_key=SESSION, send_id="a"),
              confirmation(session_key=SESSION, send_id="a", **{"payload.text": "other"}),
              confirmation(session_key=SESSION, send_id="b"))
    offset = cluster.add(CONFIRMATIONS, SESSION.encode(), b"not a confirmation")
    cluster.add(DLQ, SESSION.encode(), b"not a confirmation", 0, (
        ("error", b"not JSON"), ("source.topic", (PREFIX + CONFIRMATIONS).encode()),
        ("source.partition", b"0"), ("source.offset", str(offset).encode())))


def audited(cluster: Cluster, monkeypatch: pytest.MonkeyPatch,
            capsys: pytest.CaptureFixture[str]) -> tuple[int, dict]:
    cluster.install(monkeypatch)
    monkeypatch.setenv("TRANSCRIPT_TOPIC_PREFIX", PREFIX)
    code = audit.run(argparse.Namespace(json=True, strict=True, since=None, progress=False))
    out = capsys.readouterr().out
    return code, json.loads(out) if out else {}


def entry_value(seq: object, **changes: object) -> dict:
    entry = {"schema": "transcript-entry/1", "session_key": SESSION, "epoch": 0, "seq": seq,
             "entry_id": "e", "send_id": "s", "delivered_at": AT.isoformat(), "text": SECRET}
    entry.update(changes)
    return entry


def key(seq: int) -> bytes:
    return f"{SESSION}#{seq:010d}".encode()


# what is written (key, value) -> the finding's text
GARBAGE_ENTRIES = [
    (key(3), SECRET.encode(), "not JSON"),
    (key(3), b"\xff" + SECRET.encode(), "not UTF-8"),
    (key(3), json.dumps([SECRET]).encode(), "JSON an array, not an object"),
    (key(3), json.dumps(SECRET).encode(), "JSON a string, not an object"),
    (key(3), json.dumps({"schema": "transcript-entry/1", "text": SECRET}).encode(),
     "session_key: missing"),
    (key(3), json.dumps(entry_value("3")).encode(),
     "seq: not a whole number from 1 to 9999999999"),
    (key(3), json.dumps(entry_value(-3)).encode(), "seq: not a whole number from 1 to 9999999999"),
    (key(3), json.dumps(entry_value(10**12)).encode(),
     "seq: not a whole number from 1 to 9999999999"),
    (key(3), json.dumps(entry_value(3, delivered_at=SECRET)).encode(),
     "delivered_at: not a time with a UTC offset"),
    (key(3), json.dumps(entry_value(3, delivered_at="2025-03-01T12:00:00")).encode(),
     "delivered_at: not a time with a UTC offset"),
    (key(3), json.dumps(entry_value(float("nan"))).encode(),
     "not JSON: NaN/Infinity are not JSON"),
    (key(3), b'{"schema": "transcript-entry/1", "schema": "x", "text": "' + SECRET.encode()
     + b'"}', "an object names a member twice"),
    (key(3), b"[" * 100_000, "not JSON: nested too deeply"),
    (key(3), json.dumps(entry_value(3, schema="transcript-entry/2")).encode(),
     "not a transcript-entry/1"),
    (b"\xff" + SECRET.encode(), json.dumps(entry_value(3)).encode(),
     "a key that is not <session_key>#<seq, 10 digits> of its value"),
    (key(4), json.dumps(entry_value(3)).encode(),
     "a key that is not <session_key>#<seq, 10 digits> of its value"),
    (None, json.dumps(entry_value(3)).encode(),
     "a key that is not <session_key>#<seq, 10 digits> of its value"),
    (key(3), json.dumps(entry_value(3, session_key="\ud800")).encode(),
     "session_key: not Unicode text (a lone surrogate)"),
]
GARBAGE_DIAGNOSTICS = [
    (SESSION.encode(), SECRET.encode(), "not JSON"),
    (SESSION.encode(), json.dumps([1, SECRET]).encode(), "JSON an array, not an object"),
    (SESSION.encode(), json.dumps({"schema": "diagnostic/1", "session_key": SESSION,
                                   "code": "x", "level": "warn", "at": SECRET}).encode(),
     "send_id: missing"),
    (b"other", json.dumps({"schema": "diagnostic/1", "session_key": SESSION, "code": SECRET,
                           "level": "warn", "send_id": None, "at": "x"}).encode(),
     "a key that is not its session_key"),
]
ERASURE = {"schema": "session-erasure/1", "session_key": SESSION,
           "erased_at": AT.isoformat(), "reason": SECRET, "epoch": 1, "through_seq": 2}
GARBAGE_ERASURES = [
    (SESSION.encode(), SECRET.encode(), "not JSON"),
    (SESSION.encode(), json.dumps(dict(ERASURE, through_seq="2")).encode(),
     "through_seq: not a whole number from 0 to 9999999999"),
    (SESSION.encode(), json.dumps(dict(ERASURE, epoch=-1)).encode(),
     "epoch: not a whole number from 0 to 9223372036854775807"),
    (b"\xfe" + SECRET.encode(), json.dumps(ERASURE).encode(), "a key that is not its session_key"),
]
SOURCE = (("error", b"e"), ("source.topic", (PREFIX + CONFIRMATIONS).encode()),
          ("source.partition", b"0"), ("source.offset", b"1"))
GARBAGE_DEAD_LETTERS = [
    ((), "header error: missing"),  # what an admin tool writes: no headers at all
    ((*SOURCE[:2], ("source.partition", b"x"), SOURCE[3]),
     "header source.partition: not a whole number from 0 to 2147483647"),
    ((*SOURCE[:3], ("source.offset", b"-1")),
     "header source.offset: not a whole number from 0 to 9223372036854775807"),
    ((*SOURCE[:3], ("source.offset", b"99999999999999999999")),
     "header source.offset: not a whole number from 0 to 9223372036854775807"),
    ((SOURCE[0], ("source.topic", b"\xff"), *SOURCE[2:]), "header source.topic: not a topic name"),
    ((*SOURCE, ("source.offset", b"2")), "header source.offset: given twice"),
    ((("error", b"\xff"), *SOURCE[1:]), "header error: not UTF-8"),
]


def test_garbage_on_every_worker_owned_topic_is_a_finding_and_the_audit_goes_on(
        monkeypatch, capsys):
    cluster = Cluster()
    scenario(cluster)
    code, report = audited(cluster, monkeypatch, capsys)  # as the worker wrote it: clean
    assert (code, report["clean"], report["expected_entries"]) == (0, True, 2)
    assert report["outcomes"] == {"conflict": 1, "dead_letter": 1, "written": 2}
    findings = []
    for topic, garbage in ((ENTRIES, GARBAGE_ENTRIES), (DIAGNOSTICS, GARBAGE_DIAGNOSTICS),
                           (ERASURES, GARBAGE_ERASURES)):
        for k, v, what in garbage:
            offset = cluster.add(topic, k, v)
            findings.append(f"{PREFIX}{topic} partition 0 offset {offset}: {what}")
    for headers, what in GARBAGE_DEAD_LETTERS:
        offset = cluster.add(DLQ, SECRET.encode(), SECRET.encode(), 0, headers)
        findings.append(f"{PREFIX}{DLQ} partition 0 offset {offset}: {what}")
    code, report = audited(cluster, monkeypatch, capsys)
    assert code == 1
    assert {k: n for k, n in report["discrepancies"].items() if n} == {"malformed": len(findings)}
    listed = report["examples"]["malformed"]
    assert len(listed) == audit.EXAMPLES and set(listed) <= set(findings)
    # the good records were compared as always: two entries, the diagnostic, the dead letter
    assert (report["expected_entries"], report["actual_entries"]) == (2, 2)
    assert SECRET not in json.dumps(report)
    cluster.install(monkeypatch)
    text = audit.run(argparse.Namespace(json=False, strict=False, since=None, progress=False))
    out = capsys.readouterr().out
    assert text == 1 and f"malformed: {len(findings)}" in out and SECRET not in out


def test_every_garbage_record_is_named(monkeypatch, capsys):
    """Past EXAMPLES a kind lists no more; one topic's garbage at a time, each is named."""
    dead_letters = [(SECRET.encode(), SECRET.encode(), headers, what)
                    for headers, what in GARBAGE_DEAD_LETTERS]
    for topic, garbage in ((ENTRIES, [(k, v, (), w) for k, v, w in GARBAGE_ENTRIES]),
                           (DIAGNOSTICS, [(k, v, (), w) for k, v, w in GARBAGE_DIAGNOSTICS]),
                           (ERASURES, [(k, v, (), w) for k, v, w in GARBAGE_ERASURES]),
                           (DLQ, dead_letters)):
        cluster = Cluster()
        scenario(cluster)
        wanted = [f"{PREFIX}{topic} partition 0 offset {cluster.add(topic, k, v, 0, h)}: {what}"
                  for k, v, h, what in garbage]
        code, report = audited(cluster, monkeypatch, capsys)
        assert (code, report["examples"].get("malformed")) == (1, wanted), topic


def test_a_malformed_value_over_an_entry_leaves_the_entry_as_it_was(monkeypatch, capsys):
    """The garbage is reported; the entry the worker wrote under that key is still compared
    (a reader of the topic meets the garbage: the finding says where)."""
    cluster = Cluster()
    scenario(cluster)
    offset = cluster.add(ENTRIES, key(1), b"garbage")
    code, report = audited(cluster, monkeypatch, capsys)
    assert code == 1
    assert report["examples"] == {"malformed": [f"{PREFIX}{ENTRIES} partition 0 offset "
                                                f"{offset}: not JSON"]}


@pytest.mark.parametrize(("check", "record", "what"), [
    (audit.entry_of, SimpleNamespace(key=key(1), value=None), "no value"),
    (audit.diagnostic_of, SimpleNamespace(key=b"k", value=b"{}"), "not a diagnostic/1"),
    (audit.erasure_of, SimpleNamespace(key=b"k", value=b"7"), "JSON a number, not an object"),
    (audit.erasure_of, SimpleNamespace(key=b"k", value=b"null"), "JSON null, not an object"),
    (audit.dead_letter_of, SimpleNamespace(headers=None), "header error: missing"),
    (audit.dead_letter_of, SimpleNamespace(headers=[("error", None), *SOURCE[1:]]),
     "header error: missing"),
])
def test_the_checks_say_what_is_wrong(check, record, what):
    with pytest.raises(Malformed) as err:
        check(record)
    assert str(err.value) == what


def test_a_dead_letter_of_the_worker_names_its_source():
    assert audit.dead_letter_of(SimpleNamespace(headers=[*SOURCE, ("truncated", b"9")])) == (
        PREFIX + CONFIRMATIONS, 0, 1)


# --- checkpoints: a malformed one is reported and not used; the next usable one is -------------


def checkpoint(slot: int, ckpt_id: int, input_offset: int, sessions: int = 1,
               partition: int = 0) -> list[tuple[bytes, bytes]]:
    items = [(head_key(f"{SESSION}{i}"), SessionHead(0, 1, AT).to_bytes())
             for i in range(sessions)]
    return checkpoints.encode(partition, slot, ckpt_id, input_offset, 0, items, AT)


def truncated(cluster: Cluster, *records: tuple[bytes | None, bytes | None]) -> list[int]:
    """Input partition 0 starting at offset 5 (older records deleted), and `records` in
    partition 0 of the checkpoints topic; their offsets."""
    cluster.first[(PREFIX + CONFIRMATIONS, 0)] = 5
    for i in range(3):
        cluster.add(CONFIRMATIONS, SESSION.encode(), b"x%d" % i)
    return [cluster.add(CHECKPOINTS, k, v) for k, v in records]


def started(cluster: Cluster, monkeypatch: pytest.MonkeyPatch
            ) -> tuple[dict, audit.Report]:
    cluster.install(monkeypatch)
    ks = kafka_settings({"TRANSCRIPT_TOPIC_PREFIX": PREFIX})
    report = audit.Report()
    ends = cluster.end_offsets(ks, ks.topic(CONFIRMATIONS))
    return audit_start.starts(ks, ks.topic(CONFIRMATIONS), ends, report), report


def manifest(slot: int, **changes: object) -> tuple[bytes, bytes]:
    m = {"schema": "checkpoint/1", "partition": 0, "id": 1, "copy": "c", "input_offset": 5,
         "diagnostics_offset": 0, "chunks": 0, "keys": 0, "taken_at": AT.isoformat()}
    m.update(changes)
    return checkpoints.manifest_key(0, slot), json.dumps(m).encode()


def where(offset: int) -> str:
    return f"{PREFIX}{CHECKPOINTS} partition 0 offset {offset}: "


def test_bad_checkpoint_keys_are_findings_and_the_good_checkpoint_is_used(monkeypatch):
    good = checkpoint(0, 7, 6)
    bad = [(b"\xff" + SECRET.encode(), b"{}"), (b"c/x", b"{}"), (b"m/0", b"{}"),
           (b"c/0/0/1", b"{}"), (b"m/0/0/0", b"{}"), (b"m/1/0", good[-1][1])]
    cluster = Cluster()
    offsets = truncated(cluster, *bad, *good)
    found, report = started(cluster, monkeypatch)
    assert found[0] is not None and (found[0].id, found[0].input_offset) == (7, 6)
    shape = ("a key that is neither m/<partition>/<slot> nor c/<partition>/<slot>/<chunk, "
             "6 digits>")
    assert report.examples == {"malformed": [
        where(offsets[0]) + shape, where(offsets[1]) + shape, where(offsets[2]) + shape,
        where(offsets[3]) + shape, where(offsets[4]) + shape,
        where(offsets[5]) + "a key of partition 1"]}


@pytest.mark.parametrize(("changes", "what"), [
    ({"input_offset": "5"}, "input_offset: not a whole number from 0 to 9223372036854775807"),
    ({"input_offset": -5}, "input_offset: not a whole number from 0 to 9223372036854775807"),
    ({"input_offset": 2**70}, "input_offset: not a whole number from 0 to 9223372036854775807"),
    ({"input_offset": True}, "input_offset: not a whole number from 0 to 9223372036854775807"),
    ({"diagnostics_offset": -1},
     "diagnostics_offset: not a whole number from 0 to 9223372036854775807"),
    ({"chunks": 10**9}, "chunks: not a whole number from 0 to 999999"),
    ({"partition": 3}, "a manifest of partition 3 under a key of partition 0"),
    ({"schema": "checkpoint/2"}, "not a checkpoint/1 manifest"),
    ({"copy": 5}, "copy: not a string"),
])
def test_a_malformed_manifest_is_a_finding_and_an_older_good_one_is_used(monkeypatch, changes,
                                                                         what):
    """The malformed one is the oldest (the one the audit would start from)."""
    cluster = Cluster()
    offsets = truncated(cluster, manifest(1, **changes), *checkpoint(0, 7, 6))
    found, report = started(cluster, monkeypatch)
    assert found[0] is not None and (found[0].id, found[0].slot) == (7, 0)
    assert report.examples == {"malformed": [where(offsets[0]) + what]}


def test_a_manifest_past_the_end_of_the_input_is_a_finding(monkeypatch):
    cluster = Cluster()
    offsets = truncated(cluster, *checkpoint(1, 8, 99), *checkpoint(0, 7, 6))
    found, report = started(cluster, monkeypatch)
    assert found[0] is not None and found[0].id == 7
    assert report.examples == {"malformed": [
        where(offsets[1]) + "input_offset 99 is past the end of input partition 0 (8)"]}


@pytest.mark.parametrize("items", [[[SECRET]], [SECRET[:2]], [[SECRET, None]], [["\ud800", "x"]],
                                   {SECRET: "x"}, 5])
def test_a_malformed_chunk_is_a_finding_and_the_next_checkpoint_is_used(monkeypatch, items):
    first = checkpoint(1, 6, 5)
    chunk_key, chunk = first[0]
    broken = dict(json.loads(chunk), items=items)
    cluster = Cluster()
    offsets = truncated(cluster, *first, (chunk_key, json.dumps(broken).encode()),
                        *checkpoint(0, 7, 6))
    found, report = started(cluster, monkeypatch)
    assert found[0] is not None and found[0].id == 7
    assert report.examples == {"malformed": [
        where(offsets[2]) + "items: not a list of [key, value] strings"]}


@pytest.mark.parametrize(("item", "what"), [
    ((head_key(SESSION), SECRET.encode()), "state record 1 of 1: not JSON (JSONDecodeError)"),
    ((head_key(SESSION), b'{"v":2,"epoch":-1,"next_seq":1,"clock":null,"last_reset_at":null}'),
     "state record 1 of 1: epoch: not an integer >= 0"),
    ((b'["h",5]', SessionHead().to_bytes()), "state record 1 of 1: a key of no state record's "
                                              "form"),
    ((b'["s","a"]', b"[1,\"fp\"]"), "state record 1 of 1: a key of no state record's form"),
    ((b"\xff", b"{}"), "state record 1 of 1: a key of no state record's form"),
])
def test_a_checkpoint_whose_state_does_not_decode_is_not_used(monkeypatch, item, what):
    cluster = Cluster()
    offsets = truncated(cluster, *checkpoints.encode(0, 1, 6, 5, 0, [item], AT),
                        *checkpoint(0, 7, 6))
    found, report = started(cluster, monkeypatch)
    assert found[0] is not None and found[0].id == 7
    assert report.examples == {"malformed": [where(offsets[1]) + "checkpoint 6: " + what]}


def test_no_usable_checkpoint_because_of_garbage_leaves_the_partition_unaudited(
        monkeypatch, capsys):
    """A finding (exit 1), not exit 2: the other partitions are audited. Without any record
    of the worker's or anyone's, the audit still cannot run (exit 2, NoCheckpoint)."""
    cluster = Cluster()
    offsets = truncated(cluster, manifest(0, input_offset="5"))
    processed(cluster, confirmation(session_key=SESSION, send_id="a"))  # partition 0, still
    found, report = started(cluster, monkeypatch)
    assert found == {}
    assert report.examples == {
        "malformed": [where(offsets[0]) + "input_offset: not a whole number from 0 to "
                                          "9223372036854775807"],
        "unaudited": [f"{PREFIX}{CONFIRMATIONS} partition 0: starts at offset 5 and no "
                      f"checkpoint of it in {PREFIX}{CHECKPOINTS} is usable (1 malformed "
                      "records): not audited"]}
    code, audited_report = audited(cluster, monkeypatch, capsys)
    assert code == 1 and audited_report["partitions"] == 0
    assert audited_report["discrepancies"]["unaudited"] == 1

    nothing = Cluster()
    truncated(nothing)
    with pytest.raises(audit_start.NoCheckpoint):
        started(nothing, monkeypatch)
