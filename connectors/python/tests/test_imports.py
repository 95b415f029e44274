"""A gateway adds this package to its own environment: importing it, every module of it, loads
none of the worker's stack (faust, mode, rocksdict, aiokafka). Checked in a fresh interpreter
of the suite's environment (make test: var/venv-connector, the connector's own dependencies)."""

from __future__ import annotations

import json
import pkgutil
import subprocess
import sys

import transcript_connector

WORKER_STACK = ("faust", "mode", "rocksdict", "aiokafka")
PROBE = """
import importlib, json, pkgutil, sys
import transcript_connector
names = sorted(m.name for m in pkgutil.walk_packages(transcript_connector.__path__,
                                                     "transcript_connector."))
for name in names:
    importlib.import_module(name)
stack = set(sys.argv[1:])
print(json.dumps({"modules": names,
                  "loaded": sorted(m for m in sys.modules if m.split(".")[0] in stack)}))
"""


def test_importing_every_module_loads_no_worker_dependency() -> None:
    done = subprocess.run([sys.executable, "-c", PROBE, *WORKER_STACK], capture_output=True,
                          text=True, timeout=120, check=True)
    seen = json.loads(done.stdout)
    expected = {f"transcript_connector.{m.name}"
                for m in pkgutil.iter_modules(transcript_connector.__path__)}
    assert {"transcript_connector.builders", "transcript_connector.publisher"} <= expected
    assert set(seen["modules"]) == expected
    assert seen["loaded"] == []


def test_the_publisher_is_loaded_on_first_use_only() -> None:
    """The worker imports the package for the contract and runs its own producers."""
    probe = ("import sys, transcript_connector as t; before = 'kafka' in sys.modules; "
             "t.ConfirmationPublisher; print(before, 'kafka' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          timeout=120, check=True)
    assert done.stdout.split() == ["False", "True"]
