"""The folders are the layers: stream (the worker) sits on top, and nothing imports it.

commands (one module per CLI verb), ops (HTTP, metrics), the plain Kafka clients and the core
take the wire form, the step and the checkpoint format from workers/core, never from the
worker's internals; ops does not know the runtime (faust, mode, aiokafka) at all. Checked on
the source, every import including those inside functions. The core's own rules (no I/O, no
clock) are tests/unit/test_core_purity.py.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
WORKERS = ROOT / "workers"
NOT_STREAM = sorted(p for p in WORKERS.rglob("*.py") if WORKERS / "stream" not in p.parents)
OPS = sorted((WORKERS / "ops").glob("*.py"))
RUNTIME = {"faust", "mode", "aiokafka"}


def imports(path: Path) -> list[tuple[int, str]]:
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text("utf-8"))):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.lineno, node.module))
            found.extend((node.lineno, f"{node.module}.{alias.name}") for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level:
            found.append((node.lineno, "." * node.level + (node.module or "")))
    return found


def test_the_layers_are_there() -> None:
    assert len(NOT_STREAM) > 20 and len(OPS) >= 3
    assert {"owner.py", "outputs.py", "checkpoint_format.py"} <= {
        p.name for p in (WORKERS / "core").glob("*.py")}


@pytest.mark.parametrize("path", NOT_STREAM, ids=lambda p: str(p.relative_to(WORKERS)))
def test_nothing_outside_the_worker_imports_its_internals(path: Path) -> None:
    bad = [f"{path.relative_to(ROOT)}:{line}: {name}" for line, name in imports(path)
           if name == "workers.stream" or name.startswith(("workers.stream.", "."))]
    assert not bad, ("imports the worker's internals (move what it needs to workers/core, or "
                     "import it absolutely from there):\n" + "\n".join(bad))


@pytest.mark.parametrize("path", OPS, ids=lambda p: p.name)
def test_ops_does_not_know_the_runtime(path: Path) -> None:
    bad = [f"{path.relative_to(ROOT)}:{line}: {name}" for line, name in imports(path)
           if name.split(".")[0] in RUNTIME]
    assert not bad, "ops imports faust, mode or aiokafka:\n" + "\n".join(bad)


def test_the_check_sees_a_lazy_import(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text("def f():\n    from workers.stream.worker import run\n"
                     "    import mode\n")
    assert (2, "workers.stream.worker") in imports(probe)
    assert (3, "mode") in imports(probe)
