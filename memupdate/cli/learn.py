"""`memupdate rl learn`: a run learns one task by resumable stages (`rl.distill.learn.TASKS`). A chat student
learns to edit memory (on a CPU or a GPU): zero-shot -> distillation from a teacher -> RL iterations
(`--iterations 0`: distillation alone); or the relation judge learns by SFT, then GRPO (`--task relation`,
`memupdate judge learn` for short: the same options, those the relation task reads).

    memupdate rl learn --student smollm2 --locomo locomo10.json --train-conversations conv-26,conv-30 \
        --eval-conversations conv-47,conv-48 --out runs/smollm2      # rerun the same command to resume
    memupdate rl learn --task targeted ...                           # one question per episode (verl's setting)
    memupdate rl learn --task relation --data ../shared/data --out runs/relation [--sft-from DIR] [--ship]
"""

from __future__ import annotations

import inspect
import shutil
from collections.abc import Iterable
from dataclasses import Field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, get_type_hints

import typer

from memupdate.agent.policies import model_help, policy_help
from memupdate.cli.common import (
    DEV_DATA,
    LOCOMO_OPTION,
    URL_OPTION,
    console,
    err_console,
    load_conversations,
    open_store,
    user_errors,
)
from memupdate.errors import MemupdateError
from memupdate.rl.distill.config import RELATION_SHARED, LearnConfig, RelationConfig, TrainConfig, options

if TYPE_CHECKING:
    from memupdate.rl.distill.task import RunInputs

# What the run reads and writes; every other option is a field of LearnConfig or its relation section (`config_parameters`).
RUN_PARAMETERS = {
    "locomo": (Path | None, LOCOMO_OPTION),
    "factconsolidation": (Path | None, typer.Option(
        None, "--factconsolidation", help="MemoryAgentBench FactConsolidation rows (JSONL): a larger context's facts outside the "
        "contexts nested in it train; each nested context (6k in 32k) is a held-out bank, compacted whole. Compaction task only.")),
    "train_conversations": (str | None, typer.Option(None, "--train-conversations", help="Chat tasks: comma-separated ids trained on, e.g. conv-26,conv-30.")),
    "eval_conversations": (str | None, typer.Option(None, "--eval-conversations", help="Chat tasks: held-out ids training never touches (two or more).")),
    "data": (Path, typer.Option(DEV_DATA, "--data", help="The relation task: the development data folder (locomo/, "
                                "memoryagentbench/, natural-updates/).")),
    "out": (Path, typer.Option(..., "--out", help="Run folder (rerun the same command to resume): stages.json, checkpoints, metrics.json, "
                               "learning_curve.png.")),
    "url": (str | None, URL_OPTION),
    "ship": (bool, typer.Option(False, "--ship", help="The relation task: copy the chosen judge's weights into judge/weights/ (the default judge).")),
}
RELATION_INPUTS = ("data", "out", "url", "ship")  # the run parameters `judge learn` takes
# Help read from the registries when the command is built, after the field's own.
REGISTRY_HELP = {"teacher": policy_help, "teacher_model": model_help}
FINE_TUNING = {f.name for f in fields(TrainConfig)}
RELATION = {f.name for f in options(RelationConfig)}


def config_option(config_field: Field) -> typer.models.OptionInfo:
    """The option of a `LearnConfig` (or `RelationConfig`) field: `--name-with-dashes` (a switch
    `--name/--no-name`), the field's default (a tuple of rates as comma-separated text), help and bounds."""
    value = config_field.default
    if isinstance(value, tuple):
        value = ",".join(f"{v:g}" for v in value)
    flag = config_field.name.replace("_", "-")
    metadata = dict(config_field.metadata)
    help_text = metadata.pop("help")
    if config_field.name in REGISTRY_HELP:
        help_text = f"{help_text.rstrip('.')}: {REGISTRY_HELP[config_field.name]()}."
    panel = "Fine-tuning" if config_field.name in FINE_TUNING else "The relation task" if config_field.name in RELATION else "The run"
    decls = f"--{flag}/--no-{flag}" if isinstance(value, bool) else f"--{flag}"
    return typer.Option(value, decls, help=help_text, rich_help_panel=panel, **metadata)


def config_parameters(names: set[str] | None = None) -> list[inspect.Parameter]:
    """One keyword parameter per option of `LearnConfig` and of its relation section (`config.options()`; of
    `names` only, if given), typed as the command line reads it (rates as text): the run's own first,
    then the fine-tuning's, then the relation task's."""
    types = get_type_hints(LearnConfig, localns={"RewardConfig": object}) | get_type_hints(RelationConfig)  # the reward is no option
    chosen = [f for f in options() + options(RelationConfig) if names is None or f.name in names]
    return [
        inspect.Parameter(
            f.name, inspect.Parameter.KEYWORD_ONLY, default=config_option(f),
            annotation=str if isinstance(f.default, tuple) else types[f.name],
        )
        for f in sorted(chosen, key=lambda f: (f.name in FINE_TUNING) + 2 * (f.name in RELATION))
    ]


def run_parameters(names: Iterable[str] = tuple(RUN_PARAMETERS)) -> list[inspect.Parameter]:
    """One keyword parameter per run parameter of `names` (what the run reads and writes)."""
    return [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=RUN_PARAMETERS[name][1], annotation=RUN_PARAMETERS[name][0])
            for name in names]


@user_errors
def learn_command(**given: Any) -> None:
    """Learn a task by resumable stages: a chat student (zero-shot -> distillation from a teacher -> RL
    iterations; held-out reward per stage), or the relation judge (--task relation: SFT -> GRPO)."""
    run_learning(given)


# Typer reads the options from the signature, as HfArgumentParser reads a dataclass's fields.
learn_command.__signature__ = inspect.Signature([*run_parameters(), *config_parameters()])


def relation_signature() -> inspect.Signature:
    """`memupdate judge learn`'s options: those of `rl learn` the relation task reads."""
    return inspect.Signature([*run_parameters(RELATION_INPUTS), *config_parameters(set(RELATION_SHARED) | RELATION)])


def run_learning(given: dict[str, Any]) -> None:
    """Learn the task of the options `given` (a command's; those it lacks keep their defaults) and print
    what it reached; with --ship, ship the relation judge it chose."""
    from transformers.utils import logging as transformers_logging

    from memupdate.rl.distill.learn import learn

    transformers_logging.disable_progress_bar()  # our own bars say what is happening; its per-load bars are noise
    config = config_from(given)
    ship = given.get("ship", False)
    if ship and config.task != "relation":
        raise MemupdateError(f"--ship copies the relation judge's weights into judge/weights/: it belongs to --task relation, not {config.task}")
    inputs = run_inputs(config, given)
    out = given["out"]
    store = open_store(given.get("url"))
    with _stage_bars() as report:
        metrics = learn(store, config, out, inputs, progress=report)
    if config.task == "relation":
        _print_relation_summary(metrics, out)
        if ship:
            _ship(Path(metrics["final_checkpoint"]))
    else:
        _print_summary(metrics, out)


def config_from(given: dict[str, Any]) -> LearnConfig:
    """The `LearnConfig` of the options `given` (rates as text); a field not given keeps its default."""
    settings = {f.name: given[f.name] for f in options() if f.name in given}
    settings |= {name: _rates(settings[name], name) for name in ("sweep", "rl_sweep") if name in settings}
    relation = RelationConfig(**{f.name: given[f.name] for f in options(RelationConfig) if f.name in given})
    return LearnConfig(**settings, relation=relation)


def run_inputs(config: LearnConfig, given: dict[str, Any]) -> RunInputs:
    """What the run reads: the relation task's data folder, or a chat task's conversations (LoCoMo's, and
    with --factconsolidation its banks)."""
    from memupdate.rl.distill.task import RunInputs

    if given.get("factconsolidation") is not None and config.task != "compaction":
        raise MemupdateError("--factconsolidation trains the compaction task: add --task compaction")
    if config.task == "relation":
        given_chat = [f"--{n.replace('_', '-')}" for n in ("locomo", "train_conversations", "eval_conversations") if given.get(n)]
        if given_chat:
            raise MemupdateError(f"{', '.join(given_chat)}: the relation task reads --data, not conversations; drop them")
        return RunInputs(data=given["data"])
    missing = [f"--{n.replace('_', '-')}" for n in ("train_conversations", "eval_conversations") if not given.get(n)]
    if missing:
        raise MemupdateError(f"--task {config.task} needs {' and '.join(missing)}: the conversation ids trained on and held out, "
                             "e.g. --train-conversations conv-26,conv-30 --eval-conversations conv-47,conv-48")
    train = load_conversations(given["locomo"], given["train_conversations"])
    held_out = load_conversations(given["locomo"], given["eval_conversations"])
    if given.get("factconsolidation") is not None:
        from memupdate.rl.data.factconsolidation import fact_banks, load_factconsolidation

        fact_train, fact_held_out = fact_banks(load_factconsolidation(given["factconsolidation"]))
        train, held_out = [*train, *fact_train], [*held_out, *fact_held_out]
    return RunInputs(train, held_out)


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


def _print_relation_summary(metrics: dict, out: Path) -> None:
    for part, row in metrics["rewards"].items():
        console.print(f"{part}: {row['units']} units, {row['informative']} whose decisions earn different rewards "
                      f"(best decision's mean reward {row['best_decision_reward']:+.5f})", highlight=False)
    rl = metrics["rl"]
    for point in rl["curve"]:
        line = f"step {point['step']}: recipe reward {point['recipe_reward']:+.5f}, train {point['train_reward']:+.5f}"
        if "kl" in point:
            line += f", kl {point['kl']}, dropped {point['dropped']}/{point['drawn']}"
        console.print(line, highlight=False)
    console.print(f"chosen step {rl['chosen_step']} (0: the SFT judge); dropped groups {rl['dropped_groups']}/{rl['drawn_groups']}; "
                  f"checkpoint {rl['checkpoint']}; metrics.json and learning_curve.png in {out}", highlight=False)


def _ship(checkpoint: Path) -> None:
    """Copy the judge at `checkpoint` into judge/weights/: the default judge from now on."""
    from memupdate.judge.local import SHIPPED_CARD, SHIPPED_DELTA

    shutil.copy(checkpoint / "relation-judge.safetensors", SHIPPED_DELTA)
    shutil.copy(checkpoint / "relation-judge.json", SHIPPED_CARD)
    console.print(f"shipped: {SHIPPED_DELTA}", highlight=False)


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
