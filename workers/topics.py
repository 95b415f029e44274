"""topics.yaml as data, and the pure comparison of declared topics with what a cluster has.

`topics_cli` is the shell that asks the cluster; everything that decides lives here so that
drift rules are tested without a broker.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from workers.settings import WorkerSettings

DEFAULT_APP_ID: str = WorkerSettings.model_fields["app_id"].default
_PLACEHOLDER = re.compile(r"\{([^{}]*)\}")
_KAFKA_NAME = re.compile(r"^[A-Za-z0-9._-]{1,249}$")


class TopicsFileError(Exception):
    """topics.yaml is unreadable or invalid; the message names the file, line and field."""


class _TopicDecl(BaseModel):
    model_config = ConfigDict(extra="forbid")
    partitions: int | None = Field(default=None, ge=1)
    replication_factor: int | None = Field(default=None, ge=1)
    configs: dict[str, str] = {}


class _Defaults(BaseModel):
    model_config = ConfigDict(extra="forbid")
    partitions: int = Field(default=8, ge=1)
    replication_factor: int = Field(default=1, ge=1)


class _File(BaseModel):
    model_config = ConfigDict(extra="forbid")
    defaults: _Defaults = _Defaults()
    topics: dict[str, _TopicDecl]


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


def load_topics(
    path: Path, prefix: str = "", replication_factor: int | None = None,
    app_id: str = DEFAULT_APP_ID,
) -> list[TopicSpec]:
    """Parse topics.yaml; `replication_factor` (from the environment) overrides the file's, and
    `app_id` (TRANSCRIPT_APP_ID) fills `{app_id}` in topic names."""
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
