"""Offline RL distillation: teacher rollout groups -> rewards -> GRPO advantages -> fine-tuned student.

    from memupdate.rl.distill.run import DistillConfig, distill
    metrics = distill(store, train_conversations, eval_conversations, DistillConfig(teacher="heuristic",
                      student="tiny", group_size=4, iterations=1), out="runs/tiny")
    # runs/tiny: a Hugging Face checkpoint that `make_policy("hf", model=...)` and verl load unchanged

One iteration:
1. Rollout groups. For each training question the base bank is forked `group_size` times and the
   teacher edits each fork through the same LangGraph graph and tools as any policy, made stochastic
   (the heuristic's seeded `explore`, an LLM's sampling temperature). Every trajectory (messages as the
   student's chat template takes them, tool calls with their results, the reward and its parts) is
   appended to `trajectories.jsonl` as it finishes; a rerun skips the ones already there (resume).
2. Rewards and advantages. `compute_reward` on the target question plus its collateral sample; then
   GRPO's group-relative advantage (`advantages.group_advantages`, verl's own function when installed).
   Groups whose rewards are all equal carry no signal and are counted.
3. Student update. Trajectories with a positive advantage (rejection-sampling fine-tuning; or
   `weighting="advantage"`: weighted by it) are rendered with the student's chat template and trained
   on with the loss on assistant tokens only (`distill_render`), a plain PyTorch loop.
4. Evaluation. The student (greedy) edits held-back questions, scored with the same reward, beside the
   teacher and no edits (measured once).
With `iterations > 1` the student of iteration k rolls out the groups of k + 1, each group joined by
the original teacher's trajectories of the same question (iteration 1), so the student's trajectories
are judged against the teacher's and good teacher trajectories stay in the training set.

Limits (memory): training runs one trajectory at a time (`batch_size` trajectories per optimiser step
by gradient accumulation) cut to `max_length` tokens, and logits are computed only on the trained
tokens; peak memory is about the model, AdamW's two moments and one sequence's activations.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from memupdate.rl.data.locomo import Conversation
from memupdate.rl.distill.advantages import group_advantages, zero_variance_groups
from memupdate.rl.distill.rollouts import (
    Progress,
    Prompt,
    Teacher,
    TrajectoryLog,
    collect,
    held_back_prompts,
    make_teacher,
    summarize,
    training_prompts,
)
from memupdate.rl.evaluate import Mode
from memupdate.rl.scoring.reward import RewardConfig
from memupdate.rl.scoring.summaries import mean
from memupdate.store import MemoryStore, MemupdateError

__all__ = ["DistillConfig", "Prompt", "Teacher", "TrajectoryLog", "collect", "distill", "make_teacher", "training_prompts"]
TRAJECTORIES = "trajectories.jsonl"
EVALUATIONS = "eval.jsonl"
RUN_INFO = "memupdate.json"


@dataclass(frozen=True)
class DistillConfig:
    teacher: str = "heuristic"  # heuristic | openai:MODEL | hf:DIR
    student: str = "tiny"  # tiny | a Hugging Face checkpoint directory
    group_size: int = 4
    iterations: int = 1
    mode: Mode = "targeted"
    max_questions: int | None = 8  # training questions per training conversation
    eval_questions: int = 8  # held-back questions per evaluation conversation
    explore: float = 0.3  # heuristic teacher: share of candidate edits left out / shuffled per rollout
    temperature: float = 0.8  # LLM teachers and the student when it rolls out
    base_url: str | None = None  # openai teacher
    api_key: str | None = None
    weighting: Literal["positive", "advantage"] = "positive"
    epochs: int = 3
    learning_rate: float | None = None  # default: 1e-3 for a tiny student, 1e-5 for a pretrained one
    batch_size: int = 4  # trajectories per optimiser step (gradient accumulation, one sequence at a time)
    max_length: int = 4096  # tokens per trajectory; longer ones are cut (their start is kept)
    max_new_tokens: int = 384  # per student turn
    lora_rank: int = 0  # > 0: train LoRA adapters (peft), merged into the saved checkpoint
    gradient_checkpointing: bool = False
    tiny_vocab_size: int = 4000
    tiny_hidden_size: int = 128
    tiny_layers: int = 4
    max_turns: int | None = None
    max_operations: int | None = None
    seed: int = 0
    reward: RewardConfig = field(default_factory=RewardConfig)


# -- advantages ---------------------------------------------------------------------------------------


def assign_advantages(records: Sequence[dict[str, Any]]) -> tuple[list[float], dict[str, Any]]:
    """Each record's group-relative advantage (grouped by question), and the counts a report needs."""
    rewards = [r["reward"] for r in records]
    groups = [r["group"] for r in records]
    advantages = [float(a) for a in group_advantages(rewards, groups)] if records else []
    flat = zero_variance_groups(rewards, groups)
    return advantages, {
        "groups": len(set(groups)),
        "zero_variance_groups": len(flat),
        "trajectories": len(records),
        "positive": sum(a > 0 for a in advantages),
        "reward_mean": mean(rewards),
    }


def training_weights(advantages: Sequence[float], weighting: str) -> list[float]:
    """Rejection sampling keeps positive advantages with weight 1; `advantage` weights them by it (mean 1).
    Negative advantages are never trained on: a negative weight on the likelihood has no floor."""
    if weighting == "positive":
        return [1.0 if a > 0 else 0.0 for a in advantages]
    if weighting == "advantage":
        positive = [a for a in advantages if a > 0]
        scale = len(positive) / sum(positive) if positive else 0.0
        return [a * scale if a > 0 else 0.0 for a in advantages]
    raise MemupdateError(f"--weighting {weighting!r} is not positive or advantage")


# -- the student ------------------------------------------------------------------------------------


def check_student(path: str) -> None:
    """A clear error, before any rollout, when `path` is not a checkpoint a student can start from."""
    from memupdate.agent.policies.hf import checkpoint_tokenizer

    try:
        checkpoint_tokenizer(path)
    except ValueError as exc:
        raise MemupdateError(f"--student {path!r} (give `tiny` or a checkpoint folder): {exc}") from None


def build_tiny_student(path: Path, records: Sequence[dict[str, Any]], config: DistillConfig) -> Path:
    """A tiny Qwen2 whose tokenizer is trained on the rendered trajectories (nothing downloaded)."""
    from memupdate.rl.distill.render import render_transcript
    from memupdate.rl.distill.tiny_student import build_tiny_checkpoint, train_tokenizer

    renderer = train_tokenizer()  # only its chat template is used, to render the texts the real one learns from
    texts = [render_transcript(renderer, r["messages"]) for r in records if r["messages"]]
    return build_tiny_checkpoint(
        path, config.tiny_vocab_size, texts=texts, hidden_size=config.tiny_hidden_size, layers=config.tiny_layers,
        max_positions=max(config.max_length, 4096),
    )


def finetune(
    start: Path, out: Path, records: Sequence[dict[str, Any]], weights: Sequence[float], config: DistillConfig, *, tiny: bool,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """Fine-tune every weight of the checkpoint at `start` (or LoRA adapters) on the weighted records (the loop
    is `finetune.finetune`); save to `out`."""
    from memupdate.rl.distill.finetune import TrainConfig
    from memupdate.rl.distill.finetune import finetune as train

    train_config = TrainConfig(
        learning_rate=config.learning_rate or (1e-3 if tiny else 1e-5), epochs=config.epochs, batch_size=config.batch_size,
        top_layers=0, max_length=config.max_length, warmup_steps=0, seed=config.seed, lora_rank=config.lora_rank,
        gradient_checkpointing=config.gradient_checkpointing,
    )
    examples = [(r["messages"], w) for r, w in zip(records, weights, strict=True) if r["messages"]]
    return train(start, out, examples, [], train_config, progress=progress)


# -- evaluation ---------------------------------------------------------------------------------------


def evaluate_policy(
    store: MemoryStore, teacher: Teacher, prompts: Sequence[Prompt], label: str, log: TrajectoryLog, config: DistillConfig,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """One greedy rollout per held-back prompt, logged under `eval/{label}`; the summary."""
    records = collect(store, teacher, prompts, 1, f"eval/{label}", log, config, progress, f"eval {label}")
    return summarize(records)


# -- the loop -----------------------------------------------------------------------------------------


def distill(
    store: MemoryStore,
    train: Sequence[Conversation],
    held_back: Sequence[Conversation],
    config: DistillConfig,
    out: str | Path,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """Run the distillation into `out` (resuming from what is there); returns the metrics."""
    started = time.perf_counter()
    out = Path(out)
    tiny = config.student == "tiny"
    if not tiny:
        from memupdate.agent.models import resolve_model

        config = replace(config, student=resolve_model(config.student))
        check_student(config.student)
    if config.group_size < 2:
        raise MemupdateError(f"--group-size {config.group_size}: GRPO compares rollouts of one question, so it needs at least 2")
    out.mkdir(parents=True, exist_ok=True)
    log, eval_log = TrajectoryLog(out / TRAJECTORIES), TrajectoryLog(out / EVALUATIONS)
    prompts = training_prompts(train, config)
    evals = held_back_prompts(held_back, prompts, config)
    if not prompts:
        raise MemupdateError("no training questions: check --conversations and --max-questions")
    teacher = make_teacher(config.teacher, store, config)
    metrics: dict[str, Any] = {"config": _plain(config), "iterations": []}
    if evals:
        metrics["teacher"] = evaluate_policy(store, make_teacher(config.teacher, store, config, temperature=0.0), evals, "teacher", eval_log, config, progress)
        metrics["no_edits"] = evaluate_policy(store, make_teacher("none", store, config), evals, "none", eval_log, config, progress)

    teacher_records = collect(store, teacher, prompts, config.group_size, "it1", log, config, progress, "it1 teacher rollouts")
    start = Path(config.student)
    if tiny:
        start = out / "tiny-init"
        if not (start / "config.json").is_file():
            build_tiny_student(start, teacher_records, config)
    for iteration in range(1, config.iterations + 1):
        it_started = time.perf_counter()
        records = list(teacher_records)
        if iteration > 1:  # the previous student rolls out, its groups joined by the original teacher's
            student = make_teacher(f"hf:{start}", store, config)
            records += collect(store, student, prompts, config.group_size, f"it{iteration}", log, config, progress, f"it{iteration} student rollouts")
        advantages, stats = assign_advantages(records)
        weights = training_weights(advantages, config.weighting)
        (out / f"iter-{iteration}").mkdir(exist_ok=True)
        (out / f"iter-{iteration}" / "advantages.json").write_text(
            json.dumps({r["key"]: round(a, 6) for r, a in zip(records, advantages, strict=True)}, indent=1)
        )
        if stats["zero_variance_groups"] == stats["groups"]:
            raise MemupdateError(
                f"all {stats['groups']} groups have equal rewards within the group, so no trajectory is better than another; "
                f"raise --explore (heuristic) or --temperature, or --group-size. Trajectories are kept in {log.path}"
            )
        if not any(w > 0 for w in weights):
            raise MemupdateError(f"no trajectory has a positive advantage; nothing to learn from. Trajectories are kept in {log.path}")
        checkpoint = out / f"iter-{iteration}" / "student"
        if (checkpoint / "training.json").is_file():  # resumed: this iteration's student is already trained
            training = json.loads((checkpoint / "training.json").read_text())
        else:
            training = finetune(start, checkpoint, records, weights, config, tiny=tiny, progress=progress)
            (checkpoint / "training.json").write_text(json.dumps(training))
        row = {"iteration": iteration, **stats, "training": training}
        if evals:
            student = make_teacher(f"hf:{checkpoint}", store, config, temperature=0.0)
            row["student"] = evaluate_policy(store, student, evals, f"it{iteration}-student", eval_log, config, progress)
        row["seconds"] = round(time.perf_counter() - it_started, 1)
        metrics["iterations"].append(row)
        start = checkpoint
    metrics["seconds"] = round(time.perf_counter() - started, 1)
    _write_output(start, out, config, metrics)
    return metrics


def _write_output(final: Path, out: Path, config: DistillConfig, metrics: dict[str, Any]) -> None:
    """The last student's checkpoint files into `out`, with memupdate.json, metrics.json and the plot."""
    for item in final.iterdir():
        if item.is_file() and item.name != "training.json":
            shutil.copy2(item, out / item.name)
    last = metrics["iterations"][-1]
    info = {
        "kind": "distill",
        "base_model": config.student,
        "teacher": config.teacher,
        "iterations": config.iterations,
        "config": _plain(config),
        "metrics": {
            "student": last.get("student"),
            "teacher": metrics.get("teacher"),
            "no_edits": metrics.get("no_edits"),
            "zero_variance_groups": last["zero_variance_groups"],
            "groups": last["groups"],
            "loss_last": last["training"]["loss_last"],
        },
    }
    (out / RUN_INFO).write_text(json.dumps(info, indent=2))
    (out / "metrics.json").write_text(json.dumps(metrics, indent=2))
    plot_metrics(metrics, out / "distill.png")


def plot_metrics(metrics: dict[str, Any], path: Path) -> None:
    """Reward per iteration (student vs teacher vs no edits), share of valid tool calls, and the loss."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = metrics["iterations"]
    xs = [r["iteration"] for r in rows]
    fig, (reward_ax, valid_ax, loss_ax) = plt.subplots(1, 3, figsize=(13, 3.8))
    if all("student" in r for r in rows):
        reward_ax.plot(xs, [r["student"]["reward_mean"] for r in rows], "o-", label="student")
        for name, style in (("teacher", "--"), ("no_edits", ":")):
            if name in metrics:
                reward_ax.axhline(metrics[name]["reward_mean"], linestyle=style, color="gray" if name == "no_edits" else "C1", label=name.replace("_", " "))
        valid_ax.plot(xs, [r["student"]["valid_call_share"] or 0.0 for r in rows], "o-", label="well-formed")
        valid_ax.plot(xs, [r["student"]["ok_call_share"] or 0.0 for r in rows], "s-", label="ran without error")
    reward_ax.set(title="mean reward, held-back questions", xlabel="iteration")
    reward_ax.legend()
    valid_ax.set(title="student's tool calls", xlabel="iteration", ylim=(0, 1.05))
    valid_ax.legend()
    offset = 0
    for r in rows:
        losses = r["training"].get("losses", [])
        loss_ax.plot(range(offset, offset + len(losses)), losses, label=f"iteration {r['iteration']}")
        offset += len(losses)
    loss_ax.set(title="training loss (assistant tokens)", xlabel="optimiser step")
    loss_ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _plain(config: DistillConfig) -> dict[str, Any]:
    # Never write a key to disk.
    plain = asdict(replace(config, api_key=None, reward=replace(config.reward, answerer_api_key=None)))
    return json.loads(json.dumps(plain))
