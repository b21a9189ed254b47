"""`memupdate watch --once` over a LangGraph store of many people: a first pass and a steady pass, by
today's code and by a baseline commit's, in one run.

A LangGraph app keeps one namespace per person. The benchmark writes N people x M everyday memories
(`("memories", "person00042")`, `{"content": "Ana lives in Lisbon."}`: short facts from ~20 templates;
one person in UPDATE_EVERY also restates where they live, later, so there is an update to supersede)
into LangGraph's own `PostgresStore` (a database of its own on the benchmark's server), then times, with
a fresh `BackgroundCompactor` each pass (as `memupdate watch --once` builds one):
1. first: a pass that imports every person, compacts every bank and applies what is safe;
2. steady: after CHANGED people put one new memory each, the next pass.
With `--workers 1,2`, each size is also passed over as commands: N `memupdate watch URL --once` processes
(`--threads` cores / N each) started together against one memupdate database (start-up included), on a
fresh copy of the app's store each, then, with one worker, a steady pass as a command after STEADY_CHANGED
people wrote one memory each;
`once` counts the banks compacted exactly once (the workers claim banks: `bank.claims`), and banks/s is
banks over the wall time. Targets: two workers at least 1.4 times one worker's banks/s on 1,000 x 20;
over 200 x 20, one command in at most 20 s and two together in at most 0.7 of one; a steady command in 5 s.
The baseline (`--baseline COMMIT`, default `bench.baseline.BASELINE_COMMIT`) is this benchmark as that
commit runs it, first, in a git worktree and a process and database of its own (`bench.baseline`); its
rows are named by the commit, and `same changes` says whether today's code applied and queued the same
changes for the same people. Targets: the first pass over 1,000 x 20 in at most 60 s, a steady pass with
10 people changed in at most 5 s (2 cores).

    python -m memupdate.bench.watch [--people 100,1000] [--memories 5,20] [--workers 1,2] [--baseline COMMIT|none] [--plot watch.png] [--out PATH]
    memupdate bench watch
"""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
import time

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

TARGET_FIRST_SECONDS = 60
TARGET_STEADY_SECONDS = 5
UPDATE_EVERY = 10
CHANGED = 10
STEADY_CHANGED = 5  # people who wrote since, before a steady pass as a command
TARGET_WORKER_SPEEDUP = 1.4
TARGET_COMMAND_SECONDS = 20  # 200 x 20, one `watch --once` command
TARGET_TWO_COMMANDS = 0.7  # two commands together, of one's time
NAMES = ["Ana", "Ben", "Chloe", "Dev", "Elif", "Femi", "Greta", "Hugo", "Ines", "Jonas", "Kai", "Lena", "Mateo", "Nora"]
CITIES = ["Lisbon", "Boston", "Kyoto", "Denver", "Dublin", "Prague", "Seville", "Oslo", "Austin", "Porto"]
EVERYDAY = [
    "{name} lives in {city}.", "{name} works as a {job}.", "{name} has a {pet} named {pet_name}.",
    "{name} is allergic to {allergen}.", "{name} plays {sport} on Saturdays.", "{name} is learning {language}.",
    "{name} drives a {colour} {car}.", "{name}'s favourite band is {band}.", "{name}'s birthday is on {day} {month}.",
    "{name} prefers {milk} milk in coffee.", "{name} takes the {transport} to work.", "{name} reads {genre} before bed.",
    "{name}'s sister is called {sibling}.", "{name} supports {team}.", "{name} dislikes {food}.",
    "{name} runs {distance} every morning.", "{name} uses {editor} for side projects.", "{name} volunteers at the {place}.",
    "{name} grows {plant} on the balcony.", "{name} is saving for a trip to {country}.", "{name} bakes {bread} on Sundays.",
    "{name} listens to {podcast} podcasts while cooking.",
]
VALUES = dict(
    job=["nurse", "teacher", "chef", "pilot", "librarian", "carpenter"], pet=["dog", "cat", "parrot", "rabbit"],
    pet_name=["Rex", "Luna", "Milo", "Pip", "Olive"], allergen=["peanuts", "shellfish", "pollen", "cats"],
    sport=["tennis", "football", "padel", "volleyball"], language=["Japanese", "Portuguese", "Korean", "Greek"],
    colour=["blue", "red", "green", "silver"], car=["Honda Civic", "Toyota Yaris", "Fiat 500", "VW Golf"],
    band=["Radiohead", "ABBA", "Khruangbin", "Muse"], day=[str(d) for d in range(1, 29)],
    month=["March", "June", "October", "December"], milk=["oat", "soy", "almond"], transport=["train", "bus", "tram"],
    genre=["science fiction", "crime novels", "poetry"], sibling=["Maya", "Rosa", "Ida"], team=["Benfica", "Celtic", "Ajax"],
    food=["cilantro", "olives", "mushrooms"], distance=["5k", "3k", "10k"], editor=["VS Code", "Vim", "Emacs"],
    place=["animal shelter", "food bank", "library"], plant=["tomatoes", "basil", "chillies"],
    country=["Japan", "Peru", "Iceland"], bread=["sourdough", "focaccia", "rye"], podcast=["history", "science", "comedy"],
)


def person_memories(person: int, count: int, salt: str = "") -> list[str]:
    """`count` everyday memories of one person (deterministic per `salt`), a later restatement of where
    they live for every UPDATE_EVERY-th person."""
    rng = random.Random(f"{salt}:{person}")
    name = NAMES[person % len(NAMES)]
    values = {key: rng.choice(options) for key, options in VALUES.items()} | {"name": name, "city": rng.choice(CITIES)}
    texts = [template.format(**values) for template in [EVERYDAY[0], *rng.sample(EVERYDAY[1:], len(EVERYDAY) - 1)]][:count]
    if person % UPDATE_EVERY == 0 and count >= 2:
        texts[-1] = f"{name} lives in {rng.choice([c for c in CITIES if c != values['city']])} now."
    return texts


def app_store(engine, name: str, people: int, memories: int, salt: str = "") -> str:
    """A database `name` on the benchmark's server holding LangGraph's store with `people` x `memories`
    items (each person's last memory put a second later than the others: an update is stated later)."""
    from langgraph.store.base import PutOp
    from langgraph.store.postgres import PostgresStore
    from sqlalchemy import text

    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    url = engine.url.set(drivername="postgresql", database=name).render_as_string(hide_password=False)
    everyone = {person: person_memories(person, memories, salt) for person in range(people)}
    ops = [PutOp(("memories", f"person{person:05d}"), f"m{i}", {"content": text})
           for person, texts in everyone.items() for i, text in enumerate(texts)]
    with PostgresStore.from_conn_string(url) as store:
        store.setup()
        for start in range(0, len(ops), 5000):
            store.batch(ops[start : start + 5000])
        with store.conn.cursor() as cur:  # written over a month: each person's last memory the latest
            cur.execute("UPDATE store SET created_at = now() - interval '30 days', updated_at = now() - interval '30 days' "
                        "WHERE key <> %s", (f"m{memories - 1}",))
    return url


def drop_store(engine, name: str) -> None:
    from sqlalchemy import text

    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


def change_people(url: str, people: int, changed: int) -> None:
    """`changed` people (spread over the store) put one new memory each."""
    from langgraph.store.base import PutOp
    from langgraph.store.postgres import PostgresStore

    step = max(1, people // changed)
    with PostgresStore.from_conn_string(url) as store:
        store.batch([PutOp(("memories", f"person{person:05d}"), "new", {"content": f"{NAMES[person % len(NAMES)]} started a pottery class."})
                     for person in range(0, people, step)[:changed]])


def one_pass(root, url: str, into: tuple[str, ...]) -> dict:
    """One `watch --once` pass, as `memupdate watch --once` runs it."""
    from memupdate.agent.background import BackgroundCompactor, CompactorSettings

    load = round(os.getloadavg()[0], 2)
    started = time.perf_counter()
    passes = BackgroundCompactor(root, url, CompactorSettings(prefix=("memories",), into=into)).run_once()
    seconds = time.perf_counter() - started
    return {"seconds": round(seconds, 2), "banks": len(passes), "compacted": sum(p.reason is not None for p in passes),
            "applied": sum(len(p.applied) for p in passes), "queued": sum(len(p.queued) for p in passes), "load": load,
            "changes": sorted([p.bank.rsplit("/", 1)[-1], len(p.applied), len(p.queued)] for p in passes if p.applied or p.queued)}


def command_pass(root, url: str, into: str, workers: int) -> dict:
    """`workers` `memupdate watch URL --once` processes started together against the benchmark's database,
    their banks written under `into`; the wall time until the last exits (start-up included), and how many
    banks were compacted once and more than once."""
    from memupdate.agent.background import COMPACTED_OP
    from memupdate.store import to_namespace

    database = root.engine.url.render_as_string(hide_password=False)
    threads = max(1, (os.cpu_count() or 1) // workers)  # each worker its share of the cores (`watch --threads`)
    command = [sys.executable, "-m", "memupdate.cli", "watch", url, "--once", "--prefix", "memories", "--into", into, "--url", database,
               "--threads", str(threads)]
    load = round(os.getloadavg()[0], 2)
    started = time.perf_counter()
    jobs = [subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True) for _ in range(workers)]
    failed = [err[-300:] for job in jobs if (err := job.communicate()[1]) is not None and job.returncode != 0]
    seconds = time.perf_counter() - started
    if failed:
        raise RuntimeError(f"a watch worker failed: {failed[0]}")
    under = to_namespace(into)  # the banks: one a person, under `into` (not their forks)
    marks = [len(root.scoped(ns).events(op=COMPACTED_OP)) for ns in root.list_namespaces(under) if len(ns) == len(under) + 1]
    return {"workers": workers, "threads": threads, "seconds": round(seconds, 2), "banks": len(marks), "once": marks.count(1),
            "twice": sum(m > 1 for m in marks), "banks_per_second": round(len(marks) / seconds, 2), "load": load}


def workers_runs(engine, root, people: int, memories: int, counts: list[int]) -> list[dict]:
    """The first pass as commands with each count of workers (a fresh app store each), and after the
    one-worker pass, a steady pass as a command (STEADY_CHANGED people changed)."""
    runs = []
    for workers in counts:
        name = f"bench_watch_{people}x{memories}_w{workers}"
        with console.status(f"{people:,} x {memories}: {workers} watch command(s) at once ..."):
            url = app_store(engine, name, people, memories)
            into = f"{root.path}/{people}x{memories}-w{workers}"
            first = command_pass(root, url, into, workers)
            if workers == 1:
                change_people(url, people, STEADY_CHANGED)
                first["steady_command"] = command_pass(root, url, into, 1)["seconds"]
            drop_store(engine, name)
        runs.append({"people": people, "memories": memories} | first)
        console.print(f"{people:,} x {memories}, {workers} worker(s): {first['seconds']:.1f} s, {first['banks_per_second']} banks/s, "
                      f"{first['once']}/{first['banks']} compacted once (load {first['load']})", highlight=False)
    return runs


def run(args: argparse.Namespace) -> dict:
    engine = open_engine(args)
    baseline = baseline_of(args.baseline)
    summary: dict = {"baseline": baseline, "load_start": [round(x, 2) for x in os.getloadavg()], "runs": []}
    # The baseline first, in a process of its own: this one has loaded nothing yet.
    theirs = run_at(baseline, "watch", ["--people", args.people, "--memories", args.memories], engine)["runs"] if baseline else []
    embedder = load_embedder()
    console.print(server_line(engine, embedder))
    with bench_namespace(engine, embedder) as root:
        with console.status("warming up: the judge, the graph, the scorers' imports ..."):
            url = app_store(engine, "bench_watch_warmup", 3, 5, salt="warmup")
            one_pass(root, url, (*root.namespace, "warmup"))
            drop_store(engine, "bench_watch_warmup")
        for people in (int(n) for n in args.people.split(",")):
            for memories in (int(m) for m in args.memories.split(",")):
                name = f"bench_watch_{people}x{memories}"
                with console.status(f"{people:,} people x {memories} memories: writing the app's store ..."):
                    url = app_store(engine, name, people, memories)
                into = (*root.namespace, f"{people}x{memories}")
                root.embedder._cache.clear()  # the sizes share texts: each is embedded from scratch, as the baseline's are
                with console.status(f"{people:,} x {memories}: the first pass ..."):
                    first = one_pass(root, url, into)
                change_people(url, people, CHANGED)
                with console.status(f"{people:,} x {memories}: a steady pass ({CHANGED} people changed) ..."):
                    steady = one_pass(root, url, into)
                drop_store(engine, name)
                mine = {"people": people, "memories": memories, "path": "now", "first": first, "steady": steady}
                twin = next((r for r in theirs if (r["people"], r["memories"]) == (people, memories)), None)
                if twin is not None:  # the same changes as the baseline's, for the same people
                    summary["runs"].append({key: twin[key] for key in ("people", "memories", "first", "steady")} | {"path": baseline})
                    mine["same_changes_as_baseline"] = all(mine[which]["changes"] == twin[which]["changes"] for which in ("first", "steady"))
                summary["runs"].append(mine)
                if args.workers:
                    summary.setdefault("workers", []).extend(
                        workers_runs(engine, root, people, memories, [int(n) for n in args.workers.split(",")]))
                console.print(f"{people:,} x {memories}: first {first['seconds']:.1f} s (load {first['load']}), "
                              f"steady {steady['seconds']:.1f} s (load {steady['load']})", highlight=False)
    summary["load_end"] = [round(x, 2) for x in os.getloadavg()]
    if args.plot:
        plot(summary, args.plot)
        summary["plot"] = args.plot
    return summary


def plot(summary: dict, out: str) -> None:
    """Pass seconds against people x memories, one line per pass and path, the targets dashed."""
    lines: dict[tuple[str, str], list[tuple[int, float]]] = {}
    for r in summary["runs"]:
        for which in ("first", "steady"):
            lines.setdefault((which, r["path"]), []).append((r["people"] * r["memories"], r[which]["seconds"]))
    targets = [(TARGET_FIRST_SECONDS, f"first-pass target {TARGET_FIRST_SECONDS} s", "--"),
               (TARGET_STEADY_SECONDS, f"steady target {TARGET_STEADY_SECONDS} s", "-.")]
    plot_seconds(lines, lambda which, path: f"{which} pass, {path}", targets, out, log=True, legend_size=7,
                 xlabel="memories in the store (people x memories each)", ylabel="seconds for one `watch --once` pass",
                 title="memupdate watch over a LangGraph store of many people")


def report(summary: dict) -> None:
    rows = []
    for r in summary["runs"]:
        f, s = r["first"], r["steady"]
        rows.append([f"{r['people']:,} x {r['memories']}", r["path"], f"{f['seconds']:.1f}", f"{f['compacted']:,}",
                     f"{f['applied']} / {f['queued']}", str(f["load"]), f"{s['seconds']:.1f}", f"{s['compacted']:,}",
                     f"{s['applied']} / {s['queued']}", str(s["load"]),
                     "" if r.get("same_changes_as_baseline") is None else ("yes" if r["same_changes_as_baseline"] else "no")])
    print_table(
        "memupdate watch --once over a LangGraph store, one namespace a person",
        ["people x memories", "path", "first s", "compacted", "applied / queued", "load", "steady s", "compacted",
         "applied / queued", "load", "same changes"], rows,
        [f"load average at the start: {', '.join(map(str, summary['load_start']))}; at the end: "
         f"{', '.join(map(str, summary['load_end']))}",
         f"first: import, compaction and safe changes for everyone; steady: after {CHANGED} people wrote one memory each.",
         f"now: today's code; {summary['baseline']}: the code of that commit, measured first in the same run "
         "(a worktree, a process and a database of its own); same changes: as that commit's, person by person."
         if summary.get("baseline") else "now: today's code (no baseline measured: --baseline COMMIT).",
         f"targets: the first pass over 1,000 x 20 in at most {TARGET_FIRST_SECONDS} s; a steady pass in at most "
         f"{TARGET_STEADY_SECONDS} s."],
    )
    if summary.get("workers"):
        workers_report(summary["workers"])


def workers_report(runs: list[dict]) -> None:
    """Watch commands at once: seconds, banks/s and the ratio to one worker's, banks compacted once."""
    one = {(r["people"], r["memories"]): r for r in runs if r["workers"] == 1}
    rows = []
    for r in runs:
        alone = one.get((r["people"], r["memories"]))
        rows.append([f"{r['people']:,} x {r['memories']}", str(r["workers"]), f"{r['seconds']:.1f}", f"{r['banks_per_second']:.1f}",
                     f"{r['banks_per_second'] / alone['banks_per_second']:.2f}x" if alone else "", f"{r['once']:,} / {r['banks']:,}",
                     str(r["twice"]), f"{r['steady_command']:.1f}" if "steady_command" in r else "", str(r["load"])])
    print_table("memupdate watch --once as commands started together against one database",
                ["people x memories", "workers", "first s", "banks/s", "vs 1 worker", "compacted once", "twice", "steady s", "load"], rows,
                ["each row: its own copy of the app's store; seconds from the processes' start (imports, models) to the last exit.",
                 f"steady s: one command after {STEADY_CHANGED} people wrote one memory each.",
                 f"targets: 2 workers at least {TARGET_WORKER_SPEEDUP}x one's banks/s on 1,000 x 20; 200 x 20 as one command in at most "
                 f"{TARGET_COMMAND_SECONDS} s, two together in at most {TARGET_TWO_COMMANDS} of one; a steady command in at most {TARGET_STEADY_SECONDS} s."])


def options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--people", default="100,1000", help="people (namespaces), comma-separated")
    parser.add_argument("--memories", default="5,20", help="memories a person, comma-separated")
    baseline_option(parser)
    parser.add_argument("--plot", help="draw pass seconds against the store's size to this PNG")
    parser.add_argument("--workers", default="", help="also pass over each size as that many watch commands at once, comma-separated (1,2)")


def main(argv: list[str] | None = None) -> None:
    bench_main("watch", __doc__, run, report, argv, options=options)


if __name__ == "__main__":
    main()
