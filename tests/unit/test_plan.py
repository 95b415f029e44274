"""`plan`: the capacity model (workers/core/capacity.py) and its command.

The model's figures follow from their formulas and grow as the workload does; the command
names the field a bad constants or topics file has, and exits 2 without a traceback; and the
committed constants predict what the last `make bench` measured of its own workload.
"""

from __future__ import annotations

import json
import math
import os
import re
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import ROOT, cli
from workers.commands.plan import MEASURED, retentions
from workers.core.capacity import (
    CONSTANT_RANGES,
    MAX_CHOSEN_PARTITIONS,
    MAX_PARTITIONS,
    Constants,
    Retentions,
    Workload,
    fit,
    plan,
)


@pytest.fixture
def env() -> dict[str, str]:
    """plan needs no Kafka: the environment as it is."""
    return dict(os.environ)


def figures(w: Workload, c: Constants = MEASURED) -> dict[str, float]:
    return {f"{f.group}: {f.name}": f.value for f in plan(w, c, Retentions())}


def test_every_figure_names_its_formula_and_only_real_constants() -> None:
    names = {f.name for f in Constants.__dataclass_fields__.values()}
    out = plan(Workload(sessions=1000, sends_per_session_day=10), MEASURED)
    assert len(out) >= 20
    for f in out:
        assert f.formula and math.isfinite(f.value) and f.value >= 0, f
        assert set(f.constants) <= names, f


def test_the_figures_follow_their_formulas() -> None:
    c = MEASURED
    w = Workload(sessions=100_000, sends_per_session_day=20, partitions=16, workers=4,
                 replication_factor=3)
    f = figures(w)
    records = 100_000 * 20
    keys = 100_000 * (1 + c.seen_per_record * 20 * 7)
    assert f["deployment: state keys"] == pytest.approx(keys)
    assert f["per partition: state keys"] == pytest.approx(keys / 16)
    assert f["per partition: restore time"] == pytest.approx(keys / 16 / c.restore_records_per_s)
    assert f["deployment: a worker's restore"] == pytest.approx(
        keys / c.restore_records_per_s / 4)
    assert f["per day: input bytes"] == pytest.approx(records * c.input_record_bytes)
    assert f["per day: entry bytes"] == pytest.approx(
        records * c.written_share * c.entry_record_bytes)
    assert f["broker disk: delivery.confirmations"] == pytest.approx(
        records * c.input_record_bytes * 7)
    assert f["broker disk: transcript.entries"] == pytest.approx(
        records * c.written_share * c.entry_record_bytes * 365)
    parts = [v for k, v in f.items() if k.startswith("broker disk: ") and "all replicas" not in k]
    assert f["broker disk: all topics, all replicas"] == pytest.approx(sum(parts) * 3)


def test_workers_and_partitions_grow_with_the_workload() -> None:
    small = figures(Workload(sessions=1_000, sends_per_session_day=10))
    assert small["deployment: worker processes"] == 2  # one may fail
    assert small["deployment: partitions"] == 8  # never fewer than today's
    busy = figures(Workload(sessions=10_000_000, sends_per_session_day=50))
    peak = 10_000_000 * 50 / 86_400 * 4
    assert busy["deployment: worker processes"] == max(
        math.ceil(peak / (MEASURED.worker_records_per_s * 0.5)),
        math.ceil(busy["deployment: state keys"] / (MEASURED.restore_records_per_s * 600)))
    # a worker on a new machine restores its share within the target
    assert busy["deployment: a worker's restore"] <= 600
    p = busy["deployment: partitions"]
    assert p >= 2 * busy["deployment: worker processes"] and p & (p - 1) == 0  # a power of two
    # a partition restores within the target
    assert busy["per partition: restore time"] <= 30
    assert figures(Workload(sessions=10_000_000, sends_per_session_day=50,
                            restore_target_s=5))["deployment: partitions"] > p


def test_an_idle_workload_still_holds_its_sessions() -> None:
    f = figures(Workload(sessions=500, sends_per_session_day=0))
    assert f["deployment: state keys"] == 500
    assert f["per day: input bytes"] == 0 and f["deployment: peak input"] == 0


def test_constants_from_json_name_the_field_they_lack() -> None:
    good = MEASURED.to_dict()
    assert Constants.from_dict(good, "f.json") == MEASURED
    for bad, field in (({**good, "head_bytes": "x"}, "head_bytes"),
                       ({**good, "seen_bytes": -1}, "seen_bytes"),
                       ({**good, "written_share": float("nan")}, "written_share"),
                       ({**good, "restore_records_per_s": 0}, "restore_records_per_s"),
                       ({**good, "entry_record_bytes": True}, "entry_record_bytes"),
                       ({k: v for k, v in good.items() if k != "input_record_bytes"},
                        "input_record_bytes")):
        with pytest.raises(ValueError, match=f"f.json: field '{field}'"):
            Constants.from_dict(bad, "f.json")
    with pytest.raises(ValueError, match="not an object"):
        Constants.from_dict([1, 2], "f.json")


def test_retentions_are_read_from_topics_yaml() -> None:
    r, partitions = retentions(ROOT / "topics.yaml")
    assert (r.input_days, r.control_days, r.diagnostics_days, r.dead_letters_days) == (
        7, 7, 30, 30)
    assert partitions == 8


def test_the_command_prints_a_table_and_json(env: dict[str, str]) -> None:
    done = cli("plan", "--sessions", "1000000", "--sends-per-session-day", "20", env=env)
    assert done.returncode == 0, done.stderr
    out = done.stdout.decode()
    for heading in ("deployment:", "per partition:", "per day:", "broker disk:"):
        assert heading in out
    assert "restore_records_per_s = " in out and "constants: make bench" in out
    assert re.search(r"declares 8 partitions: a new deployment of \d+ sets", out)
    done = cli("plan", "--sessions", "1000", "--sends-per-session-day", "5", "--json",
               "--partitions", "32", env=env)
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    by = {f"{f['group']}: {f['name']}": f for f in doc["figures"]}
    assert by["deployment: partitions"]["value"] == 32
    assert by["deployment: partitions"]["formula"] == "given (--partitions)"
    assert doc["constants"] == MEASURED.to_dict()


@pytest.mark.parametrize("args, says", [
    (["--sessions", "-5", "--sends-per-session-day", "1"], "--sessions: -5 is out of range"),
    (["--sessions", "1e99", "--sends-per-session-day", "1"], "--sessions: not an integer"),
    (["--sessions", "10", "--sends-per-session-day", "inf"], "--sends-per-session-day: inf"),
    (["--sessions", "10", "--sends-per-session-day", "1", "--headroom", "0"],
     "--headroom: 0 is out of range"),
    (["--sessions", "10"], "--sends-per-session-day"),
])
def test_out_of_range_arguments_exit_2_with_the_reason(env: dict[str, str], args: list[str],
                                                       says: str) -> None:
    done = cli("plan", *args, env=env)
    assert done.returncode == 2
    assert says in done.stderr.decode() and "Traceback" not in done.stderr.decode()


def test_a_bad_constants_file_names_the_file_and_field(env: dict[str, str],
                                                       tmp_path: Path) -> None:
    base = ["plan", "--sessions", "10", "--sends-per-session-day", "1", "--constants"]
    cases = {
        "missing.json": (None, "missing.json: cannot be read"),
        "text.json": (b"{not json", "text.json: not JSON"),
        "bench.json": (json.dumps({"capacity": {"constants": {**MEASURED.to_dict(),
                                                              "seen_bytes": "big"}}}).encode(),
                       "bench.json: capacity.constants: field 'seen_bytes'"),
        "old.json": (json.dumps({"capacity": 3}).encode(), "old.json: capacity.constants: not"),
    }
    for name, (content, says) in cases.items():
        if content is not None:
            (tmp_path / name).write_bytes(content)
        done = cli(*base, str(tmp_path / name), env=env)
        assert done.returncode == 2, name
        err = done.stderr.decode()
        assert says in err and "Traceback" not in err, err
    good = tmp_path / "good.json"
    good.write_text(json.dumps({"capacity": {"constants": replace(
        MEASURED, worker_records_per_s=1000.0, source="elsewhere").to_dict()}}))
    done = cli(*base, str(good), "--json", env=env)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["constants"]["source"] == "elsewhere"


def test_a_topics_file_without_a_finite_retention_is_named(env: dict[str, str],
                                                           tmp_path: Path) -> None:
    text = (ROOT / "topics.yaml").read_text().replace(
        'retention.ms: "2592000000"         # 30 days\n      max.message.bytes: "2097152"       '
        '# a diagnostic', 'retention.ms: "-1"\n      max.message.bytes: "2097152"       '
        '# a diagnostic', 1)
    assert text != (ROOT / "topics.yaml").read_text()
    path = tmp_path / "topics.yaml"
    path.write_text(text)
    done = cli("plan", "--sessions", "10", "--sends-per-session-day", "1", "--topics-file",
               str(path), env=env)
    assert done.returncode == 2
    assert "topics.transcript.diagnostics.configs.retention.ms: -1" in done.stderr.decode()


def test_the_committed_constants_predict_the_last_bench_run() -> None:
    """`make bench` (h): the model with the committed constants, for the bench's own workload
    (200,000 records over 2,000 sessions, one day), beside what the worker left on the broker
    and in its state; each within 25% (the changelog, measured before any cleaning, within
    25% of the model's range for it: `bench.capacity.predict`)."""
    result = json.loads((ROOT / "bench" / "results" / "latest.json").read_text())
    rows = result["capacity"]["predicted"]
    assert {r["figure"] for r in rows} >= {
        "deployment: state keys", "deployment: state bytes", "per day: input bytes",
        "per day: entry bytes", "per partition: changelog bytes"}
    from bench.capacity import predict
    measured = {r["figure"]: r["measured"] for r in rows}
    for row in predict(MEASURED, 2000, result["records"]["throughput"],
                       result.get("partitions", 8), measured):
        assert row["held"], row


def test_plan_sizes_workers_by_the_deployment_scale_bench() -> None:
    """`make bench-scale` (issue 43): plan's drain per worker and a worker's memory are what
    one exactly-once worker measured at a million sessions on 64 partitions, within 25%; and
    its result is a constants file plan reads."""
    path = ROOT / "bench" / "results" / "scale.json"
    large = json.loads(path.read_text())["large"]
    assert large["sessions"] >= 1_000_000 and large["partitions"] >= 64
    assert large["records"] >= 1_000_000
    assert abs(MEASURED.worker_records_per_s / large["worker"] - 1) <= 0.25
    assert abs(MEASURED.worker_peak_rss_mb / large["peak_rss_mb"] - 1) <= 0.25
    from workers.commands.plan import load_constants
    assert load_constants(path).worker_records_per_s == round(large["worker"], 1)


def test_a_constants_file_from_before_the_memory_constant_still_loads() -> None:
    old = {k: v for k, v in MEASURED.to_dict().items() if k != "worker_peak_rss_mb"}
    assert Constants.from_dict(old, "old").worker_peak_rss_mb == \
        Constants.__dataclass_fields__["worker_peak_rss_mb"].default


@pytest.mark.parametrize("args", [
    ["--sessions", "10000000000", "--sends-per-session-day", "1000000"],
    ["--sessions", "1", "--sends-per-session-day", "0", "--dedupe-window-days", "0.0001"],
    ["--sessions", "5", "--sends-per-session-day", "3", "--partitions", "1", "--workers", "9"],
])
def test_extreme_workloads_give_finite_figures(env: dict[str, str], args: list[str]) -> None:
    done = cli("plan", *args, "--json", env=env)
    assert done.returncode == 0, done.stderr
    for f in json.loads(done.stdout)["figures"]:
        assert math.isfinite(f["value"]) and f["value"] >= 0, f


def _doc_rows(path: Path, header: str) -> dict[str, list[str]]:
    """The rows of the table under `header` in a markdown file: name -> its cells."""
    lines = path.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(header))
    rows: dict[str, list[str]] = {}
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip("|").split("|")]
        rows[cells[0].strip("*")] = cells[1:]
    return rows


SIZES = [(10_000, 20), (1_000_000, 20), (20_000_000, 30)]
HEADER = "| `plan --sessions … --sends-per-session-day …` |"


def test_the_documented_sizes_are_what_plan_prints() -> None:
    """docs/capacity.md's three sizes and README's lines of them: plan's own output, so a
    change of the model or of its constants cannot leave them behind."""
    from workers.commands.plan import human

    kept, _ = retentions(ROOT / "topics.yaml")
    out = []
    for sessions, sends in SIZES:
        figs = plan(Workload(sessions=sessions, sends_per_session_day=sends), MEASURED, kept)
        out.append({f"{f.group}: {f.name}": re.sub(r" records/s$| keys$| records$",
                                                     lambda m: "/s" if "/" in m[0] else "",
                                                     human(f.value, f.unit))
                    for f in figs})
    docs = _doc_rows(ROOT / "docs/capacity.md", HEADER)
    assert len(docs) == len(out[0])
    for name, cells in docs.items():
        assert cells == [o[name] for o in out], name
    readme = _doc_rows(ROOT / "README.md", HEADER)
    pairs = {"peak input": ["deployment: peak input"],
             "worker processes / partitions": ["deployment: worker processes",
                                               "deployment: partitions"],
             "state bytes (deployment)": ["deployment: state bytes"],
             "a partition's restore / a worker's": ["per partition: restore time",
                                                    "deployment: a worker's restore"],
             "input bytes a day": ["per day: input bytes"],
             "broker disk, all topics and replicas": ["broker disk: all topics, all replicas"]}
    assert set(readme) == set(pairs)
    for name, cells in readme.items():
        assert cells == [" / ".join(o[n] for n in pairs[name]) for o in out], name


# ---- what one deployment accepts (issue 42, item 6) ----

def _strict_json(text: str) -> dict:
    """JSON as RFC 8259 has it: Infinity and NaN are not JSON, and Python's parser takes them."""
    def refuse(token: str) -> None:
        raise ValueError(f"not JSON: {token}")
    return json.loads(text, parse_constant=refuse)


def test_the_partition_bound_is_the_deployments() -> None:
    """plan's cap is TRANSCRIPT_PARTITIONS' bound in the worker and in the connectors, and the
    largest count it chooses is a power of two within it."""
    from transcript_connector import PublisherOptions

    from workers.settings import WorkerSettings, numeric_range

    assert numeric_range(WorkerSettings, "partitions").highest == MAX_PARTITIONS
    bounds = [m.le for m in PublisherOptions.model_fields["partitions"].metadata
              if hasattr(m, "le")]
    assert bounds == [MAX_PARTITIONS]
    assert MAX_CHOSEN_PARTITIONS == 8192 <= MAX_PARTITIONS < 2 * MAX_CHOSEN_PARTITIONS


def test_a_workload_too_large_for_one_deployment_is_said_and_sized_within_it(
        env: dict[str, str]) -> None:
    """400M sessions x 30 a day needed 16,384 partitions, which nothing accepts."""
    w = Workload(sessions=400_000_000, sends_per_session_day=30)
    f = figures(w)
    assert f["deployment: partitions"] == MAX_CHOSEN_PARTITIONS
    assert f["deployment: worker processes"] <= MAX_CHOSEN_PARTITIONS
    [why] = fit(w, MEASURED).misfits
    assert "restores within 30 s" in why and "8,192" in why and "Split the sessions over 2" in why
    done = cli("plan", "--sessions", "400000000", "--sends-per-session-day", "30", env=env)
    assert done.returncode == 0, done.stderr
    out = done.stdout.decode()
    assert "does not fit one deployment:\n  - a partition restores within 30 s" in out
    assert "TRANSCRIPT_PARTITIONS=8192" in out
    done = cli("plan", "--sessions", "400000000", "--sends-per-session-day", "30", "--json",
               env=env)
    doc = _strict_json(done.stdout.decode())
    assert doc["fits"] is False and doc["does_not_fit"] == [why]
    small = _strict_json(cli("plan", "--sessions", "1000", "--sends-per-session-day", "5",
                             "--json", env=env).stdout.decode())
    assert small["fits"] is True and small["does_not_fit"] == []


def test_absurd_workloads_stay_within_the_deployment() -> None:
    """1e10 sessions x 1e6 sends a day gave 4.4e12 partitions."""
    w = Workload(sessions=10**10, sends_per_session_day=10**6)
    f = figures(w)
    assert f["deployment: partitions"] == MAX_CHOSEN_PARTITIONS
    assert f["deployment: worker processes"] == MAX_CHOSEN_PARTITIONS
    misfits = fit(w, MEASURED).misfits
    assert len(misfits) == 2 and "worker processes" in misfits[0] and "partitions" in misfits[1]
    given = fit(Workload(sessions=5, sends_per_session_day=3, partitions=1, workers=9), MEASURED)
    assert given.misfits == ("9 workers for 1 partitions: 8 would own no partition",)


@settings(max_examples=300, deadline=None)
@given(sessions=st.integers(1, 10**10), sends=st.floats(0, 10**6),
       window=st.floats(1e-4, 3650), peak=st.floats(1, 1000), headroom=st.floats(1e-3, 1),
       restore=st.floats(1e-3, 86400), worker_restore=st.floats(1e-3, 7 * 86400),
       partitions=st.none() | st.integers(1, MAX_PARTITIONS),
       workers=st.none() | st.integers(1, MAX_PARTITIONS))
def test_every_workload_plan_accepts_gives_counts_a_deployment_accepts(
        sessions, sends, window, peak, headroom, restore, worker_restore, partitions,
        workers) -> None:
    w = Workload(sessions=sessions, sends_per_session_day=sends, dedupe_window_days=window,
                 peak_factor=peak, headroom=headroom, restore_target_s=restore,
                 worker_restore_target_s=worker_restore, partitions=partitions, workers=workers)
    for c in (MEASURED, EXTREME_LOW, EXTREME_HIGH):
        out = plan(w, c)
        f = {f"{x.group}: {x.name}": x.value for x in out}
        assert all(math.isfinite(x.value) and x.value >= 0 for x in out)
        assert 1 <= f["deployment: partitions"] <= MAX_PARTITIONS
        if workers is None:
            assert f["deployment: worker processes"] <= f["deployment: partitions"]
        size = fit(w, c)
        assert (size.workers > size.partitions) == any("own no partition" in m
                                                       for m in size.misfits)


def _at(which: int) -> Constants:
    """Every constant at the low (0) or high (1) end of its range."""
    return Constants(**{name: CONSTANT_RANGES[name][which] for name in CONSTANT_RANGES},
                     source="edge")


EXTREME_LOW, EXTREME_HIGH = _at(0), _at(1)


@pytest.mark.parametrize("field, value, says", [
    ("restore_records_per_s", 1e-300, "1e-300 is out of range (1 to 1e+09: a process"),
    ("worker_records_per_s", 1e12, "out of range (1 to 1e+09"),
    ("input_record_bytes", 1e308, "out of range (1 to 2.09715e+06: no record or state value"),
    ("head_bytes", 0.5, "out of range (1 to 2.09715e+06"),
    ("written_share", 1.5, "out of range (0 to 1: each input record has one outcome)"),
    ("state_writes_per_record", 3, "out of range (0 to 2"),
])
def test_constants_out_of_range_name_the_file_and_field(env: dict[str, str], tmp_path: Path,
                                                        field: str, value: float,
                                                        says: str) -> None:
    """A tiny rate gave an unnamed OverflowError, huge sizes printed Infinity as --json."""
    with pytest.raises(ValueError, match=f"^f.json: field '{field}': ") as caught:
        Constants.from_dict({**MEASURED.to_dict(), field: value}, "f.json")
    assert says in str(caught.value)
    path = tmp_path / "bench.json"
    path.write_text(json.dumps({"capacity": {"constants": {**MEASURED.to_dict(),
                                                           field: value}}}))
    done = cli("plan", "--sessions", "10000000000", "--sends-per-session-day", "1000000",
               "--json", "--constants", str(path), env=env)
    err = done.stderr.decode()
    assert done.returncode == 2, done.stdout[-400:]
    assert f"{path}: capacity.constants: field '{field}': " in err and says in err, err
    assert "Traceback" not in err and not done.stdout


@pytest.mark.parametrize("flag", ["--partitions", "--workers"])
def test_counts_past_the_deployments_bound_are_refused(env: dict[str, str], flag: str) -> None:
    done = cli("plan", "--sessions", "10", "--sends-per-session-day", "1", flag, "100000",
               env=env)
    assert done.returncode == 2
    assert f"{flag}: 100000 is out of range (>= 1, <= 10000)" in done.stderr.decode()


def test_json_is_json_at_every_edge(env: dict[str, str], tmp_path: Path) -> None:
    """The largest workload plan accepts, with every constant at either end of its range."""
    for c in (EXTREME_LOW, EXTREME_HIGH):
        path = tmp_path / "c.json"
        path.write_text(json.dumps(c.to_dict()))
        done = cli("plan", "--sessions", "10000000000", "--sends-per-session-day", "1000000",
                   "--dedupe-window-days", "3650", "--history-days", "36500", "--json",
                   "--constants", str(path), env=env)
        assert done.returncode == 0, done.stderr
        doc = _strict_json(done.stdout.decode())
        assert all(math.isfinite(f["value"]) for f in doc["figures"])


# ---- standbys (issue 44) ----

def _figure(figs: list, name: str) -> float:
    return next(f.value for f in figs if f"{f.group}: {f.name}" == name)


def test_standbys_add_their_state_and_fetch_to_each_worker() -> None:
    one = plan(Workload(sessions=1_000_000, sends_per_session_day=20, workers=4), MEASURED)
    none = plan(Workload(sessions=1_000_000, sends_per_session_day=20, workers=4,
                         standby_replicas=0), MEASURED)
    state = _figure(one, "deployment: state bytes")
    assert _figure(one, "deployment: standbys per partition") == 1
    assert _figure(one, "deployment: state bytes per worker") == pytest.approx(state * 2 / 4)
    assert _figure(none, "deployment: state bytes per worker") == pytest.approx(state / 4)
    assert _figure(none, "deployment: a worker's standby fetch") == 0
    peak = _figure(one, "deployment: peak input")
    assert _figure(one, "deployment: a worker's standby fetch") == pytest.approx(
        peak * MEASURED.state_writes_per_record / 4)


def test_one_worker_keeps_no_standby_however_many_are_asked_for() -> None:
    figs = plan(Workload(sessions=10_000, sends_per_session_day=20, workers=1,
                         standby_replicas=3), MEASURED)
    assert _figure(figs, "deployment: standbys per partition") == 0
    three = plan(Workload(sessions=10_000, sends_per_session_day=20, workers=3,
                          standby_replicas=5), MEASURED)
    assert _figure(three, "deployment: standbys per partition") == 2


# ---- a growth step (issue 44, item 4) ----

def test_a_growth_step_costs_its_move_and_the_restart() -> None:
    """The pause of `repartition` to twice the partitions: every live state key and entry
    record moved at the measured rate, then each worker's restore of its share."""
    c = MEASURED
    w = Workload(sessions=100_000, sends_per_session_day=20, partitions=16, workers=4)
    f = figures(w)
    keys = f["deployment: state keys"]
    entries = 100_000 * 20 * c.written_share * w.history_days
    assert f["deployment: a growth step's pause"] == pytest.approx(
        (keys + entries) / c.move_records_per_s + keys / c.restore_records_per_s / 4)
    # entries are never deleted: the step grows with the history a deployment keeps
    assert figures(replace(w, history_days=30))["deployment: a growth step's pause"] < \
        f["deployment: a growth step's pause"]


def test_the_growth_constant_is_what_the_scale_test_measured() -> None:
    """`make faults` (tests/faults/test_repartition_scale.py) writes its repartition of
    1,000,000 sessions, 8 -> 16, to bench/results/repartition.json: the committed constant is
    its rate within 25%, and that run left everything in place (audit clean, no stray)."""
    run = json.loads((ROOT / "bench" / "results" / "repartition.json").read_text())
    assert run["sessions"] >= 1_000_000 and (run["from"], run["to"]) == (8, 16)
    assert run["audit_exit"] == 0 and run["strays"] == 0
    rate = (2 * run["moved_state_keys"] + run["copied_entries"]) / run["command_s"]
    assert abs(rate / run["move_records_per_s"] - 1) <= 0.01
    assert abs(MEASURED.move_records_per_s / rate - 1) <= 0.25


def test_a_constants_file_from_before_the_growth_constant_still_loads() -> None:
    old = {k: v for k, v in MEASURED.to_dict().items() if k != "move_records_per_s"}
    assert Constants.from_dict(old, "old").move_records_per_s == \
        Constants.__dataclass_fields__["move_records_per_s"].default
