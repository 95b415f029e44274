"""connectors/typescript's own node suite (`npm test`): the canonicaliser on every parity
vector and on every code point, partitioning, the builders, the publisher's options; and the
builders against the worker's own parser and rules. No broker: the end-to-end run is
tests/integration/test_typescript_connector.py."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.typescript_connector import ROOT, built, failures, tap_summary


def test_the_node_unit_and_parity_suite_passes() -> None:
    done = subprocess.run(["npm", "test", "--silent"], cwd=built(), capture_output=True,
                          text=True, timeout=600)
    summary = tap_summary(done.stdout)
    assert done.returncode == 0 and summary.get("fail") == 0, failures(done.stdout + done.stderr)
    assert summary.get("pass", 0) >= 900, summary  # the parity vectors are most of them


def test_what_the_builders_accept_the_worker_accepts_and_what_they_refuse_it_refuses() -> None:
    """connectors/typescript/test/support/builder-cases.ts: records built (the worker must not
    dead-letter one) and inputs refused, as a connector without the builders would send them
    (the worker must dead-letter each, naming the same field): through `replay`, the worker's
    own step."""
    package = built()
    cases_run = subprocess.run(["node", "build/test/support/builder-cases.js"], cwd=package,
                               capture_output=True, text=True, timeout=120)
    assert cases_run.returncode == 0, cases_run.stderr
    # split on newlines only: the values hold U+2028 and U+0085, which splitlines() splits on
    cases = [json.loads(line) for line in cases_run.stdout.split("\n") if line]
    assert sum(c["valid"] for c in cases) >= 20 and sum(not c["valid"] for c in cases) >= 40
    lines = "\n".join(c["value"] for c in cases) + "\n"
    replayed = subprocess.run([sys.executable, "-m", "workers", "replay", "-"], cwd=ROOT,
                              input=lines.encode(), capture_output=True, timeout=300, check=True)
    outcomes = [json.loads(line) for line in replayed.stdout.split(b"\n") if line]
    assert len(outcomes) == len(cases)
    wrong = []
    for case, out in zip(cases, outcomes, strict=True):
        if case["valid"] and out["outcome"] == "dead_letter":
            wrong.append(f"{case['name']}: built, but the worker says {out['error']}")
        if not case["valid"] and not (out["outcome"] == "dead_letter"
                                      and out["error"].startswith(case["reason"])):
            wrong.append(f"{case['name']}: refused ({case['field']}), but the worker says "
                         f"{out['outcome']} {out.get('error', '')}")
    assert wrong == []
