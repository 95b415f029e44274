"""The printed table and the chart of `make bench` (bench/results/latest.{json,png}).

Reads results of earlier runs too (one worker, no `modes`): their worker is shown unnamed.
"""

from __future__ import annotations

from pathlib import Path

NAN = float("nan")
_ABBREV = {"exactly_once": "exactly-\nonce", "at_least_once": "at-least-\nonce"}  # chart labels


def _modes(r: dict) -> list[tuple[str | None, str, str]]:
    """(mode, throughput key, latency key) per measured mode, the default (first) one first."""
    modes = r.get("modes")
    if not modes:
        return [(None, "worker", "latency_ms")]
    primary = r.get("processing_guarantee", modes[0])
    out = []
    for m in modes:
        key = "worker" if m == primary else f"worker_{m}"
        if key in r["throughput"]:
            out.append((m, key, "latency_ms" if m == primary else f"latency_ms_{m}"))
    return out


def _quix(r: dict) -> list[tuple[str, str]]:
    """(throughput key, mode) of each Quix Streams run of the result."""
    return [(k, k.removeprefix("quix_")) for k in ("quix_exactly_once", "quix_at_least_once")
            if k in r["throughput"]]


def _ratio(a: float | None, b: float | None) -> float:
    return a / b if a is not None and b else NAN


def _seconds(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.2f}s"


# issue 25's goals, which replaced issue 15's targets: (id, what, the figure's path in the
# result, op, bound, unit); judged on the default (first) mode. A path step "<mode>" is that
# mode; a figure not in the result is "not measured" (a baseline left out, a mode not run, or a
# failed phase). Times and µs are the note machine's: compare ratios within a run
TARGETS = (
    ("worker_vs_quix_exactly_once", "worker / Quix exactly-once, drain",
     ("worker_vs_quix", "exactly_once", "events_per_s"), ">=", 2.0, "x"),
    ("core_us_per_record", "the core, decide_speed --worker", ("core_us_per_record",), "<=", 8.0,
     "µs/record"),
    ("p99_1000", "p99 at 1,000/s", ("latency_ms", "1000", "p99"), "<=", 25.0, "ms"),
    ("p99_5000", "p99 at 5,000/s", ("latency_ms", "5000", "p99"), "<=", 50.0, "ms"),
    ("p99_ratio_1000", "p99 at 1,000/s, exactly-once / at-least-once",
     ("exactly_once_vs_at_least_once", "latency", "1000", "p99"), "<=", 1.5, "x"),
    ("p99_ratio_5000", "p99 at 5,000/s, exactly-once / at-least-once",
     ("exactly_once_vs_at_least_once", "latency", "5000", "p99"), "<=", 1.5, "x"),
    ("recovery_from_changelog", "recovery of 100k sessions from the changelog",
     ("recovery_s", "from_changelog"), "<=", 2.0, "s"),
    ("recovery_local", "recovery of 100k sessions with local state", ("recovery_s", "local"),
     "<=", 1.0, "s"),
    ("peak_rss", "peak RSS over (c), 200k records", ("peak_rss_mb", "<mode>"), "<=", 200.0, "MB"),
    ("two_processes", "two processes of one group / one, drain",
     ("scaling_two_processes", "events_per_s"), ">=", 1.85, "x"),
)
# issue 41's goals (bound reads), in the same form; judged on what (d2) and (c4) measured,
# always exactly-once (only it writes positions). The reads' bounds are relative: a read's p99
# minus the entries' p99 of the same window (bench/read_cost.py)
TARGETS_41 = (
    ("read_topic_p99_1000", "bound read from the topic: p99 - entry p99, 1,000/s",
     ("read_cost", "topic_p99_over_entry_ms"), "<=", 10.0, "ms"),
    ("read_db_p99_1000", "bound read from a sink database: p99 - entry p99",
     ("read_cost", "db_p99_over_entry_ms"), "<=", 50.0, "ms"),
    ("read_failures", "bound reads stale or without the entry (d2)",
     ("read_cost", "failed_reads"), "<=", 0, "reads"),
    ("positions_drain", "drain with positions / without, exactly-once",
     ("positioned_vs_unpositioned", "events_per_s"), ">=", 0.97, "x"),
)
_OP = {">=": "≥", "<=": "≤"}


def _dig(r: dict, path: tuple[str, ...], mode: str | None):  # noqa: ANN202
    v = r
    for step in path:
        if not isinstance(v, dict):
            return None
        v = v.get(mode if step == "<mode>" else step)
    return v if isinstance(v, int | float) and v == v else None  # not NaN


def targets(r: dict) -> dict:
    """Each goal (issue 25's, then issue 41's: `issue`) with this run's figure and whether it
    is met (None: not measured). `scale` notes a run on other sizes than the target's (100k
    sessions, 200k records, 1,000/s)."""
    mode = r.get("processing_guarantee")
    out = {}
    goals = [(25, g) for g in TARGETS] + [(41, g) for g in TARGETS_41]
    for issue, (key, what, path, op, bound, unit) in goals:
        v = _dig(r, path, mode)
        t = {"what": what, "op": op, "target": bound, "unit": unit, "value": v,
             "mode": mode if issue == 25 else "exactly_once", "issue": issue,
             "met": None if v is None else (v >= bound if op == ">=" else v <= bound)}
        sessions = r.get("records", {}).get("recovery_sessions")
        if key.startswith("recovery") and sessions != 100_000:
            t["scale"] = f"measured with {sessions:,} sessions"
        if key == "peak_rss" and r.get("records", {}).get("throughput") != 200_000:
            t["scale"] = f"measured with {r['records']['throughput']:,} records"
        rate = (r.get("read_cost") or {}).get("rate")
        if key.startswith("read_") and rate is not None and rate != 1000:
            t["scale"] = f"measured at {rate:,}/s"
        out[key] = t
    return out


def _target(r: dict, key: str, fmt: str = "g", value: float | None = None, note: str = "") -> str:
    """`≤ 50 ms (met)` / `≤ 50 ms (NOT met)` / `≤ 50 ms` (not measured) for the table's target
    columns; `value` judges another figure than the target's own (another mode's) by the same
    bound; `note` goes before the verdict."""
    t = (r.get("targets") or targets(r)).get(key)
    if t is None:
        return ""
    ok = t["met"] if value is None else \
        (value >= t["target"] if t["op"] == ">=" else value <= t["target"])
    unit = "" if t["unit"] == "x" else f" {t['unit']}"
    met = {True: " (met)", False: " (NOT met)", None: ""}[ok]
    return f"{_OP[t['op']]} {t['target']:{fmt}}{unit}{note}{met}"


def _targets_line(r: dict) -> list[str]:
    """A count, then every goal on a line of its own: verdict, what, figure against bound."""
    ts = r.get("targets") or targets(r)
    verdicts = {True: "met", False: "NOT met", None: "not measured"}
    met = sum(1 for t in ts.values() if t["met"])
    measured = sum(1 for t in ts.values() if t["met"] is not None)
    mode = next(iter(ts.values()), {}).get("mode")
    issues = sorted({t.get("issue", 25) for t in ts.values()})
    which = f"issue 25 ({mode or 'the worker'})"
    if len(issues) > 1:  # issue 41's are judged exactly-once
        which = ("issues 25 and 41 (exactly_once)" if mode == "exactly_once"
                 else f"issues 25 ({mode or 'the worker'}) and 41 (exactly_once)")
    lines = [f"goals of {which}: met {met} of {measured} measured"]
    lines[0] += f", {len(ts) - measured} not measured" if len(ts) > measured else ""
    for t in ts.values():
        unit = "x" if t["unit"] == "x" else f" {t['unit']}"
        figure = "" if t["value"] is None else f"{t['value']:.4g}{unit}"
        scale = f" [{t['scale']}]" if t.get("scale") else ""
        lines.append(f"    {verdicts[t['met']]:<13}{t['what']:<52}{figure:>14}   "
                     f"{_OP[t['op']]} {t['target']:g}{unit}{scale}")
    return lines


def packages_line(found: dict) -> str:
    """The worker's packages on one line (older results have none)."""
    return "worker packages: " + ", ".join(f"{name} {version or '-'}"
                                           for name, version in found.items())


def table(r: dict) -> str:
    t, n = r["throughput"], r["records"]
    modes = _modes(r)
    ceiling = r.get("ceiling_events_per_s", NAN)  # NaN: (a) not run (--only)
    ran = set(r.get("phases") or ("b", "d", "e"))  # the phases run (bench/run.py --only)
    w = 52
    lines = [
        f"transcript-owner bench  {r['timestamp']}  nproc={r['machine']['nproc']}  "
        f"python={r['machine']['python']}  kafka={r['machine']['kafka']}",
        *([packages_line(r["machine"]["packages"])] if "packages" in r["machine"] else []),
        f"input: {n['throughput']:,} synthetic confirmations preloaded on "
        f"{r.get('partitions', 8)} partitions (every topic of the run has as many) "
        "(same records for every throughput row" + (", each mode" if modes and modes[0][0]
                                                     else "")
        + (", the Quix runs on copies of their own)" if _quix(r) else ")"),
        "",
        f"{'throughput (same run)':<{w}}{'events/s':>12}{'vs ceiling':>12}{'seconds':>10}",
    ]
    if "ceiling" in t:
        lines.append(f"{'(a) ceiling: aiokafka passthrough, idempotent':<{w}}"
                     f"{ceiling:>12,.0f}{'1.00':>12}{t['ceiling']['seconds']:>10.2f}")
    if (rd := t.get("librdkafka_passthrough")) is not None:
        lines.append(f"{'(a2) librdkafka passthrough, idempotent':<{w}}"
                     f"{rd['events_per_s']:>12,.0f}{rd['events_per_s'] / ceiling:>12.2f}"
                     f"{rd['seconds']:>10.2f}")
    if "b" in ran:
        lines += [
            f"{'(b) faust noop agent, concurrency=1':<{w}}"
            f"{r['faust_noop_events_per_s']:>12,.0f}"
            f"{r['faust_noop_events_per_s'] / ceiling:>12.2f}"
            f"{t.get('faust_noop', {}).get('seconds', NAN):>10.2f}",
        ]
    quix = _quix(r)
    for name, mode in quix:
        q = t[name]
        lines.append(f"{'(q) Quix, ' + mode + ' (first output -> lag 0)':<{w}}"
                     f"{q['events_per_s']:>12,.0f}{q['events_per_s'] / ceiling:>12.2f}"
                     f"{q['seconds']:>10.2f}")
    for mode, key, _ in modes:
        label = f"(c) worker{', ' + mode if mode else ''} (first output -> lag 0)"
        eps = t[key]["events_per_s"]
        lines.append(f"{label:<{w}}{eps:>12,.0f}{eps / ceiling:>12.2f}{t[key]['seconds']:>10.2f}")
    cmp_ = r.get("exactly_once_vs_at_least_once")
    if cmp_:
        lines.append(f"{'    exactly_once / at_least_once':<{w}}{cmp_['events_per_s']:>12.2f}"
                     f"{'':>12}{'':>10}   (to last output sent: "
                     f"{cmp_['events_per_s_to_last_output']:.2f})")
    if (nc := t.get("worker_unchained")) is not None:
        label = f"(c3) worker, {nc['mode']}, without its hash chain"
        lines.append(f"{label:<{w}}{nc['events_per_s']:>12,.0f}"
                     f"{nc['events_per_s'] / ceiling:>12.2f}{nc['seconds']:>10.2f}")
        if (c := r.get("chained_vs_unchained")) is not None:
            p99 = ", ".join(f"{rate}/s {x['p99']:.2f}" for rate, x in c["latency"].items()
                            if x.get("p99") is not None)
            lines.append(f"{'    with the chain / without':<{w}}{c['events_per_s']:>12.2f}"
                         f"{'':>12}{'':>10}   (p99: {p99})")
    if (np_ := t.get("worker_unpositioned")) is not None:
        label = f"(c4) worker, {np_['mode']}, without positions"
        lines.append(f"{label:<{w}}{np_['events_per_s']:>12,.0f}"
                     f"{np_['events_per_s'] / ceiling:>12.2f}{np_['seconds']:>10.2f}")
        if (c := r.get("positioned_vs_unpositioned")) is not None:
            lines.append(f"{'    with positions / without':<{w}}{c['events_per_s']:>12.3f}"
                         f"{'':>12}{'':>10}   goal {_target(r, 'positions_drain', '.2f')} "
                         f"(to last output sent: {c['events_per_s_to_last_output']:.3f})")
    if (x2 := t.get("worker_two_processes")) is not None:
        label = f"(c2) worker x2 processes, one group, {x2['mode']}"
        lines.append(f"{label:<{w}}{x2['events_per_s']:>12,.0f}"
                     f"{x2['events_per_s'] / ceiling:>12.2f}{x2['seconds']:>10.2f}")
    for mode, key, _ in modes:
        x = t[key]
        name = f" {mode}" if mode else ""
        lines += [
            f"    worker{name} start-up (process start -> first output): {x['startup_s']:.2f}s; "
            f"events incl. re-keyed copies: {x['events']:,}",
            f"    worker{name} first -> last output sent: {x['first_to_last_output_s']:.2f}s = "
            f"{x['events_per_s_to_last_output']:,.0f} events/s (lag 0 also waits for the "
            "offset commit)",
        ]
    for mode, key, _ in modes:
        x = t[key]
        if x.get("peak_rss_mb") is not None:
            name = f" {mode}" if mode else ""
            after = x.get("peak_rss_mb_after_latency")
            tgt = _target(r, "peak_rss", value=x["peak_rss_mb"], note=" for 200k records")
            lines.append(f"    worker{name} peak RSS (VmHWM) over (c): {x['peak_rss_mb']:,.0f} MB"
                         f", target {tgt}" + (f"; after (d): {after:,.0f} MB" if after else ""))
    for mode, key, _ in modes:
        x = t[key]
        if x.get("connections") is not None or x.get("transactional_ids") is not None:
            name = f" {mode}" if mode else ""
            conns, ids = x.get("connections"), x.get("transactional_ids")
            lines.append(f"    worker{name} at lag 0 of (c), {r.get('partitions', 8)} partitions: "
                         f"connections to the broker {'n/a' if conns is None else conns}, "
                         f"transactional ids of its group {'n/a' if ids is None else ids}")
    if x2 is not None:
        sc = r.get("scaling_two_processes") or {}
        parts = x2.get("partitions_per_member")
        rss = [f"{v:,.0f}" if v is not None else "?" for v in x2.get("peak_rss_mb_per_process")
               or ()]
        lines.append(f"    two processes / one (c), {x2['mode']}: "
                     f"{sc.get('events_per_s', NAN):.3f}, target {_target(r, 'two_processes')} "
                     f"(scaling ratio; to last output sent "
                     f"{sc.get('events_per_s_to_last_output', NAN):.2f}); start-up "
                     f"{x2['startup_s']:.2f}s; input partitions per process: "
                     f"{'+'.join(map(str, parts)) if parts else 'n/a'}; peak RSS "
                     f"{' / '.join(rss) or 'n/a'} MB" + (
                         f"; connections {' / '.join(map(str, cs))}, transactional ids "
                         f"{x2.get('transactional_ids', 'n/a')}"
                         if (cs := x2.get("connections_per_process")) else ""))
    for name, mode in quix:
        q = t[name]
        lines.append(f"    Quix {mode} start-up: {q['startup_s']:.2f}s; to last output sent: "
                     f"{q['events_per_s_to_last_output']:,.0f} events/s; incl. start-up: "
                     f"{q.get('events_per_s_incl_startup', NAN):,.0f} events/s (commit every "
                     f"{q.get('commit_interval_s', NAN):g}s)")
    vq, vr = r.get("worker_vs_quix") or {}, r.get("worker_vs_librdkafka") or {}
    if vq or vr:
        lines += ["", f"{'ratios (same run)':<{w}}{'drain':>12}{'incl.start':>12}"
                      f"{'to last':>10}   target (drain)"]
        primary = r.get("processing_guarantee")
        for mode, x in vq.items():
            tgt = _target(r, "worker_vs_quix_exactly_once", ".2f") if mode == "exactly_once" \
                else ""
            lines.append(f"{'    worker / Quix Streams, ' + mode:<{w}}{x['events_per_s']:>12.2f}"
                         f"{x['events_per_s_incl_startup']:>12.2f}"
                         f"{x['events_per_s_to_last_output']:>10.2f}   {tgt}".rstrip())
        for mode, x in vr.items():
            tgt = _target(r, "worker_vs_librdkafka", ".2f") if mode == primary else ""
            lines.append(f"{'    worker ' + mode + ' / librdkafka passthrough':<{w}}{x:>12.2f}"
                         f"{'':>22}   {tgt}".rstrip())
    b = r.get("baselines")
    if b:
        v = b.get("versions", {})
        lines.append(f"    baselines on Python {v.get('python')}: quixstreams "
                     f"{v.get('quixstreams')}, confluent-kafka {v.get('confluent_kafka')} "
                     f"(librdkafka {v.get('librdkafka')}), orjson {v.get('orjson')}")
    if "d" in ran:
        lines += ["", f"{'(d) end-to-end latency, ms':<34}{'p50':>9}{'p95':>9}{'p99':>9}"
                      f"{'max':>9}{'achieved/s':>12}{'entries':>9}   p99 target"]
    p99_targets = {"1000": "p99_1000", "5000": "p99_5000"}
    rates: list[str] = []
    for _, _, lkey in modes:
        rates += [k for k in r.get(lkey, {}) if k not in rates]
    for rate in sorted(rates, key=int):
        first = True
        for mode, _, lkey in modes:
            v = r.get(lkey, {}).get(rate)
            if v is None:
                continue
            label = (f"    at {rate}/s" if first else "") if not mode else \
                f"{'    at ' + rate + '/s' if first else '':<14}{mode}"
            first = False
            tgt = _target(r, p99_targets[rate]) if rate in p99_targets and lkey == "latency_ms" \
                else ""
            lines.append(f"{label:<34}{v['p50']:>9.1f}{v['p95']:>9.1f}{v['p99']:>9.1f}"
                         f"{v['max'] or NAN:>9.1f}{v['achieved_rate']:>12,.0f}"
                         f"{v['entries_measured']:>9,}   {tgt}".rstrip())
        ratio = (cmp_ or {}).get("latency", {}).get(rate)
        if ratio:
            tgt = _target(r, f"p99_ratio_{rate}", ".2f") if rate in p99_targets else ""
            lines.append((f"{'':<14}{'exactly/at-least':<20}"
                          + "".join(f"{_ratio(ratio[p], 1):>9.2f}" for p in ("p50", "p95", "p99"))
                          + f"{'':>30}{tgt}").rstrip())
    lines += _read_cost_lines(r)
    a = r.get("audit")
    if a:
        what = ("audit --strict" if a.get("strict") else "audit") \
            + (f" of {a['mode']}" if a.get("mode") else "")
        reps = f"{a['repeats']} repeated keys"
        if a.get("diagnostic_repeats") is not None:
            reps += f", {a['diagnostic_repeats']} repeated diagnostics"
        lines += ["", f"{what} after (c) and (d): {'clean' if a['clean'] else 'NOT CLEAN'} "
                      f"({a['expected_entries']:,} entries expected, {a['actual_entries']:,} "
                      f"read, {a['discrepancies']} discrepancies, {reps}; {a['seconds']}s)"]
    sk = r.get("sink")
    if sk:
        lines += ["", f"(f) sink sqlite --until-end over those entries: {sk['rows']:,} rows "
                      f"({sk['skipped']} skipped) in {sk['seconds']}s incl. start-up = "
                      f"{sk['rows_per_s']:,.0f} rows/s"]
    rec = r["recovery_s"]
    mode = f", {r['processing_guarantee']}," if r.get("processing_guarantee") else ""
    lines += [] if "e" not in ran else [
        "",
        f"(e) recovery{mode} with {n['recovery_sessions']:,} sessions of state "
        "(worker start -> new record's entry readable):",
        f"    local RocksDB kept: {_seconds(rec.get('local'))}, target "
        f"{_target(r, 'recovery_local')}    state dir wiped (from changelog): "
        f"{_seconds(rec.get('from_changelog'))}, target {_target(r, 'recovery_from_changelog')}"
        + ("" if n.get("recovery_sessions") == 100_000 else
           "; the targets are for 100,000 sessions"),
    ]
    core = r.get("core")
    if core:
        ph = ", ".join(f"{k} {v['us_per_record']:.2f}" for k, v in core.get("phases", {}).items())
        lines += ["", f"(g) the core without Kafka ({core.get('command', 'decide_speed --worker')}"
                      f", the same {core.get('records') or 0:,} records):",
                  f"    {core['us_per_record']:.2f} µs/record ({ph}) = "
                  f"{core['records_per_s']:,} records/s   target "
                  f"{_target(r, 'core_us_per_record')}"]
    if (cap := r.get("capacity")) is not None:
        lines += ["", "(h) `plan`'s figures for this workload (committed constants) beside what "
                      "(c) left; this run's constants in capacity.constants:"]
        for row in cap["predicted"]:
            upto = f" (to {row['up_to']:,.0f})" if row["up_to"] != row["predicted"] else ""
            lines.append(f"    {row['figure']:<34}{row['predicted']:>16,.0f} predicted"
                         f"{row['measured']:>16,.0f} measured   x{row['ratio']:.3f}{upto}"
                         f"   {'held' if row['held'] else 'NOT held'} (within 25%)")
    if r.get("targets") is not None or r.get("core") is not None:
        lines += [""] + _targets_line(r)
    if r.get("missing"):
        lines += ["", "MISSING: " + "; ".join(r["missing"])]
    lines.append(f"\nwall time: {r['wall_s']:.0f}s")
    return "\n".join(lines)


def _read_cost_lines(r: dict) -> list[str]:
    """(d2): the entries' latency, the acknowledgement and both bound reads, each goal beside
    its read; what failed; the gateway's CPU."""
    rc = r.get("read_cost")
    if not rc:
        return []
    w = 52
    lines = ["", f"{'(d2) bound reads at ' + format(rc['rate'], ',') + '/s, ms':<{w}}"
                 f"{'p50':>8}{'p95':>8}{'p99':>8}{'max':>8}{'measured':>10}   goal (p99)"]
    rows = [("entry end-to-end (publish -> readable, as (d))", rc["entry_ms"], ""),
            ("publish -> acknowledged", rc["ack_ms"], "")]
    for kind, name, key in (("topic", "the topic", "read_topic_p99_1000"),
                            ("db", "the sink's database", "read_db_p99_1000")):
        if (x := rc.get(f"read_{kind}_ms")) is not None:
            over = rc.get(f"{kind}_p99_over_entry_ms")
            goal = _target(r, key, note=" over the entry's")
            rows.append((f"acknowledged -> read from {name}", x,
                         f"{'n/a' if over is None else format(over, '+.1f')} ms: {goal}"))
    for label, x, goal in rows:
        lines.append(f"{'    ' + label:<{w}}{x['p50']:>8.1f}{x['p95']:>8.1f}{x['p99']:>8.1f}"
                     f"{x['max'] or NAN:>8.1f}{x['measured']:>10,}   {goal}".rstrip())
    failed = []
    for kind in ("topic", "db"):
        if (x := rc.get(f"read_{kind}_ms")) is not None:
            failed.append(f"{kind}: {x['reads']:,} reads, {x['stale']} stale, "
                          f"{x['without_entry']} without the entry, {x['errors']} errors")
    lines += [f"    {rc['records']:,} confirmations over {rc['sessions']:,} sessions at "
              f"{rc['achieved_rate'] or NAN:,.0f}/s achieved, every {rc['read_every']}th read "
              f"back bound to its delivery ({rc['read_timeout_s']:g}s deadline)",
              "    " + "; ".join(failed) + f"; goal {_target(r, 'read_failures')}"]
    if rc.get("entries_missing") or rc.get("publish_errors"):
        lines.append(f"    entries never seen: {rc.get('entries_missing')}, publish errors: "
                     f"{rc.get('publish_errors')}")
    if (a := rc.get("audit")) is not None:
        verdict = "clean" if a["clean"] else "NOT CLEAN"
        lines.append(f"    audit --strict of (d2)'s topics: {verdict} ({a['actual_entries']:,} "
                     f"entries, {a['discrepancies']} discrepancies)")
    if cpu := rc.get("gateway_cpu_s"):
        lines.append(f"    gateway CPU over the {rc.get('gateway_window_s', NAN):.1f}s window: "
                     + ", ".join(f"{k} {v:.2f}s" for k, v in cpu.items()))
    return lines


def chart(r: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    modes = _modes(r)
    fig, (a, b) = plt.subplots(1, 2, figsize=(12, 4.6))
    t = r["throughput"]
    names = ["ceiling\n(aiokafka)"] + (["librdkafka\npassthru"]
                                       if "librdkafka_passthrough" in t else []) + ["faust noop"]
    vals = [r.get("ceiling_events_per_s", NAN)] + (
        [t["librdkafka_passthrough"]["events_per_s"]]
        if "librdkafka_passthrough" in t else []) + [r["faust_noop_events_per_s"]]
    colors = ["#999999"] * (len(vals) - 1) + ["#6c8ebf"]
    for name, mode in _quix(r):
        names.append(f"Quix\n{_ABBREV.get(mode, mode)}")
        vals.append(t[name]["events_per_s"])
        colors.append("#59a14f" if mode == "exactly_once" else "#a0cbe8")
    names += [f"worker\n{_ABBREV.get(m, m)}" if m else "worker" for m, _, _ in modes]
    vals += [t[k]["events_per_s"] for _, k, _ in modes]
    colors += ["#d6792c", "#e8b07a"][:len(modes)]
    if (x2 := t.get("worker_two_processes")) is not None:
        names.append(f"worker x2\n{_ABBREV.get(x2['mode'], x2['mode'])}")
        vals.append(x2["events_per_s"])
        colors.append("#b85c1f")
    bars = a.bar(names, vals, color=colors)
    a.bar_label(bars, labels=[f"{v:,.0f}" for v in vals], fontsize=7 if len(vals) > 5 else 10)
    a.tick_params(axis="x", labelsize=8 if len(vals) > 5 else 10)
    a.set_ylabel("events/s")
    a.set_title(f"throughput, {r['records']['throughput']:,} records, same run")
    rates: list[str] = []
    for _, _, lkey in modes:
        rates += [k for k in r.get(lkey, {}) if k not in rates]
    rates.sort(key=int)
    series = [(m, lkey, p) for m, _, lkey in modes for p in ("p50", "p95", "p99")]
    width = 0.8 / len(series)
    pcolor = {"p50": "#4c72b0", "p95": "#dd8452", "p99": "#c44e52"}
    hatches = ["", "//", "xx", ".."]
    seen = []
    for i, (m, lkey, p) in enumerate(series):
        ks = [k for k in rates if k in r.get(lkey, {})]
        xs = [rates.index(k) + (i - (len(series) - 1) / 2) * width for k in ks]
        ys = [r[lkey][k][p] for k in ks]
        mi = [x[0] for x in modes].index(m)
        bb = b.bar(xs, ys, width, label=f"{p} {m}" if m else p, color=pcolor[p],
                   hatch=hatches[mi % len(hatches)], edgecolor="white" if mi == 0 else "black",
                   linewidth=0.3)
        b.bar_label(bb, fmt="%.0f", fontsize=6)
        seen += ys
    positive = [y for y in seen if y and y > 0]
    if positive and max(positive) / min(positive) > 30:
        b.set_yscale("log")
    elif positive:
        b.set_ylim(top=max(positive) * 1.4)  # room for the legend above the bars
    b.set_xticks(range(len(rates)), [f"{k}/s" for k in rates])
    b.set_ylabel("ms (produce -> entry readable)")
    b.set_title("end-to-end latency by input rate" + (" and mode" if len(modes) > 1 else ""))
    b.legend(fontsize=7, ncol=len(modes))
    fig.suptitle(f"transcript-owner bench {r['timestamp']} (nproc={r['machine']['nproc']})")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
