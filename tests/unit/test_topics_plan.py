"""The pure drift rules of topics.yaml, without a broker."""

from __future__ import annotations

from pathlib import Path

import pytest

from workers.core.outputs import changelog_topic
from workers.settings import SettingsError, WorkerSettings
from workers.stream.transactions import worker_transactional_id
from workers.topics import (
    AclBinding,
    ObservedTopic,
    TopicsFileError,
    acl_table,
    compare,
    compare_acls,
    load_acls,
    load_topics,
)

ROOT = Path(__file__).resolve().parents[2]


def observed_from(specs, **changes):
    out = {}
    for s in specs:
        out[s.name] = ObservedTopic(s.name, s.partitions, s.replication_factor, s.config_map)
    for name, topic in changes.items():
        out[name] = topic
    return out


CHANGELOG = "transcript-owner-sessions-changelog"
LEADER = "transcript-owner-__assignor-__leader"
LAYOUT = "transcript.layout"


def test_repo_topics_file_declares_every_topic_the_worker_uses():
    specs = {s.name: s for s in load_topics(ROOT / "topics.yaml")}
    assert set(specs) == {
        "delivery.confirmations", "transcript.entries", "transcript.diagnostics",
        "delivery.confirmations.dlq", CHANGELOG, LEADER, "transcript.checkpoints",
        "transcript.erasures", "transcript.control", LAYOUT,
    }
    # the operator's erasures: read with the input partition of their number, replayed by audit
    control = specs["transcript.control"].config_map
    assert control["message.timestamp.type"] == "LogAppendTime"
    assert control["retention.ms"] == specs["delivery.confirmations"].config_map["retention.ms"]
    assert specs["transcript.checkpoints"].partitions == specs["delivery.confirmations"].partitions
    assert specs["transcript.entries"].config_map["cleanup.policy"] == "compact"
    assert specs["delivery.confirmations"].config_map["retention.ms"] == str(7 * 86400 * 1000)
    assert all(s.partitions == 8 for n, s in specs.items() if n not in (LEADER, LAYOUT))
    assert specs[LEADER].partitions == 1
    # the moves `repartition` made: one partition, so that its records are in one order
    assert specs[LAYOUT].partitions == 1
    assert specs[LAYOUT].config_map["cleanup.policy"] == "compact"
    # every record the worker writes may be up to 2 MiB (a diagnostic carries a session key)
    for name in ("transcript.entries", "transcript.diagnostics", "delivery.confirmations.dlq",
                 CHANGELOG):
        assert specs[name].config_map["max.message.bytes"] == "2097152", name


def test_the_changelog_is_compacted_kept_forever_and_named_as_faust_names_it():
    specs = {s.name: s for s in load_topics(ROOT / "topics.yaml", prefix="p.", app_id="blue")}
    name = changelog_topic("p.", "blue", "sessions")
    assert name == "p.blue-sessions-changelog"
    c = specs[name].config_map
    assert (c["cleanup.policy"], c["retention.ms"], c["min.compaction.lag.ms"]) == (
        "compact", "-1", "0")
    assert specs[name].partitions == WorkerSettings().partitions  # TRANSCRIPT_PARTITIONS' default
    assert "p.blue-__assignor-__leader" in specs


def test_production_replication_applies_to_the_changelog_too():
    (spec,) = [s for s in load_topics(ROOT / "topics.yaml", replication_factor=3)
               if s.name == CHANGELOG]
    assert spec.replication_factor == 3 and spec.config_map["min.insync.replicas"] == "2"


@pytest.mark.parametrize(
    "text, where",
    [
        ('topics:\n  a: {}\n  "{app}-x": {}\n', ':3: topics.{app}-x: unknown placeholder {app}'),
        ('topics:\n  "a b": {}\n', ":2: topics.a b: 'a b' is not a Kafka topic name"),
        ('topics:\n  "{app_id}": {}\n', ":2: topics.{app_id}: '..' is not a Kafka topic name"),
    ],
)
def test_bad_topic_names_name_file_and_line(tmp_path, text, where):
    path = tmp_path / "topics.yaml"
    path.write_text(text)
    with pytest.raises(TopicsFileError) as err:
        load_topics(path, app_id="..")
    assert where in str(err.value)


def test_prefix_and_replication_override():
    specs = load_topics(ROOT / "topics.yaml", prefix="p.", replication_factor=3)
    assert all(s.name.startswith("p.") and s.replication_factor == 3 for s in specs)
    assert all(s.config_map["min.insync.replicas"] == "2" for s in specs)


def test_matching_cluster_has_no_drift():
    specs = load_topics(ROOT / "topics.yaml")
    plan = compare(specs, observed_from(specs))
    assert plan.drift == [] and plan.changes_nothing


def test_missing_topic_is_created_and_config_drift_altered_partitions_refused():
    specs = load_topics(ROOT / "topics.yaml")
    by = {s.name: s for s in specs}
    e = by["transcript.entries"]
    observed = observed_from(specs)
    del observed["delivery.confirmations.dlq"]
    observed["transcript.entries"] = ObservedTopic(
        e.name, 4, 1, {**e.config_map, "cleanup.policy": "delete"}
    )
    plan = compare(specs, observed)
    assert [s.name for s in plan.create] == ["delivery.confirmations.dlq"]
    assert plan.alter == {"transcript.entries": {"cleanup.policy": "compact"}}
    assert [(d.topic, d.kind, d.declared, d.actual) for d in plan.refused] == [
        ("transcript.entries", "partitions", "8", "4")
    ]


@pytest.mark.parametrize(
    "text, where",
    [
        ("topics:\n  a:\n    partitions: 0\n", ":3: topics.a.partitions:"),
        ("topics:\n  a:\n    colour: red\n", ":3: topics.a.colour:"),
        ("defaults:\n  partitions: x\ntopics: {}\n", ":2: defaults.partitions:"),
        ("topics: [\n", ": not valid YAML"),
        ("", ":1: file is empty"),
    ],
)
def test_file_errors_name_file_line_and_field(tmp_path, text, where):
    path = tmp_path / "topics.yaml"
    path.write_text(text)
    with pytest.raises(TopicsFileError) as err:
        load_topics(path)
    assert str(err.value).startswith(str(path))
    assert where in str(err.value)


# ---- acls: ----------------------------------------------------------------------------------

def _bindings(acls, principal):
    return {(b.resource, b.name, b.pattern, b.operation) for b in acls.bindings
            if b.principal == principal}


def test_repo_acls_give_each_principal_what_it_needs_and_no_more():
    acls = load_acls(ROOT / "topics.yaml", prefix="p.", app_id="blue")
    assert dict(acls.principals) == {
        "worker": "User:worker", "connector": "User:connector", "operator": "User:operator",
        "reader": "User:reader"}
    assert _bindings(acls, "User:worker") == {
        ("topic", "p.delivery.confirmations", "literal", "Read"),
        ("topic", "p.delivery.confirmations", "literal", "Write"),  # re-keyed, forwarded
        ("topic", "p.transcript.control", "literal", "Read"),  # the operator's erasures
        ("topic", "p.transcript.entries", "literal", "Write"),
        ("topic", "p.transcript.diagnostics", "literal", "Write"),
        ("topic", "p.delivery.confirmations.dlq", "literal", "Write"),
        ("topic", "p.transcript.erasures", "literal", "Write"),  # forget: in its transaction
        ("topic", "p.transcript.checkpoints", "literal", "Write"),  # state copies, for audit
        ("topic", "p.blue-sessions-changelog", "literal", "Read"),
        ("topic", "p.blue-sessions-changelog", "literal", "Write"),
        ("topic", "p.blue-__assignor-__leader", "literal", "Read"),
        ("group", "p.blue", "literal", "Read"),
        # the exactly-once producer's id is "<group>-<worker>" (workers.stream.transactions)
        ("transactional_id", "p.blue-", "prefixed", "Write"),
        ("transactional_id", "p.blue-", "prefixed", "Describe"),
    }
    assert worker_transactional_id("p.blue", "pod-0", "/s").startswith("p.blue-")
    assert worker_transactional_id("p.blue", None, "/s").startswith("p.blue-")
    assert _bindings(acls, "User:connector") == {
        ("topic", "p.delivery.confirmations", "literal", "Write"),
        ("topic", "p.delivery.confirmations", "literal", "Describe"),
        # a gateway's own transactions, apart from the worker's "p.blue-": it fences no worker
        ("transactional_id", "p.blue.connector-", "prefixed", "Write"),
        ("transactional_id", "p.blue.connector-", "prefixed", "Describe")}
    assert not "p.blue.connector-x".startswith("p.blue-")
    assert _bindings(acls, "User:reader") == {
        ("topic", "p.transcript.entries", "literal", "Read"),
        ("topic", "p.transcript.entries", "literal", "Describe"),
        # a bound read (DESIGN 1.3): the input's partition count and last stable offsets;
        # nothing that writes, so no entry and no position can be forged by a reader
        ("topic", "p.delivery.confirmations", "literal", "Describe"),
        ("topic", "p.transcript.layout", "literal", "Read"),  # the earlier partition counts
        ("topic", "p.transcript.layout", "literal", "Describe"),
        # the TypeScript reader's throw-away groups (kafkajs cannot assign partitions itself)
        ("group", "p.blue.reader-", "prefixed", "Read"),
        ("group", "p.blue.reader-", "prefixed", "Delete")}
    # the only principal that may erase (DESIGN 1.2): no connector writes transcript.control
    assert _bindings(acls, "User:operator") == {
        ("topic", "p.transcript.control", "literal", "Write"),
        ("topic", "p.transcript.control", "literal", "Describe"),
        ("topic", "p.transcript.entries", "literal", "Read"),
        ("topic", "p.transcript.entries", "literal", "Describe"),
        ("topic", "p.transcript.erasures", "literal", "Read"),
        ("topic", "p.transcript.erasures", "literal", "Describe"),
        # a move in progress: forget refuses to key an erase for the old count
        ("topic", "p.transcript.layout", "literal", "Read"),
        ("topic", "p.transcript.layout", "literal", "Describe")}
    writers = {b.principal for b in acls.bindings
               if b.name == "p.transcript.control" and b.operation == "Write"}
    assert writers == {"User:operator"}
    assert all(b.permission == "allow" and b.host == "*" for b in acls.bindings)
    # every topic of the file is watched for extra bindings, declared in acls: or not
    specs = load_topics(ROOT / "topics.yaml", prefix="p.", app_id="blue")
    assert {n for k, n, _ in acls.resources if k == "topic"} == {s.name for s in specs}
    assert ("transactional_id", "p.blue-", "prefixed") in acls.resources
    assert ("group", "p.blue", "literal") in acls.resources


def test_principals_come_from_the_environment_first():
    acls = load_acls(ROOT / "topics.yaml", environ={
        "TRANSCRIPT_ACL_WORKER_PRINCIPAL": "transcript-owner-prod",
        "TRANSCRIPT_ACL_READER_PRINCIPAL": "User:CN=sink,O=example",
        "TRANSCRIPT_ACL_CONNECTOR_PRINCIPAL": ""})  # empty: the file's
    assert dict(acls.principals) == {"worker": "User:transcript-owner-prod",
                                     "connector": "User:connector",
                                     "operator": "User:operator",
                                     "reader": "User:CN=sink,O=example"}
    assert _bindings(acls, "User:worker") == set()
    assert ("topic", "transcript.entries", "literal", "Write") in _bindings(
        acls, "User:transcript-owner-prod")


@pytest.mark.parametrize("value", ["Group:ops", " worker", "a\tb", "User:"])
def test_a_bad_principal_in_the_environment_names_the_variable(value):
    with pytest.raises(SettingsError, match="^TRANSCRIPT_ACL_WORKER_PRINCIPAL: "):
        load_acls(ROOT / "topics.yaml", environ={"TRANSCRIPT_ACL_WORKER_PRINCIPAL": value})


ACL_BASE = "topics:\n  a: {}\n  b: {}\nacls:\n"


@pytest.mark.parametrize("text, where", [
    ("  w:\n    topics:\n      c: [Read]\n", ":7: acls.w.topics.c: not a topic of this file"),
    ("  w:\n    topics:\n      a: [Read, Fly]\n", ":7: acls.w.topics.a.1: Input should be"),
    ("  w:\n    groups:\n      g: [Write]\n", ":7: acls.w.groups.g.0: Input should be"),
    ("  w:\n    cluster: [Read]\n", ":6: acls.w.cluster.0: Input should be"),
    ("  w:\n    topic: {}\n", ":6: acls.w.topic: Extra inputs are not permitted"),
    ("  Worker-1: {}\n", ":5: acls.Worker-1: a principal's key is"),
    ("  w:\n    principal: Group:x\n", ":6: acls.w.principal: 'Group:x': only User principals"),
    ("  w:\n    groups:\n      \"{app}\": [Read]\n",
     ":7: acls.w.groups.{app}: unknown placeholder"),
    ("  w:\n    transactional_ids:\n      \"a b*\": [Write]\n",
     ":7: acls.w.transactional_ids.a b*: 'a b' is not a valid transactional id name"),
])
def test_acl_errors_name_file_line_and_field(tmp_path, text, where):
    path = tmp_path / "topics.yaml"
    path.write_text(ACL_BASE + text)
    with pytest.raises(TopicsFileError) as err:
        load_acls(path)
    assert str(err.value).startswith(str(path))
    assert where in str(err.value)


def test_a_star_makes_a_prefixed_pattern_and_names_take_app_id_and_prefix(tmp_path):
    path = tmp_path / "topics.yaml"
    path.write_text(ACL_BASE + "  w:\n    groups:\n      \"{app_id}\": [Read]\n"
                    "      \"{app_id}-audit-*\": [Read]\n    cluster: [IdempotentWrite]\n")
    acls = load_acls(path, prefix="t.", app_id="x")
    assert _bindings(acls, "User:w") == {
        ("group", "t.x", "literal", "Read"), ("group", "t.x-audit-", "prefixed", "Read"),
        ("cluster", "kafka-cluster", "literal", "IdempotentWrite")}
    assert ("cluster", "kafka-cluster", "literal") in acls.resources


def test_acl_drift_is_missing_and_extra_and_apply_only_adds():
    acls = load_acls(ROOT / "topics.yaml", prefix="p.")
    have = set(acls.bindings)
    assert not compare_acls(acls, have).drift
    gone = AclBinding("topic", "p.transcript.entries", "literal", "User:reader", "Read")
    stray = AclBinding("topic", "p.", "prefixed", "User:connector", "Read")
    denied = AclBinding("group", "p.transcript-owner", "literal", "User:worker", "Read",
                        permission="deny")
    plan = compare_acls(acls, (have - {gone}) | {stray, denied})
    assert plan.drift and plan.create == [gone]
    assert plan.extra == sorted([stray, denied])
    rows = [r.split() for r in acl_table(plan).splitlines()[2:]]
    assert ["group", "p.transcript-owner", "User:worker", "Read", "(none)", "deny"] in rows
    assert ["topic", "p.*", "User:connector", "Read", "(none)", "allow"] in rows
    assert ["topic", "p.transcript.entries", "User:reader", "Read", "allow", "absent"] in rows
    assert len(rows) == 3


def test_a_file_without_acls_declares_none(tmp_path):
    path = tmp_path / "topics.yaml"
    path.write_text("topics:\n  a: {}\n")
    acls = load_acls(path)
    assert acls.bindings == () and acls.principals == ()
