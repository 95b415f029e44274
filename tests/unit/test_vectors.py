"""schemas/vectors/session_keys.json: the parity vectors both languages run.

Python passes every vector; the file, the hash-chain vectors (chain.json, which
connectors/python/tests/test_chain.py and the TypeScript suite run) and the TypeScript port's
Unicode tables are current (regenerated, they are byte-identical; the tables are written from
the pinned module transcript_connector/unicode_tables.py, not from the running Python); and
the vectors reach every line and every branch of transcript_connector/session_keys.py
(coverage.py, branch mode), so a change to any rule shows up as a changed vector, which the
TypeScript suite then checks.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import coverage
import pytest
from transcript_connector import session_keys as session_keys_module
from transcript_connector.parse import Invalid, parse_input
from transcript_connector.partitioning import partition_for

from workers.core import canonical_session_key, session_key_for_route

ROOT = Path(__file__).resolve().parents[2]
TABLES_SCRIPT = ROOT / "connectors/typescript/scripts/pyunicode_tables.py"


def _load(name: str, path: Path):
    """schemas/vectors/ holds tools, not a package: load a file of it as a module."""
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


generate = _load("vectors_generate", ROOT / "schemas/vectors/generate.py")
chain_vectors = _load("vectors_chain", ROOT / "schemas/vectors/chain.py")
edges = sys.modules["session_key_edges"]  # imported by the generator, from beside it
OUT, _Route, build, render = generate.OUT, generate._Route, generate.build, generate.render
VECTORS = json.loads(OUT.read_text("utf-8"))


def _outcome(call) -> dict:
    try:
        return {"expect": call()}
    except ValueError as exc:
        return {"error": str(exc)}


def _wanted(v: dict) -> dict:
    return {"error": v["error"]["message"]} if "error" in v else {"expect": v["expect"]}


def _run_all(canonical, for_route) -> list[str]:
    """Every vector through the given functions; the ids of those that disagree."""
    bad = []
    for v in VECTORS["canonical"]:
        if _outcome(lambda v=v: canonical(v["raw"], v["agent_id"])) != _wanted(v):
            bad.append(v["id"])
    for v in VECTORS["route"]:
        got = _outcome(lambda v=v: for_route(v["agent_id"], _Route(v["route"]), v["dm_scope"]))
        if got != _wanted(v):
            bad.append(v["id"])
    return bad


def test_python_passes_every_vector() -> None:
    canonical_session_key.cache_clear()
    assert _run_all(canonical_session_key, session_key_for_route) == []


def test_there_are_at_least_300_vectors_covering_every_kind_of_edge() -> None:
    assert len(VECTORS["canonical"]) + len(VECTORS["route"]) >= 300
    tags = {t for v in VECTORS["canonical"] + VECTORS["route"] for t in v["tags"]}
    assert {"whitespace", "bom", "control", "signal", "matrix", "telegram-topic", "legacy-dm",
            "main", "case-folding", "invalid", "unicode-version", "sigma", "agent-id"} <= tags
    assert sum("error" in v for v in VECTORS["canonical"]) >= 20


def test_hand_written_edges_state_what_python_does() -> None:
    """The expectations of schemas/vectors/session_key_edges.py were written by hand."""
    by_id = {v["id"]: v for v in VECTORS["canonical"] + VECTORS["route"]}
    errors = edges.Err | edges.ScopeErr | edges.AgentErr
    for id_, _tags, _raw, _agent, expected in edges.CANONICAL:
        want = {"error": expected.message} if isinstance(expected, errors) else {"expect": expected}
        assert _wanted(by_id[id_]) == want, id_
    for id_, *_rest, expected in edges.ROUTES:
        want = {"error": expected.message} if isinstance(expected, errors) else {"expect": expected}
        assert _wanted(by_id[id_]) == want, id_


def test_partitions_are_the_workers() -> None:
    checked = 0
    for v in VECTORS["canonical"] + VECTORS["route"] + VECTORS["partition"]:
        key = v.get("expect", v.get("key"))
        if key is None:
            continue
        if v["partitions"] is None:  # not UTF-8: the worker cannot key it at all
            with pytest.raises(UnicodeEncodeError):
                key.encode()
            continue
        for n, p in v["partitions"].items():
            assert partition_for(key, int(n)) == p
            checked += 1
    assert checked > 3000


def test_timestamps_python_verdicts_and_the_builder_is_never_looser() -> None:
    for t in VECTORS["timestamps"]:
        reset = {"schema": "session-reset/1", "session_key": "agent:ops:main",
                 "reset_at": t["text"]}
        parsed = parse_input(json.dumps(reset).encode())
        python = "invalid: " + parsed.reason if isinstance(parsed, Invalid) else "valid"
        assert python == t["python"], t["text"]
        if python != "valid":
            assert t["typescript"] == "invalid", t["text"]


def test_the_vectors_file_is_current() -> None:
    data, problems = build()
    assert problems == []
    assert render(data) == OUT.read_text("utf-8"), "stale: run `make vectors`"


def test_the_chain_vectors_file_is_current() -> None:
    """schemas/vectors/chain.json (both connectors' hash-chain vectors) is what
    schemas/vectors/chain.py writes from transcript_connector.chain now."""
    current = chain_vectors.OUT.read_text("utf-8")
    assert chain_vectors.render() == current, "stale: run `make vectors`"


@pytest.mark.parametrize("script", [ROOT / "schemas/vectors/positions.py",
                                    ROOT / "connectors/typescript/scripts/entries_cases.py"])
def test_the_position_vectors_and_the_entries_cases_are_current(script: Path) -> None:
    """schemas/vectors/positions.json (both connectors' reading of transcript.entries) and
    the TypeScript suite's extra entries cases are what their scripts write from
    transcript_connector.entries_topic now."""
    done = subprocess.run([sys.executable, str(script), "--check"], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr


def test_the_typescript_unicode_tables_are_current() -> None:
    """src/pyunicode-tables.ts is what the script writes from the pinned Python module."""
    done = subprocess.run([sys.executable, str(TABLES_SCRIPT), "--check"], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr


def test_the_vectors_reach_every_line_and_branch_of_the_canonicaliser(tmp_path: Path) -> None:
    """A fresh copy of the module, loaded and run under coverage.py with branch coverage (the
    imported one ran its module body before measuring began, and its functions are cached)."""
    source = Path(session_keys_module.__file__)
    cov = coverage.Coverage(branch=True, data_file=None, include=[str(source)])
    cov.start()
    try:
        fresh = _load("session_keys_under_coverage", source)
        bad = _run_all(fresh.canonical_session_key, fresh.session_key_for_route)
    finally:
        cov.stop()
        sys.modules.pop("session_keys_under_coverage", None)
    assert bad == []
    report = tmp_path / "coverage.json"
    cov.json_report(outfile=str(report))
    [(_, data)] = json.loads(report.read_text())["files"].items()
    summary = data["summary"]
    assert data["missing_lines"] == [], f"lines no vector reaches: {data['missing_lines']}"
    assert data["missing_branches"] == [], f"branches no vector takes: {data['missing_branches']}"
    assert summary["num_branches"] >= 30 and summary["covered_branches"] == summary["num_branches"]
