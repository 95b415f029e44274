"""`transcript-owner topics apply|check`: the shell that reads the cluster and applies the plan.

Topics first, then the ACLs of topics.yaml's `acls:` (workers.topics: what is drift, and why
`apply` adds bindings but never removes one). A cluster without an authorizer answers ACL
requests with SECURITY_DISABLED: then the ACLs are skipped with a note on stderr, and the
topics alone decide the outcome.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from workers.core.errors import OwnerError
from workers.settings import KafkaSettings, SettingsError, kafka_settings, worker_settings
from workers.topics import (
    PACKAGED_TOPICS_FILE,
    AclBinding,
    AclPlan,
    Acls,
    ObservedTopic,
    Plan,
    TopicsFileError,
    TopicSpec,
    acl_table,
    compare,
    compare_acls,
    drift_table,
    load_acls,
    load_topics,
    topics_file,
)

DEFAULT_FILE = PACKAGED_TOPICS_FILE


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("action", choices=["apply", "check"])
    parser.add_argument("--file", type=Path, default=topics_file(),
                        help="default: TRANSCRIPT_TOPICS_FILE, else %(default)s")
    parser.add_argument(
        "--dry-run", action="store_true", help="apply: validate changes with the broker only"
    )
    parser.add_argument("--timeout", type=float, default=30.0, help="seconds (default 30)")
    parser.add_argument(
        "--no-acls", action="store_true",
        help="leave ACLs alone: neither check nor apply the file's `acls:` section",
    )


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
    if not dry_run and (plan.create or plan.alter):
        _await_visible(admin, specs, plan, timeout)
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


_OPERATIONS = {  # topics.yaml's spelling -> kafka-python's ACLOperation member
    "Read": "READ", "Write": "WRITE", "Create": "CREATE", "Delete": "DELETE", "Alter": "ALTER",
    "Describe": "DESCRIBE", "ClusterAction": "CLUSTER_ACTION",
    "DescribeConfigs": "DESCRIBE_CONFIGS", "AlterConfigs": "ALTER_CONFIGS",
    "IdempotentWrite": "IDEMPOTENT_WRITE", "All": "ALL",
}
_KINDS = {"topic": "TOPIC", "group": "GROUP", "transactional_id": "TRANSACTIONAL_ID",
          "cluster": "CLUSTER"}


class AclsUnavailable(OwnerError):
    """The cluster has no authorizer: there are no ACLs to check or apply."""


def observe_acls(admin, acls: Acls) -> set[AclBinding]:
    """Every binding the cluster has on the deployment's resources, however it matches them
    (a MATCH filter: the literal name, prefixed patterns covering it, and `*`)."""
    from kafka.admin import (
        ACLFilter,
        ACLOperation,
        ACLPermissionType,
        ACLResourcePatternType,
        ResourcePatternFilter,
        ResourceType,
    )
    from kafka.errors import SecurityDisabledError

    operations = {getattr(ACLOperation, k): v for v, k in _OPERATIONS.items()}
    kinds = {getattr(ResourceType, k): v for v, k in _KINDS.items()}
    found: set[AclBinding] = set()
    for kind, name, _pattern in acls.resources:
        match = ACLFilter(
            principal=None, host=None, operation=ACLOperation.ANY,
            permission_type=ACLPermissionType.ANY,
            resource_pattern=ResourcePatternFilter(
                getattr(ResourceType, _KINDS[kind]), name, ACLResourcePatternType.MATCH))
        try:
            bindings, _ = admin.describe_acls(match)
        except SecurityDisabledError as exc:
            raise AclsUnavailable(str(exc)) from None
        for b in bindings:
            rp = b.resource_pattern
            found.add(AclBinding(
                resource=kinds.get(rp.resource_type, rp.resource_type.name.lower()),
                name=rp.resource_name,
                pattern=rp.pattern_type.name.lower(),
                principal=b.principal,
                operation=operations.get(b.operation, b.operation.name.title().replace("_", "")),
                permission=b.permission_type.name.lower(),
                host=b.host,
            ))
    return found


def _await_visible(admin, specs: list[TopicSpec], plan: Plan, timeout: float) -> None:  # noqa: ANN001
    """Until the broker shows the topics created and the configs set: it applies them from the
    metadata log a moment after the controller accepts them, and a `check` right after `apply`
    must not report drift that is already repaired."""
    from kafka.errors import KafkaError

    wanted = {s.name for s in plan.create}
    deadline, pause = time.monotonic() + timeout, 0.05
    while True:
        seen = observe(admin, specs)
        if wanted <= set(seen) and all(
                name in seen and all(seen[name].configs.get(k) == v for k, v in values.items())
                for name, values in plan.alter.items()):
            return
        if time.monotonic() > deadline:
            raise KafkaError(f"the changes were accepted but the broker did not show them "
                             f"within {timeout:.0f}s")
        time.sleep(pause)
        pause = min(1.0, pause * 2)


def apply_acls(admin, acls: Acls, plan: AclPlan, dry_run: bool, timeout: float) -> list[str]:
    """Create the missing bindings (never delete one) and wait until the broker's authorizer
    has them: it applies them from the metadata log a moment after the controller accepts
    them, and a `check` right after `apply` must see them."""
    from kafka.admin import (
        ACL,
        ACLOperation,
        ACLPermissionType,
        ACLResourcePatternType,
        ResourcePattern,
        ResourceType,
    )
    from kafka.errors import KafkaError

    lines = []
    if plan.create and not dry_run:
        result = admin.create_acls([
            ACL(principal=b.principal, host=b.host,
                operation=getattr(ACLOperation, _OPERATIONS[b.operation]),
                permission_type=ACLPermissionType.ALLOW,
                resource_pattern=ResourcePattern(
                    getattr(ResourceType, _KINDS[b.resource]), b.name,
                    getattr(ACLResourcePatternType, b.pattern.upper())))
            for b in plan.create])
        if result["failed"]:
            errors = sorted({getattr(e, "__name__", str(e)) for e in result["failed"]})
            raise KafkaError(f"{len(result['failed'])} of {len(plan.create)} ACL bindings "
                             f"were not created: {', '.join(errors)}")
        deadline, pause = time.monotonic() + timeout, 0.05
        while not set(plan.create) <= observe_acls(admin, acls):
            if time.monotonic() > deadline:
                raise KafkaError(f"the {len(plan.create)} ACL bindings were created but the "
                                 f"broker did not show them within {timeout:.0f}s")
            time.sleep(pause)  # the authorizer tells no one when it has caught up: ask again
            pause = min(0.5, pause * 2)
    for b in plan.create:
        lines.append(f"allowed {b.principal} {b.operation} on {b.resource_label}")
    for b in plan.extra:
        lines.append(
            f"left {b.permission} {b.principal} {b.operation} on {b.resource_label}"
            + ("" if b.host == "*" else f" from {b.host}")
            + ": not in topics.yaml (declare it, or remove it deliberately)")
    if dry_run:
        lines = [f"(dry run) {line}" for line in lines]
    return lines


def run(args: argparse.Namespace) -> int:
    try:
        settings: KafkaSettings = kafka_settings()
        app_id = worker_settings().app_id
        specs = load_topics(args.file, settings.topic_prefix, settings.replication_factor,
                            app_id=app_id)
        acls = None if args.no_acls else load_acls(
            args.file, settings.topic_prefix, app_id=app_id, environ=os.environ)
    except (SettingsError, TopicsFileError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    from kafka.admin import KafkaAdminClient
    from kafka.errors import KafkaError

    from workers.kafka_auth import check_access

    check_access(settings, timeout_s=args.timeout)  # refused credentials: exit 2, named
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
        acl_plan = _acl_plan(admin, acls, settings, args.file.name)
        matched = f"{len(specs)} topics" + (
            f" and {len(acls.bindings)} ACL bindings" if acl_plan is not None and acls else "")
        if args.action == "check":
            if not plan.drift and not (acl_plan and acl_plan.drift):
                print(f"no drift: {matched} match {args.file.name}")
                return 0
            tables = [drift_table(plan.drift)] if plan.drift else []
            if acl_plan and acl_plan.drift:
                tables.append(acl_table(acl_plan))
            print("\n\n".join(tables))
            return 1
        if plan.changes_nothing and not plan.refused and not (acl_plan and acl_plan.create):
            print(f"nothing to change: {matched} match {args.file.name}")
            for line in apply_acls(admin, acls, acl_plan, args.dry_run, args.timeout) \
                    if acl_plan and acls else ():
                print(line)  # the extra bindings left in place
            return 0
        for line in apply(admin, specs, plan, args.dry_run, args.timeout):
            print(line)
        for line in apply_acls(admin, acls, acl_plan, args.dry_run, args.timeout) \
                if acl_plan and acls else ():
            print(line)
        return 1 if plan.refused else 0
    except KafkaError as exc:
        print(f"error: {_kafka_error(exc, settings)}", file=sys.stderr)
        return 2
    finally:
        admin.close()


def _acl_plan(admin, acls: Acls | None, settings: KafkaSettings, file: str) -> AclPlan | None:
    """None when ACLs are not compared: --no-acls, none declared, or no authorizer (noted)."""
    if acls is None or not acls.bindings:
        return None
    try:
        return compare_acls(acls, observe_acls(admin, acls))
    except AclsUnavailable:
        print(f"note: acls: skipped: the cluster at {settings.bootstrap} has no authorizer "
              f"(SECURITY_DISABLED); the {len(acls.bindings)} bindings of {file} were not "
              "compared or applied", file=sys.stderr)
        return None


def _kafka_error(exc: Exception, settings: KafkaSettings) -> str:
    from kafka.errors import ClusterAuthorizationFailedError, TopicAuthorizationFailedError

    who = (f"KAFKA_SASL_USERNAME={settings.sasl_username!r}" if settings.sasl_username
           else "this client")
    if isinstance(exc, ClusterAuthorizationFailedError):
        return (f"{type(exc).__name__}: {who} may not administer the cluster (ACLs need "
                "Describe and Alter on it): run `topics` as an admin, or with --no-acls")
    if isinstance(exc, TopicAuthorizationFailedError):
        return (f"{type(exc).__name__}: {who} may not describe or create the topics: "
                "run `topics` as an admin")
    return f"{type(exc).__name__}: {exc}"
