"""topics.yaml as data, and the pure comparison of declared topics and ACLs with a cluster's.

`topics_cli` is the shell that asks the cluster; everything that decides lives here so that
drift rules are tested without a broker.

ACLs (the file's `acls:` section): each entry is a principal (a SASL user, `User:<name>`) and
what it may do on the deployment's topics, consumer groups, transactional ids and the cluster.
Names follow the topics' rules: `{app_id}` filled in, TRANSCRIPT_TOPIC_PREFIX applied. A topic
is a key of `topics:`, bound as a LITERAL pattern on its prefixed name; a group or
transactional id ending in `*` is a PREFIXED pattern (the rest of the name), else LITERAL.
Every binding allows, from any host. The principal's user name is `principal:` (default: the
entry's key), overridden by TRANSCRIPT_ACL_<KEY>_PRINCIPAL.

Drift: a declared binding the cluster lacks is `missing` (`apply` creates it). A binding the
cluster has on one of the deployment's resources (every topic of the file, every group and
transactional id of `acls:`, the cluster if `acls:` names it) that the file does not declare is
`extra`, however it matches (literal, a prefix, `*`) and whether it allows or denies: `check`
reports it, and `apply` leaves it in place and says so, since removing access is a decision for
an operator (it may belong to another tool), like changing a partition count.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from workers.core.errors import OwnerError
from workers.settings import SettingsError, WorkerSettings

DEFAULT_APP_ID: str = WorkerSettings.model_fields["app_id"].default
_PLACEHOLDER = re.compile(r"\{([^{}]*)\}")
_KAFKA_NAME = re.compile(r"^[A-Za-z0-9._-]{1,249}$")


class TopicsFileError(OwnerError):
    """topics.yaml is unreadable or invalid; the message names the file, line and field."""


TOPICS_FILE_ENV = "TRANSCRIPT_TOPICS_FILE"
# the repository's, and the image's /app/topics.yaml: beside the installed package
PACKAGED_TOPICS_FILE = Path(__file__).resolve().parents[1] / "topics.yaml"
KAFKA_DEFAULT_RETENTION_MS = 7 * 86_400_000  # retention.ms when a topic does not set it


def topics_file(environ: Mapping[str, str] | None = None) -> Path:
    """The topics.yaml a command reads unless told otherwise: TRANSCRIPT_TOPICS_FILE, else the
    one beside the package. `topics apply` and the worker read the same one, so the worker
    checks its settings against the retentions the cluster was given."""
    env = os.environ if environ is None else environ
    return Path(env[TOPICS_FILE_ENV]) if env.get(TOPICS_FILE_ENV) else PACKAGED_TOPICS_FILE


def retention_ms(path: Path, topic: str) -> int | None:
    """`topic`'s retention.ms in topics.yaml (a logical name: `delivery.confirmations`), Kafka's
    default when the file sets none; None when it keeps records for ever (-1). TopicsFileError
    names the file and the field."""
    spec = next((s for s in load_topics(path) if s.name == topic), None)
    if spec is None:
        raise TopicsFileError(f"{path}: topic {topic!r} is not declared")
    raw = spec.config_map.get("retention.ms")
    if raw is None:
        return KAFKA_DEFAULT_RETENTION_MS
    try:
        ms = int(raw)
    except ValueError:
        raise TopicsFileError(f"{path}: topics.{topic}.configs.retention.ms: not an integer: "
                              f"{raw!r}") from None
    return None if ms < 0 else ms


class _TopicDecl(BaseModel):
    model_config = ConfigDict(extra="forbid")
    partitions: int | None = Field(default=None, ge=1)
    replication_factor: int | None = Field(default=None, ge=1)
    configs: dict[str, str] = {}


class _Defaults(BaseModel):
    model_config = ConfigDict(extra="forbid")
    partitions: int = Field(default=8, ge=1)
    replication_factor: int = Field(default=1, ge=1)


TopicOperation = Literal["Read", "Write", "Create", "Delete", "Alter", "Describe",
                         "DescribeConfigs", "AlterConfigs", "All"]
GroupOperation = Literal["Read", "Describe", "Delete", "All"]
TransactionalIdOperation = Literal["Write", "Describe", "All"]
ClusterOperation = Literal["Create", "Alter", "Describe", "ClusterAction", "DescribeConfigs",
                           "AlterConfigs", "IdempotentWrite", "All"]


class _AclDecl(BaseModel):
    model_config = ConfigDict(extra="forbid")
    principal: str | None = Field(default=None, min_length=1, max_length=255)
    topics: dict[str, list[TopicOperation]] = {}
    groups: dict[str, list[GroupOperation]] = {}
    transactional_ids: dict[str, list[TransactionalIdOperation]] = {}
    cluster: list[ClusterOperation] = []


class _File(BaseModel):
    model_config = ConfigDict(extra="forbid")
    defaults: _Defaults = _Defaults()
    topics: dict[str, _TopicDecl]
    acls: dict[str, _AclDecl] = {}


@dataclass(frozen=True)
class TopicSpec:
    name: str  # cluster name, prefix applied
    partitions: int
    replication_factor: int
    configs: tuple[tuple[str, str], ...]

    @property
    def config_map(self) -> dict[str, str]:
        return dict(self.configs)


def _line_of(node: yaml.Node, loc: tuple[Any, ...]) -> int:
    """1-based line of the deepest YAML node on the pydantic error path."""
    for key in loc:
        if isinstance(node, yaml.SequenceNode) and isinstance(key, int) \
                and 0 <= key < len(node.value):
            node = node.value[key]
            continue
        if not isinstance(node, yaml.MappingNode):
            break
        for k, v in node.value:
            if k.value == str(key):
                node = v
                break
        else:
            break
    return node.start_mark.line + 1


def _coerce_scalars(raw: Any) -> Any:
    """Config values may be written as YAML numbers; Kafka wants strings."""
    if isinstance(raw, dict) and "topics" in raw and isinstance(raw["topics"], dict):
        for decl in raw["topics"].values():
            if isinstance(decl, dict) and isinstance(decl.get("configs"), dict):
                decl["configs"] = {
                    k: (str(v).lower() if isinstance(v, bool) else str(v))
                    for k, v in decl["configs"].items()
                }
    return raw


def _key_line(node: yaml.Node, name: str) -> int:
    """1-based line of topic `name`'s key under `topics`."""
    for k, v in node.value if isinstance(node, yaml.MappingNode) else ():
        if k.value == "topics" and isinstance(v, yaml.MappingNode):
            for tk, _ in v.value:
                if tk.value == name:
                    return tk.start_mark.line + 1
    return 1


def _cluster_name(path: Path, node: yaml.Node, name: str, prefix: str, app_id: str) -> str:
    """The topic's name on the cluster: `{app_id}` filled in, the prefix applied."""

    def fill(match: re.Match) -> str:
        if match.group(1) != "app_id":
            raise TopicsFileError(
                f"{path}:{_key_line(node, name)}: topics.{name}: unknown placeholder "
                f"{match.group(0)} (known: {{app_id}})")
        return app_id

    full = prefix + _PLACEHOLDER.sub(fill, name)
    if not _KAFKA_NAME.match(full) or full in (".", ".."):
        raise TopicsFileError(
            f"{path}:{_key_line(node, name)}: topics.{name}: {full!r} is not a Kafka topic name "
            "(1..249 of A-Z a-z 0-9 . _ -)")
    return full


def _parse(path: Path) -> tuple[yaml.Node, _File]:
    try:
        text = path.read_text(encoding="utf-8")
        node = yaml.compose(text)
        raw = yaml.safe_load(text)
    except OSError as exc:
        raise TopicsFileError(f"{path}: cannot read: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark else str(path)
        raise TopicsFileError(f"{where}: not valid YAML: {getattr(exc, 'problem', exc)}") from None
    if node is None:
        raise TopicsFileError(f"{path}:1: file is empty; expected a 'topics' mapping")
    try:
        parsed = _File.model_validate(_coerce_scalars(raw))
    except ValidationError as exc:
        err = exc.errors()[0]
        field_path = ".".join(str(p) for p in err["loc"])
        line = _line_of(node, tuple(err["loc"]))
        raise TopicsFileError(f"{path}:{line}: {field_path}: {err['msg']}") from None
    return node, parsed


def load_topics(
    path: Path, prefix: str = "", replication_factor: int | None = None,
    app_id: str = DEFAULT_APP_ID,
) -> list[TopicSpec]:
    """Parse topics.yaml; `replication_factor` (from the environment) overrides the file's, and
    `app_id` (TRANSCRIPT_APP_ID) fills `{app_id}` in topic names."""
    node, parsed = _parse(path)
    specs = []
    for name, decl in parsed.topics.items():
        rf = replication_factor or decl.replication_factor or parsed.defaults.replication_factor
        configs = dict(decl.configs)
        if rf >= 3:
            configs.setdefault("min.insync.replicas", str(rf - 1))
        specs.append(
            TopicSpec(
                name=_cluster_name(path, node, name, prefix, app_id),
                partitions=decl.partitions or parsed.defaults.partitions,
                replication_factor=rf,
                configs=tuple(sorted(configs.items())),
            )
        )
    return specs


@dataclass(frozen=True)
class ObservedTopic:
    name: str
    partitions: int
    replication_factor: int
    configs: dict[str, str]  # effective values for the keys asked about


DriftKind = Literal["missing", "partitions", "replication_factor", "config"]


@dataclass(frozen=True)
class Drift:
    topic: str
    kind: DriftKind
    item: str
    declared: str
    actual: str
    fixable: bool  # can `apply` repair it without moving or deleting data?


@dataclass
class Plan:
    create: list[TopicSpec] = field(default_factory=list)
    alter: dict[str, dict[str, str]] = field(default_factory=dict)  # topic -> config -> value
    refused: list[Drift] = field(default_factory=list)  # drift `apply` will not touch
    drift: list[Drift] = field(default_factory=list)

    @property
    def changes_nothing(self) -> bool:
        return not self.create and not self.alter


def compare(specs: list[TopicSpec], observed: dict[str, ObservedTopic]) -> Plan:
    """What differs between topics.yaml and the cluster, and what `apply` may do about it."""
    plan = Plan()
    for spec in specs:
        have = observed.get(spec.name)
        if have is None:
            plan.drift.append(Drift(spec.name, "missing", "topic", "present", "absent", True))
            plan.create.append(spec)
            continue
        if have.partitions != spec.partitions:
            d = Drift(
                spec.name, "partitions", "partitions",
                str(spec.partitions), str(have.partitions), False,
            )
            plan.drift.append(d)
            plan.refused.append(d)
        if have.replication_factor != spec.replication_factor:
            d = Drift(
                spec.name, "replication_factor", "replication.factor",
                str(spec.replication_factor), str(have.replication_factor), False,
            )
            plan.drift.append(d)
            plan.refused.append(d)
        for key, value in spec.configs:
            actual = have.configs.get(key, "")
            if actual != value:
                plan.drift.append(Drift(spec.name, "config", key, value, actual or "(unset)", True))
                plan.alter.setdefault(spec.name, {})[key] = value
    return plan


# ---- ACLs ----------------------------------------------------------------------------------

ResourceKind = Literal["topic", "group", "transactional_id", "cluster"]
CLUSTER_RESOURCE = "kafka-cluster"  # the one name of Kafka's cluster resource
_ROLE = re.compile(r"^[a-z][a-z0-9_]{0,63}$")
_RESOURCE_LABEL = {"topic": "topic", "group": "group", "transactional_id": "transactional-id",
                   "cluster": "cluster"}


@dataclass(frozen=True, order=True)
class AclBinding:
    """One ACL binding, in topics.yaml's words (operations as the file spells them)."""

    resource: str  # ResourceKind, or what the cluster reports for other kinds
    name: str  # cluster name, prefix applied; without the `*` of a prefixed pattern
    pattern: str  # "literal" | "prefixed"
    principal: str  # "User:worker"
    operation: str  # "Read", "Write", "IdempotentWrite", …
    permission: str = "allow"  # "allow" | "deny"
    host: str = "*"

    @property
    def resource_label(self) -> str:
        kind = _RESOURCE_LABEL.get(self.resource, self.resource)
        if self.resource == "cluster":
            return kind
        return f"{kind} {self.name}{'*' if self.pattern == 'prefixed' else ''}"


@dataclass(frozen=True)
class Acls:
    bindings: tuple[AclBinding, ...]  # what topics.yaml declares
    # the deployment's resources, (kind, name, pattern): every binding the cluster has on one
    # of them (however it matches) is compared with `bindings`
    resources: tuple[tuple[str, str, str], ...]
    principals: tuple[tuple[str, str], ...]  # (key in acls:, principal)


def principal_env(role: str) -> str:
    """The variable that overrides the principal of acls.<role>."""
    return f"TRANSCRIPT_ACL_{role.upper()}_PRINCIPAL"


def _principal(value: str) -> str:
    """`User:<name>` from `<name>` or `User:<name>`; ValueError says what is wrong."""
    if value != value.strip() or not value:
        raise ValueError("empty, or with leading or trailing blanks")
    if any(ord(c) < 32 or ord(c) == 127 for c in value):
        raise ValueError("holds a control character")
    kind, sep, name = value.partition(":")
    if not sep:
        kind, name = "User", value
    if kind != "User":
        raise ValueError(f"{value!r}: only User principals (User:<name>, or just the name)")
    if not name or len(name) > 255:
        raise ValueError(f"{value!r}: the user name must be 1..255 characters")
    return f"User:{name}"


def _key_node(node: yaml.Node, *path: str) -> yaml.Node | None:
    """The key node at `path` (mapping keys), for error lines."""
    found = None
    for key in path:
        if not isinstance(node, yaml.MappingNode):
            return found
        for k, v in node.value:
            if k.value == key:
                found, node = k, v
                break
        else:
            return found
    return found


def load_acls(path: Path, prefix: str = "", app_id: str = DEFAULT_APP_ID,
              environ: Mapping[str, str] | None = None) -> Acls:
    """The `acls:` section of topics.yaml as bindings on cluster names. `environ` may
    override principals (TRANSCRIPT_ACL_<KEY>_PRINCIPAL): a bad value is a SettingsError naming
    the variable; a bad file, a TopicsFileError naming file, line and field."""
    node, parsed = _parse(path)
    env = environ or {}

    def fail(where: tuple[str, ...], message: str) -> TopicsFileError:
        key = _key_node(node, *where)
        line = key.start_mark.line + 1 if key is not None else 1
        return TopicsFileError(f"{path}:{line}: {'.'.join(where)}: {message}")

    def name_of(where: tuple[str, ...], raw: str, kind: str) -> tuple[str, str]:
        pattern = "literal"
        if kind != "topic" and raw.endswith("*"):
            raw, pattern = raw[:-1], "prefixed"

        def fill(match: re.Match) -> str:
            if match.group(1) != "app_id":
                raise fail(where, f"unknown placeholder {match.group(0)} (known: {{app_id}})")
            return app_id

        full = prefix + _PLACEHOLDER.sub(fill, raw)
        if not _KAFKA_NAME.match(full):
            raise fail(where, f"{full!r} is not a valid {kind.replace('_', ' ')} name "
                              "(1..249 of A-Z a-z 0-9 . _ -, then a `*` for a prefix)")
        return full, pattern

    topic_names = {raw: _cluster_name(path, node, raw, prefix, app_id) for raw in parsed.topics}
    bindings: set[AclBinding] = set()
    resources: dict[tuple[str, str, str], None] = {
        ("topic", name, "literal"): None for name in topic_names.values()}
    principals = []
    for role, decl in parsed.acls.items():
        if not _ROLE.match(role):
            raise fail(("acls", role), "a principal's key is 1..64 of a-z 0-9 _, starting with a "
                                       f"letter (it names {principal_env('<key>')})")
        var = principal_env(role)
        if env.get(var, "") != "":
            try:
                principal = _principal(env[var])
            except ValueError as exc:
                raise SettingsError(f"{var}: {exc}") from None
        else:
            try:
                principal = _principal(decl.principal or role)
            except ValueError as exc:
                raise fail(("acls", role, "principal"), str(exc)) from None
        principals.append((role, principal))
        for raw, operations in decl.topics.items():
            if raw not in topic_names:
                raise fail(("acls", role, "topics", raw),
                           "not a topic of this file (a key of `topics:`)")
            for op in operations:
                bindings.add(AclBinding("topic", topic_names[raw], "literal", principal, op))
        for kind, entries in (("group", decl.groups),
                              ("transactional_id", decl.transactional_ids)):
            section = "groups" if kind == "group" else "transactional_ids"
            for raw, operations in entries.items():
                name, pattern = name_of(("acls", role, section, raw), raw, kind)
                resources[(kind, name, pattern)] = None
                for op in operations:
                    bindings.add(AclBinding(kind, name, pattern, principal, op))
        if decl.cluster:
            resources[("cluster", CLUSTER_RESOURCE, "literal")] = None
            for op in decl.cluster:
                bindings.add(AclBinding("cluster", CLUSTER_RESOURCE, "literal", principal, op))
    return Acls(tuple(sorted(bindings)), tuple(resources), tuple(principals))


@dataclass
class AclPlan:
    create: list[AclBinding] = field(default_factory=list)  # declared, absent: `apply` adds
    extra: list[AclBinding] = field(default_factory=list)  # present, undeclared: left alone

    @property
    def drift(self) -> bool:
        return bool(self.create or self.extra)


def compare_acls(declared: Acls, observed: set[AclBinding] | list[AclBinding]) -> AclPlan:
    """What differs between the declared bindings and those the cluster has on the
    deployment's resources (`observed`, as `topics_cli.observe_acls` reads them)."""
    have, want = set(observed), set(declared.bindings)
    return AclPlan(create=sorted(want - have), extra=sorted(have - want))


def acl_table(plan: AclPlan) -> str:
    rows = [(b.resource_label, b.principal, b.operation, b.permission, "absent")
            for b in plan.create]
    rows += [(b.resource_label, b.principal, b.operation, "(none)",
              b.permission + ("" if b.host == "*" else f" from {b.host}"))
             for b in plan.extra]
    return format_table(rows, ("acl on", "principal", "operation", "topics.yaml", "cluster"))


def format_table(rows: list[tuple[str, ...]], header: tuple[str, ...]) -> str:
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]

    def line(row: tuple[str, ...]) -> str:
        return "  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()

    return "\n".join([line(header), line(tuple("-" * w for w in widths)), *map(line, rows)])


def drift_table(drift: list[Drift]) -> str:
    return format_table(
        [(d.topic, d.item, d.declared, d.actual) for d in drift],
        ("topic", "drift", "topics.yaml", "cluster"),
    )
