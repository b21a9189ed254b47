"""FactConsolidation at the held-out size: loading and compacting with the rule a bank of 18,000 facts.

The held-out 262k sub-dataset has 18,332 facts; the development rows have at most 2,310 (the 32k
context). The bank is that context repeated with renamed subjects until it holds `--facts` facts:
copy k (k >= 1) appends one made-up surname of its own to every capitalised name of every fact
("Thomas Kyd was born in the city of London." -> "Thomas Kyd Brandt was born in the city of London
Brandt."), so a copy's updates stay updates of its own subjects and no two copies state the same fact;
serials run on across copies (copy k's facts come after copy k-1's), one hour apart, as the loader writes
them.

Measured in one process, each phase's wall time and the process's peak RSS after it (the embedding
model included; the PostgreSQL server's memory is its own):
1. load: `load_context`, every fact embedded once, in batches, and written (`create_many`);
2. baseline, the no-edit pass: what every compaction pays before its first episode (fork the bank,
   read its vectors, plan the neighbourhoods, drop the fork);
3. compact: `compact_bank` with the heuristic policy reading the default relation judge, every
   neighbourhood an episode (the pairs that meet judged first, so each update's two facts share one);
4. review: `build_review` of that fork (what `memupdate compact` adds to write its page).
Targets: compacting (3) under 2 minutes; at least 95% of the stale facts the judge reads as updates
(the older of each pair that meets and reads as an update) superseded.

    python -m memupdate.bench.factconsolidation [--file FILE] [--facts 18000] [--out PATH]
    memupdate bench factconsolidation
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
    load_embedder,
    open_engine,
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
    from memupdate.agent.compaction import compact_bank, neighbourhoods
    from memupdate.agent.policies import make_policy
    from memupdate.bank.review import build_review
    from memupdate.rl.data.factconsolidation import load_context

    path = Path(args.file) if args.file else dev_file()
    if not path.is_file():
        raise SystemExit(f"FactConsolidation file not found at {path}: pass --file or set {ENV_VAR}")
    context, source, copies = large_context(path, args.facts)
    engine = open_engine(args)
    embedder = load_embedder()
    console.print(server_line(engine, embedder))
    summary: dict = {"facts": len(context.facts), "source_facts": len(source.facts), "copies": copies,
                     "load_start": [round(x, 2) for x in os.getloadavg()], "phases": {}}

    def phase(name: str, started: float, **extra) -> None:
        summary["phases"][name] = {"seconds": round(time.perf_counter() - started, 2), "peak_rss_gb": round(peak_rss_gb(), 2), **extra}
        console.print(f"{name}: {summary['phases'][name]['seconds']:.1f} s", highlight=False)

    with bench_namespace(engine, embedder) as root:
        started = time.perf_counter()
        bank = load_context(root, context).base
        phase("load", started, memories=bank.count())
        policy = make_policy("heuristic", root)

        started = time.perf_counter()
        fork = bank.fork((*bank.namespace, "traj", "noedit"))
        keys, vectors = fork.vectors()
        plan = neighbourhoods(keys, vectors)
        fork.drop()
        phase("no-edit pass", started, episodes=len(plan))

        started = time.perf_counter()
        result = compact_bank(policy, bank, (*bank.namespace, "traj", "compact"))
        phase("compact", started, episodes=result.episodes, failed=len(result.failed_episodes),
              memories_after=result.fork.count(), write_calls=len(result.calls))

        summary["stale"] = stale_superseded(policy, bank, result.fork)
        started = time.perf_counter()
        page = build_review(bank, result.fork, result.calls, judge=policy.judge)
        phase("review", started, flagged=page.counts.flagged)
        summary["review_counts"] = page.counts.to_json()
        result.fork.drop()
        bank.drop()
    summary["load_end"] = [round(x, 2) for x in os.getloadavg()]
    summary["target_met"] = summary["phases"]["compact"]["seconds"] < TARGET_SECONDS
    return summary


def stale_superseded(policy, bank, fork) -> dict:
    """Of the stale facts the judge reads as updates (the older of each pair that meets in the whole
    bank and reads as an update), how many the compaction superseded: pairs that never shared an
    episode stay unresolved."""
    from memupdate.judge.meeting import candidate_pairs
    from memupdate.text.facts import is_newer

    keys, vectors = bank.vectors()
    records = {m.key: m for m in bank.list()}
    pairs = [(records[keys[i]], records[keys[j]]) for i, j in candidate_pairs(vectors)]
    stale = set()
    for (a, b), verdict in zip(pairs, policy._judged(pairs), strict=True):
        if verdict.relation == "update" and (newer := is_newer(b, a)) is not None:
            stale.add(a.key if newer else b.key)
    live = {m.key for m in fork.list()}
    superseded = {e.memory_key for e in fork.events(op="delete") if (e.before or {}).get("metadata", {}).get("superseded_by")}
    done = len(stale & superseded - live)
    return {"stale": len(stale), "superseded": done, "share": round(done / len(stale), 4) if stale else None}


def report(summary: dict) -> None:
    phases = summary["phases"]
    baseline = phases["no-edit pass"]["seconds"] or 1e-9
    rows = []
    for name, block in phases.items():
        notes = ", ".join(f"{k} {v}" for k, v in block.items() if k not in ("seconds", "peak_rss_gb"))
        rows.append([name, f"{block['seconds']:.1f}", f"{block['seconds'] / baseline:.1f}x", f"{block['peak_rss_gb']:.2f}", notes])
    compact = phases["compact"]["seconds"]
    print_table(
        f"FactConsolidation: a bank of {summary['facts']:,} facts ({summary['source_facts']:,} dev facts x {summary['copies']} "
        "copies, renamed subjects), the rule (heuristic)",
        ["phase", "seconds", "x no-edit pass", "peak RSS GB", "what"], rows,
        [f"load average at the start: {', '.join(map(str, summary['load_start']))}; at the end: "
         f"{', '.join(map(str, summary['load_end']))}",
         "x no-edit pass: the phase's time over the no-edit pass (fork, vectors, neighbourhoods, drop) of the same run.",
         "peak RSS: this process (embedding model included) after the phase; the server's memory is its own.",
         f"target: compacting under {TARGET_SECONDS} s: {'met' if summary['target_met'] else 'missed'} ({compact:.1f} s).",
         f"stale facts the judge reads as updates: {summary['stale']['stale']}, superseded {summary['stale']['superseded']} "
         f"(share {summary['stale']['share']}; target 0.95)"],
    )


def options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--file", help=f"FactConsolidation rows (default ${ENV_VAR}, else the dev copy beside the repository)")
    parser.add_argument("--facts", type=int, default=18000, help="facts in the bank")


def main(argv: list[str] | None = None) -> None:
    bench_main("factconsolidation", __doc__, run, report, argv, options=options)


if __name__ == "__main__":
    main()
