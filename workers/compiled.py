"""Which modules of the per-record path run compiled, and whether one is stale.

`make install` compiles these with mypyc (deploy/compile/build.py): each `X.py` gets an
`X.cpython-*.so` beside it, which Python imports in its place. A source edited after its
build runs *old* code until `make compile`: `status()` names such modules, the worker warns
of them at start and the test session stops on them (tests/conftest.py).
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path

# the worker's per-record path: parse-to-outputs of the core, and the session store over RocksDB
MODULES = (
    "workers.core.decide",
    "workers.core.fingerprint",
    "workers.core.outputs",
    "workers.core.owner",
    "workers.core.state",
    "workers.core.store",
    "workers.stream.session_store",
    # the contract's partitioner, which the worker runs for every record (its cache misses at
    # a million sessions): built on its own, as the Python connector's install imports it too
    "transcript_connector.partitioning",
)
CONNECTOR_SRC = Path("connectors/python/src")  # where transcript_connector's sources are


def source(module: str) -> Path:
    """The module's source file, relative to the repository (what mypyc is given)."""
    path = Path(*module.split(".")).with_suffix(".py")
    return CONNECTOR_SRC / path if module.startswith("transcript_connector.") else path


@dataclass(frozen=True)
class Status:
    compiled: tuple[str, ...]  # imported from a .so
    interpreted: tuple[str, ...]  # imported from its .py
    stale: tuple[str, ...]  # compiled, but its .py is newer than the .so

    def describe(self) -> str:
        if not self.compiled:
            return "the per-record path is interpreted (make compile builds it)"
        text = f"{len(self.compiled)} of {len(MODULES)} per-record modules compiled (mypyc)"
        return text + (f"; STALE, older than their sources: {', '.join(self.stale)} "
                       "(make compile)" if self.stale else "")


def status() -> Status:
    """Where each module of MODULES is imported from, without importing it."""
    compiled, interpreted, stale = [], [], []
    for module in MODULES:
        spec = importlib.util.find_spec(module)
        origin = Path(spec.origin) if spec is not None and spec.origin else None
        if origin is None or origin.suffix != ".so":
            interpreted.append(module)
            continue
        compiled.append(module)
        if is_stale(origin):
            stale.append(module)
    return Status(tuple(compiled), tuple(interpreted), tuple(stale))


def is_stale(extension: Path) -> bool:
    """Whether the source beside a compiled module (`X.cpython-*.so` -> `X.py`) is newer."""
    py = extension.with_name(extension.name.split(".", 1)[0] + ".py")
    return py.exists() and py.stat().st_mtime > extension.stat().st_mtime
