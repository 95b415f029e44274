"""The pure drift rules of topics.yaml, without a broker."""

from __future__ import annotations

from pathlib import Path

import pytest

from workers import local_state
from workers.settings import WorkerSettings
from workers.topics import ObservedTopic, TopicsFileError, compare, load_topics

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


def test_repo_topics_file_declares_every_topic_the_worker_uses():
    specs = {s.name: s for s in load_topics(ROOT / "topics.yaml")}
    assert set(specs) == {
        "delivery.confirmations", "transcript.entries", "transcript.diagnostics",
        "delivery.confirmations.dlq", CHANGELOG, LEADER,
    }
    assert specs["transcript.entries"].config_map["cleanup.policy"] == "compact"
    assert specs["delivery.confirmations"].config_map["retention.ms"] == str(7 * 86400 * 1000)
    assert all(s.partitions == 8 for n, s in specs.items() if n != LEADER)
    assert specs[LEADER].partitions == 1
    # every record the worker writes may be up to 2 MiB (a diagnostic carries a session key)
    for name in ("transcript.entries", "transcript.diagnostics", "delivery.confirmations.dlq",
                 CHANGELOG):
        assert specs[name].config_map["max.message.bytes"] == "2097152", name


def test_the_changelog_is_compacted_kept_forever_and_named_as_faust_names_it():
    specs = {s.name: s for s in load_topics(ROOT / "topics.yaml", prefix="p.", app_id="blue")}
    name = local_state.changelog_topic("p.", "blue", "sessions")
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
