"""Benchmark of `MemoryStore` (PostgreSQL + pgvector) against LangGraph's `InMemoryStore` and
LangGraph's own `PostgresStore`, on the same data and the same precomputed embeddings.

Sizes (default 200, 5,000 and 100,000 memories): up to 5,000 one namespace holds them all; above,
they are spread over namespaces of 200 (100,000 = 500 namespaces), and one of them is searched.
Texts are synthetic, unique, LoCoMo-like facts. The first 5,000 are embedded by the real model
(packaged all-MiniLM-L6-v2); beyond, those vectors are reused, cycled with small noise (embedding
100,000 texts on 2 CPU cores would take ~10 minutes and measure the model, not the stores).

Rows, per size and per store:
- insert incl. embedding (memories/s, up to 1,000: the model's rate sets it; the model on a cold cache);
- insert SQL only: the same vectors served from a dict (as from the embedder's warm cache);
- search p50/p95 (ms), top_k=5, query embedding excluded: memupdate times `search_by_vector` on
  pre-embedded queries, the LangGraph stores `search(ns, query=q, limit=5)` with a dict-lookup embed;
- get p50 (ms) of one memory by key; delete p50 (ms) of one memory (memupdate writes its event row too);
- fork / drop p50 (ms) of the searched namespace (memupdate only: LangGraph's stores have no fork);
- memory: growth of this process's RSS while inserting (the whole store for InMemoryStore, the client
  for the others) and the server's table size (tables plus indexes).
`PostgresStore` runs on the same embedded server (a database of its own) with the vector index it
configures for `index={"dims": 384, "embed": ...}`: HNSW, cosine (approximate; memupdate scans exactly).

    python -m memupdate.bench.store                              # embedded server in a fresh temp dir, ~6-8 min
    python -m memupdate.bench.store --sizes 200,5000 --queries 200 --out bench-store.json --plot cost.png
    memupdate bench store --sizes 200                  # the same, through the CLI

Every namespace it writes lives under `bench/<run id>/...` and is dropped at the end, the
PostgresStore database too; the temp data dir (when --data-dir is not given) is removed at exit.
"""

from __future__ import annotations

import argparse
import gc
import random
import statistics
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np
import psutil
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from memupdate.bench.common import bench_main, console, open_engine, percentile
from memupdate.text.dates import MONTHS

STORES = ("memupdate", "InMemoryStore", "PostgresStore")
MAX_NAMESPACE = 5_000  # above this, memories are spread over namespaces of SPREAD memories
# Insert incl. embedding is measured up to this size: the model's rate sets it (the same texts/s for
# every store), and 3 x 5,000 cold embeddings would take minutes on 2 cores.
MAX_EMBEDDED_INSERT = 1_000
SPREAD = 200
NOISE = 0.02  # relative noise on reused vectors beyond the first MAX_NAMESPACE
GETS = 200
DELETES = 50
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
]
PLACES = [
    "Sweden", "Boston", "Lisbon", "Kyoto", "Denver", "the Rockies", "Lake Tahoe", "Chicago", "Portland",
    "Barcelona", "Vancouver", "Seattle", "Nairobi", "Cape Town", "Austin", "Dublin", "Prague", "Oslo",
    "Yosemite", "Banff", "Hawaii", "Berlin", "Mexico City", "Montreal", "Edinburgh", "Sydney", "Seoul",
    "Rome", "the Grand Canyon", "Amsterdam",
]
ACTIVITIES = [
    "hiking", "camping", "kayaking", "surfing", "skiing", "cycling", "fishing", "birdwatching",
    "rock climbing", "swimming", "sailing", "running", "snowboarding", "horseback riding", "scuba diving",
    "ice skating", "paddleboarding", "bowling", "dancing", "stargazing",
]
SKILLS = [
    "the violin", "the piano", "the guitar", "pottery", "Spanish", "Japanese", "photography", "oil painting",
    "woodworking", "salsa dancing", "coding in Python", "calligraphy", "chess", "baking sourdough",
    "knitting", "the cello",
]
RELATIVES = ["sister", "brother", "mother", "father", "cousin", "grandmother", "aunt", "uncle", "best friend"]
JOBS = [
    "nurse", "software engineer", "teacher", "counselor", "chef", "architect", "photographer", "accountant",
    "graphic designer", "firefighter", "veterinarian", "librarian", "pharmacist", "electrician",
]
PETS = ["dog", "cat", "parrot", "rabbit", "hamster", "turtle", "puppy", "kitten"]
PET_NAMES = ["Oliver", "Luna", "Max", "Bailey", "Oscar", "Daisy", "Milo", "Coco", "Pepper", "Shadow", "Biscuit"]
FOODS = ["peanuts", "shellfish", "gluten", "dairy", "strawberries", "eggs", "soy", "sesame", "mushrooms"]
CAUSES = [
    "mental health", "animal shelters", "cancer research", "LGBTQ youth", "clean oceans", "literacy",
    "homeless veterans", "children's hospitals",
]
BOOKS = [
    "Becoming Nicole", "Charlotte's Web", "The Hobbit", "Dune", "Pride and Prejudice", "Educated",
    "The Alchemist", "Little Women", "Sapiens", "The Night Circus", "Circe", "Atomic Habits",
]
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


# -- the three stores, behind the few verbs a row needs --------------------------------------------


class Ours:
    """memupdate's `MemoryStore`, one instance per namespace (they share the engine)."""

    name = "memupdate"

    def __init__(self, engine, embedder, root: tuple[str, ...]):
        from memupdate.store import MemoryStore

        self.engine, self.embedder, self.root = engine, embedder, root
        self._stores: dict[tuple, Any] = {}
        self._make = lambda ns: MemoryStore(engine, self.embedder, (*root, *ns))

    def store(self, ns: tuple[str, ...]):
        if ns not in self._stores:
            self._stores[ns] = self._make(ns)
        return self._stores[ns]

    def insert(self, ns: tuple[str, ...], items: Sequence[tuple[str, str]]) -> None:
        from memupdate.store import NewMemory

        self.store(ns).create_many([NewMemory(text, kind="episodic", key=key) for key, text in items])

    def search(self, ns: tuple[str, ...], query: str, vector: np.ndarray) -> list[str]:
        return [hit.memory.key for hit in self.store(ns).search_by_vector(vector, TOP_K)]

    def get(self, ns: tuple[str, ...], key: str) -> None:
        self.store(ns).get(key)

    def delete(self, ns: tuple[str, ...], key: str) -> None:
        self.store(ns).delete(key)

    def table_bytes(self) -> int:
        from sqlalchemy import text

        with self.engine.connect() as conn:
            return conn.execute(text("SELECT pg_total_relation_size('memories')")).scalar_one()


class LangGraph:
    """LangGraph's `InMemoryStore` or `PostgresStore`, both with an index on the memory's `content`."""

    def __init__(self, name: str, store, embed: SwitchableEmbed, conn=None):
        self.name, self.lg, self.embed, self.conn = name, store, embed, conn

    def insert(self, ns: tuple[str, ...], items: Sequence[tuple[str, str]]) -> None:
        from langgraph.store.base import PutOp

        self.lg.batch([PutOp(ns, key, {"content": text, "kind": "episodic"}) for key, text in items])

    def search(self, ns: tuple[str, ...], query: str, vector: np.ndarray) -> list[str]:
        return [item.key for item in self.lg.search(ns, query=query, limit=TOP_K)]

    def get(self, ns: tuple[str, ...], key: str) -> None:
        self.lg.get(ns, key)

    def delete(self, ns: tuple[str, ...], key: str) -> None:
        self.lg.delete(ns, key)

    def table_bytes(self) -> int | None:
        if self.conn is None:
            return None
        with self.conn.cursor() as cur:
            cur.execute("SELECT pg_total_relation_size('store') + pg_total_relation_size('store_vectors') AS bytes")
            return cur.fetchone()["bytes"]  # PostgresStore's connection returns dict rows


class SwitchableEmbed:
    """The LangGraph stores' embed function: the real model (cold inserts) or a dict of precomputed vectors."""

    def __init__(self, as_lists: bool):
        self.as_lists, self.model, self.vectors = as_lists, None, {}

    def __call__(self, texts: Sequence[str]) -> list:
        vectors = self.model.embed(list(texts)) if self.model is not None else [self.vectors[t] for t in texts]
        return [v.tolist() for v in vectors] if self.as_lists else list(vectors)


@contextmanager
def postgres_store(engine, dims: int, embed: SwitchableEmbed) -> Iterator[LangGraph]:
    """LangGraph's `PostgresStore` in a database of its own on the same server, dropped at the end."""
    from langgraph.store.postgres import PostgresStore
    from sqlalchemy import text

    name = f"bench_langgraph_{uuid.uuid4().hex[:8]}"
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    url = engine.url.set(drivername="postgresql", database=name).render_as_string(hide_password=False)
    try:
        with PostgresStore.from_conn_string(url, index={"dims": dims, "embed": embed, "fields": ["content"]}) as store:
            store.setup()
            yield LangGraph("PostgresStore", store, embed, store.conn)
    finally:
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


# -- data ---------------------------------------------------------------------------------------


def layout(size: int) -> list[tuple[str, ...]]:
    """The namespaces (relative) that hold `size` memories: one up to MAX_NAMESPACE, else SPREAD each."""
    if size <= MAX_NAMESPACE:
        return [(f"n{size}",)]
    return [(f"n{size}", f"s{j:03d}") for j in range(size // SPREAD)]


def noisy_copies(pool: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
    """`n` unit vectors: the pool's, cycled, each with small Gaussian noise (so no two are equal)."""
    vectors = pool[np.arange(n) % len(pool)] + rng.normal(0, NOISE / np.sqrt(pool.shape[1]), (n, pool.shape[1]))
    return (vectors / np.linalg.norm(vectors, axis=1, keepdims=True)).astype(np.float32)


# -- the benchmark --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Workload:
    """What every store gets, the same for all three: the texts in insertion order, the queries and their
    vectors, and each text's vector (the model's for the first `modelled`, noisy copies of those beyond)."""

    sizes: list[int]
    texts: list[str]
    queries: list[str]
    query_vectors: np.ndarray
    vectors: dict[str, np.ndarray]
    modelled: int


@dataclass
class Stores:
    """The three stores of a run, memupdate's first (its exact search is what recall is measured against)."""

    ours: Ours
    in_memory: LangGraph
    postgres: LangGraph
    new_in_memory: Callable[[], Any]  # an empty InMemoryStore over the precomputed vectors

    @property
    def all(self) -> list[Ours | LangGraph]:
        return [self.ours, self.in_memory, self.postgres]


def run(args: argparse.Namespace) -> dict[str, Any]:
    from memupdate.store import server_info

    sizes = sorted(int(s) for s in args.sizes.split(",") if s.strip())
    rng = random.Random(args.seed)
    modelled = min(max(sizes), MAX_NAMESPACE)  # texts the model embeds; beyond, vectors are reused
    texts = unique_texts(FACT_TEMPLATES, max(sizes) + WARMUP_TEXTS, rng)
    warmup_texts, texts = texts[-WARMUP_TEXTS:], texts[:-WARMUP_TEXTS]
    queries = unique_texts(QUERY_TEMPLATES, args.queries, rng)

    engine = open_engine(args)
    info = server_info(engine)
    embedder = warm_embedder(warmup_texts, args.batch)
    console.print(
        f"PostgreSQL {info['server_version']}, pgvector {info['pgvector_version']}; embedder {embedder.name} "
        f"({embedder.dims} dims); sizes {sizes}, {len(queries)} queries, batch {args.batch}; the first "
        f"{modelled:,} texts embedded by the model, the rest reuse those vectors with {NOISE:g} noise"
    )
    workload = embed_workload(embedder, sizes, texts, queries, modelled, args.seed)
    results = measure_stores(engine, embedder, workload, args)
    return {
        "server": info,
        "embedder": embedder.name,
        "config": {"sizes": sizes, "queries": len(queries), "batch": args.batch, "fork_reps": args.fork_reps,
                   "top_k": TOP_K, "seed": args.seed, "modelled_texts": modelled, "spread": SPREAD, "noise": NOISE},
        "results": {str(size): values for size, values in results.items()},
        "targets": targets(results),
    }


def warm_embedder(warmup_texts: Sequence[str], batch: int):
    """The embedding model, loaded and past its first batches (they run 3-5x slower)."""
    from memupdate.store import get_embedder

    with console.status("loading the embedding model ..."):
        embedder = get_embedder()
        for start in range(0, WARMUP_TEXTS, batch):
            embedder.embed(warmup_texts[start : start + batch])
    return embedder


def embed_workload(embedder, sizes: list[int], texts: list[str], queries: list[str], modelled: int, seed: int) -> Workload:
    """Every vector the stores will be served, embedded once, untimed."""
    with console.status(f"embedding {modelled:,} texts and {len(queries)} queries (untimed) ..."):
        pool = embedder.embed(texts[:modelled])
        query_vectors = embedder.embed(queries)
    vectors = dict(zip(texts[:modelled], pool, strict=True))
    if max(sizes) > modelled:
        vectors |= dict(zip(texts[modelled:], noisy_copies(pool, max(sizes) - modelled, np.random.default_rng(seed)), strict=True))
    vectors |= dict(zip(queries, query_vectors, strict=True))
    return Workload(sizes, texts, queries, query_vectors, vectors, modelled)


def measure_stores(engine, embedder, workload: Workload, args: argparse.Namespace) -> dict[int, dict[str, dict[str, float | None]]]:
    """Every row, size by size, for the three stores: size -> store -> row -> value. The benchmark's
    namespaces are dropped and the engine disposed at the end, whatever happens."""
    from langgraph.store.memory import InMemoryStore

    run_id = uuid.uuid4().hex[:8]
    results: dict[int, dict[str, dict[str, float | None]]] = {size: {s: {} for s in STORES} for size in workload.sizes}
    in_memory_embed, postgres_embed = SwitchableEmbed(as_lists=False), SwitchableEmbed(as_lists=True)
    in_memory_embed.vectors = postgres_embed.vectors = workload.vectors

    def new_in_memory() -> InMemoryStore:
        return InMemoryStore(index={"dims": embedder.dims, "embed": in_memory_embed, "fields": ["content"]})

    ours = Ours(engine, PrecomputedEmbedder(embedder.name, embedder.dims, workload.vectors), ("bench", run_id))
    progress = Progress(TextColumn("{task.description:<44}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=console)
    try:
        with postgres_store(engine, embedder.dims, postgres_embed) as theirs_pg, progress:
            stores = Stores(ours, LangGraph("InMemoryStore", new_in_memory(), in_memory_embed), theirs_pg, new_in_memory)
            for size in workload.sizes:
                measure_size(size, stores, embedder, workload, args, results[size], progress)
                stores.in_memory.lg = new_in_memory()
                gc.collect()
    finally:
        with console.status("dropping the benchmark namespaces ..."):
            for namespace in ours.store(("x",)).list_namespaces(("bench", run_id)):
                ours.store(("x",)).scoped(namespace).drop()
        engine.dispose()
    return results


def measure_size(size: int, stores: Stores, model, workload: Workload, args: argparse.Namespace,
                 rows: dict[str, dict[str, float | None]], progress: Progress) -> None:
    """Every row at one size, into `rows` (store -> row -> value)."""
    namespaces = layout(size)
    per_ns = size // len(namespaces)
    keyed = [(f"m{i}", text) for i, text in enumerate(workload.texts[:size])]
    chunks = {ns: keyed[j * per_ns : (j + 1) * per_ns] for j, ns in enumerate(namespaces)}
    if size <= MAX_EMBEDDED_INSERT:
        insert_embedded(size, keyed, stores, model, args.batch, rows, progress)
    insert_precomputed(size, chunks, stores, args.batch, rows, progress)
    searched = namespaces[0]
    read_and_delete(size, searched, [key for key, _ in chunks[searched]], per_ns, stores, workload, args, rows, progress)


def insert_embedded(size: int, keyed: list[tuple[str, str]], stores: Stores, model, batch: int,
                    rows: dict[str, dict[str, float | None]], progress: Progress) -> None:
    """Insert with the real model on a cold cache (small sizes: the model's rate sets this row), then drop
    what it wrote."""
    for backend in stores.all:
        model._cache.clear()
        seconds = insert_all(backend, {("embed", f"n{size}"): keyed}, batch, progress,
                             f"n={size:,} {backend.name}: insert + embed", model)
        rows[backend.name]["insert_embed_per_s"] = size / seconds
    stores.ours.store(("embed", f"n{size}")).drop()
    stores.in_memory.lg = stores.new_in_memory()
    with stores.postgres.conn.cursor() as cur:
        cur.execute("DELETE FROM store WHERE prefix LIKE 'embed.%'")


def insert_precomputed(size: int, chunks: dict, stores: Stores, batch: int,
                       rows: dict[str, dict[str, float | None]], progress: Progress) -> None:
    """Insert pre-embedded (SQL only), with the memory it takes: this process's RSS and the server's tables."""
    process = psutil.Process()
    for backend in stores.all:
        gc.collect()
        rss, table = process.memory_info().rss, backend.table_bytes()
        seconds = insert_all(backend, chunks, batch, progress, f"n={size:,} {backend.name}: insert pre-embedded")
        gc.collect()
        row = rows[backend.name]
        row["insert_sql_per_s"] = size / seconds
        row["rss_growth_mb"] = (process.memory_info().rss - rss) / 2**20
        after = backend.table_bytes()
        row["table_mb"] = None if after is None else (after - table) / 2**20


def read_and_delete(size: int, searched: tuple[str, ...], keys: list[str], per_ns: int, stores: Stores, workload: Workload,
                    args: argparse.Namespace, rows: dict[str, dict[str, float | None]], progress: Progress) -> None:
    """Search (recall against memupdate's exact scan), get, fork/drop (memupdate only) and delete, on the
    namespace `searched` holding `keys`."""
    queries, query_vectors = workload.queries, workload.query_vectors
    exact: list[list[str]] = []
    for backend in stores.all:
        task = progress.add_task(f"n={size:,} {backend.name}: search, get, delete", total=3)
        found: list[list[str]] = []

        def search(i: int, b=backend, out=found, ns=searched) -> None:
            out.append(b.search(ns, queries[i], query_vectors[i]))

        ms = time_each(search, range(len(queries)))
        found = found[-len(queries):]
        row = rows[backend.name]
        row |= {"search_p50_ms": percentile(ms, 50), "search_p95_ms": percentile(ms, 95)}
        if backend is stores.ours:
            exact = found
        else:
            row["recall_at_5"] = float(np.mean([len(set(a) & set(b)) / max(len(b), 1) for a, b in zip(found, exact, strict=True)]))
        progress.advance(task)
        picks = random.Random(args.seed).choices(keys, k=GETS)
        ms = time_each(lambda k, b=backend, ns=searched: b.get(ns, k), picks)
        row |= {"get_p50_ms": percentile(ms, 50), "get_p95_ms": percentile(ms, 95)}
        progress.advance(task)
        if backend is stores.ours:
            fork_ms, drop_ms = fork_and_drop(stores.ours.store(searched), args.fork_reps, per_ns)
            row |= {"fork_p50_ms": statistics.median(fork_ms), "drop_p50_ms": statistics.median(drop_ms)}
        victims = random.Random(args.seed).sample(keys, min(DELETES, len(keys) // 2))
        ms = time_each(lambda k, b=backend, ns=searched: b.delete(ns, k), victims, warmup=0)
        row |= {"delete_p50_ms": percentile(ms, 50), "delete_p95_ms": percentile(ms, 95)}
        progress.advance(task)


def insert_all(backend, chunks: dict, batch: int, progress: Progress, description: str, model=None) -> float:
    """Insert every chunk in batches of `batch`; returns the seconds inside the stores' calls only.
    With `model`, the stores embed with the real model (ours through its embedder, LangGraph's through embed)."""
    total = sum(len(items) for items in chunks.values())
    task = progress.add_task(description, total=total)
    elapsed = 0.0
    with embedding_with(backend, model):
        for ns, items in chunks.items():
            for start in range(0, len(items), batch):
                began = time.perf_counter()
                backend.insert(ns, items[start : start + batch])
                elapsed += time.perf_counter() - began
                progress.advance(task, len(items[start : start + batch]))
    return elapsed


@contextmanager
def embedding_with(backend, model) -> Iterator[None]:
    """Point `backend`'s embedding at the real `model` for the duration (None: keep the precomputed vectors)."""
    if model is None:
        yield
        return
    if isinstance(backend, Ours):
        saved, backend.embedder = backend.embedder, model
        backend._stores.clear()
        try:
            yield
        finally:
            backend.embedder = saved
            backend._stores.clear()
        return
    backend.embed.model = model
    try:
        yield
    finally:
        backend.embed.model = None


def fork_and_drop(store, reps: int, size: int) -> tuple[list[float], list[float]]:
    fork_ms, drop_ms = [], []
    for rep in range(reps):
        began = time.perf_counter()
        fork = store.fork((*store.namespace[:2], "forks", f"{store.namespace[-1]}-{rep}"))
        fork_ms.append((time.perf_counter() - began) * 1000)
        if rep == 0:
            assert fork.count() == size, "the fork did not copy every memory"
        began = time.perf_counter()
        fork.drop()
        drop_ms.append((time.perf_counter() - began) * 1000)
    return fork_ms, drop_ms


def targets(results: dict[int, dict[str, dict]]) -> list[dict[str, Any]]:
    if TARGET_SIZE not in results:
        return []
    ours = results[TARGET_SIZE]["memupdate"]
    return [
        {"metric": "search_p50_ms", "size": TARGET_SIZE, "value": ours["search_p50_ms"], "target": TARGET_SEARCH_P50_MS,
         "met": ours["search_p50_ms"] <= TARGET_SEARCH_P50_MS},
        {"metric": "fork_p50_ms", "size": TARGET_SIZE, "value": ours["fork_p50_ms"], "target": TARGET_FORK_MS,
         "met": ours["fork_p50_ms"] <= TARGET_FORK_MS},
    ]


# -- report ---------------------------------------------------------------------------------------

# (label, key, format, higher is better)
ROWS = [
    ("insert incl. embedding¹", "insert_embed_per_s", "rate", True),
    ("insert SQL only²", "insert_sql_per_s", "rate", True),
    ("search p50³", "search_p50_ms", "ms", False),
    ("search p95³", "search_p95_ms", "ms", False),
    ("search recall@5 vs exact⁴", "recall_at_5", "share", True),
    ("get p50", "get_p50_ms", "ms", False),
    ("delete p50⁵", "delete_p50_ms", "ms", False),
    ("fork namespace p50⁶", "fork_p50_ms", "ms", False),
    ("drop the fork p50⁶", "drop_p50_ms", "ms", False),
    ("RSS growth while inserting⁷", "rss_growth_mb", "mb", False),
    ("server table size⁷", "table_mb", "mb", False),
]
FORMATS = {"rate": "{:,.0f} /s", "ms": "{:.2f} ms", "share": "{:.0%}", "mb": "{:,.1f} MB"}


def speedup(ours: float | None, theirs: float | None, higher_better: bool) -> str:
    """How many times better memupdate is (> 1: better), coloured."""
    if ours is None or theirs is None or not ours or not theirs:
        return "—"
    factor = ours / theirs if higher_better else theirs / ours
    colour = "green" if factor >= 1 else "red"
    return f"[{colour}]{factor:.2f}×[/{colour}]" if factor >= 0.1 else f"[{colour}]{factor:.3f}×[/{colour}]"


def report(summary: dict[str, Any]) -> None:
    results = {int(size): values for size, values in summary["results"].items()}
    table = Table(title="memupdate MemoryStore vs LangGraph's InMemoryStore and PostgresStore (same data, same vectors)")
    for column in ["row", "memories", *STORES, "× vs InMemory", "× vs Postgres"]:
        table.add_column(column, justify="left" if column in ("row",) else "right", no_wrap=column == "row")
    for label, key, kind, higher in ROWS:
        shown = [size for size in sorted(results) if any(results[size][s].get(key) is not None for s in STORES)]
        for i, size in enumerate(shown):
            values = [results[size][s].get(key) for s in STORES]
            table.add_row(
                label if i == 0 else "",
                f"{size:,}",
                *("—" if v is None else FORMATS[kind].format(v) for v in values),
                *(speedup(values[0], other, higher) if key not in ("recall_at_5", "rss_growth_mb") else "" for other in values[1:]),
                end_section=i == len(shown) - 1,
            )
    console.print(table)
    config = summary["config"]
    console.print(
        f"memories > {MAX_NAMESPACE:,} are spread over namespaces of {config['spread']} and one of them is searched, "
        f"forked, read and deleted from; the first {config['modelled_texts']:,} texts are embedded by "
        f"{summary['embedder']}, the rest reuse those vectors with {config['noise']:g} relative noise.\n"
        f"× = how many times faster (or smaller) memupdate is than that store; > 1 means memupdate wins.\n"
        f"¹ batches of {config['batch']}, the model on a cold cache (model warmed up); up to {MAX_EMBEDDED_INSERT:,} "
        "memories (the model's rate sets this row).\n"
        "² the same vectors from a dict: only the store is timed (memupdate: create_many; LangGraph: batch(PutOp ...)).\n"
        f"³ top_k={config['top_k']}, {config['queries']} queries, query embedding excluded (a dict lookup for LangGraph's "
        "stores, which still run it through their embed path).\n"
        "⁴ share of memupdate's exact top 5 that the store returns (PostgresStore has an HNSW index: approximate "
        "whenever the planner uses it).\n"
        "⁵ one memory by key; memupdate also writes its event row in the same statement.\n"
        f"⁶ memupdate only ({config['fork_reps']} reps): the whole searched namespace copied with one INSERT ... SELECT, "
        "then dropped; LangGraph's stores have no fork.\n"
        "⁷ this process's RSS growth while inserting (the whole store for InMemoryStore, whose vectors are the "
        "benchmark's own arrays, not copies;\n  the client for the others) and the server-side growth of the "
        "store's tables and indexes."
    )
    for target in summary["targets"]:
        label = "search p50" if target["metric"] == "search_p50_ms" else "fork"
        console.print(
            f"target {label} at {target['size']} memories: {target['value']:.2f} ms "
            f"{_verdict(target['value'], target['target'], 'ms')}"
        )


def _verdict(value: float, limit: float, unit: str) -> str:
    mark = "[green]met[/green]" if value <= limit else "[red]missed[/red]"
    return f"≤ {limit:g} {unit}: {mark}"


def plot(summary: dict[str, Any], path: str) -> None:
    """The cost curve: search and fork p50 against the number of memories, log-log, as a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    results = {int(size): values for size, values in summary["results"].items()}
    sizes = sorted(results)
    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    for store, style in zip(STORES, ("o-", "s--", "^-."), strict=True):
        ax.plot(sizes, [results[s][store].get("search_p50_ms") for s in sizes], style, label=f"search p50, {store}")
    ax.plot(sizes, [results[s]["memupdate"].get("fork_p50_ms") for s in sizes], "D:", label="fork p50, memupdate")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel(f"memories in the database (above {MAX_NAMESPACE:,}: namespaces of {summary['config']['spread']})")
    ax.set_ylabel("milliseconds (p50)")
    ax.set_title("memupdate vs LangGraph stores: cost curve")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    console.print(f"wrote {path}")


def main(argv: Sequence[str] | None = None) -> None:
    args, summary = bench_main("store", __doc__, run, report, argv, options=_options)
    if args.plot:
        plot(summary, args.plot)


def _options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--sizes", default="200,5000,100000", help="memories, comma-separated (default 200,5000,100000)")
    parser.add_argument("--queries", type=int, default=200, help="search queries per size (default 200)")
    parser.add_argument("--batch", type=int, default=100, help="memories per insert call (default 100)")
    parser.add_argument("--fork-reps", type=int, default=10, help="forks (+ drops) per size (default 10)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the synthetic memories and queries")
    parser.add_argument("--plot", metavar="OUT.png", help="also draw the cost curve to OUT.png")


if __name__ == "__main__":
    main()
