"""FactConsolidation at the held-out size: compacting banks of 2,000 to 18,000 facts, with the local
relation judge and with the rule, each by today's code and by a baseline commit's, in one run.

The held-out 262k sub-dataset has 18,332 facts; the development rows have at most 2,310 (the 32k
context). A bank is that context repeated with renamed subjects until it holds N facts: copy k
(k >= 1) appends one made-up surname of its own to every capitalised name of every fact ("Thomas Kyd
was born in the city of London." -> "Thomas Kyd Brandt was born in the city of London Brandt."), so a
copy's updates stay updates of its own subjects and no two copies state the same fact; serials run on
across copies (copy k's facts come after copy k-1's), one hour apart, as the loader writes them.

For each size, the bank is loaded once (every fact embedded once and written); then for each judge
(`--judges`: local, rule), in one process on the same bank:
1. compact: `compact_bank` with the heuristic policy, every neighbourhood an episode;
2. review: `build_review` of that fork (what `memupdate compact` adds to write its page);
3. stale: of the stale facts the judge supersedes by itself (the older of each pair that meets in the
   whole bank and reads as an update its decision applies, every such pair judged, filter or not: an
   unreviewed compaction acts on no other reading, `HeuristicPolicy.asks`), the share superseded;
4. changes: the memories it supersedes or merges (`retired_memories`), against the baseline's.
The baseline (`--baseline COMMIT`, default `bench.baseline.BASELINE_COMMIT`) is this benchmark as that
commit runs it, first, in a git worktree and a process and database of its own (`bench.baseline`); its
rows are named by the commit. Where its JSON lists the memories it retired, today's are compared key by
key (the keys are the facts' own); otherwise the memories left after. Targets: 18,000 facts compacted with the local judge in at most 120 s on 2 cores; at least 95% of the
stale facts whose update the judge applies by itself end superseded, at every size. `--plot` draws
seconds against facts.

    python -m memupdate.bench.factconsolidation [--file FILE] [--facts 2000,6000,18000] [--judges local,rule]
        [--baseline COMMIT|none] [--plot fc-scale.png] [--out PATH]
    memupdate bench factconsolidation [--plot fc-scale.png]
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import time
import uuid
from pathlib import Path

from memupdate.bench.baseline import baseline_of, baseline_option, run_at
from memupdate.bench.common import (
    bench_main,
    bench_namespace,
    console,
    load_embedder,
    open_engine,
    plot_seconds,
    print_table,
    server_line,
)

ENV_VAR = "MEMUPDATE_FACTCONSOLIDATION_FILE"
DEV_FILE = Path(__file__).resolve().parent.parent.parent / "shared" / "data" / "memoryagentbench" / "factconsolidation-dev.jsonl"
TARGET_SECONDS = 120
SURNAMES = ("Brandt", "Castell", "Dorn", "Esker", "Falk", "Grau", "Holm", "Ivers", "Jaro", "Kessel", "Lund", "Marr")
# A capitalised name: one or more capitalised words, not the sentence's opening "The".
_NAME = re.compile(r"\b(?!The\b)[A-Z][\w'.\-]*(?:\s+(?:of\s+|de\s+)?[A-Z][\w'.\-]*)*")


def dev_file() -> Path:
    value = os.environ.get(ENV_VAR, "").strip()
    return Path(value).expanduser() if value else DEV_FILE


def renamed(fact: str, copy: int) -> str:
    """`fact` with every capitalised name followed by copy `copy`'s surname (copy 0: unchanged)."""
    if copy == 0:
        return fact
    surname = SURNAMES[(copy - 1) % len(SURNAMES)] + ("" if copy <= len(SURNAMES) else str(copy))
    return _NAME.sub(lambda m: f"{m.group(0).rstrip('.')} {surname}" + ("." if m.group(0).endswith(".") else ""), fact)


def large_context(path: Path, facts: int):
    """The largest context of the file repeated with renamed subjects up to `facts` facts."""
    from memupdate.rl.data.factconsolidation import FactContext, load_factconsolidation

    source = max((s.context for s in load_factconsolidation(path)), key=lambda c: len(c.facts))
    texts: list[str] = []
    copy = 0
    while len(texts) < facts:
        texts += [renamed(fact, copy) for fact in source.facts]
        copy += 1
    return FactContext(f"bench{facts}-{uuid.uuid4().hex[:8]}", tuple(texts[:facts])), source, copy


def peak_rss_gb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024**2


def run(args: argparse.Namespace) -> dict:
    from memupdate.rl.data.factconsolidation import load_context

    path = Path(args.file) if args.file else dev_file()
    if not path.is_file():
        raise SystemExit(f"FactConsolidation file not found at {path}: pass --file or set {ENV_VAR}")
    engine = open_engine(args)
    baseline = baseline_of(args.baseline)
    summary: dict = {"baseline": baseline, "load_start": [round(x, 2) for x in os.getloadavg()], "target_seconds": TARGET_SECONDS,
                     "sizes": []}
    # The baseline first, in a process of its own: this one has loaded nothing yet.
    theirs = run_at(baseline, "factconsolidation", ["--file", str(path.resolve()), "--facts", args.facts, "--judges", args.judges],
                    engine)["sizes"] if baseline else []
    embedder = load_embedder()
    console.print(server_line(engine, embedder))
    judges = [j.strip() for j in args.judges.split(",") if j.strip()]
    with bench_namespace(engine, embedder) as root:
        for facts in (int(n) for n in args.facts.split(",")):
            context, source, copies = large_context(path, facts)
            started = time.perf_counter()
            bank = load_context(root, context).base
            size = {"facts": len(context.facts), "source_facts": len(source.facts), "copies": copies,
                    "load_seconds": round(time.perf_counter() - started, 2), "runs": []}
            console.print(f"{facts:,} facts loaded in {size['load_seconds']:.1f} s", highlight=False)
            twins = next((s["runs"] for s in theirs if s["facts"] == size["facts"]), [])
            for judge in judges:
                run_ = compact_once(root, bank, judge)
                if (twin := next((r for r in twins if r["judge"] == judge), None)) is not None:
                    size["runs"].append({k: v for k, v in twin.items() if k != "changes_vs_before"} | {"path": baseline})
                    run_["changes_vs_baseline"] = versus_baseline(run_, twin, "memories_after")
                size["runs"].append(run_)
            bank.drop()
            summary["sizes"].append(size)
    summary["load_end"] = [round(x, 2) for x in os.getloadavg()]
    if args.plot:
        plot(summary, args.plot)
        summary["plot"] = args.plot
    return summary


def compact_once(root, bank, judge_name: str) -> dict:
    """One compaction of `bank` with the heuristic policy reading `judge_name`, its review, the stale
    share, and what it changed; its fork dropped."""
    from memupdate.agent.compaction import compact_bank
    from memupdate.agent.policies.heuristic import HeuristicPolicy
    from memupdate.bank.review import build_review
    from memupdate.judge.judges import make_judge

    judge = make_judge(judge_name)
    policy = HeuristicPolicy(store=root, judge=judge)
    out: dict = {"judge": judge_name, "path": "now", "load": [round(x, 2) for x in os.getloadavg()]}
    counted = _count_pairs(judge)
    started = time.perf_counter()
    result = compact_bank(policy, bank, (*bank.namespace, "traj", judge_name))
    out["compact_seconds"] = round(time.perf_counter() - started, 2)
    out["judged_in_compaction"] = counted["pairs"]
    started = time.perf_counter()
    page = build_review(bank, result.fork, result.calls, judge=policy.remembering_judge())
    out["review_seconds"] = round(time.perf_counter() - started, 2)
    out["judged_in_review"] = counted["pairs"] - out["judged_in_compaction"]
    out |= {"episodes": result.episodes, "failed": len(result.failed_episodes), "memories_after": result.fork.count(),
            "write_calls": len(result.calls), "flagged": page.counts.flagged, "peak_rss_gb": round(peak_rss_gb(), 2)}
    out["stale"] = stale_superseded(policy.remembering_judge(), bank, result.fork)  # pairs it read are not judged again
    out["retired_memories"] = changed_memories(result.fork)
    console.print(f"  {judge_name:>5}: compact {out['compact_seconds']:.1f} s, review {out['review_seconds']:.1f} s, "
                  f"stale superseded {out['stale']['all']['share']} / {out['stale']['judged']['share']} / {out['stale']['true']['share']} (load {out['load'][0]})", highlight=False)
    result.fork.drop()
    _count_pairs(judge, stop=True)
    return out


def _count_pairs(judge, *, stop: bool = False) -> dict:
    """Count the pairs `judge` reads from now on (its `judge` method wrapped; `stop` unwraps it)."""
    if stop:
        judge.__dict__.pop("judge", None)
        return {}
    counted = {"pairs": 0}
    inner = judge.judge

    def counting(pairs):
        counted["pairs"] += len(pairs)
        return inner(pairs)

    judge.judge = counting
    return counted


def changed_memories(fork) -> dict[str, str]:
    """Each bank memory the compaction retired: superseded (and by which) or merged."""
    out = {}
    for event in fork.events(op="delete"):
        meta = (event.before or {}).get("metadata") or {}
        out[event.memory_key] = f"superseded by {meta['superseded_by']}" if meta.get("superseded_by") else "merged or deleted"
    return out


def compare_changes(mine: dict[str, str], theirs: dict[str, str]) -> dict:
    """How today's retired memories compare with the baseline's: both, only today's, only the baseline's."""
    both = set(mine) & set(theirs)
    return {"both": len(both), "only_now": len(set(mine) - set(theirs)), "only_baseline": len(set(theirs) - set(mine)),
            "same_kind": sum(mine[k].split()[0] == theirs[k].split()[0] for k in both)}


def versus_baseline(mine: dict, theirs: dict, count: str) -> dict:
    """Today's run against the baseline's: key by key where the baseline listed its retired memories
    (`compare_changes`), else whether both runs have the same `count` (a key of both, e.g. `memories_after`)."""
    if "retired_memories" in theirs:
        return compare_changes(mine["retired_memories"], theirs["retired_memories"])
    return {"count": count, "same": mine[count] == theirs[count]}


def versus_cell(versus: dict | None, minus: str = "-") -> str:
    """A `versus_baseline` in a table cell."""
    if not versus:
        return ""
    if "both" in versus:
        return f"{versus['both']:,} both, +{versus['only_now']:,} / {minus}{versus['only_baseline']:,}"
    return f"{'same' if versus['same'] else 'another'} {versus['count'].replace('_', ' ')} (keys not listed)"


def stale_superseded(judge, bank, fork) -> dict:
    """Of the stale facts `judge` supersedes by itself (the older of each pair that meets in the whole bank
    and reads as an update its decision applies; every such pair judged), how many the compaction
    superseded: `all`; among the pairs worth judging (`judge.meeting.worth_judging`: those a compaction now judges), `judged`; and
    among the pairs the rule, exact on FactConsolidation's template, reads as updates too (true updates
    of one subject: the judge also reads copies about other subjects as updates), `true`."""
    from memupdate.judge import judge_memories
    from memupdate.judge.decision import operation
    from memupdate.judge.meeting import candidate_pairs, worth_judging
    from memupdate.judge.rule import RuleJudge

    keys, vectors = bank.vectors()
    records = {m.key: m for m in bank.list()}
    met = candidate_pairs(vectors)
    pairs = [(records[keys[i]], records[keys[j]]) for i, j in met]
    worth = worth_judging([records[k].content for k in keys], met)
    rule = judge_memories(RuleJudge(), pairs)
    stale: dict[str, set[str]] = {"all": set(), "judged": set(), "true": set()}
    for (a, b), verdict, ok, ruled in zip(pairs, judge_memories(judge, pairs), worth, rule, strict=True):
        op = operation(verdict.relation, verdict.current, (a.content, b.content))
        if verdict.relation == "update" and judge.auto_apply.act(verdict) == "apply" and op is not None:
            older = op.of((a.key, b.key))[0]
            stale["all"].add(older)
            if ok:
                stale["judged"].add(older)
            if ruled.relation == "update":
                stale["true"].add(older)
    live = {m.key for m in fork.list()}
    superseded = {e.memory_key for e in fork.events(op="delete") if (e.before or {}).get("metadata", {}).get("superseded_by")}
    out = {}
    for name, keys_ in stale.items():
        done = len(keys_ & superseded - live)
        out[name] = {"stale": len(keys_), "superseded": done, "share": round(done / len(keys_), 4) if keys_ else None}
    return out


def plot(summary: dict, out: str) -> None:
    """Compaction seconds against facts, one line per judge and code (today's, the baseline's), the target dashed."""
    lines: dict[tuple[str, str], list[tuple[int, float]]] = {}
    for size in summary["sizes"]:
        for run_ in size["runs"]:
            lines.setdefault((run_["judge"], run_["path"]), []).append((size["facts"], run_["compact_seconds"]))
    plot_seconds(lines, lambda judge, path: f"{judge} judge, {path}", [(TARGET_SECONDS, f"target {TARGET_SECONDS} s", "--")], out,
                 xlabel="facts in the bank", ylabel="compaction seconds (2 cores)", title="FactConsolidation: compacting a bank")


def report(summary: dict) -> None:
    rows = []
    for size in summary["sizes"]:
        for r in size["runs"]:
            rows.append([f"{size['facts']:,}", r["judge"], r["path"], f"{r['compact_seconds']:.1f}", f"{r['review_seconds']:.1f}",
                         f"{r['judged_in_compaction']:,} + {r['judged_in_review']:,}",
                         " / ".join(f"{r['stale'][k]['superseded']:,}/{r['stale'][k]['stale']:,} ({r['stale'][k]['share']})"
                                    for k in ("all", "judged", "true")),
                         f"{r['memories_after']:,}", versus_cell(r.get("changes_vs_baseline")), str(r["load"][0])])
    baseline = summary.get("baseline")
    print_table(
        "FactConsolidation at scale: the heuristic policy with each judge, today's code" + (f" and {baseline}'s" if baseline else ""),
        ["facts", "judge", "code", "compact s", "review s", "pairs judged (compact + review)", "stale superseded: all / judged / true",
         "memories after", "retired vs baseline", "load"], rows,
        [f"load average at the start: {', '.join(map(str, summary['load_start']))}; at the end: "
         f"{', '.join(map(str, summary['load_end']))}",
         f"now: today's code; {baseline}: the code of that commit, measured first in the same run (a worktree, a process "
         "and a database of its own)." if baseline else "now: today's code (no baseline measured: --baseline COMMIT).",
         "stale superseded: of the stale facts the judge supersedes by itself (an update its decision applies), those superseded: all (every pair that meets "
         "judged), judged (pairs sharing a rare word, what a compaction now judges), true (the rule, exact on the "
         "template, reads an update too: the judge also reads facts about other subjects as updates).",
         "retired vs baseline: memories both retire, and those only today's code / only the baseline's retires (same judge); "
         "where the baseline's JSON does not list them, whether as many memories are left after.",
         f"targets: the local judge at 18,000 facts in at most {TARGET_SECONDS} s; a stale share of at least 0.95."],
    )


def options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--file", help=f"FactConsolidation rows (default ${ENV_VAR}, else the dev copy beside the repository)")
    parser.add_argument("--facts", default="2000,6000,18000", help="facts in each bank, comma-separated")
    parser.add_argument("--judges", default="local,rule", help="the judges the heuristic reads, comma-separated")
    baseline_option(parser)
    parser.add_argument("--plot", help="draw compaction seconds against facts to this PNG")


def main(argv: list[str] | None = None) -> None:
    bench_main("factconsolidation", __doc__, run, report, argv, options=options)


if __name__ == "__main__":
    main()
