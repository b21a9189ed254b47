"""What the benchmarks share: a database, an embedder, 200 memories with questions, and the report.

    args = parse_args(parser)                  # adds --url, --data-dir, --out
    engine = open_engine(args)                 # --url, else an embedded server in a temp dir
    memories, questions, source = memory_bank(200, 64)
    with bench_namespace(engine, embedder) as root: ...   # everything under bench/<run id>, dropped at exit
    fn = timed(fn, meter := Meter())           # meter.seconds, meter.calls
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console
from rich.table import Table

from memupdate.text.dates import MONTHS

REPO = Path(__file__).resolve().parent.parent
LOCOMO_DEV_FILE = REPO.parent / "shared" / "data" / "locomo" / "locomo10-dev.json"
CONVERSATION = "conv-26"

# Wide enough for the tables when stdout is not a terminal (rich would wrap at 80 columns).
console = Console(width=None if sys.stdout.isatty() else 120)


# -- command line, database, embedder ------------------------------------------------------------


def parse_args(parser: argparse.ArgumentParser, argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser.add_argument("--url", help="postgresql://... of an external server instead of the embedded one")
    parser.add_argument("--data-dir", help="the embedded server's data dir (default: a temp dir)")
    parser.add_argument("--out", metavar="PATH", help="also write the results as JSON to PATH")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")  # no "Loading weights" bar amid ours
    return parser.parse_args(argv)


def bench_main(
    name: str,
    doc: str | None,
    run: Callable[[argparse.Namespace], dict[str, Any]],
    report: Callable[[dict[str, Any]], None],
    argv: Sequence[str] | None = None,
    *,
    options: Callable[[argparse.ArgumentParser], None] | None = None,
) -> tuple[argparse.Namespace, dict[str, Any]]:
    """A benchmark's `main`: its command line (`python -m memupdate.bench.<name>`, described by the first
    paragraph of `doc`, with its own `options` and the shared --url, --data-dir and --out), run, report,
    and the JSON written; returns the arguments and the summary."""
    parser = argparse.ArgumentParser(prog=f"python -m memupdate.bench.{name}", description=(doc or "").split("\n\n")[0])
    if options is not None:
        options(parser)
    args = parse_args(parser, argv)
    summary = run(args)
    report(summary)
    write_json(args.out, summary)
    return args, summary


def open_engine(args: argparse.Namespace):
    """The engine to benchmark on, migrated: `--url`, else the embedded server in `--data-dir` or a temp dir."""
    from memupdate.migrations.schema import upgrade
    from memupdate.store import get_engine, start_embedded_server, temporary_data_dir

    if args.url:
        engine = get_engine(args.url)
    else:
        data_dir = Path(args.data_dir) if args.data_dir else temporary_data_dir("memupdate-bench-")
        with console.status(f"starting the embedded PostgreSQL in {data_dir} ..."):
            engine = get_engine(start_embedded_server(data_dir))
    upgrade(engine)
    return engine


def load_embedder():
    """The real embedder, warmed up on texts nothing else uses (its first batches run 3-5x slower)."""
    from memupdate.store import get_embedder

    with console.status("loading the embedding model ..."):
        embedder = get_embedder()
        embedder.embed([f"warm-up sentence number {i} for the model" for i in range(256)])
        for i in range(10):  # the one-text path that tools and questions take
            embedder.embed([f"single warm-up sentence {i}"])
    return embedder


@contextmanager
def bench_namespace(engine, embedder) -> Iterator[Any]:
    """A root store at bench/<run id>; every namespace below it is dropped on the way out."""
    from memupdate.store import MemoryStore

    root = MemoryStore(engine, embedder, ("bench", uuid.uuid4().hex[:8]))
    try:
        yield root
    finally:
        with console.status("dropping the benchmark namespaces ..."):
            for namespace in root.list_namespaces(root.namespace):
                root.scoped(namespace).drop()
        if left := root.list_namespaces(root.namespace):
            console.print(f"[red]namespaces left behind: {left}[/red]")
        engine.dispose()


def server_line(engine, embedder) -> str:
    from memupdate.store import server_info

    info = server_info(engine)
    return f"PostgreSQL {info['server_version']}, pgvector {info['pgvector_version']}, {embedder.name}"


# -- memories and questions ----------------------------------------------------------------------


@dataclass(frozen=True)
class BenchQuestion:
    """What the QA proxy reads of a question (LoCoMo's `QAItem` has the same fields)."""

    question: str
    answer: str
    evidence: tuple[str, ...]
    index: int = -1  # `collateral_sample` tells questions apart by it
    category: int = 4  # LoCoMo's single-hop: the whole answer is one phrase


NAMES = ["Caroline", "Melanie", "Jon", "Gina", "Maria", "Nate", "Audrey", "Evan", "Joanna", "Tim"]
PLACES = ["Boston", "Lisbon", "Kyoto", "Denver", "Chicago", "Portland", "Seattle", "Dublin", "Prague"]
ACTIVITIES = ["hiking", "camping", "kayaking", "surfing", "skiing", "cycling", "fishing", "sailing"]
SKILLS = ["the violin", "the piano", "pottery", "Spanish", "photography", "chess", "knitting", "woodworking"]
JOBS = ["nurse", "teacher", "counselor", "chef", "baker", "photographer", "librarian", "firefighter"]
PETS = ["dog", "cat", "parrot", "rabbit", "hamster", "turtle"]
PET_NAMES = ["Oliver", "Luna", "Max", "Bailey", "Oscar", "Daisy", "Milo", "Coco"]

# (fact, question, answer): the answer's words are in the fact, so the QA proxy can find them.
TEMPLATES = [
    ("{name} adopted a {pet} named {pet_name} on {date}.", "What is the name of {name}'s {pet}?", "{pet_name}"),
    ("{name} went {activity} in {place} on {date}.", "Where did {name} go {activity} on {date}?", "{place}"),
    ("{name} started learning {skill} in {month} {year}.", "What did {name} start learning in {month} {year}?",
     "{skill}"),
    ("{name} has worked as a {job} in {place} since {year}.", "Since when has {name} worked as a {job}?", "{year}"),
]


def synthetic_facts(n: int, seed: int, names: Sequence[str] = NAMES) -> list[tuple[str, BenchQuestion, dict]]:
    """`n` LoCoMo-like (fact, question, metadata), every fact and question distinct (deterministic per seed)."""
    rng = random.Random(seed)
    facts: list[tuple[str, BenchQuestion, dict]] = []
    seen: set[str] = set()
    while len(facts) < n:
        fact, question, answer = rng.choice(TEMPLATES)
        day, month, year = rng.randint(1, 28), rng.randrange(12), rng.randint(2019, 2024)
        values = dict(
            name=rng.choice(names), place=rng.choice(PLACES), activity=rng.choice(ACTIVITIES),
            skill=rng.choice(SKILLS), job=rng.choice(JOBS), pet=rng.choice(PETS), pet_name=rng.choice(PET_NAMES),
            month=MONTHS[month], year=year, date=f"{day} {MONTHS[month]} {year}",
        )
        text, question = fact.format(**values), question.format(**values)
        if text in seen or question in seen:  # one fact per question, so every answer is unambiguous
            continue
        seen |= {text, question}
        dia_id = f"S{len(facts) // 10 + 1}:{len(facts) % 10 + 1}"
        metadata = {"dia_ids": [dia_id], "date": f"{year}-{month + 1:02d}-{day:02d}", "speaker": values["name"],
                    "source": "bench:synthetic"}
        facts.append((text, BenchQuestion(question, answer.format(**values), (dia_id,), len(facts)), metadata))
    return facts


def locomo_file() -> Path | None:
    """$MEMUPDATE_LOCOMO_FILE, else the dev copy beside the repository, when it exists."""
    from memupdate.rl.data.locomo import default_locomo_path

    for path in (default_locomo_path(), LOCOMO_DEV_FILE):
        if path is not None and path.is_file():
            return path
    return None


def memory_bank(n_memories: int, n_questions: int, seed: int = 0) -> tuple[list[Any], list[Any], str]:
    """(memories to write, questions, where they come from): conv-26's facts padded with synthetic ones
    about its speakers and its first answered questions when LoCoMo is found, else all synthetic."""
    from memupdate.rl.data.ingest import fact_metadata
    from memupdate.rl.data.locomo import load_locomo
    from memupdate.store import NewMemory

    def synthetic_memories(facts: list) -> list[NewMemory]:
        return [NewMemory(t, kind="episodic", metadata=m, key=f"s{i:04d}") for i, (t, _, m) in enumerate(facts)]

    path = locomo_file()
    if path is None:
        facts = synthetic_facts(n_memories, seed)
        questions = random.Random(seed).sample([q for _, q, _ in facts], n_questions)
        return synthetic_memories(facts), questions, f"synthetic: {n_memories} facts (no LoCoMo file found)"
    conversation = load_locomo(path, [CONVERSATION])[0]
    real = [
        NewMemory(fact.text, kind="episodic", metadata=fact_metadata(fact), key=f"f{i:04d}")
        for i, fact in enumerate(conversation.facts[:n_memories])
    ]
    pad = synthetic_facts(n_memories - len(real), seed, [conversation.speaker_a, conversation.speaker_b])
    questions = [q for q in conversation.qa if not q.is_adversarial and q.answer][:n_questions]
    source = f"LoCoMo {CONVERSATION} ({path.name}): {len(real)} facts + {len(pad)} synthetic ones about its speakers"
    return real + synthetic_memories(pad), questions, source


# -- numbers and the report ----------------------------------------------------------------------


@dataclass
class Meter:
    seconds: float = 0.0
    calls: int = 0


def timed(fn: Callable, meter: Meter) -> Callable:
    """`fn`, adding its time and calls to `meter`."""

    def wrapper(*args, **kwargs):
        start = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            meter.seconds += time.perf_counter() - start
            meter.calls += 1

    return wrapper


def percentile(values: Sequence[float], q: float) -> float:
    return float(np.percentile(np.asarray(values, dtype=np.float64), q))


def verdict(met: bool) -> str:
    return "[green]met[/green]" if met else "[red]missed[/red]"


def print_table(title: str, columns: Sequence[str], rows: Sequence[Sequence[str]], notes: Sequence[str], left: int = 1) -> None:
    """A rich table, the first `left` columns (labels) left-aligned, numbers right-aligned; then the notes."""
    table = Table(title=title)
    for i, column in enumerate(columns):
        table.add_column(column, justify="left" if i < left else "right", no_wrap=i < left)
    for row in rows:
        table.add_row(*row)
    console.print(table)
    for note in notes:
        console.print(note)


def write_json(path: str | None, summary: dict[str, Any]) -> None:
    if path:
        Path(path).write_text(json.dumps(summary, indent=2, default=str) + "\n")
        console.print(f"wrote {path}")


def plot_seconds(lines: dict[tuple[str, str], list[tuple[int, float]]], label: Callable[[str, str], str],
                 targets: Sequence[tuple[float, str, str]], out: str, *, xlabel: str, ylabel: str, title: str,
                 log: bool = False, legend_size: int = 8) -> None:
    """Seconds against size as a PNG: one line per (kind, path) of `lines` (the path "now" solid, any other
    dotted), each target (seconds, label, line style) a grey horizontal line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for (kind, path), points in sorted(lines.items()):
        xs, ys = zip(*sorted(points), strict=True)
        ax.plot(xs, ys, marker="o", linestyle="-" if path == "now" else ":", label=label(kind, path))
    for seconds, name, style in targets:
        ax.axhline(seconds, color="grey", linestyle=style, linewidth=0.8, label=name)
    if log:
        ax.set_xscale("log")
        ax.set_yscale("log")
    ax.set(xlabel=xlabel, ylabel=ylabel, title=title)
    ax.legend(fontsize=legend_size)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    console.print(f"wrote {out}")
