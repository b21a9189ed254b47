"""The relation judge's speed on this machine: milliseconds a pair, one pair at a time (p50, p95: a watcher
judging a memory as it is written) and batched (a compaction judging a bank's pairs), the local judge
against the rule (the baseline) in the same run.

Target: the local judge at most 20 ms a pair (p50, 2 cores). The pairs are everyday statements
(`rl.data.generated_relations`), so the benchmark needs no data file.

    python -m memupdate.bench.judge [--pairs 256] [--out PATH]
"""

from __future__ import annotations

import argparse
import os
import time
from typing import Any

from memupdate.bench.common import bench_main, percentile, print_table, verdict

TARGET_MS = 20.0


def _options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--pairs", type=int, default=256, help="pairs judged (one at a time, then batched)")


def run(args: argparse.Namespace) -> dict[str, Any]:
    from memupdate.judge.judges import make_judge
    from memupdate.rl.data.generated_relations import generated_pairs

    pairs = [p.statements for p in generated_pairs(args.pairs, seed=7)]
    rows = {}
    started = time.perf_counter()
    local = make_judge("local")
    load_seconds = time.perf_counter() - started
    for judge in (make_judge("rule"), local):
        judge.judge(pairs[:8])  # warm
        single = []
        for pair in pairs:
            t = time.perf_counter()
            judge.judge([pair])
            single.append(1000 * (time.perf_counter() - t))
        t = time.perf_counter()
        judge.judge(pairs)
        batched = 1000 * (time.perf_counter() - t) / len(pairs)
        rows[judge.name] = {"p50_ms": percentile(single, 50), "p95_ms": percentile(single, 95), "batched_ms": batched}
    return {"pairs": len(pairs), "load_seconds": load_seconds, "judges": rows, "target_ms": TARGET_MS,
            "load_average": os.getloadavg()[0]}


def report(summary: dict[str, Any]) -> None:
    rule = summary["judges"]["rule"]
    rows = []
    for name, row in summary["judges"].items():
        met = verdict(row["p50_ms"] <= TARGET_MS) if name == "local" else ""
        rows.append([name, f"{row['p50_ms']:.2f}", f"{row['p95_ms']:.2f}", f"{row['batched_ms']:.2f}",
                     f"{row['p50_ms'] / max(rule['p50_ms'], 1e-6):.0f}x", met])
    print_table(
        f"relation judge: {summary['pairs']} pairs", ["judge", "p50 ms", "p95 ms", "batched ms/pair", "p50 vs rule", f"<= {TARGET_MS:.0f} ms"],
        rows, [f"local judge loaded in {summary['load_seconds']:.1f} s; load average {summary['load_average']:.2f}"],
    )


def main(argv=None) -> dict[str, Any]:
    return bench_main("judge", __doc__, run, report, argv, options=_options)[1]


if __name__ == "__main__":
    main()
