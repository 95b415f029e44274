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
