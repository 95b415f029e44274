"""The per-record path runs compiled after `make install`, and a stale build is caught."""

from __future__ import annotations

import os
from pathlib import Path

from workers.compiled import MODULES, is_stale, source, status


def test_make_compiled_every_module_of_the_per_record_path() -> None:
    s = status()
    assert s.compiled == MODULES, f"{s.describe()}; interpreted: {s.interpreted} (make compile)"
    assert s.stale == ()


def test_every_listed_module_has_its_source() -> None:
    root = Path(__file__).resolve().parents[2]
    for module in MODULES:
        assert (root / source(module)).is_file(), module


def test_a_source_newer_than_its_build_is_stale(tmp_path: Path) -> None:
    py, so = tmp_path / "decide.py", tmp_path / "decide.cpython-311-x86_64-linux-gnu.so"
    py.write_text("x = 1\n")
    so.write_bytes(b"\0")
    os.utime(py, (1_000, 1_000))
    os.utime(so, (2_000, 2_000))
    assert not is_stale(so)
    os.utime(py, (3_000, 3_000))
    assert is_stale(so)
    py.unlink()
    assert not is_stale(so)  # no source beside it (an installed build): nothing to compare


# a process that imports the sources, not the builds beside them: the folders of `workers` and
# of the connector's package get a finder with no extension-module loader (other folders, the
# standard library's among them, keep theirs)
_SOURCES_ONLY = """
import importlib.machinery as m, os, sys
mine = tuple(os.path.join(os.getcwd(), folder)
             for folder in ("workers", "connectors/python/src/transcript_connector"))
sources = m.FileFinder.path_hook(
    (m.SourceFileLoader, m.SOURCE_SUFFIXES), (m.SourcelessFileLoader, m.BYTECODE_SUFFIXES))
def hook(path):
    if os.path.abspath(path).startswith(mine):
        return sources(path)
    raise ImportError(path)
sys.path_hooks.insert(0, hook)
sys.path_importer_cache.clear()
"""
_REPLAY = """
import sys
from workers.compiled import status
from workers.cli import main
print(len(status().compiled), file=sys.stderr)
sys.exit(main(["replay", sys.argv[1], "--written-at", "2027-01-01T00:00:00Z"]))
"""


def test_replay_prints_the_same_bytes_compiled_and_from_the_sources(tmp_path: Path) -> None:
    import subprocess
    import sys

    from workers.synthetic import generate

    path = tmp_path / "in.jsonl"
    path.write_bytes(b"".join(value + b"\n" for _, value in generate(20_000, sessions_n=300,
                                                                      seed=7)))
    root = Path(__file__).resolve().parents[2]
    runs = [subprocess.run([sys.executable, "-c", prelude + _REPLAY, str(path)], cwd=root,
                           capture_output=True, timeout=300)
            for prelude in ("", _SOURCES_ONLY)]
    for run in runs:
        assert run.returncode == 0, run.stderr.decode()[-2000:]
    (compiled, sources) = runs
    assert compiled.stderr.split()[0] == str(len(MODULES)).encode()  # the builds ran...
    assert sources.stderr.split()[0] == b"0"  # ...and here the sources did
    assert compiled.stdout == sources.stdout and compiled.stdout.count(b"\n") == 20_000
