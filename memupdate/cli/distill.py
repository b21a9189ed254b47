"""`memupdate rl distill`: offline RL distillation of a teacher into a student checkpoint (runs on a CPU)."""

from __future__ import annotations

from pathlib import Path

import typer

from memupdate.cli.common import (
    CONVERSATIONS_OPTION,
    LOCOMO_OPTION,
    URL_OPTION,
    console,
    err_console,
    load_conversations,
    open_store,
    user_errors,
)
from memupdate.store.errors import MemupdateError


@user_errors
def distill_command(
    locomo: Path | None = LOCOMO_OPTION,
    teacher: str = typer.Option("heuristic", "--teacher", help="heuristic | openai:MODEL (with --base-url) | hf:DIR"),
    student: str = typer.Option("tiny", "--student", help="tiny (built here, nothing downloaded) | a HF checkpoint directory"),
    group_size: int = typer.Option(4, "--group-size", help="Rollouts per training question (GRPO group)."),
    iterations: int = typer.Option(1, "--iterations", help="The student of iteration k rolls out for k + 1."),
    out: Path = typer.Option(..., "--out", help="Output directory: checkpoint, trajectories.jsonl, metrics; rerun to resume."),
    conversations: str | None = CONVERSATIONS_OPTION,
    eval_conversations: str | None = typer.Option(
        None, "--eval-conversations", help="Held-back conversations (default: the file's test split, else the training ones' unused questions)."
    ),
    max_questions: int | None = typer.Option(8, "--max-questions", help="Training questions per conversation."),
    eval_questions: int = typer.Option(8, "--eval-questions", help="Held-back questions per evaluation conversation (0: no evaluation)."),
    mode: str = typer.Option("targeted", "--mode", help="targeted (question visible) | blind"),
    explore: float = typer.Option(0.3, "--explore", help="Heuristic teacher: share of candidate edits dropped/shuffled per rollout."),
    temperature: float = typer.Option(0.8, "--temperature", help="Sampling temperature of LLM teachers and of the student's rollouts."),
    base_url: str | None = typer.Option(None, "--base-url", help="openai teacher: the endpoint, e.g. http://localhost:30000/v1."),
    api_key: str | None = typer.Option(None, "--api-key", help="openai teacher: the key (default $OPENAI_API_KEY)."),
    weighting: str = typer.Option("positive", "--weighting", help="positive (rejection sampling) | advantage (weighted by it)."),
    epochs: int = typer.Option(3, "--epochs"),
    learning_rate: float | None = typer.Option(None, "--learning-rate", help="Default 1e-3 for tiny, 1e-5 for a pretrained student."),
    batch_size: int = typer.Option(4, "--batch-size", help="Trajectories per optimiser step (accumulated one at a time)."),
    max_length: int = typer.Option(4096, "--max-length", help="Tokens per trajectory; longer ones are cut (memory)."),
    max_new_tokens: int = typer.Option(384, "--max-new-tokens", help="Per student turn, when it rolls out or is evaluated."),
    lora_rank: int = typer.Option(0, "--lora-rank", help="> 0: train LoRA adapters (peft), merged on save."),
    gradient_checkpointing: bool = typer.Option(False, "--gradient-checkpointing", help="Less memory, ~30% slower."),
    tiny_hidden_size: int = typer.Option(128, "--tiny-hidden-size", help="--student tiny: width of the model."),
    tiny_layers: int = typer.Option(4, "--tiny-layers", help="--student tiny: transformer layers."),
    max_turns: int | None = typer.Option(None, "--max-turns", help="Assistant turns per episode (default 15)."),
    max_operations: int | None = typer.Option(None, "--max-operations", help="Tool calls per episode (default 30)."),
    seed: int = typer.Option(0, "--seed"),
    url: str | None = URL_OPTION,
) -> None:
    """Distill a teacher into a student: rollout groups -> rewards -> GRPO advantages -> fine-tune -> evaluate."""
    from transformers.utils import logging as transformers_logging

    from memupdate.rl.data.locomo import split_conversations
    from memupdate.rl.distill.run import DistillConfig, distill

    transformers_logging.disable_progress_bar()  # our own bars say what is happening; its per-load bars are noise

    if mode not in ("targeted", "blind"):
        raise MemupdateError(f"--mode {mode!r} is not targeted or blind")
    every = load_conversations(locomo, None)
    train = load_conversations(locomo, conversations) if conversations else split_conversations(every)[0]
    if eval_conversations:
        held_back = load_conversations(locomo, eval_conversations)
    else:
        chosen = {c.sample_id for c in train}
        held_back = [c for c in split_conversations(every)[1] if c.sample_id not in chosen] or train
    config = DistillConfig(
        teacher=teacher, student=student, group_size=group_size, iterations=iterations, mode=mode,  # type: ignore[arg-type]
        max_questions=max_questions, eval_questions=eval_questions, explore=explore, temperature=temperature,
        base_url=base_url, api_key=api_key, weighting=weighting, epochs=epochs, learning_rate=learning_rate,  # type: ignore[arg-type]
        batch_size=batch_size, max_length=max_length, max_new_tokens=max_new_tokens, lora_rank=lora_rank,
        gradient_checkpointing=gradient_checkpointing, tiny_hidden_size=tiny_hidden_size, tiny_layers=tiny_layers,
        max_turns=max_turns, max_operations=max_operations, seed=seed,
    )
    store = open_store(url)
    console.print(
        f"training on {', '.join(c.sample_id for c in train)}; held back: {', '.join(c.sample_id for c in held_back)}"
    )
    with _stage_bars() as report:
        metrics = distill(store, train, held_back, config, out, progress=report)
    _print_summary(metrics, out)


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


def _print_summary(metrics: dict, out: Path) -> None:
    def line(name: str, summary: dict | None) -> str:
        if not summary:
            return f"{name:>12}: -"
        valid = summary["valid_call_share"]
        ok = summary["ok_call_share"]
        return (
            f"{name:>12}: reward {summary['reward_mean']:+.4f}  well-formed calls "
            f"{'-' if valid is None else f'{valid:.0%}'}  ran ok {'-' if ok is None else f'{ok:.0%}'}  "
            f"calls/episode {summary['calls_per_episode']:.1f}  tools {summary['tool_calls'] or '-'}"
        )

    for row in metrics["iterations"]:
        console.print(
            f"iteration {row['iteration']}: {row['groups']} groups ({row['zero_variance_groups']} zero-variance), "
            f"{row['positive']}/{row['trajectories']} positive; loss {row['training']['loss_first']:.3f} -> "
            f"{row['training']['loss_last']:.3f}; {row['seconds']} s"
        )
        if "student" in row:
            console.print(line("student", row["student"]), highlight=False)
    console.print(line("teacher", metrics.get("teacher")), highlight=False)
    console.print(line("no edits", metrics.get("no_edits")), highlight=False)
    console.print(f"checkpoint, metrics.json, distill.png and trajectories.jsonl in {out} ({metrics['seconds']} s)")
