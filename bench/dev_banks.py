"""Speed changes nothing the judge decides: the development banks compacted by the heuristic policy with
the same judge on the path before the speed-ups and on today's, side by side.

Banks: LoCoMo conv-47 and conv-48 (the evaluation conversations of the dev file) and FactConsolidation
sh_6k. For each bank and path (`before`: `HeuristicPolicy(judge_once=False, follow_chains=False)`;
`now`: the defaults), `compact` with the bank's questions: seconds, the pairs the judge read, the QA
proxy before -> after, and the memories each path retires (superseded or merged): both, only now, only
before, with a few examples of those that differ.

    python -m memupdate.bench.dev_banks [--judge local] [--out PATH]
"""

from __future__ import annotations

import argparse
import os
import time
import uuid

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
from memupdate.bench.factconsolidation import changed_memories, compare_changes, dev_file


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
    from memupdate.agent.compaction import compact
    from memupdate.agent.policies.heuristic import HeuristicPolicy
    from memupdate.bench.factconsolidation import _count_pairs
    from memupdate.judge.judges import make_judge

    engine = open_engine(args)
    embedder = load_embedder()
    console.print(server_line(engine, embedder))
    summary: dict = {"judge": args.judge, "load_start": [round(x, 2) for x in os.getloadavg()], "banks": []}
    with bench_namespace(engine, embedder) as root:
        for name, bank, questions in banks(root):
            row: dict = {"bank": name, "memories": bank.count(), "questions": len(questions), "paths": {}}
            retired = {}
            for path in ("before", "now"):
                judge = make_judge(args.judge)
                policy = HeuristicPolicy(store=root, judge=judge, judge_once=path == "now", follow_chains=path == "now")
                counted = _count_pairs(judge)
                started = time.perf_counter()
                done = compact(policy, bank, (*bank.namespace, "traj", f"{path}-{uuid.uuid4().hex[:6]}"), questions)
                seconds = time.perf_counter() - started
                _count_pairs(judge, stop=True)
                qa = done.qa.summary()
                retired[path] = changed_memories(done.fork)
                row["paths"][path] = {"seconds": round(seconds, 2), "pairs_judged": counted["pairs"], "qa_before": qa["before"],
                                      "qa_after": qa["after"], "retired": len(retired[path]), "load": round(os.getloadavg()[0], 2)}
                done.fork.drop()
            row["changes"] = compare_changes(retired["now"], retired["before"])
            texts = {m.key: m.content for m in bank.list()}
            row["only_now"] = [texts.get(k, k) for k in sorted(set(retired["now"]) - set(retired["before"]))][:5]
            row["only_before"] = [texts.get(k, k) for k in sorted(set(retired["before"]) - set(retired["now"]))][:5]
            summary["banks"].append(row)
            console.print(f"{name}: {row['paths']} {row['changes']}", highlight=False)
            bank.drop()
    summary["load_end"] = [round(x, 2) for x in os.getloadavg()]
    return summary


def report(summary: dict) -> None:
    rows = []
    for row in summary["banks"]:
        for path, r in row["paths"].items():
            c = row["changes"]
            rows.append([row["bank"], path, f"{r['seconds']:.1f}", f"{r['pairs_judged']:,}", f"{r['qa_before']:.3f} -> {r['qa_after']:.3f}",
                         str(r["retired"]), "" if path == "before" else f"{c['both']} both, +{c['only_now']} / -{c['only_before']}",
                         str(r["load"])])
    print_table(
        f"The development banks, the heuristic with the {summary['judge']} judge: before the speed-ups and now",
        ["bank", "path", "seconds", "pairs judged", "QA proxy", "retired", "retired vs before", "load"], rows,
        [f"load average at the start: {', '.join(map(str, summary['load_start']))}; at the end: {', '.join(map(str, summary['load_end']))}"]
        + [f"{row['bank']}: only now {row['only_now']}; only before {row['only_before']}" for row in summary["banks"]
           if row["only_now"] or row["only_before"]],
    )


def options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--judge", default="local", help="the judge the heuristic reads on both paths")


def main(argv: list[str] | None = None) -> None:
    bench_main("dev_banks", __doc__, run, report, argv, options=options)


if __name__ == "__main__":
    main()
