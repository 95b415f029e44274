"""The core is pure: no Kafka, faust, OS, logging, clock or randomness (checked on the source).

Layers: shells -> workers.core -> the contract (transcript_connector's pure modules, which the
Python connector ships too). The core imports nothing from the shells, and the contract imports
nothing from workers or schemas: a gateway installs it without the worker.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CORE = sorted((ROOT / "workers" / "core").glob("*.py"))
SCHEMAS = sorted((ROOT / "schemas").glob("*.py"))
CONNECTOR = ROOT / "connectors" / "python" / "src" / "transcript_connector"
# the contract's pure parts; the connector's publisher is a shell beside them
CONTRACT = [CONNECTOR / f"{name}.py"
            for name in ("session_keys", "unicode_text", "unicode_tables", "partitioning",
                         "records", "parse", "structs", "record_keys", "builders")]

FORBIDDEN_IN_CORE = {
    "faust",
    "aiokafka",
    "kafka",
    "os",
    "logging",
    "time",
    "random",
    "secrets",
    "socket",
    "subprocess",
    "asyncio",
    "threading",
    "sys",
    "io",
    "pathlib",
    "rocksdict",
}
CLOCK_CALLS = {"now", "utcnow", "today", "time", "monotonic", "perf_counter", "uuid1", "uuid4"}


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text("utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def test_the_core_is_there() -> None:
    assert {p.name for p in CORE} >= {
        "__init__.py",
        "decide.py",
        "fingerprint.py",
        "owner.py",
        "store.py",
        "outcomes.py",
        "state.py",
    }
    assert all(p.is_file() for p in CONTRACT)
    # the state store of the worker is a shell: it reads RocksDB and logs
    assert not (ROOT / "workers" / "core" / "session_store.py").exists()


@pytest.mark.parametrize("path", CORE + CONTRACT, ids=lambda p: p.name)
def test_core_imports_no_io_clock_or_shell(path: Path) -> None:
    for name in _imports(path):
        top = name.split(".")[0]
        if path.name == "parse.py" and name == "threading":
            continue  # a thread-local for the exact reader's state, no thread of its own
        assert top not in FORBIDDEN_IN_CORE, f"{path.name} imports {name}"
        if top == "workers":
            assert name.startswith("workers.core"), f"{path.name} imports the shell {name}"


@pytest.mark.parametrize("path", CORE + CONTRACT, ids=lambda p: p.name)
def test_core_never_reads_the_clock(path: Path) -> None:
    for node in ast.walk(ast.parse(path.read_text("utf-8"))):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            assert node.func.attr not in CLOCK_CALLS, (
                f"{path.name}:{node.lineno} calls .{node.func.attr}()"
            )


@pytest.mark.parametrize("path", SCHEMAS + sorted(CONNECTOR.glob("*.py")), ids=lambda p: p.name)
def test_the_contract_does_not_import_workers(path: Path) -> None:
    shells = {"workers"} | ({"schemas"} if path.is_relative_to(CONNECTOR) else set())
    assert not any(name.split(".")[0] in shells for name in _imports(path)), path.name
