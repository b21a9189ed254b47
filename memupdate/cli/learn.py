"""`memupdate rl learn`: a student learns to edit memory (on a CPU or a GPU), by resumable stages:
zero-shot -> distillation from a teacher -> RL iterations (`--iterations 0`: distillation alone).

    memupdate rl learn --student smollm2 --locomo locomo10.json --train-conversations conv-26,conv-30 \
        --eval-conversations conv-47,conv-48 --out runs/smollm2      # rerun the same command to resume
    memupdate rl learn --task targeted ...                           # one question per episode (verl's setting)
"""

from __future__ import annotations

import inspect
from dataclasses import Field, fields
from pathlib import Path
from typing import Any, get_type_hints

import typer

from memupdate.agent.policies import model_help, policy_help
from memupdate.cli.common import (
    LOCOMO_OPTION,
    URL_OPTION,
    console,
    err_console,
    load_conversations,
    open_store,
    user_errors,
)
from memupdate.errors import MemupdateError
from memupdate.rl.distill.config import LearnConfig, TrainConfig, options

# What the run reads and writes; every other option is a field of LearnConfig (`config_parameters`).
RUN_PARAMETERS = {
    "locomo": (Path | None, LOCOMO_OPTION),
    "factconsolidation": (Path | None, typer.Option(
        None, "--factconsolidation", help="MemoryAgentBench FactConsolidation rows (JSONL): a larger context's facts outside the "
        "contexts nested in it train; each nested context (6k in 32k) is a held-out bank, compacted whole. Compaction task only.")),
    "train_conversations": (str, typer.Option(..., "--train-conversations", help="Comma-separated ids trained on, e.g. conv-26,conv-30.")),
    "eval_conversations": (str, typer.Option(..., "--eval-conversations", help="Held-out ids training never touches (two or more).")),
    "out": (Path, typer.Option(..., "--out", help="Run folder: stages.json, trajectories, checkpoints, metrics.json, learning_curve.png.")),
    "url": (str | None, URL_OPTION),
}
# Help read from the registries when the command is built, after the field's own.
REGISTRY_HELP = {"teacher": policy_help, "teacher_model": model_help}
FINE_TUNING = {f.name for f in fields(TrainConfig)}


def config_option(config_field: Field) -> typer.models.OptionInfo:
    """The option of a `LearnConfig` field: `--name-with-dashes` (a switch `--name/--no-name`), the field's
    default (a tuple of rates as comma-separated text), help and bounds."""
    value = config_field.default
    if isinstance(value, tuple):
        value = ",".join(f"{v:g}" for v in value)
    flag = config_field.name.replace("_", "-")
    metadata = dict(config_field.metadata)
    help_text = metadata.pop("help")
    if config_field.name in REGISTRY_HELP:
        help_text = f"{help_text.rstrip('.')}: {REGISTRY_HELP[config_field.name]()}."
    panel = "Fine-tuning" if config_field.name in FINE_TUNING else "The run"
    decls = f"--{flag}/--no-{flag}" if isinstance(value, bool) else f"--{flag}"
    return typer.Option(value, decls, help=help_text, rich_help_panel=panel, **metadata)


def config_parameters() -> list[inspect.Parameter]:
    """One keyword parameter per option of `LearnConfig` (`config.options()`), typed as the command line
    reads it (rates as text): the run's own first, then the fine-tuning's."""
    types = get_type_hints(LearnConfig, localns={"RewardConfig": object})  # the reward is no option
    return [
        inspect.Parameter(
            f.name, inspect.Parameter.KEYWORD_ONLY, default=config_option(f),
            annotation=str if isinstance(f.default, tuple) else types[f.name],
        )
        for f in sorted(options(), key=lambda f: f.name in FINE_TUNING)
    ]


@user_errors
def learn_command(**given: Any) -> None:
    """Zero-shot -> distillation from a teacher -> RL iterations; held-out reward per stage."""
    from transformers.utils import logging as transformers_logging

    from memupdate.rl.distill.learn import learn

    transformers_logging.disable_progress_bar()  # our own bars say what is happening; its per-load bars are noise
    settings = {f.name: given[f.name] for f in options()}
    if settings["task"] == "relation":  # before any data is read: its own command trains the relation judge
        from memupdate.rl.distill.learn import make_task

        make_task(LearnConfig(task="relation"), None)
    config = LearnConfig(**settings | {name: _rates(settings[name], name) for name in ("sweep", "rl_sweep")})
    train = load_conversations(given["locomo"], given["train_conversations"])
    held_out = load_conversations(given["locomo"], given["eval_conversations"])
    if given["factconsolidation"] is not None:
        from memupdate.rl.data.factconsolidation import fact_banks, load_factconsolidation

        if config.task != "compaction":
            raise MemupdateError("--factconsolidation trains the compaction task: add --task compaction")
        fact_train, fact_held_out = fact_banks(load_factconsolidation(given["factconsolidation"]))
        train, held_out = [*train, *fact_train], [*held_out, *fact_held_out]
    out = given["out"]
    store = open_store(given["url"])
    with _stage_bars() as report:
        metrics = learn(store, train, held_out, config, out, progress=report)
    _print_summary(metrics, out)


# Typer reads the options from the signature, as HfArgumentParser reads a dataclass's fields.
learn_command.__signature__ = inspect.Signature([
    *(inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=option, annotation=kind)
      for name, (kind, option) in RUN_PARAMETERS.items()),
    *config_parameters(),
])


def _rates(text: str, name: str) -> tuple[float, ...]:
    """`--sweep`'s or `--rl-sweep`'s comma-separated learning rates, e.g. 3e-4,1e-3 (empty: none)."""
    try:
        return tuple(float(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise MemupdateError(f"--{name.replace('_', '-')} {text!r}: give learning rates separated by commas, e.g. 1e-4,3e-4") from None


def _print_summary(metrics: dict, out: Path) -> None:
    for name, row in metrics["evaluations"].items():
        if name == "rl_minus_sft":
            console.print(f"{'RL - SFT':>10}: {row['mean']:+.4f} [{row['low']:+.4f}, {row['high']:+.4f}] (paired, per question)", highlight=False)
            continue
        r = row["reward"]
        line = f"{name:>10}: reward {r['mean']:+.4f} [{r['low']:+.4f}, {r['high']:+.4f}]"
        if "qa_delta" in row:  # compaction: each held-out question's QA proxy change, the memories, lost sources
            q = row["qa_delta"]
            line += (f"  QA {q['mean']:+.4f} [{q['low']:+.4f}, {q['high']:+.4f}] (better/worse {row['better_worse'][0]}/"
                     f"{row['better_worse'][1]}, of heuristic {row['share_of_heuristic']})  memories {row['memories'][0]} -> "
                     f"{row['memories'][1]}  lost/100 {row['lost_sources_per_100']}")
        console.print(f"{line}  well-formed {row['well_formed_calls']}  ran {row['calls_ran']}  share of teacher {row['share_of_teacher']}",
                      highlight=False, soft_wrap=True)
    console.print(f"metrics.json and learning_curve.png in {out}; the student: {metrics['final_checkpoint']}", highlight=False)


class _stage_bars:  # lower-case: used like a function, as a context manager
    """One rich progress bar per stage (rollouts, fine-tune, evaluation)."""

    def __enter__(self):
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        self.bars = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                             TimeRemainingColumn(), console=err_console)
        self.tasks: dict[str, int] = {}
        self.bars.__enter__()
        return self.update

    def update(self, stage: str, done: int, total: int) -> None:
        if stage not in self.tasks:
            self.tasks[stage] = self.bars.add_task(stage, total=total)
        self.bars.update(self.tasks[stage], completed=done, total=total)

    def __exit__(self, *exc) -> None:
        self.bars.__exit__(*exc)
