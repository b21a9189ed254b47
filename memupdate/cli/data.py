"""`memupdate data`: load LoCoMo, print its statistics, and write verl's parquet files."""

from __future__ import annotations

import json
from pathlib import Path

import typer
from rich.table import Table

from memupdate.cli.common import (
    CONVERSATIONS_OPTION,
    LOCOMO_OPTION,
    URL_OPTION,
    console,
    load_conversations,
    open_store,
    progress_bar,
    user_errors,
)

app = typer.Typer(help="Load LoCoMo, print its statistics, and write verl's parquet files.", no_args_is_help=True)



@app.command("stats")
@user_errors
def data_stats(
    locomo: Path | None = LOCOMO_OPTION,
    conversations: str | None = CONVERSATIONS_OPTION,
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of tables."),
) -> None:
    """Count conversations, sessions, turns, facts and QA per category."""
    from memupdate.rl.data.locomo import locomo_stats

    stats = locomo_stats(load_conversations(locomo, conversations))
    if as_json:
        console.print_json(json.dumps(stats))
        return
    table = Table("conversation", "sessions", "turns", "facts", "qa")
    for row in stats["per_conversation"]:
        table.add_row(row["sample_id"], *(str(row[k]) for k in ("sessions", "turns", "facts", "qa")))
    table.add_row("all", *(f"[bold]{stats[k]}[/]" for k in ("sessions", "turns", "facts", "qa")))
    console.print(table)
    console.print("QA per category: " + ", ".join(f"{k} {v}" for k, v in stats["qa_by_category"].items()))


@app.command("load")
@user_errors
def data_load(
    locomo: Path | None = LOCOMO_OPTION,
    conversations: str | None = CONVERSATIONS_OPTION,
    url: str | None = URL_OPTION,
) -> None:
    """Put each conversation's observation facts into its base namespace ("locomo", id). Idempotent."""
    from memupdate.rl.data.ingest import ingest

    chosen = load_conversations(locomo, conversations)
    store = open_store(url)
    with progress_bar("loading") as bar:
        task = bar.add_task("load", total=len(chosen))
        for conversation in chosen:
            report = ingest(store, conversation)
            bar.advance(task)
            console.print(f"{report.summary()}; {report.base.count()} memories", highlight=False)


@app.command("preprocess")
@user_errors
def data_preprocess(
    out: Path = typer.Option(..., "--out", help="Folder for train.parquet and test.parquet."),
    locomo: Path | None = LOCOMO_OPTION,
    conversations: str | None = CONVERSATIONS_OPTION,
    n_train: int = typer.Option(7, "--n-train", help="The first N conversations train, the rest test."),
    include_adversarial: bool = typer.Option(False, "--include-adversarial", help="Keep category 5 items."),
    task: str = typer.Option(
        "targeted", "--task",
        help="targeted: one row per QA pair (configs/locomo_memory_grpo.yaml). compaction: one row per "
        "neighbourhood of a bank, edited blind and scored on every question of the bank "
        "(configs/locomo_memory_compaction_grpo.yaml); loads the banks into the database. relation: one row per "
        "candidate pair of a `memupdate judge learn` run, its rewards in the row (configs/relation_grpo.yaml); "
        "needs --rewards and --data, no database.",
    ),
    factconsolidation: Path | None = typer.Option(
        None, "--factconsolidation",
        help="compaction: also MemoryAgentBench's FactConsolidation JSONL. Contexts nested in a larger one (the 6k "
        "in the 32k) are evaluation banks and write no row; the larger one's other facts train.",
    ),
    size: int | None = typer.Option(
        None, "--size", min=2, help="compaction: memories per neighbourhood (default: the offline learner's, 10)."
    ),
    rewards: Path | None = typer.Option(
        None, "--rewards", help="relation: the run's reward table (`memupdate judge learn --out DIR` writes DIR/rewards.jsonl)."
    ),
    data: Path | None = typer.Option(
        None, "--data", help="relation: the data folder the run read (its pairs' texts and times are rebuilt from it)."
    ),
    url: str | None = URL_OPTION,
) -> None:
    """Write verl's RL dataset: one row per QA pair (unique trajectory ids), per neighbourhood of a bank,
    or per candidate pair of memories (the relation task)."""
    from memupdate.errors import MemupdateError
    from memupdate.rl.data.preprocess import preprocess

    if task == "relation":
        _preprocess_relation(rewards, data, out)
        return
    if rewards is not None or data is not None:
        raise MemupdateError("--rewards and --data belong to --task relation; add it, or drop them")
    chosen = load_conversations(locomo, conversations)
    if task == "targeted":
        if factconsolidation is not None or size is not None:
            raise MemupdateError("--factconsolidation and --size belong to --task compaction; add it, or drop them")
        counts = preprocess(chosen, out, n_train=n_train, include_adversarial=include_adversarial)
    elif task == "compaction":
        from memupdate.rl.data.factconsolidation import load_factconsolidation
        from memupdate.rl.distill.compaction import preprocess_compaction

        sets = load_factconsolidation(factconsolidation) if factconsolidation is not None else []
        store = open_store(url)
        with progress_bar("banks") as bar:
            job = bar.add_task("loading banks and cutting neighbourhoods", total=None)
            counts = preprocess_compaction(
                store, chosen, out, factconsolidation=sets, n_train=n_train, size=size,
                include_adversarial=include_adversarial, progress=lambda _: bar.advance(job),
            )
    else:
        raise MemupdateError(f"--task {task!r}: choose targeted, compaction or relation")
    console.print(f"wrote {out}/train.parquet ({counts['train']} rows) and {out}/test.parquet ({counts['test']} rows)", soft_wrap=True)


def _preprocess_relation(rewards: Path | None, data: Path | None, out: Path) -> None:
    from memupdate.errors import MemupdateError
    from memupdate.rl.data.relation_rows import preprocess_relation
    from memupdate.rl.distill.relation import banks_of, run_config

    if rewards is None or data is None:
        raise MemupdateError(
            "--task relation needs --rewards (a run's rewards.jsonl, from `memupdate judge learn`) and --data (the folder that run read)"
        )
    if not data.is_dir():
        raise MemupdateError(f"--data {data} is not a folder: give the data folder the run read (e.g. ../shared/data)")
    with console.status(f"rebuilding the candidate pairs of {data} ..."):
        banks = banks_of(data, run_config(rewards.parent))
    export = preprocess_relation(rewards, banks, out)
    counts = export.counts
    console.print(
        f"wrote {out}/train.parquet ({counts['train']} rows) and {out}/test.parquet ({counts['test']} rows); "
        f"left out {export.uninformative} units whose decisions all earn the same reward"
        + (f"; {export.unmatched} units of {rewards} match no pair of {data}" if export.unmatched else ""),
        soft_wrap=True,
    )
