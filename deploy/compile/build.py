"""Compile the worker's per-record path with mypyc, in place: `make compile` (and `make install`).

The modules (workers/compiled.py) run once per input record in the worker, `replay` and
`audit`. Each `X.py` gets an `X.cpython-*.so` beside it, which Python imports in its place;
the group's shared library is `workers/compiled__mypyc.*.so`. `make uncompile` deletes them
to run the sources. Of the connector's package (transcript_connector) only its partitioner is
compiled, each module on its own, with no shared library: its source folder is also the Python
connector's install (var/venv-connector), which has no `workers`.

    .venv/bin/python deploy/compile/build.py
"""

from __future__ import annotations

import os
import sys
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from workers.compiled import CONNECTOR_SRC, MODULES, source  # noqa: E402

GROUP = "workers.compiled"  # the shared library: workers/compiled__mypyc.*.so
# the compiled modules are type-checked; what they import is read for its types only
MYPY_FLAGS = ("--follow-imports=silent", "--ignore-missing-imports")


def main() -> int:
    os.chdir(ROOT)
    # mypy reads the connector's package from its sources (the editable install's finder is an
    # import hook, which mypy does not run)
    os.environ["MYPYPATH"] = str(ROOT / "connectors/python/src")
    warnings.filterwarnings("ignore", message=".*tool.setuptools.*")  # pyproject.toml's, read too
    from mypyc.build import mypycify
    from setuptools import setup

    setup(
        name="transcript-owner-compiled",
        packages=[],
        # where build_ext --inplace puts the connector's builds: beside their sources
        package_dir={"transcript_connector": str(CONNECTOR_SRC / "transcript_connector")},
        ext_modules=[
            *mypycify([*MYPY_FLAGS, *(str(source(m)) for m in MODULES if m.startswith("workers."))],
                      opt_level="3", group_name=GROUP),
            *(ext for m in MODULES if not m.startswith("workers.")
              for ext in mypycify([*MYPY_FLAGS, str(source(m))], opt_level="3")),
        ],
        script_args=["--quiet", "build_ext", "--inplace", "--build-temp", "build/mypyc"],
    )
    # build_ext copies an unchanged build with its old time; it was made from these sources
    # (mypyc wrote the same C from them), so it is as new as they are (workers.compiled.is_stale)
    for module in MODULES:
        for built in source(module).parent.glob(source(module).stem + ".cpython-*.so"):
            built.touch()
    return 0


if __name__ == "__main__":
    sys.exit(main())
