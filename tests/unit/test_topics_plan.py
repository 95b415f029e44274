"""The pure drift rules of topics.yaml, without a broker."""

from __future__ import annotations

from pathlib import Path

import pytest

from workers.topics import ObservedTopic, TopicsFileError, compare, load_topics

ROOT = Path(__file__).resolve().parents[2]


def observed_from(specs, **changes):
    out = {}
    for s in specs:
        out[s.name] = ObservedTopic(s.name, s.partitions, s.replication_factor, s.config_map)
    for name, topic in changes.items():
        out[name] = topic
    return out


def test_repo_topics_file_declares_the_four_topics():
    specs = {s.name: s for s in load_topics(ROOT / "topics.yaml")}
    assert set(specs) == {
        "delivery.confirmations", "transcript.entries", "transcript.diagnostics",
        "delivery.confirmations.dlq",
    }
    assert specs["transcript.entries"].config_map["cleanup.policy"] == "compact"
    assert specs["delivery.confirmations"].config_map["retention.ms"] == str(7 * 86400 * 1000)
    assert all(s.partitions == 8 for s in specs.values())


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
