"""`transcript-owner topics apply|check`: the shell that reads the cluster and applies the plan."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from workers.settings import KafkaSettings, SettingsError, kafka_settings, worker_settings
from workers.topics import (
    ObservedTopic,
    Plan,
    TopicsFileError,
    TopicSpec,
    compare,
    drift_table,
    load_topics,
)

DEFAULT_FILE = Path(__file__).resolve().parent.parent / "topics.yaml"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("action", choices=["apply", "check"])
    parser.add_argument("--file", type=Path, default=DEFAULT_FILE, help="default: %(default)s")
    parser.add_argument(
        "--dry-run", action="store_true", help="apply: validate changes with the broker only"
    )
    parser.add_argument("--timeout", type=float, default=30.0, help="seconds (default 30)")


def observe(admin, specs: list[TopicSpec]) -> dict[str, ObservedTopic]:
    from kafka.admin import ConfigResource, ConfigResourceType

    existing = set(admin.list_topics())
    names = [s.name for s in specs if s.name in existing]
    if not names:
        return {}
    described = {t["name"]: t for t in admin.describe_topics(names)}
    wanted = {s.name: [k for k, _ in s.configs] for s in specs}
    resources = [ConfigResource(ConfigResourceType.TOPIC, n, configs=None) for n in names]
    configs = admin.describe_configs(resources, config_filter="all")
    by_topic = configs.get("topic", {})
    observed = {}
    for name in names:
        partitions = described[name]["partitions"]
        values = by_topic.get(name, {})
        observed[name] = ObservedTopic(
            name=name,
            partitions=len(partitions),
            replication_factor=min((len(p["replica_nodes"]) for p in partitions), default=0),
            configs={k: values[k]["value"] for k in wanted[name] if k in values},
        )
    return observed


def apply(admin, specs: list[TopicSpec], plan: Plan, dry_run: bool, timeout: float) -> list[str]:
    from kafka.admin import ConfigResource, ConfigResourceType, NewTopic
    from kafka.errors import TopicAlreadyExistsError

    lines = []
    if plan.create:
        new = [
            NewTopic(s.name, s.partitions, s.replication_factor, topic_configs=s.config_map)
            for s in plan.create
        ]
        try:
            admin.create_topics(new, timeout_ms=int(timeout * 1000), validate_only=dry_run)
        except TopicAlreadyExistsError:
            pass  # another apply won the race: the topic exists, which is what we want
        for s in plan.create:
            lines.append(f"created {s.name} ({s.partitions} partitions, rf {s.replication_factor})")
    if plan.alter:
        resources = [
            ConfigResource(ConfigResourceType.TOPIC, name, configs=values)
            for name, values in plan.alter.items()
        ]
        admin.alter_configs(resources, validate_only=dry_run, incremental=True)
        for name, values in plan.alter.items():
            for key, value in values.items():
                lines.append(f"set {name} {key}={value}")
    for d in plan.refused:
        lines.append(
            f"would not change {d.item} of {d.topic} ({d.actual} -> {d.declared}): "
            + (
                "changing partitions moves sessions between partitions; do it deliberately"
                if d.kind == "partitions"
                else "replica reassignment is an operator's job"
            )
        )
    if dry_run:
        lines = [f"(dry run) {line}" for line in lines]
    return lines


def run(args: argparse.Namespace) -> int:
    try:
        settings: KafkaSettings = kafka_settings()
        specs = load_topics(args.file, settings.topic_prefix, settings.replication_factor,
                            app_id=worker_settings().app_id)
    except (SettingsError, TopicsFileError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    from kafka.admin import KafkaAdminClient
    from kafka.errors import KafkaError

    try:
        admin = KafkaAdminClient(
            **settings.kafka_python_kwargs(),
            client_id="transcript-owner-topics",
            request_timeout_ms=int(args.timeout * 1000),
        )
    except KafkaError as exc:
        print(f"error: cannot reach Kafka at {settings.bootstrap}: {exc}", file=sys.stderr)
        return 2
    try:
        plan = compare(specs, observe(admin, specs))
        if args.action == "check":
            if not plan.drift:
                print(f"no drift: {len(specs)} topics match {args.file.name}")
                return 0
            print(drift_table(plan.drift))
            return 1
        if plan.changes_nothing and not plan.refused:
            print(f"nothing to change: {len(specs)} topics match {args.file.name}")
            return 0
        for line in apply(admin, specs, plan, args.dry_run, args.timeout):
            print(line)
        return 1 if plan.refused else 0
    except KafkaError as exc:
        print(f"error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    finally:
        admin.close()
