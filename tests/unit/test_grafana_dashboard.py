"""deploy/grafana/transcript-owner.json: a well-formed Grafana dashboard whose queries name only
metrics the worker exposes (workers.ops.metrics.METRIC_NAMES), each used as its type allows.

tests/integration/test_prometheus.py runs every one of these queries against a real
Prometheus scraping a real worker; this test needs neither.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from workers.ops.metrics import METRIC_NAMES, Metrics

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "deploy/grafana/transcript-owner.json"
DATASOURCE_REF = "${datasource}"
HISTOGRAM_PARTS = ("_bucket", "_sum", "_count")
# PromQL words that are not metric names (functions are recognised by their "(")
KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or",
            "unless", "offset", "inf", "nan"}


def load() -> dict:
    return json.loads(DASHBOARD.read_text())


def panels(dashboard: dict) -> list[dict]:
    """Every panel, those inside collapsed rows too."""
    out = []
    for p in dashboard["panels"]:
        out.append(p)
        out.extend(p.get("panels", []))
    return out


def queried(dashboard: dict) -> list[dict]:
    return [p for p in panels(dashboard) if p.get("type") != "row"]


def exprs(dashboard: dict) -> list[str]:
    return [t["expr"] for p in queried(dashboard) for t in p["targets"]]


def metric_names(expr: str) -> set[str]:
    """The metric (sample) names a PromQL expression selects: its identifiers outside strings,
    label matchers, ranges and by/without lists, that are not function calls or keywords."""
    s = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)  # strings ($job, label values)
    s = re.sub(r"\{[^}]*\}", " ", s)  # label matchers
    s = re.sub(r"\[[^\]]*\]", " ", s)  # ranges ($__rate_interval)
    s = re.sub(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", s)
    names = set()
    for m in re.finditer(r"(?<![\w.$])([A-Za-z_:][A-Za-z0-9_:]*)(\s*\()?", s):
        name, call = m.group(1), m.group(2)
        if not call and name.lower() not in KEYWORDS:
            names.add(name)
    return names


def exposed() -> dict[str, str]:
    """Sample name -> the type of its family, for every name in METRIC_NAMES, read from what
    the worker's registry renders (a counter's samples end in _total, a histogram's in
    _bucket/_sum/_count)."""
    families = {f.name: f.type for f in text_string_to_metric_families(Metrics().render().decode())}
    out: dict[str, str] = {}
    for name in METRIC_NAMES:
        family = name.removesuffix("_total") if name not in families else name
        kind = families.get(family)
        assert kind is not None, f"{name} is in METRIC_NAMES; the registry renders no such family"
        if kind == "histogram":
            out.update({name + part: kind for part in HISTOGRAM_PARTS})
        else:
            out[name] = kind
    return out


def test_the_metric_name_parser():
    assert metric_names('sum by (le) (rate(a_bucket{job=~"$job", x="b_total"}[$__rate_interval]))'
                        ) == {"a_bucket"}
    assert metric_names("histogram_quantile(0.95, sum by (le) (rate(h_bucket[5m])))") == {
        "h_bucket"}
    assert metric_names("sum(rate(x_sum[1m])) / sum(rate(x_count[1m])) > bool 0") == {
        "x_sum", "x_count"}
    assert metric_names("max without (pod) (up) offset 5m") == {"up"}


def test_is_a_dashboard():
    d = load()
    assert d["title"] and d["uid"] and isinstance(d["schemaVersion"], int)
    assert 36 <= d["schemaVersion"] <= 41
    ids = [p["id"] for p in panels(d)]
    assert all(isinstance(i, int) for i in ids) and len(ids) == len(set(ids)), ids
    for p in panels(d):
        g = p["gridPos"]
        assert {"h", "w", "x", "y"} <= set(g) and g["w"] >= 1 and g["h"] >= 1, p["title"]
        assert 0 <= g["x"] and g["x"] + g["w"] <= 24, p["title"]
        assert p.get("title"), p
    for p in queried(d):
        assert p["targets"], p["title"]
        refs = [t["refId"] for t in p["targets"]]
        assert len(refs) == len(set(refs)) and all(refs), p["title"]
        assert all(t.get("expr", "").strip() for t in p["targets"]), p["title"]


def test_panels_do_not_overlap():
    cells: dict[tuple[int, int], str] = {}
    for p in panels(load()):
        g = p["gridPos"]
        for x in range(g["x"], g["x"] + g["w"]):
            for y in range(g["y"], g["y"] + g["h"]):
                assert (x, y) not in cells, f"{p['title']} overlaps {cells[(x, y)]}"
                cells[(x, y)] = p["title"]


def test_every_query_uses_the_datasource_variable():
    d = load()
    variables = {v["name"]: v for v in d["templating"]["list"]}
    ds = variables["datasource"]
    assert ds["type"] == "datasource" and ds["query"] == "prometheus"
    ref = {"type": "prometheus", "uid": DATASOURCE_REF}
    for p in queried(d):
        assert p["datasource"] == ref, p["title"]
        assert all(t.get("datasource", ref) == ref for t in p["targets"]), p["title"]
    for v in variables.values():
        if v["type"] == "query":
            assert v["datasource"] == ref, v["name"]
    # every other variable is used by every query (none is left dangling or ignored)
    for name in set(variables) - {"datasource"}:
        for e in exprs(d):
            assert f"${name}" in e, (name, e)


def test_every_metric_is_one_the_worker_exposes():
    known = exposed()
    used: set[str] = set()
    for e in exprs(load()):
        names = metric_names(e)
        assert names, e
        unknown = names - set(known)
        assert not unknown, f"{sorted(unknown)} in {e!r}: not in workers.ops.metrics.METRIC_NAMES"
        used |= names
    # the dashboard shows every metric of the worker (the process ones it needs)
    shown = {n.removesuffix(part) for n in used for part in HISTOGRAM_PARTS
             if known[n] == "histogram" and n.endswith(part)} | {
        n for n in used if known[n] != "histogram"}
    missing = {n for n in METRIC_NAMES if n.startswith("transcript_owner_")} - shown
    assert not missing, f"no panel shows {sorted(missing)}"
    assert {"process_cpu_seconds_total", "process_resident_memory_bytes"} <= shown


def test_functions_fit_the_metric_types():
    known = exposed()
    for e in exprs(load()):
        for fn, name in re.findall(r"\b(rate|irate|increase)\(\s*([A-Za-z_:][\w:]*)", e):
            assert known[name] in ("counter", "histogram"), f"{fn} of the gauge {name}: {e}"
        for name in re.findall(r"histogram_quantile\([^,]+,\s*sum by \(le\) \(rate\(([\w:]+)", e):
            assert name.endswith("_bucket") and known[name] == "histogram", e
        if "histogram_quantile" in e:
            assert re.search(r"by \((?:[^)]*,\s*)?le(?:\s*,[^)]*)?\)", e), e
        for name in metric_names(e):
            if known[name] == "counter":  # a counter's value alone is meaningless on a graph
                assert re.search(rf"\b(?:rate|irate|increase)\(\s*{name}\b", e), (name, e)


@pytest.mark.parametrize("name", ["transcript_owner_records_total", "process_cpu_seconds_total"])
def test_a_metric_the_worker_does_not_expose_fails(name):
    bogus = name.replace("_total", "_typo_total")
    assert bogus not in exposed()
    assert metric_names(f"sum(rate({bogus}[1m]))") == {bogus}
