"""The TypeScript connector (connectors/typescript) as the Python suite runs it.

`make test` builds it first (`make connector`: `npm ci` when the lockfile changed, `tsc` when a
source did); `built()` runs the same target, a no-op then, so that `pytest` on its own never
runs a stale build.
"""

from __future__ import annotations

import shutil
import subprocess
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "connectors/typescript"


@cache
def built() -> Path:
    """The package directory, installed and built; fails with make's output otherwise."""
    assert shutil.which("node") and shutil.which("npm"), "Node.js 20+ and npm are required"
    done = subprocess.run(["make", "-s", "connector"], cwd=ROOT, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, f"make connector failed:\n{done.stdout}\n{done.stderr}"
    return PACKAGE


def tap_summary(output: str) -> dict[str, int]:
    """`# pass N`, `# fail N`, … from node --test's TAP output."""
    counts = {}
    for line in output.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[0] == "#" and parts[2].isdigit():
            counts[parts[1]] = int(parts[2])
    return counts


def failures(output: str, limit: int = 12_000) -> str:
    """The failing tests' part of the TAP output (or its tail)."""
    lines = output.splitlines()
    picked = [i for i, ln in enumerate(lines) if ln.lstrip().startswith("not ok")]
    chunks = ["\n".join(lines[max(0, i - 40): i + 5]) for i in picked[:5]]
    text = "\n".join(chunks) if chunks else output
    return text[-limit:]
