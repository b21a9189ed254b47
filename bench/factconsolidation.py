"""FactConsolidation at the held-out size: compacting banks of 2,000 to 18,000 facts, with the local
relation judge and with the rule, each on the path before the speed-ups and on today's, in one run.

The held-out 262k sub-dataset has 18,332 facts; the development rows have at most 2,310 (the 32k
context). A bank is that context repeated with renamed subjects until it holds N facts: copy k
(k >= 1) appends one made-up surname of its own to every capitalised name of every fact ("Thomas Kyd
was born in the city of London." -> "Thomas Kyd Brandt was born in the city of London Brandt."), so a
copy's updates stay updates of its own subjects and no two copies state the same fact; serials run on
across copies (copy k's facts come after copy k-1's), one hour apart, as the loader writes them.

For each size, the bank is loaded once (every fact embedded once and written); then for each judge
(`--judges`: local, rule) and each path (`--paths`: `now`, and `before`: `HeuristicPolicy(judge_once=False,
follow_chains=False)`, every episode judging its own pairs, the review judging them again, no filter,
no chain rounds, the judge unscreened), in one process on the same bank:
1. compact: `compact_bank` with the heuristic policy, every neighbourhood an episode;
2. review: `build_review` of that fork (what `memupdate compact` adds to write its page);
3. stale: of the stale facts the judge supersedes by itself (the older of each pair that meets in the
   whole bank and reads as an update its decision applies, every such pair judged, filter or not: an
   unreviewed compaction acts on no other reading, `HeuristicPolicy.asks`), the share superseded;
4. changes: the memories each path supersedes or merges, against the path before's (the same judge).
Targets: 18,000 facts compacted with the local judge in at most 120 s on 2 cores; at least 95% of the
stale facts whose update the judge applies by itself end superseded, at every size. `--plot` draws
seconds against facts.

    python -m memupdate.bench.factconsolidation [--file FILE] [--facts 2000,6000,18000] [--judges local,rule]
        [--paths now,before] [--plot fc-scale.png] [--out PATH]
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

from memupdate.bench.common import (
    bench_main,
    bench_namespace,
    console,
    judge_screen,
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
    embedder = load_embedder()
    console.print(server_line(engine, embedder))
    summary: dict = {"load_start": [round(x, 2) for x in os.getloadavg()], "target_seconds": TARGET_SECONDS, "sizes": []}
    judges = [j.strip() for j in args.judges.split(",") if j.strip()]
    paths = [p.strip() for p in args.paths.split(",") if p.strip()]
    with bench_namespace(engine, embedder) as root:
        for facts in (int(n) for n in args.facts.split(",")):
            context, source, copies = large_context(path, facts)
            started = time.perf_counter()
            bank = load_context(root, context).base
            size = {"facts": len(context.facts), "source_facts": len(source.facts), "copies": copies,
                    "load_seconds": round(time.perf_counter() - started, 2), "runs": []}
            console.print(f"{facts:,} facts loaded in {size['load_seconds']:.1f} s", highlight=False)
            for judge in judges:
                before = None
                for name in sorted(paths, key=lambda p: p != "before"):  # the path before first: the others compare to it
                    run_ = compact_once(root, bank, judge, name)
                    if name == "before":
                        before = run_.pop("_changes")
                    else:
                        mine = run_.pop("_changes")
                        run_["changes_vs_before"] = compare_changes(mine, before) if before is not None else None
                    run_.pop("_changes", None)
                    size["runs"].append(run_)
            bank.drop()
            summary["sizes"].append(size)
    summary["load_end"] = [round(x, 2) for x in os.getloadavg()]
    if args.plot:
        plot(summary, args.plot)
        summary["plot"] = args.plot
    return summary


def compact_once(root, bank, judge_name: str, path: str) -> dict:
    """One compaction of `bank` with the heuristic policy reading `judge_name`, on `path` (`now` or
    `before`), its review, the stale share, and what it changed; its fork dropped."""
    from memupdate.agent.compaction import compact_bank
    from memupdate.agent.policies.heuristic import HeuristicPolicy
    from memupdate.bank.review import build_review
    from memupdate.judge.judges import make_judge

    speedups = path != "before"
    judge = make_judge(judge_name)
    policy = HeuristicPolicy(store=root, judge=judge, judge_once=speedups, follow_chains=speedups)
    out: dict = {"judge": judge_name, "path": path, "load": [round(x, 2) for x in os.getloadavg()]}
    counted = _count_pairs(judge)
    with judge_screen(speedups, judge):
        started = time.perf_counter()
        result = compact_bank(policy, bank, (*bank.namespace, "traj", f"{judge_name}-{path}"))
        out["compact_seconds"] = round(time.perf_counter() - started, 2)
        out["judged_in_compaction"] = counted["pairs"]
        started = time.perf_counter()
        page = build_review(bank, result.fork, result.calls, judge=policy.review_judge())
        out["review_seconds"] = round(time.perf_counter() - started, 2)
    out["judged_in_review"] = counted["pairs"] - out["judged_in_compaction"]
    out |= {"episodes": result.episodes, "failed": len(result.failed_episodes), "memories_after": result.fork.count(),
            "write_calls": len(result.calls), "flagged": page.counts.flagged, "peak_rss_gb": round(peak_rss_gb(), 2)}
    out["stale"] = stale_superseded(policy.remembering_judge(), bank, result.fork)  # pairs it read are not judged again
    out["_changes"] = changed_memories(result.fork)
    console.print(f"  {judge_name:>5} {path:>6}: compact {out['compact_seconds']:.1f} s, review {out['review_seconds']:.1f} s, "
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


def compare_changes(mine: dict[str, str], before: dict[str, str]) -> dict:
    """How one path's retired memories compare with the path before's: both, only this one, only before."""
    both = set(mine) & set(before)
    return {"both": len(both), "only_now": len(set(mine) - set(before)), "only_before": len(set(before) - set(mine)),
            "same_kind": sum(mine[k].split()[0] == before[k].split()[0] for k in both)}


def stale_superseded(judge, bank, fork) -> dict:
    """Of the stale facts `judge` supersedes by itself (the older of each pair that meets in the whole bank
    and reads as an update its decision applies; every such pair judged), how many the compaction
    superseded: `all`; among the pairs worth judging (`judge.meeting.worth_judging`: those a compaction now judges), `judged`; and
    among the pairs the rule, exact on FactConsolidation's template, reads as updates too (true updates
    of one subject: the judge also reads copies about other subjects as updates), `true`."""
    from memupdate.judge import judge_memories
    from memupdate.judge.meeting import candidate_pairs, worth_judging
    from memupdate.judge.rule import RuleJudge
    from memupdate.text.facts import is_newer

    keys, vectors = bank.vectors()
    records = {m.key: m for m in bank.list()}
    met = candidate_pairs(vectors)
    pairs = [(records[keys[i]], records[keys[j]]) for i, j in met]
    worth = worth_judging([records[k].content for k in keys], met)
    rule = judge_memories(RuleJudge(), pairs)
    stale: dict[str, set[str]] = {"all": set(), "judged": set(), "true": set()}
    for (a, b), verdict, ok, ruled in zip(pairs, judge_memories(judge, pairs), worth, rule, strict=True):
        if verdict.relation == "update" and judge.auto_apply.act(verdict) == "apply" and (newer := is_newer(b, a)) is not None:
            older = a.key if newer else b.key
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
    """Compaction seconds against facts, one line per judge and path, the target dashed."""
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
            versus = r.get("changes_vs_before")
            rows.append([f"{size['facts']:,}", r["judge"], r["path"], f"{r['compact_seconds']:.1f}", f"{r['review_seconds']:.1f}",
                         f"{r['judged_in_compaction']:,} + {r['judged_in_review']:,}",
                         " / ".join(f"{r['stale'][k]['superseded']:,}/{r['stale'][k]['stale']:,} ({r['stale'][k]['share']})"
                                    for k in ("all", "judged", "true")),
                         f"{r['memories_after']:,}", "" if not versus else
                         f"{versus['both']:,} both, +{versus['only_now']:,} / -{versus['only_before']:,}", str(r["load"][0])])
    print_table(
        "FactConsolidation at scale: the heuristic policy, each judge on the path before the speed-ups and now",
        ["facts", "judge", "path", "compact s", "review s", "pairs judged (compact + review)", "stale superseded: all / judged / true",
         "memories after", "retired vs before", "load"], rows,
        [f"load average at the start: {', '.join(map(str, summary['load_start']))}; at the end: "
         f"{', '.join(map(str, summary['load_end']))}",
         "before: every episode judges its own pairs and the review judges them again, no filter, no chain rounds; "
         "now: judged once in one batch, pairs sharing no rare word spared, chains followed to their newest statement.",
         "stale superseded: of the stale facts the judge supersedes by itself (an update its decision applies), those superseded: all (every pair that meets "
         "judged), judged (pairs sharing a rare word, what a compaction now judges), true (the rule, exact on the "
         "template, reads an update too: the judge also reads facts about other subjects as updates).",
         "retired vs before: memories both paths retire, and those only now / only before retires (same judge).",
         f"targets: the local judge at 18,000 facts in at most {TARGET_SECONDS} s; a stale share of at least 0.95."],
    )


def options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--file", help=f"FactConsolidation rows (default ${ENV_VAR}, else the dev copy beside the repository)")
    parser.add_argument("--facts", default="2000,6000,18000", help="facts in each bank, comma-separated")
    parser.add_argument("--judges", default="local,rule", help="the judges the heuristic reads, comma-separated")
    parser.add_argument("--paths", default="now,before", help="now (the speed-ups) and before (the path before them)")
    parser.add_argument("--plot", help="draw compaction seconds against facts to this PNG")


def main(argv: list[str] | None = None) -> None:
    bench_main("factconsolidation", __doc__, run, report, argv, options=options)


if __name__ == "__main__":
    main()
