"""A bench run records the worker's package versions and whether its per-record path ran
compiled: `pyproject.toml` gives ranges, each machine installs fresh, and figures from two days
are only comparable when both say what they ran on."""

from __future__ import annotations

from importlib import metadata

from bench.common import WORKER_PACKAGES, packages
from bench.report import packages_line
from bench.scale import report
from workers.compiled import MODULES, status


def test_the_versions_are_the_installed_ones_and_the_compiled_modules_counted() -> None:
    found = packages()
    assert [n for n in found if n != "compiled_modules"] == list(WORKER_PACKAGES)
    assert found["aiokafka"] == metadata.version("aiokafka")
    assert found["rocksdict"] == metadata.version("rocksdict")
    assert found["compiled_modules"] == f"{len(status().compiled)} of {len(MODULES)}"


def test_a_package_not_installed_is_named_not_an_error(monkeypatch) -> None:
    monkeypatch.setattr("bench.common.WORKER_PACKAGES", ("aiokafka", "no-such-package-here"))
    found = packages()
    assert found["no-such-package-here"] is None
    assert "no-such-package-here -" in packages_line(found)


def test_the_scale_report_prints_them_and_reads_results_without_them() -> None:
    figures = {"records": 1, "sessions": 1, "partitions": 1, "worker": None,
               "worker_at_least_once": None, "peak_rss_mb": None, "p99_ms_exactly_once": None,
               "p99_ms_at_least_once": None, "quix_exactly_once": None, "missing": []}
    doc = {"timestamp": "t", "wall_s": 1.0, "small": figures, "large": figures, "memory": [],
           "passthroughs": {}, "goals": []}
    assert "worker packages" not in report(doc)
    line = report({**doc, "packages": {"aiokafka": "0.14.0", "compiled_modules": "8 of 8"}})
    assert "worker packages: aiokafka 0.14.0, compiled_modules 8 of 8" in line
