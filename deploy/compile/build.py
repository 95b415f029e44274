"""Compile the worker's per-record path with mypyc, in place: `make compile` (and `make install`).

The modules (workers/compiled.py) run once per input record in the worker, `replay` and
`audit`. Each `X.py` gets an `X.cpython-*.so` beside it, which Python imports in its place;
the group's shared library is `workers/compiled__mypyc.*.so`. `make uncompile` deletes them
to run the sources. Of the connector's package (transcript_connector) only its partitioner is
compiled, each module on its own, with no shared library: its source folder is also the Python
connector's install (var/venv-connector), which has no `workers`.

    .venv/bin/python deploy/compile/build.py [--into SITE_PACKAGES]

`--into` then copies the builds beside the same modules installed (non-editable) in that
directory: the image's venv (deploy/container/Containerfile), built from this checkout's copy.
mypy reads the checkout, not site-packages, where every installed module would be its own.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from workers.compiled import CONNECTOR_SRC, MODULES, source  # noqa: E402

GROUP = "workers.compiled"  # the shared library: workers/compiled__mypyc.*.so
# the compiled modules are type-checked; what they import is read for its types only
MYPY_FLAGS = ("--follow-imports=silent", "--ignore-missing-imports")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--into", type=Path, metavar="SITE_PACKAGES",
                        help="then copy the builds beside the package installed there")
    args = parser.parse_args(argv)
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
    if args.into is not None:
        return install(args.into)
    return 0


def install(site: Path) -> int:
    """Each build beside its module in `site`, as new as the module (workers.compiled.is_stale);
    exit 2 when a module is not installed there."""
    for module in MODULES:
        installed = site / Path(*module.split(".")).with_suffix(".py")
        if not installed.is_file():
            print(f"build: {module} is not installed in {site} ({installed} missing)",
                  file=sys.stderr)
            return 2
        stem = source(module).stem  # its build, and the shared library of one built alone
        for pattern in (f"{stem}.cpython-*.so", f"{stem}__mypyc.cpython-*.so"):
            for built in source(module).parent.glob(pattern):
                shutil.copyfile(built, installed.parent / built.name)
    for shared in Path("workers").glob("compiled__mypyc.cpython-*.so"):  # the group's library
        shutil.copyfile(shared, site / "workers" / shared.name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
