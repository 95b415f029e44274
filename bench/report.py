"""The printed table and the chart of `make bench` (bench/results/latest.{json,png}).

Reads results of earlier runs too (one worker, no `modes`): their worker is shown unnamed.
"""

from __future__ import annotations

from pathlib import Path

NAN = float("nan")


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


def _ratio(a: float | None, b: float | None) -> float:
    return a / b if a is not None and b else NAN


def _seconds(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.2f}s"


def table(r: dict) -> str:
    t, n = r["throughput"], r["records"]
    modes = _modes(r)
    ceiling = r["ceiling_events_per_s"]
    w = 52
    lines = [
        f"transcript-owner bench  {r['timestamp']}  nproc={r['machine']['nproc']}  "
        f"python={r['machine']['python']}  kafka={r['machine']['kafka']}",
        f"input: {n['throughput']:,} synthetic confirmations preloaded on 8 partitions "
        "(same records for a, b, and c" + (" in each mode)" if modes[0][0] else ")"),
        "",
        f"{'throughput (same run)':<{w}}{'events/s':>12}{'vs ceiling':>12}{'seconds':>10}",
        f"{'(a) ceiling: aiokafka passthrough, idempotent':<{w}}"
        f"{ceiling:>12,.0f}{'1.00':>12}{t['ceiling']['seconds']:>10.2f}",
        f"{'(b) faust noop agent, concurrency=1':<{w}}{r['faust_noop_events_per_s']:>12,.0f}"
        f"{r['faust_noop_events_per_s'] / ceiling:>12.2f}"
        f"{t.get('faust_noop', {}).get('seconds', NAN):>10.2f}",
    ]
    for mode, key, _ in modes:
        label = f"(c) worker{', ' + mode if mode else ''} (first output -> lag 0)"
        eps = t[key]["events_per_s"]
        lines.append(f"{label:<{w}}{eps:>12,.0f}{eps / ceiling:>12.2f}{t[key]['seconds']:>10.2f}")
    cmp_ = r.get("exactly_once_vs_at_least_once")
    if cmp_:
        lines.append(f"{'    exactly_once / at_least_once':<{w}}{cmp_['events_per_s']:>12.2f}"
                     f"{'':>12}{'':>10}   (to last output sent: "
                     f"{cmp_['events_per_s_to_last_output']:.2f})")
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
    lines += ["", f"{'(d) end-to-end latency, ms':<34}{'p50':>9}{'p95':>9}{'p99':>9}{'max':>9}"
                  f"{'achieved/s':>12}{'entries':>9}"]
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
            lines.append(f"{label:<34}{v['p50']:>9.1f}{v['p95']:>9.1f}{v['p99']:>9.1f}"
                         f"{v['max'] or NAN:>9.1f}{v['achieved_rate']:>12,.0f}"
                         f"{v['entries_measured']:>9,}")
        ratio = (cmp_ or {}).get("latency", {}).get(rate)
        if ratio:
            lines.append(f"{'':<14}{'exactly/at-least':<20}"
                         + "".join(f"{_ratio(ratio[p], 1):>9.2f}" for p in ("p50", "p95", "p99")))
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
    rec = r["recovery_s"]
    mode = f", {r['processing_guarantee']}," if r.get("processing_guarantee") else ""
    lines += [
        "",
        f"(e) recovery{mode} with {n['recovery_sessions']:,} sessions of state "
        "(worker start -> new record's entry readable):",
        f"    local RocksDB kept: {_seconds(rec.get('local'))}    "
        f"state dir wiped (from changelog): {_seconds(rec.get('from_changelog'))}",
    ]
    if r.get("missing"):
        lines += ["", "MISSING: " + "; ".join(r["missing"])]
    lines.append(f"\nwall time: {r['wall_s']:.0f}s")
    return "\n".join(lines)


def chart(r: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    modes = _modes(r)
    fig, (a, b) = plt.subplots(1, 2, figsize=(12, 4.6))
    names = ["ceiling\n(aiokafka)", "faust noop"] + [
        f"worker\n{m}" if m else "worker" for m, _, _ in modes]
    vals = [r["ceiling_events_per_s"], r["faust_noop_events_per_s"]] + [
        r["throughput"][k]["events_per_s"] for _, k, _ in modes]
    colors = ["#999999", "#6c8ebf", "#d6792c", "#e8b07a"][:len(vals)]
    bars = a.bar(names, vals, color=colors)
    a.bar_label(bars, labels=[f"{v:,.0f}" for v in vals])
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
    b.set_xticks(range(len(rates)), [f"{k}/s" for k in rates])
    b.set_ylabel("ms (produce -> entry readable)")
    b.set_title("end-to-end latency by input rate" + (" and mode" if len(modes) > 1 else ""))
    b.legend(fontsize=7, ncol=len(modes))
    fig.suptitle(f"transcript-owner bench {r['timestamp']} (nproc={r['machine']['nproc']})")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
