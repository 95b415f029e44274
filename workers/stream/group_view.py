"""The consumer group's members as every worker can see them (DescribeGroups).

A worker names itself in the group by its transactional id (faust's `broker_client_id`, the
client id DescribeGroups reports), so the group's members say which transactional ids are
alive (workers.stream.fencing).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

# kafka-python cannot decode faust's member metadata (its subscription's user data) and logs
# each member's raw metadata at WARNING when it tries; only the names are read here
logging.getLogger("kafka.admin._groups").setLevel(logging.ERROR)


@dataclass(frozen=True)
class GroupView:
    state: str  # "Stable", "PreparingRebalance", ...
    members: tuple[str, ...]  # their client ids: the workers' transactional ids


def describe(admin: Any, group: str) -> GroupView:
    """DescribeGroups through a kafka-python admin client (blocking)."""
    found = admin.describe_groups([group])[group]
    if found.get("error"):
        raise RuntimeError(f"group {group} cannot be described: {found['error']}")
    return GroupView(str(found.get("group_state")),
                     tuple(str(m.get("client_id") or m.get("member_id"))
                           for m in found.get("members") or ()))
