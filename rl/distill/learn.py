"""A student that learns to edit memory on a CPU: zero-shot -> distillation (SFT) -> RL iterations, by stage.

    from memupdate.rl.distill.learn import LearnConfig, learn
    metrics = learn(store, train_conversations, eval_conversations, LearnConfig(student="smollm2"), out="runs/smollm2")
    # CLI: memupdate rl learn --student smollm2 --locomo FILE --train-conversations a,b,c --eval-conversations d,e \
    #          --out runs/smollm2

Stages, each written to `out/stages.json` when it finishes (a rerun of the same command skips the finished
ones; rollouts inside a stage are logged one by one and are not redone either):
1. `teacher-groups`: `group_size` rollouts of the teacher per training question. The teacher is the
   heuristic policy in its `stepwise` form (search first, then edit only what the search showed), so
   every handle it writes is in the transcript before it: a language model can imitate it.
2. `eval-teacher`, `eval-no-edits`, `eval-zero-shot`: the held-out questions (conversations training
   never touches), one greedy rollout each: the teacher, no edits (reward 0 by construction), the
   untrained student.
3. `sft`: fine-tune on the teacher's trajectories that beat their group (or all of a group with equal
   rewards above 0); `eval-sft`.
4. `rl-K` for K = 1..iterations: the current student samples `student_group_size` rollouts per
   question at `temperature`, joined by the teacher's trajectories of the same questions; GRPO
   advantages over the joined group; an advantage-weighted update from the current student: trajectories
   above their group's mean pulled up, those below pushed down (PPO-clipped, `finetune.py`); `eval-rl-K`.
Every eighth training question is kept out of the updates: the loss on its teacher trajectories is the
held-out loss that says whether the learning rate moves the model.
The run ends with `metrics.json` and `learning_curve.png` (mean reward per stage with a 95% interval).
"""

from __future__ import annotations

import json
import math
import statistics
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from memupdate.rl.data.locomo import Conversation
from memupdate.rl.distill.finetune import TrainConfig, finetune
from memupdate.rl.distill.run import (
    DistillConfig,
    Progress,
    Prompt,
    Teacher,
    TrajectoryLog,
    assign_advantages,
    collect,
    summarize,
)
from memupdate.rl.evaluate import EvalConfig, eval_questions
from memupdate.rl.scoring.reward import RewardConfig, collateral_sample
from memupdate.rl.scoring.summaries import mean
from memupdate.store import MemoryStore, MemupdateError

STAGES = "stages.json"


@dataclass(frozen=True)
class LearnConfig:
    student: str = "smollm2"  # a model name (agent/models.py) or a checkpoint folder
    train_questions: int = 10  # per training conversation, spread over the conversation
    eval_questions: int = 10  # per held-out conversation
    group_size: int = 4  # teacher rollouts per training question
    student_group_size: int = 3  # student rollouts per question in an RL iteration
    rl_questions: int = 16  # training questions an RL iteration rolls out on (spread over all of them)
    iterations: int = 2
    explore: float = 0.5  # the teacher's share of edits dropped or shuffled per rollout
    stepwise: int = 8  # the teacher's first search shows this many memories; it edits only those
    teacher_operations: int = 4  # the teacher's plan: the search and up to three edits
    temperature: float = 0.8  # the student's RL rollouts
    max_new_tokens: int = 192
    max_prose_tokens: int = 48  # a student turn with this many tokens and no <tool_call> is cut (a loop)
    threads: int = 0  # torch threads (0: torch's default); 1 is ~4x faster when other jobs share the cores
    max_turns: int = 4
    max_operations: int = 6
    sft_epochs: int = 4
    rl_epochs: int = 2
    learning_rate: float = 3e-4  # used when `sweep` is empty
    sweep: tuple[float, ...] = (1e-5, 1e-4, 3e-4, 1e-3)  # SFT tries each for one pass; the best held-out loss wins
    top_layers: int = 6
    lora_rank: int = 0  # > 0 (with top_layers 0): LoRA adapters instead, e.g. for Qwen2.5-3B on a GPU
    batch_size: int = 8
    seed: int = 0
    reward: RewardConfig = field(default_factory=RewardConfig)


def spread(items: Sequence[Any], n: int) -> list[Any]:
    """`n` items evenly spaced over `items` (LoCoMo lists questions by kind; the first n are alike)."""
    if n >= len(items):
        return list(items)
    return [items[math.floor(i * len(items) / n)] for i in range(n)]


def prompts_for(conversations: Sequence[Conversation], per_conversation: int, config: LearnConfig) -> list[Prompt]:
    prompts = []
    for conversation in conversations:
        questions, _ = eval_questions(conversation, EvalConfig())
        for qa in spread(questions, per_conversation):
            prompts.append(Prompt(conversation, qa, [qa, *collateral_sample(questions, qa.index, config.reward.collateral_questions)]))
    return prompts


def teacher(store: MemoryStore, config: LearnConfig, explore: float) -> Teacher:
    from memupdate.agent.policies.heuristic import HeuristicPolicy

    def member(seed: int) -> HeuristicPolicy:
        return HeuristicPolicy(
            store=store, seed=seed, explore=explore, stepwise=config.stepwise, look_first=True,
            max_operations=config.teacher_operations,
        )

    return Teacher(f"heuristic(stepwise={config.stepwise}, explore={explore})", member)


def student(path: str | Path, config: LearnConfig, temperature: float) -> Teacher:
    """The checkpoint at `path` as a policy; each member its own sampling seed, the weights shared."""
    from memupdate.agent.policies.hf import HuggingFaceChatModel, prompt_settings

    loaded = HuggingFaceChatModel.from_pretrained(path, dtype="float32")
    settings = prompt_settings(path)

    def member(seed: int) -> HuggingFaceChatModel:
        return HuggingFaceChatModel(
            hf_model=loaded.hf_model, tokenizer=loaded.tokenizer, max_new_tokens=config.max_new_tokens,
            temperature=temperature, seed=seed, max_prose_tokens=config.max_prose_tokens, **settings,
        )

    return Teacher(f"student:{path}", member)


def _distill_config(config: LearnConfig) -> DistillConfig:
    """The settings `collect` and `rollout` read (mode, budgets, reward, seed)."""
    return DistillConfig(
        mode="targeted", max_turns=config.max_turns, max_operations=config.max_operations, seed=config.seed, reward=config.reward
    )


class Stages:
    """`stages.json`: each finished stage's result; a rerun skips what is there."""

    def __init__(self, path: Path):
        self.path = path
        self.done: dict[str, Any] = json.loads(path.read_text()) if path.is_file() else {}

    def run(self, name: str, fn: Any) -> Any:
        if name not in self.done:
            started = time.perf_counter()
            result = fn()
            self.done[name] = {"result": result, "seconds": round(time.perf_counter() - started, 1), "load": _load()}
            self.path.write_text(json.dumps(self.done, indent=1))
        return self.done[name]["result"]


def learn(
    store: MemoryStore,
    train: Sequence[Conversation],
    held_out: Sequence[Conversation],
    config: LearnConfig,
    out: str | Path,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """Run (or resume) every stage into `out`; returns the metrics also written to `out/metrics.json`."""
    from memupdate.agent.models import resolve_model
    from memupdate.agent.policies.hf import prompt_settings

    overlap = {c.sample_id for c in train} & {c.sample_id for c in held_out}
    if overlap:
        raise MemupdateError(f"conversations {sorted(overlap)} are both trained on and held out: give disjoint lists")
    if not held_out:
        raise MemupdateError("no held-out conversation: pass --eval-conversations (at least one training never touches)")
    if config.threads:
        import torch

        torch.set_num_threads(config.threads)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    base = Path(resolve_model(config.student))
    settings = prompt_settings(base)
    rollouts = _distill_config(config)
    stages = Stages(out / STAGES)
    log, eval_log = TrajectoryLog(out / "trajectories.jsonl"), TrajectoryLog(out / "eval.jsonl")
    prompts = prompts_for(train, config.train_questions, config)
    evals = prompts_for(held_out, config.eval_questions, config)
    kept_out = {p.group for i, p in enumerate(prompts) if i % 8 == 7}  # the held-out loss's questions

    def evaluate(label: str, policy: Teacher) -> dict[str, Any]:
        records = collect(store, policy, evals, 1, f"eval/{label}", eval_log, rollouts, progress, f"eval {label}")
        return {**summarize(records), "rewards": [r["reward"] for r in records], "groups": [r["group"] for r in records],
                "tokens_per_rollout": mean([_tokens(r) for r in records])}

    # 1-2. The teacher's groups; the reference points on the held-out questions.
    teacher_records = stages.run(
        "teacher-groups",
        lambda: _keys(collect(store, teacher(store, config, config.explore), prompts, config.group_size, "teacher", log, rollouts, progress, "teacher groups")),
    )
    teacher_records = [log.records[k] for k in teacher_records]
    stages.run("eval-teacher", lambda: evaluate("teacher", teacher(store, config, 0.0)))
    stages.run("eval-no-edits", lambda: evaluate("no-edits", Teacher("none", lambda seed: None)))
    stages.run("eval-zero-shot", lambda: evaluate("zero-shot", student(base, config, 0.0)))

    def held_out_trajectories() -> list[list[dict[str, str]]]:
        """The kept-out questions' teacher trajectories that earned a reward (all of them if none did: a
        loss is still measured, and the learning-rate sweep still has something to choose by)."""
        kept = [r for r in teacher_records if r["group"] in kept_out and r["messages"]]
        return [_seen(r, settings) for r in [r for r in kept if r["reward"] > 0] or kept]

    def train_stage(start: Path, target: Path, records: list[dict[str, Any]], weights: list[float], epochs: int, sweep: tuple = ()) -> dict[str, Any]:
        examples = [(_seen(r, settings), w) for r, w in zip(records, weights, strict=True) if r["group"] not in kept_out and r["messages"]]
        train_config = TrainConfig(
            learning_rate=learning_rate(), epochs=epochs, batch_size=config.batch_size, top_layers=config.top_layers, seed=config.seed,
            sweep=sweep, lora_rank=config.lora_rank,
        )
        return finetune(start, target, examples, held_out_trajectories(), train_config, progress=progress)

    # 3. Distillation: imitate the teacher's better trajectories.
    def sft() -> dict[str, Any]:
        advantages, stats = assign_advantages(teacher_records)
        flat = _flat_groups(teacher_records)
        weights = [1.0 if r["reward"] > 0 and (a > 0 or r["group"] in flat) else 0.0 for r, a in zip(teacher_records, advantages, strict=True)]
        return {**stats, "training": train_stage(base, out / "sft", teacher_records, weights, config.sft_epochs, config.sweep)}

    def learning_rate() -> float:
        """The rate the SFT sweep chose (RL iterations go on with it), else the configured one."""
        chosen = stages.done.get("sft", {}).get("result", {}).get("training", {}).get("learning_rate")
        return chosen or config.learning_rate

    stages.run("sft", sft)
    stages.run("eval-sft", lambda: evaluate("sft", student(out / "sft", config, 0.0)))

    # 4. RL iterations: the student's own groups, joined by the teacher's, advantage-weighted.
    current = out / "sft"
    chosen = spread([p for p in prompts if p.group not in kept_out], config.rl_questions)
    for k in range(1, config.iterations + 1):
        target = out / f"rl-{k}"

        def iteration(start: Path = current, k: int = k, target: Path = target) -> dict[str, Any]:
            own = collect(store, student(start, config, config.temperature), chosen, config.student_group_size, f"rl-{k}", log, rollouts, progress, f"rl-{k} student groups")
            minutes = sum(r["seconds"] for r in own) / 60  # each rollout's own time: right on a resumed stage too
            groups = {p.group for p in chosen}
            records = own + [r for r in teacher_records if r["group"] in groups]
            advantages, stats = assign_advantages(records)
            nonzero = [abs(a) for a in advantages if a != 0]
            scale = len(nonzero) / sum(nonzero) if nonzero else 0.0  # mean |weight| 1 over the trained ones
            weights = [a * scale for a in advantages]
            return {
                **stats,
                "student": summarize(own),
                "student_reward_mean": mean([r["reward"] for r in own]),
                "rollouts_per_minute": round(len(own) / minutes, 2) if minutes > 0 else None,
                "tokens_per_rollout": mean([_tokens(r) for r in own]),
                "student_trajectories_trained": sum(w > 0 for w, r in zip(weights, records, strict=True) if r["policy"].startswith("student")),
                "student_trajectories_pushed_down": sum(w < 0 for w, r in zip(weights, records, strict=True) if r["policy"].startswith("student")),
                "training": train_stage(start, target, records, weights, config.rl_epochs),
            }

        stages.run(f"rl-{k}", iteration)
        stages.run(f"eval-rl-{k}", lambda target=target, k=k: evaluate(f"rl-{k}", student(target, config, 0.0)))
        current = target

    metrics = collect_metrics(stages.done, config, train, held_out, current)
    (out / "metrics.json").write_text(json.dumps(metrics, indent=2))
    plot_learning_curve(metrics, out / "learning_curve.png")
    return metrics


# -- metrics --------------------------------------------------------------------------------------------


def interval(values: Sequence[float]) -> dict[str, Any]:
    """Mean and its 95% interval (normal approximation over the per-question values)."""
    n = len(values)
    centre = mean(values)
    half = 1.96 * statistics.stdev(values) / math.sqrt(n) if n > 1 else 0.0
    return {"n": n, "mean": round(centre, 5), "low": round(centre - half, 5), "high": round(centre + half, 5)}


def collect_metrics(done: dict[str, Any], config: LearnConfig, train: Sequence[Conversation], held_out: Sequence[Conversation], final: Path) -> dict[str, Any]:
    evals = {name.removeprefix("eval-"): stage["result"] for name, stage in done.items() if name.startswith("eval-")}
    teacher_mean = evals["teacher"]["reward_mean"]
    table = {}
    for name, result in evals.items():
        table[name] = {
            "reward": interval(result["rewards"]),
            "share_of_teacher": round(result["reward_mean"] / teacher_mean, 3) if teacher_mean > 0 else None,
            "well_formed_calls": result["valid_call_share"],
            "calls_ran": result["ok_call_share"],
            "calls_per_episode": result["calls_per_episode"],
            "tokens_per_rollout": result["tokens_per_rollout"],
            "tool_calls": result["tool_calls"],
        }
    rl = [n for n in evals if n.startswith("rl-")]
    if rl and "sft" in evals:  # paired per question: did the last RL iteration beat SFT alone?
        last, sft = evals[rl[-1]], evals["sft"]
        table["rl_minus_sft"] = interval([a - b for a, b in zip(last["rewards"], sft["rewards"], strict=True)])
    return {
        "config": json.loads(json.dumps(asdict(config))),
        "train_conversations": [c.sample_id for c in train],
        "held_out_conversations": [c.sample_id for c in held_out],
        "held_out_questions": len(evals["teacher"]["rewards"]),
        "final_checkpoint": str(final),
        "evaluations": table,
        "stages": {name: {"seconds": s["seconds"], "load": s["load"], **_stage_facts(s["result"])} for name, s in done.items()},
    }


def _stage_facts(result: Any) -> dict[str, Any]:
    if not isinstance(result, dict):
        return {"rollouts": len(result)} if isinstance(result, list) else {}
    facts = {k: result[k] for k in ("groups", "zero_variance_groups", "trajectories", "positive", "reward_mean",
                                     "rollouts_per_minute", "tokens_per_rollout", "student_trajectories_trained",
                                     "student_trajectories_pushed_down") if k in result}
    if "training" in result:
        t = result["training"]
        facts["training"] = {k: t.get(k) for k in ("examples", "pushed_down", "steps", "learning_rate", "sweep_held_out_loss", "held_out_loss", "seconds", "peak_rss_mb", "trained_parameters")}
        facts["training"]["loss_first_last"] = [t["losses"][0], t["losses"][-1]]
    return facts


def plot_learning_curve(metrics: dict[str, Any], path: Path) -> None:
    """Held-out reward per stage (zero-shot, SFT, RL iterations) with 95% intervals, beside the teacher
    and no edits; the student's call shares; the held-out loss per epoch."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    table = metrics["evaluations"]
    order = ["zero-shot", "sft", *sorted((n for n in table if n.startswith("rl-") and n[3:].isdigit()), key=lambda n: int(n[3:]))]
    order = [n for n in order if n in table]
    xs = list(range(len(order)))
    fig, (reward_ax, calls_ax, loss_ax) = plt.subplots(1, 3, figsize=(14, 4))
    means = [table[n]["reward"]["mean"] for n in order]
    errors = [[m - table[n]["reward"]["low"] for n, m in zip(order, means, strict=True)], [table[n]["reward"]["high"] - m for n, m in zip(order, means, strict=True)]]
    reward_ax.errorbar(xs, means, yerr=errors, fmt="o-", capsize=4, label="student")
    teacher = table["teacher"]["reward"]
    reward_ax.axhline(teacher["mean"], color="C1", linestyle="--", label="teacher")
    reward_ax.axhspan(teacher["low"], teacher["high"], color="C1", alpha=0.12)
    reward_ax.axhline(0.0, color="gray", linestyle=":", label="no edits")
    if "sft" in table:
        reward_ax.axhline(table["sft"]["reward"]["mean"], color="C2", linestyle="-.", alpha=0.6, label="SFT alone")
    reward_ax.set(title=f"held-out reward ({metrics['held_out_questions']} questions, 95% CI)", xticks=xs, xticklabels=order)
    reward_ax.legend(fontsize=8)
    calls_ax.plot(xs, [table[n]["well_formed_calls"] or 0.0 for n in order], "o-", label="well-formed")
    calls_ax.plot(xs, [table[n]["calls_ran"] or 0.0 for n in order], "s-", label="ran without error")
    calls_ax.axhline(0.9, color="C0", linestyle=":", alpha=0.5)
    calls_ax.axhline(0.8, color="C1", linestyle=":", alpha=0.5)
    calls_ax.set(title="student's tool calls", xticks=xs, xticklabels=order, ylim=(0, 1.05))
    calls_ax.legend(fontsize=8)
    offset = 0
    for name, stage in metrics["stages"].items():
        losses = [v for v in stage.get("training", {}).get("held_out_loss", []) if v is not None]
        if losses:
            loss_ax.plot(range(offset, offset + len(losses)), losses, "o-", label=name)
            offset += len(losses) - 1
    loss_ax.set(title="held-out loss (assistant tokens)", xlabel="epoch")
    loss_ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _seen(record: dict[str, Any], settings: dict[str, Any]) -> list[dict[str, str]]:
    from memupdate.rl.distill.render import as_student_saw

    return as_student_saw(record["messages"], settings)


def _flat_groups(records: Sequence[dict[str, Any]]) -> set[str]:
    by: dict[str, set[float]] = {}
    for r in records:
        by.setdefault(r["group"], set()).add(round(r["reward"], 9))
    return {g for g, values in by.items() if len(values) == 1}


def _keys(records: Sequence[dict[str, Any]]) -> list[str]:
    return [r["key"] for r in records]


def _tokens(record: dict[str, Any]) -> float:
    """Characters / 4 of what the policy wrote (a token estimate that needs no tokenizer)."""
    return sum(len(m["content"]) for m in record["messages"] if m["role"] == "assistant") / 4


def _load() -> float:
    import os

    return round(os.getloadavg()[0], 2)
