"""The development banks compacted by the heuristic policy with one judge, by today's code and by a
baseline commit's, side by side: what a change of code does to what the judge decides.

Banks: LoCoMo conv-47 and conv-48 (the evaluation conversations of the dev file) and FactConsolidation
sh_6k. For each bank, `compact` with the bank's questions: seconds, the pairs the judge read, the QA
proxy before -> after, and the memories it retires (superseded or merged). The baseline (`--baseline
COMMIT`, default `bench.baseline.BASELINE_COMMIT`) is this benchmark as that commit runs it, first, in a
git worktree and a process and database of its own (`bench.baseline`), its rows named by the commit.
Where its JSON lists the memories it retired, today's are compared key by key (both, only now, only the
baseline, with a few examples of those that differ); otherwise by how many.

    python -m memupdate.bench.dev_banks [--judge local] [--baseline COMMIT|none] [--out PATH]
"""

from __future__ import annotations

import argparse
import os
import time
import uuid

from memupdate.bench.baseline import baseline_of, baseline_option, run_at
from memupdate.bench.common import (
    LOCOMO_DEV_FILE,
    bench_main,
    bench_namespace,
    console,
    load_embedder,
    open_engine,
    print_table,
    server_line,
)
from memupdate.bench.factconsolidation import changed_memories, dev_file, versus_baseline, versus_cell


def banks(root):
    """(name, bank, questions) of each development bank, loaded once."""
    from memupdate.rl.data.factconsolidation import load_context, load_factconsolidation, select_sources
    from memupdate.rl.data.ingest import ingest
    from memupdate.rl.data.locomo import load_locomo

    out = []
    for conversation in load_locomo(LOCOMO_DEV_FILE, ["conv-47", "conv-48"]):
        out.append((conversation.sample_id, ingest(root, conversation).base, list(conversation.qa)))
    (sh6k,) = select_sources(load_factconsolidation(dev_file()), "sh_6k")
    out.append(("sh_6k", load_context(root, sh6k.context).base, list(sh6k.qa)))
    return out


def run(args: argparse.Namespace) -> dict:
    engine = open_engine(args)
    baseline = baseline_of(args.baseline)
    summary: dict = {"judge": args.judge, "baseline": baseline, "load_start": [round(x, 2) for x in os.getloadavg()], "banks": []}
    # The baseline first, in a process of its own: this one has loaded nothing yet.
    theirs = {row["bank"]: row["paths"]["now"] for row in run_at(baseline, "dev_banks", ["--judge", args.judge], engine)["banks"]} \
        if baseline else {}
    embedder = load_embedder()
    console.print(server_line(engine, embedder))
    with bench_namespace(engine, embedder) as root:
        for name, bank, questions in banks(root):
            row: dict = {"bank": name, "memories": bank.count(), "questions": len(questions), "paths": {}}
            if name in theirs:
                row["paths"][baseline] = theirs[name]
            row["paths"]["now"] = mine = compact_now(root, bank, questions, args.judge)
            if name in theirs:
                row["changes"] = versus_baseline(mine, theirs[name], "retired")
                if "retired_memories" in theirs[name]:
                    texts = {m.key: m.content for m in bank.list()}
                    now, then = set(mine["retired_memories"]), set(theirs[name]["retired_memories"])
                    row["only_now"] = [texts.get(k, k) for k in sorted(now - then)][:5]
                    row["only_baseline"] = [texts.get(k, k) for k in sorted(then - now)][:5]
            summary["banks"].append(row)
            console.print(f"{name}: {mine['seconds']:.1f} s, {mine['retired']} retired {row.get('changes', '')}", highlight=False)
            bank.drop()
    summary["load_end"] = [round(x, 2) for x in os.getloadavg()]
    return summary


def compact_now(root, bank, questions, judge_name: str) -> dict:
    """`compact` of `bank` by today's code with the heuristic reading `judge_name`; its fork dropped."""
    from memupdate.agent.compaction import compact
    from memupdate.agent.policies.heuristic import HeuristicPolicy
    from memupdate.bench.factconsolidation import _count_pairs
    from memupdate.judge.judges import make_judge

    judge = make_judge(judge_name)
    policy = HeuristicPolicy(store=root, judge=judge)
    counted = _count_pairs(judge)
    started = time.perf_counter()
    done = compact(policy, bank, (*bank.namespace, "traj", f"now-{uuid.uuid4().hex[:6]}"), questions)
    seconds = time.perf_counter() - started
    _count_pairs(judge, stop=True)
    qa = done.qa.summary()
    retired = changed_memories(done.fork)
    done.fork.drop()
    return {"seconds": round(seconds, 2), "pairs_judged": counted["pairs"], "qa_before": qa["before"], "qa_after": qa["after"],
            "retired": len(retired), "load": round(os.getloadavg()[0], 2), "retired_memories": retired}


def report(summary: dict) -> None:
    rows = []
    for row in summary["banks"]:
        for path, r in row["paths"].items():
            rows.append([row["bank"], path, f"{r['seconds']:.1f}", f"{r['pairs_judged']:,}", f"{r['qa_before']:.3f} -> {r['qa_after']:.3f}",
                         str(r["retired"]), versus_cell(row.get("changes")) if path == "now" else "", str(r["load"])])
    baseline = summary.get("baseline")
    print_table(
        f"The development banks, the heuristic with the {summary['judge']} judge: today's code"
        + (f" and {baseline}'s" if baseline else ""),
        ["bank", "code", "seconds", "pairs judged", "QA proxy", "retired", "retired vs baseline", "load"], rows,
        [f"load average at the start: {', '.join(map(str, summary['load_start']))}; at the end: {', '.join(map(str, summary['load_end']))}"]
        + [f"{row['bank']}: only now {row['only_now']}; only {baseline} {row['only_baseline']}" for row in summary["banks"]
           if row.get("only_now") or row.get("only_baseline")],
    )


def options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--judge", default="local", help="the judge the heuristic reads, today's code and the baseline's")
    baseline_option(parser)


def main(argv: list[str] | None = None) -> None:
    bench_main("dev_banks", __doc__, run, report, argv, options=options)


if __name__ == "__main__":
    main()
