"""workers/commands/repartition_move.py without a broker: the move's tasks run in processes of
their own, `--parallel` at a time, the workers' check before each; a task that fails stops the
move with the partition and the reason (exit 2, no traceback), and a check that refuses starts
no more tasks. The moves themselves run against the broker: tests/faults/test_repartition.py,
tests/integration/test_repartition.py."""

from __future__ import annotations

import pytest

from tests.conftest import cli
from workers.commands.repartition_move import (
    MoveFailed,
    Task,
    legacy_transactional_id,
    move_partitions,
    transactional_id,
)
from workers.settings import kafka_settings

NOWHERE = kafka_settings({"KAFKA_BOOTSTRAP": "127.0.0.1:1"})  # nothing listens on port 1


def tasks(n: int) -> list[Task]:
    return [Task(NOWHERE, "g", "g-sessions-changelog", "transcript.entries", "transcript.layout",
                 n, 2 * n, p) for p in range(n)]


def test_a_task_that_fails_stops_the_move_naming_its_partition() -> None:
    checked: list[int] = []
    said: list[str] = []
    with pytest.raises(MoveFailed, match=r"^partition 0: .*run the command again\)$"):
        move_partitions(tasks(3), 1, lambda: checked.append(1), said.append)
    assert checked == [1] and said == []  # one at a time: nothing started after the failure


def test_a_refused_check_starts_no_more_tasks() -> None:
    class Refused(Exception):
        pass

    def check() -> None:
        raise Refused("a worker joined")

    with pytest.raises(Refused, match="a worker joined"):
        move_partitions(tasks(4), 2, check, print)


def test_each_old_partition_has_a_transactional_id_of_its_own() -> None:
    ids = {transactional_id("app", p) for p in range(16)}
    assert len(ids) == 16 and legacy_transactional_id("app") not in ids
    assert all(i.startswith("app-") for i in ids)  # the worker's ACLs: the prefix `<group>-`


@pytest.mark.parametrize("value", ["0", "65", "two"])
def test_parallel_out_of_range_is_refused(value: str) -> None:
    done = cli("repartition", "--partitions", "16", "--parallel", value, env={})
    assert done.returncode == 2 and b"--parallel" in done.stderr, done.stderr
    assert b"Traceback" not in done.stderr
