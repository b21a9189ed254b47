"""Benchmark of `MemoryStore` (PostgreSQL + pgvector) against LangGraph's `InMemoryStore`.

For each namespace size (default 200 and 5,000 synthetic, unique, LoCoMo-like facts) it measures:

- bulk insert rate (memories/s) through `create_many`, including the real embedding model
  (packaged all-MiniLM-L6-v2, cold cache), and the SQL-only rate: the same texts pre-embedded, the
  vectors handed to `create_many` from a dict, so no model call is timed (same as the embedder's warm
  LRU cache); LangGraph's `InMemoryStore.batch(PutOp...)` with the same vectors is the comparison;
- search latency p50/p95 (ms), top_k=5, EXCLUDING query embedding: queries are embedded once up front,
  then each `search_by_vector` call is timed; `InMemoryStore.search(ns, query=q, limit=5)` holds the
  same memories with the same vectors, its `embed` function being a dict lookup of the pre-computed
  vectors (its time still includes the thread pool LangGraph starts per call to embed the query);
- fork time (ms) of the whole namespace (`fork` to a fresh namespace, repeated, p50) and the time to
  `drop` that fork (p50).

Targets: search p50 <= 2 ms at 200 memories; fork of 200 memories <= 20 ms.

Run it from the repository root (about 1-2 minutes on 2 cores, most of it embedding 5,200 texts):

    python -m bench.store                              # embedded server in a fresh temp dir
    python -m bench.store --sizes 200,5000 --queries 200 --json bench-store.json
    python -m bench.store --url postgresql://user:pass@host:5432/db    # an external server

Every namespace it writes lives under `bench/<run id>/...` and is dropped at the end; the temp data
dir (when --data-dir is not given) is removed after the embedded server stops.
"""

from __future__ import annotations

import argparse
import gc
import random
import statistics
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from bench.common import console, open_engine, parse_args, percentile, write_json

TARGET_SEARCH_P50_MS = 2.0  # at 200 memories
TARGET_FORK_MS = 20.0  # fork of 200 memories
TARGET_SIZE = 200
TOP_K = 5
WARMUP_CALLS = 10
WARMUP_TEXTS = 300

# -- synthetic memories ---------------------------------------------------------------------------

NAMES = [
    "Caroline", "Melanie", "Jon", "Gina", "John", "Maria", "Joanna", "Nate", "Tim", "Audrey", "Andrew",
    "James", "Deborah", "Jolene", "Evan", "Sam", "Calvin", "Dave", "Priya", "Omar", "Lena", "Hiro",
    "Sofia", "Mateo", "Aisha", "Ravi", "Chloe", "Lucas", "Nadia", "Ethan", "Yuki", "Fatima", "Noah",
    "Elena", "Kwame", "Ingrid", "Diego", "Mei", "Tom", "Zara",
]  # fmt: skip
PLACES = [
    "Sweden", "Boston", "Lisbon", "Kyoto", "Denver", "the Rockies", "Lake Tahoe", "Chicago", "Portland",
    "Barcelona", "Vancouver", "Seattle", "Nairobi", "Cape Town", "Austin", "Dublin", "Prague", "Oslo",
    "Yosemite", "Banff", "Hawaii", "Berlin", "Mexico City", "Montreal", "Edinburgh", "Sydney", "Seoul",
    "Rome", "the Grand Canyon", "Amsterdam",
]  # fmt: skip
ACTIVITIES = [
    "hiking", "camping", "kayaking", "surfing", "skiing", "cycling", "fishing", "birdwatching",
    "rock climbing", "swimming", "sailing", "running", "snowboarding", "horseback riding", "scuba diving",
    "ice skating", "paddleboarding", "bowling", "dancing", "stargazing",
]  # fmt: skip
SKILLS = [
    "the violin", "the piano", "the guitar", "pottery", "Spanish", "Japanese", "photography", "oil painting",
    "woodworking", "salsa dancing", "coding in Python", "calligraphy", "chess", "baking sourdough",
    "knitting", "the cello",
]  # fmt: skip
RELATIVES = ["sister", "brother", "mother", "father", "cousin", "grandmother", "aunt", "uncle", "best friend"]
JOBS = [
    "nurse", "software engineer", "teacher", "counselor", "chef", "architect", "photographer", "accountant",
    "graphic designer", "firefighter", "veterinarian", "librarian", "pharmacist", "electrician",
]  # fmt: skip
PETS = ["dog", "cat", "parrot", "rabbit", "hamster", "turtle", "puppy", "kitten"]
PET_NAMES = ["Oliver", "Luna", "Max", "Bailey", "Oscar", "Daisy", "Milo", "Coco", "Pepper", "Shadow", "Biscuit"]  # fmt: skip
FOODS = ["peanuts", "shellfish", "gluten", "dairy", "strawberries", "eggs", "soy", "sesame", "mushrooms"]
CAUSES = [
    "mental health", "animal shelters", "cancer research", "LGBTQ youth", "clean oceans", "literacy",
    "homeless veterans", "children's hospitals",
]  # fmt: skip
BOOKS = [
    "Becoming Nicole", "Charlotte's Web", "The Hobbit", "Dune", "Pride and Prejudice", "Educated",
    "The Alchemist", "Little Women", "Sapiens", "The Night Circus", "Circe", "Atomic Habits",
]  # fmt: skip
MONTHS = [
    "January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
    "November", "December",
]  # fmt: skip
YEARS = [str(y) for y in range(2018, 2025)]

FACT_TEMPLATES = [
    "{name} went {activity} in {place} on {date}.",
    "{name} started learning {skill} in {month} {year}.",
    "{name}'s {relative} lives in {place} and works as a {job}.",
    "{name} adopted a {pet} named {pet_name} on {date}.",
    "{name} visited {place} with {name2} on {date}.",
    "{name} has worked as a {job} in {place} since {year}.",
    "{name} is allergic to {food}, so {name2} cooked without it on {date}.",
    "{name} plans to go {activity} in {place} in {month} {year}.",
    "{name} ran a charity race for {cause} on {date}.",
    "{name} told {name2} that {book} is a favorite book, on {date}.",
    "{name} and {name2} went {activity} together near {place} in {month} {year}.",
    "{name} volunteered for {cause} in {place} during {month} {year}.",
]
QUERY_TEMPLATES = [
    "When did {name} go {activity}?",
    "Where did {name} go {activity}?",
    "What is {name} learning?",
    "Where does {name}'s {relative} live?",
    "What is the name of {name}'s {pet}?",
    "Who did {name} visit {place} with?",
    "What does {name} do for work?",
    "What food is {name} allergic to?",
    "Which book did {name} recommend to {name2}?",
    "When did {name} run a charity race?",
    "What are {name}'s plans for {month}?",
    "What cause did {name} volunteer for in {place}?",
]


def _fill(template: str, rng: random.Random) -> str:
    name, name2 = rng.sample(NAMES, 2)
    return template.format(
        name=name,
        name2=name2,
        place=rng.choice(PLACES),
        activity=rng.choice(ACTIVITIES),
        skill=rng.choice(SKILLS),
        relative=rng.choice(RELATIVES),
        job=rng.choice(JOBS),
        pet=rng.choice(PETS),
        pet_name=rng.choice(PET_NAMES),
        food=rng.choice(FOODS),
        cause=rng.choice(CAUSES),
        book=rng.choice(BOOKS),
        month=rng.choice(MONTHS),
        year=rng.choice(YEARS),
        date=f"{rng.randint(1, 28)} {rng.choice(MONTHS)} {rng.choice(YEARS)}",
    )


def unique_texts(templates: Sequence[str], n: int, rng: random.Random) -> list[str]:
    """`n` distinct texts filled from `templates` (deterministic for a seeded `rng`)."""
    texts: dict[str, None] = {}
    while len(texts) < n:
        texts[_fill(rng.choice(templates), rng)] = None
    return list(texts)


# -- helpers --------------------------------------------------------------------------------------


class PrecomputedEmbedder:
    """An `Embedder` serving vectors computed beforehand from a dict: `create_many` then times SQL only."""

    def __init__(self, name: str, dims: int, vectors: dict[str, np.ndarray]):
        self.name, self.dims, self.vectors = name, dims, vectors

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        return np.stack([self.vectors[t] for t in texts]) if texts else np.empty((0, self.dims), np.float32)


def time_each(fn: Callable[[Any], Any], args: Sequence[Any], warmup: int = WARMUP_CALLS) -> list[float]:
    """Milliseconds of `fn(arg)` for each arg, after `warmup` untimed calls (caches, prepared statements)."""
    for arg in args[:warmup]:
        fn(arg)
    gc.collect()  # start each timed loop without the garbage of earlier phases
    timings = []
    for arg in args:
        start = time.perf_counter()
        fn(arg)
        timings.append((time.perf_counter() - start) * 1000)
    return timings


def insert_batches(store, texts: Sequence[str], batch: int, progress: Progress, description: str) -> float:  # noqa: ANN001
    """`create_many` in batches of `batch`; returns the seconds spent inside `create_many` only."""
    from memupdate.store import NewMemory

    task = progress.add_task(description, total=len(texts))
    elapsed = 0.0
    for start in range(0, len(texts), batch):
        items = [
            NewMemory(
                text,
                kind="episodic",
                metadata={"dia_ids": [f"D{(start + i) // 20 + 1}:{(start + i) % 20 + 1}"]},
            )
            for i, text in enumerate(texts[start : start + batch])
        ]
        began = time.perf_counter()
        store.create_many(items)
        elapsed += time.perf_counter() - began
        progress.advance(task, len(items))
    return elapsed


# -- the benchmark --------------------------------------------------------------------------------


def run(args: argparse.Namespace) -> dict[str, Any]:
    from langgraph.store.base import PutOp
    from langgraph.store.memory import InMemoryStore

    from memupdate.store import MemoryStore
    from memupdate.store.database import server_info
    from memupdate.store.embeddings import get_embedder

    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    rng = random.Random(args.seed)
    # One pool of distinct facts: a slice per size, and the tail to warm the model up (never a cache hit later).
    all_texts = unique_texts(FACT_TEMPLATES, sum(sizes) + WARMUP_TEXTS, rng)
    warmup_texts = all_texts[sum(sizes) :]
    queries = unique_texts(QUERY_TEMPLATES, args.queries, rng)
    texts_by_size, offset = {}, 0
    for size in sizes:
        texts_by_size[size], offset = all_texts[offset : offset + size], offset + size

    engine = open_engine(args)
    info = server_info(engine)
    with console.status("loading the embedding model ..."):
        embedder = get_embedder()
        # The first batches run 3-5x slower (kernel set-up): warm up on facts no memory or query uses.
        for start in range(0, WARMUP_TEXTS, args.batch):
            embedder.embed(warmup_texts[start : start + args.batch])
    console.print(
        f"PostgreSQL {info['server_version']}, pgvector {info['pgvector_version']}; embedder {embedder.name} "
        f"({embedder.dims} dims); sizes {sizes}, {len(queries)} queries, batch {args.batch}, "
        f"{args.fork_reps} forks per size"
    )

    run_id = uuid.uuid4().hex[:8]
    root = MemoryStore(engine, embedder, ("bench", run_id))
    results: dict[int, dict[str, float]] = {size: {} for size in sizes}
    vectors: dict[str, np.ndarray] = {}
    try:
        # 1. inserts: cold (embedding included) into `<n>-embed`, then SQL-only into `<n>`, which is searched.
        with Progress(
            TextColumn("{task.description:<34}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=console,
        ) as progress:
            for size in sizes:
                texts = texts_by_size[size]
                cold = root.scoped(("bench", run_id, f"n{size}-embed"))
                seconds = insert_batches(cold, texts, args.batch, progress, f"n={size}: insert + embed")
                results[size]["insert_embed_per_s"] = size / seconds
                vectors.update(zip(texts, embedder.embed(texts), strict=True))  # cache hits
                precomputed = PrecomputedEmbedder(embedder.name, embedder.dims, vectors)
                warm = MemoryStore(engine, precomputed, ("bench", run_id, f"n{size}"))
                seconds = insert_batches(warm, texts, args.batch, progress, f"n={size}: insert pre-embedded")
                results[size]["insert_sql_per_s"] = size / seconds
                assert warm.count() == size and cold.count() == size

        with console.status("embedding the queries ..."):
            query_vectors = embedder.embed(queries)
        vectors.update(zip(queries, query_vectors, strict=True))

        # 2. search: memupdate, then InMemoryStore holding the same memories and vectors.
        def embed_from_dict(texts: list[str]) -> list[np.ndarray]:
            return [vectors[t] for t in texts]

        in_memory = InMemoryStore(
            index={"dims": embedder.dims, "embed": embed_from_dict, "fields": ["content"]}
        )
        for size in sizes:
            store = root.scoped(("bench", run_id, f"n{size}"))
            with console.status(f"n={size}: searching memupdate ..."):
                ms = time_each(lambda v, s=store: s.search_by_vector(v, TOP_K), list(query_vectors))
            results[size] |= {"search_p50_ms": percentile(ms, 50), "search_p95_ms": percentile(ms, 95)}

            ns = store.namespace
            ops = [
                PutOp(ns, f"m{i}", {"content": text, "kind": "episodic"})
                for i, text in enumerate(texts_by_size[size])
            ]
            began = time.perf_counter()
            in_memory.batch(ops)
            results[size]["inmemory_insert_per_s"] = size / (time.perf_counter() - began)
            with console.status(f"n={size}: searching InMemoryStore ..."):
                ms = time_each(lambda q, ns=ns: in_memory.search(ns, query=q, limit=TOP_K), queries)
            results[size] |= {
                "inmemory_search_p50_ms": percentile(ms, 50),
                "inmemory_search_p95_ms": percentile(ms, 95),
            }
            hits = in_memory.search(ns, query=queries[0], limit=TOP_K)
            ours = store.search_by_vector(query_vectors[0], TOP_K)
            results[size]["top1_agrees"] = float(hits[0].value["content"] == ours[0].memory.content)

        # 3. fork the whole namespace to a fresh one, then drop the fork.
        for size in sizes:
            store = root.scoped(("bench", run_id, f"n{size}"))
            fork_ms, drop_ms = [], []
            with console.status(f"n={size}: fork + drop x{args.fork_reps} ..."):
                for rep in range(args.fork_reps):
                    began = time.perf_counter()
                    fork = store.fork((*store.namespace, f"fork{rep}"))
                    fork_ms.append((time.perf_counter() - began) * 1000)
                    if rep == 0:
                        assert fork.count() == size, "the fork did not copy every memory"
                    began = time.perf_counter()
                    fork.drop()
                    drop_ms.append((time.perf_counter() - began) * 1000)
            results[size] |= {
                "fork_p50_ms": statistics.median(fork_ms),
                "drop_p50_ms": statistics.median(drop_ms),
            }
    finally:
        with console.status("dropping the benchmark namespaces ..."):
            for namespace in root.list_namespaces(("bench", run_id)):
                root.scoped(namespace).drop()
        left = root.list_namespaces(("bench", run_id))
        if left:
            console.print(f"[red]namespaces left behind: {left}[/red]")
        engine.dispose()

    return {
        "server": info,
        "embedder": embedder.name,
        "config": {
            "sizes": sizes,
            "queries": len(queries),
            "batch": args.batch,
            "fork_reps": args.fork_reps,
            "top_k": TOP_K,
            "seed": args.seed,
        },
        "results": {str(size): values for size, values in results.items()},
        "targets": targets(results),
    }


def targets(results: dict[int, dict[str, float]]) -> list[dict[str, Any]]:
    if TARGET_SIZE not in results:
        return []
    search, fork = results[TARGET_SIZE]["search_p50_ms"], results[TARGET_SIZE]["fork_p50_ms"]
    return [
        {"metric": "search_p50_ms", "size": TARGET_SIZE, "value": search, "target": TARGET_SEARCH_P50_MS,
         "met": search <= TARGET_SEARCH_P50_MS},
        {"metric": "fork_p50_ms", "size": TARGET_SIZE, "value": fork, "target": TARGET_FORK_MS,
         "met": fork <= TARGET_FORK_MS},
    ]  # fmt: skip


# -- report ---------------------------------------------------------------------------------------


def _verdict(value: float, limit: float, unit: str) -> str:
    mark = "[green]met[/green]" if value <= limit else "[red]missed[/red]"
    return f"≤ {limit:g} {unit}: {mark}"


def report(summary: dict[str, Any]) -> None:
    results = {int(size): values for size, values in summary["results"].items()}
    table = Table(
        title="memupdate MemoryStore (PostgreSQL + pgvector) vs LangGraph InMemoryStore", show_lines=False
    )
    for column, justify in [("metric", "left"), ("memories", "right"), ("memupdate", "right"),
                            ("InMemoryStore", "right"), ("ratio", "right"), ("target", "left")]:  # fmt: skip
        table.add_column(column, justify=justify)

    def rate(v: float) -> str:
        return f"{v:,.0f} /s"

    def ms(v: float) -> str:
        return f"{v:.2f} ms"

    rows = [
        ("insert incl. embedding¹", "insert_embed_per_s", None, rate, None),
        ("insert SQL only²", "insert_sql_per_s", "inmemory_insert_per_s", rate, None),
        ("search p50³", "search_p50_ms", "inmemory_search_p50_ms", ms, TARGET_SEARCH_P50_MS),
        ("search p95³", "search_p95_ms", "inmemory_search_p95_ms", ms, None),
        ("fork whole namespace p50", "fork_p50_ms", None, ms, TARGET_FORK_MS),
        ("drop the fork p50", "drop_p50_ms", None, ms, None),
    ]
    for label, ours, theirs, fmt, limit in rows:
        for i, size in enumerate(sorted(results)):
            values = results[size]
            other = values.get(theirs) if theirs else None
            target = _verdict(values[ours], limit, "ms") if limit is not None and size == TARGET_SIZE else ""
            table.add_row(
                label if i == 0 else "",
                f"{size:,}",
                fmt(values[ours]),
                fmt(other) if other is not None else "—",
                f"{values[ours] / other:.2f}×" if other else "—",
                target,
                end_section=i == len(results) - 1,
            )
    console.print(table)
    config = summary["config"]
    console.print(
        f"¹ create_many in batches of {config['batch']}, texts embedded by {summary['embedder']} on the CPU "
        "(cold cache, model warmed up).\n"
        "² the same texts pre-embedded: create_many gets their vectors from a dict (as from the embedder's warm "
        "cache),\n  so only the SQL is timed; InMemoryStore: one batch(PutOp ...) whose embed fn is a dict lookup.\n"
        f"³ top_k={config['top_k']}, {config['queries']} queries, query embedding excluded on both sides: memupdate "
        "times search_by_vector\n  on pre-embedded queries; InMemoryStore.search(ns, query=q, limit=5) embeds q "
        "by a dict lookup of the same vector\n  (through the thread pool LangGraph starts per call). "
        f"{WARMUP_CALLS} untimed warm-up calls first.\n"
        "ratio = memupdate / InMemoryStore (of times for search, of rates for insert). "
        f"fork: {config['fork_reps']} forks per size, each to a fresh namespace, dropped right after."
    )
    for size in sorted(results):
        values = results[size]
        console.print(
            f"search p50 ratio memupdate/InMemoryStore at {size:,} memories: "
            f"[bold]{values['search_p50_ms'] / values['inmemory_search_p50_ms']:.2f}×[/bold]"
            + (
                ""
                if values.get("top1_agrees", 1.0)
                else "  [yellow](top-1 of the first query differs)[/yellow]"
            )
        )
    for target in summary["targets"]:
        label = "search p50" if target["metric"] == "search_p50_ms" else "fork"
        console.print(
            f"target {label} at {target['size']} memories: {target['value']:.2f} ms "
            f"{_verdict(target['value'], target['target'], 'ms')}"
        )


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.store", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--sizes", default="200,5000", help="namespace sizes, comma-separated (default 200,5000)"
    )
    parser.add_argument("--queries", type=int, default=200, help="search queries per size (default 200)")
    parser.add_argument("--batch", type=int, default=100, help="memories per create_many call (default 100)")
    parser.add_argument("--fork-reps", type=int, default=10, help="forks (+ drops) per size (default 10)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the synthetic memories and queries")
    args = parse_args(parser, argv)  # adds --url, --data-dir, --json

    summary = run(args)
    report(summary)
    write_json(args.json, summary)


if __name__ == "__main__":
    main()
