"""The printed table and the chart of `make bench` (bench/results/latest.{json,png})."""

from __future__ import annotations

from pathlib import Path


def table(r: dict) -> str:
    t, n = r["throughput"], r["records"]
    lines = [
        f"transcript-owner bench  {r['timestamp']}  nproc={r['machine']['nproc']}  "
        f"python={r['machine']['python']}  kafka={r['machine']['kafka']}",
        f"input: {n['throughput']:,} synthetic confirmations preloaded on 8 partitions "
        "(same records for a, b, c)",
        "",
        f"{'throughput (same run)':<44}{'events/s':>12}{'vs ceiling':>12}{'seconds':>10}",
        f"{'(a) ceiling: aiokafka passthrough, idempotent':<44}"
        f"{r['ceiling_events_per_s']:>12,.0f}{'1.00':>12}{t['ceiling']['seconds']:>10.2f}",
        f"{'(b) faust noop agent, concurrency=1':<44}{r['faust_noop_events_per_s']:>12,.0f}"
        f"{r['faust_noop_events_per_s'] / r['ceiling_events_per_s']:>12.2f}"
        f"{t['faust_noop']['seconds']:>10.2f}",
        f"{'(c) worker (first output -> lag 0)':<44}{r['worker_events_per_s']:>12,.0f}"
        f"{r['ratio']:>12.2f}{t['worker']['seconds']:>10.2f}",
        f"    worker start-up (process start -> first output): {t['worker']['startup_s']:.2f}s; "
        f"events incl. re-keyed copies: {t['worker']['events']:,}",
        f"    first -> last output sent: {t['worker']['first_to_last_output_s']:.2f}s = "
        f"{t['worker']['events_per_s_to_last_output']:,.0f} events/s (lag 0 also waits for "
        "faust's offset commit)",
        "",
        f"{'(d) end-to-end latency, ms':<30}{'p50':>9}{'p95':>9}{'p99':>9}{'max':>9}"
        f"{'achieved/s':>12}{'entries':>9}",
    ]
    for rate, v in r["latency_ms"].items():
        lines.append(f"{'    at ' + rate + '/s':<30}{v['p50']:>9.1f}{v['p95']:>9.1f}"
                     f"{v['p99']:>9.1f}"
                     f"{v['max'] or float('nan'):>9.1f}{v['achieved_rate']:>12,.0f}"
                     f"{v['entries_measured']:>9,}")
    a = r.get("audit")
    if a:
        lines += ["", f"audit after (c) and (d): {'clean' if a['clean'] else 'NOT CLEAN'} "
                      f"({a['expected_entries']:,} entries expected, {a['actual_entries']:,} "
                      f"read, {a['discrepancies']} discrepancies, {a['repeats']} repeated keys; "
                      f"{a['seconds']}s)"]
    rec = r["recovery_s"]
    lines += [
        "",
        f"(e) recovery with {n['recovery_sessions']:,} sessions of state "
        "(worker start -> new record's entry readable):",
        f"    local RocksDB kept: {rec.get('local', float('nan')):.2f}s    "
        f"state dir wiped (from changelog): {rec.get('from_changelog', float('nan')):.2f}s",
    ]
    if r.get("missing"):
        lines += ["", "MISSING: " + "; ".join(r["missing"])]
    lines.append(f"\nwall time: {r['wall_s']:.0f}s")
    return "\n".join(lines)


def chart(r: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4.2))
    names = ["ceiling\n(aiokafka)", "faust noop", "worker"]
    vals = [r["ceiling_events_per_s"], r["faust_noop_events_per_s"], r["worker_events_per_s"]]
    bars = a.bar(names, vals, color=["#999999", "#6c8ebf", "#d6792c"])
    a.bar_label(bars, labels=[f"{v:,.0f}" for v in vals])
    a.set_ylabel("events/s")
    a.set_title(f"throughput, {r['records']['throughput']:,} records, same run")
    rates = list(r["latency_ms"])
    width = 0.25
    for i, p in enumerate(("p50", "p95", "p99")):
        xs = [j + (i - 1) * width for j in range(len(rates))]
        bb = b.bar(xs, [r["latency_ms"][k][p] for k in rates], width, label=p)
        b.bar_label(bb, fmt="%.0f", fontsize=7)
    b.set_xticks(range(len(rates)), [f"{k}/s" for k in rates])
    b.set_ylabel("ms (produce -> entry readable)")
    b.set_title("end-to-end latency by input rate")
    b.legend()
    fig.suptitle(f"transcript-owner bench {r['timestamp']} (nproc={r['machine']['nproc']})")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
