"""The background compactor (`memupdate watch`, `BackgroundCompactor`): how fast it compacts, and what
it costs the app writing beside it.

1. Throughput: one pass of the heuristic over a bank of N memories of memupdate's own database
   (synthetic LoCoMo-like facts, 5% of them written twice, once without the final period, so there are
   near-duplicates to merge): memories compacted per second (N / the pass's wall time), the changes
   applied and queued, and the process's peak RSS after the pass.
2. The app's write latency: a process of its own puts `{"content": ...}` items into LangGraph's
   `PostgresStore` (a database `app` on the same server), one at a time, every other one a
   near-duplicate of the one before (so the passes have merges to write back); p50/p95/max
   milliseconds with nothing else running, then while `BackgroundCompactor` passes (import, compaction,
   apply, per-change export under row locks) run back to back on that store.

    python -m memupdate.bench.compactor [--sizes 1000,10000] [--writes 300] [--out PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import threading
import time

from memupdate.bench.common import (
    bench_namespace,
    console,
    load_embedder,
    open_engine,
    parse_args,
    percentile,
    print_table,
    server_line,
    synthetic_facts,
    write_json,
)

SEED = 0
DUPLICATES = 0.05
APP_ITEMS = 1000

# The app: puts into LangGraph's PostgresStore, one at a time; prints each put's seconds as JSON.
WRITER = """
import json, sys, time
from langgraph.store.postgres import PostgresStore
url, n, tag = sys.argv[1], int(sys.argv[2]), sys.argv[3]
with PostgresStore.from_conn_string(url) as store:
    times = []
    for i in range(n):
        start = time.perf_counter()
        text = f"User zero noted thing {i // 2} during run {tag}" + ("." if i % 2 else "")  # every other one a near-duplicate
        store.put(("memories", "user0"), f"{tag}-{i}", {"content": text})
        times.append(time.perf_counter() - start)
        time.sleep(0.01)
print(json.dumps(times))
"""


def peak_rss_gb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024**2


def bank_memories(n: int):
    """`n` memories: synthetic facts, DUPLICATES of them twice (the copy with a trailing period)."""
    from memupdate.store import NewMemory

    twins = int(n * DUPLICATES)
    facts = synthetic_facts(n - twins, SEED)
    memories = [NewMemory(text, kind="episodic", metadata=meta) for text, _, meta in facts]
    memories += [NewMemory(text.rstrip("."), kind="episodic", metadata=meta) for text, _, meta in facts[:twins]]
    return memories


def throughput(root, size: int) -> dict:
    from memupdate.agent.background import BackgroundCompactor

    bank = root.scoped((*root.namespace, f"bank{size}"))
    with console.status(f"writing a bank of {size:,} memories (embedding them) ..."):
        start = time.perf_counter()
        memories = bank_memories(size)
        for i in range(0, len(memories), 1000):
            bank.create_many(memories[i : i + 1000])
        fill = time.perf_counter() - start
    with console.status(f"one compactor pass over {size:,} memories ..."):
        load = os.getloadavg()
        start = time.perf_counter()
        (done,) = BackgroundCompactor(root, bank.path).run_once()
        seconds = time.perf_counter() - start
    return {"memories": size, "fill_s": fill, "pass_s": seconds, "per_second": size / seconds, "applied": len(done.applied),
            "queued": len(done.queued), "after": bank.count(), "peak_rss_gb": peak_rss_gb(), "load_before": load}


def app_database(engine) -> str:
    """A database `app` on the benchmark's server with LangGraph's store tables and APP_ITEMS items."""
    from langgraph.store.base import PutOp
    from langgraph.store.postgres import PostgresStore
    from sqlalchemy import text

    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(text("DROP DATABASE IF EXISTS bench_app WITH (FORCE)"))
        conn.execute(text("CREATE DATABASE bench_app"))
    url = engine.url.set(drivername="postgresql", database="bench_app").render_as_string(hide_password=False)
    facts = synthetic_facts(APP_ITEMS, SEED + 1)
    with PostgresStore.from_conn_string(url) as store:
        store.setup()
        store.batch([PutOp(("memories", f"user{i % 10}"), f"seed-{i}", {"content": t}) for i, (t, _, _) in enumerate(facts)])
    return url


def write_latency(url: str, writes: int, tag: str) -> list[float]:
    job = subprocess.run([sys.executable, "-c", WRITER, url, str(writes), tag], capture_output=True, text=True, timeout=3600)
    if job.returncode != 0:
        raise RuntimeError(job.stderr[-2000:])
    return json.loads(job.stdout.strip().splitlines()[-1])


def latency(root, engine, writes: int) -> dict:
    """The app's puts alone, then beside compactor passes run back to back in this process."""
    from memupdate.agent.background import BackgroundCompactor, CompactorSettings

    url = app_database(engine)
    into = (*root.namespace, "app")
    compactor = BackgroundCompactor(root, url, CompactorSettings(prefix=("memories",), into=into, grow_by=20))
    with console.status(f"first pass: importing and compacting {APP_ITEMS:,} app items ..."):
        start = time.perf_counter()
        compactor.run_once()
        first = time.perf_counter() - start
    with console.status(f"the app's {writes} puts, nothing else running ..."):
        alone = write_latency(url, writes, "alone")
    stop, passes = threading.Event(), []

    def keep_compacting() -> None:
        while not stop.is_set():
            started = time.perf_counter()
            done = compactor.run_once()
            passes.append({"seconds": time.perf_counter() - started, "applied": sum(len(p.applied) for p in done)})

    worker = threading.Thread(target=keep_compacting, daemon=True)
    with console.status(f"the app's {writes} puts while the compactor runs ..."):
        worker.start()
        beside = write_latency(url, writes, "beside")
        stop.set()
        worker.join()
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        from sqlalchemy import text

        conn.execute(text("DROP DATABASE IF EXISTS bench_app WITH (FORCE)"))

    def stats(times: list[float]) -> dict:
        return {"p50_ms": percentile(times, 50) * 1000, "p95_ms": percentile(times, 95) * 1000, "max_ms": max(times) * 1000}

    return {"writes": writes, "first_pass_s": first, "alone": stats(alone), "beside": stats(beside), "passes": passes}


def run(args: argparse.Namespace) -> dict:
    engine = open_engine(args)
    embedder = load_embedder()
    console.print(server_line(engine, embedder))
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    summary: dict = {"sizes": [], "load_start": os.getloadavg()}
    with bench_namespace(engine, embedder) as root:
        for size in sizes:
            summary["sizes"].append(throughput(root, size))
            console.print(f"{size:,} memories: {summary['sizes'][-1]['per_second']:.1f} memories/s")
        if args.writes:
            summary["latency"] = latency(root, engine, args.writes)
    summary["load_end"] = os.getloadavg()
    summary["peak_rss_gb"] = peak_rss_gb()
    return summary


def report(summary: dict) -> None:
    rows = [[f"{r['memories']:,}", f"{r['pass_s']:.1f}", f"{r['per_second']:.1f}", str(r["applied"]), str(r["queued"]),
             f"{r['after']:,}", f"{r['peak_rss_gb']:.2f}", f"{r['fill_s']:.0f}"] for r in summary["sizes"]]
    load = ", ".join(f"{x:.1f}" for x in summary["load_start"])
    print_table(
        "One compactor pass (heuristic) over a bank of memupdate's database",
        ["memories", "pass s", "memories/s", "applied", "queued", "after", "peak RSS GB", "fill s"], rows,
        [f"load average at the start: {load}; at the end: {', '.join(f'{x:.1f}' for x in summary['load_end'])}",
         "fill s: writing the bank (embedding every memory), not part of the pass.",
         "peak RSS: the whole process (embedding model included), after the pass."],
    )
    lat = summary.get("latency")
    if lat:
        rows = [[name, f"{lat[name]['p50_ms']:.1f}", f"{lat[name]['p95_ms']:.1f}", f"{lat[name]['max_ms']:.1f}"] for name in ("alone", "beside")]
        print_table(
            f"The app's put latency (LangGraph PostgresStore, {lat['writes']} puts, another process)",
            ["compactor", "p50 ms", "p95 ms", "max ms"], rows,
            [f"beside: {len(lat['passes'])} compactor passes ran meanwhile on a store of {APP_ITEMS:,}+ items "
             f"(first pass {lat['first_pass_s']:.1f} s)."],
        )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m memupdate.bench.compactor", description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="1000,10000", help="bank sizes, comma-separated (100000 takes hours here)")
    parser.add_argument("--writes", type=int, default=300, help="the app's puts per latency run (0: skip it)")
    args = parse_args(parser, argv)
    summary = run(args)
    report(summary)
    write_json(args.out, summary)


if __name__ == "__main__":
    main()
