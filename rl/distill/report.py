"""What a learning run reports: `metrics.json` (a chat student's: each held-out evaluation with its 95%
interval; every run's: each stage's facts and time) and `learning_curve.png`, read from the finished stages
(`stages.json`) and written by `RunFolder.report`.

    from memupdate.rl.distill.report import collect_metrics, plot_learning_curve
    metrics = collect_metrics(done, config, task, train, held_out, final=Path("runs/x/sft"))
    plot_learning_curve(metrics, Path("runs/x/learning_curve.png"))    # a chat student's stages
    plot_grpo_curve(metrics, Path("runs/relation/learning_curve.png"))  # the relation task's GRPO steps
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from memupdate.rl.data.locomo import Conversation
from memupdate.rl.distill.config import LearnConfig
from memupdate.rl.distill.task import Task
from memupdate.scoring.summaries import interval


def collect_metrics(
    done: dict[str, Any], config: LearnConfig, task: Task, train: Sequence[Conversation], held_out: Sequence[Conversation], final: Path,
) -> dict[str, Any]:
    """A finished run's metrics (`done`: its `stages.json`): each held-out evaluation's score with its 95%
    interval and its calls, paired RL - SFT, each stage's time and facts; `final` is the student it ends with."""
    evals = {name.removeprefix("eval-"): stage["result"] for name, stage in done.items() if name.startswith("eval-")}
    teacher_mean = evals["teacher"]["reward_mean"]
    reference = evals.get("heuristic")  # the task as users run it (`as_users_run`), if it has one
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
        } | task.evaluation_row(result, reference)
    rl = [n for n in evals if n.startswith("rl-")]
    if rl and "sft" in evals:  # paired per question: did the last RL iteration beat SFT alone?
        last, sft = task.paired_values(evals[rl[-1]]), task.paired_values(evals["sft"])
        table["rl_minus_sft"] = interval([a - b for a, b in zip(last, sft, strict=True)])
    return {
        "config": plain_config(config),
        "train_conversations": [c.sample_id for c in train],
        "held_out_conversations": [c.sample_id for c in held_out],
        "task": config.task,
        "held_out_questions": len(task.paired_values(evals["teacher"])),
        "score": task.score,
        "final_checkpoint": str(final),
        "evaluations": table,
        "stages": {name: times | _stage_facts(done[name]["result"]) for name, times in stage_times(done).items()},
    }


def stage_times(done: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Each finished stage's seconds and the load beside them (None where a stage record kept none)."""
    return {name: {"seconds": stage["seconds"], "load": stage.get("load")} for name, stage in done.items()}


def _stage_facts(result: Any) -> dict[str, Any]:
    if not isinstance(result, dict):
        return {"rollouts": len(result)} if isinstance(result, list) else {}
    facts = {k: result[k] for k in ("groups", "zero_variance_groups", "trajectories", "positive", "reward_mean",
                                     "rollouts_per_minute", "tokens_per_rollout", "student_trajectories_trained",
                                     "student_trajectories_pushed_down") if k in result}
    if "training" in result:
        t = result["training"]
        facts["training"] = {k: t.get(k) for k in (
            "examples", "pushed_down", "steps", "learning_rate", "sweep_held_out_loss", "held_out_loss", "held_out_loss_by_part", "held_out_examples_by_part",
            "kept_epoch", "seconds", "peak_rss_mb", "trained_parameters",
        )}
        facts["training"]["loss_first_last"] = [t["losses"][0], t["losses"][-1]]
    if "agreement" in result:  # an RL iteration chosen by `held_out_agreement`
        facts["held_out_agreement"] = result["agreement"]
    return facts


def plot_learning_curve(metrics: dict[str, Any], path: Path) -> None:
    """Held-out score per stage (zero-shot, SFT, RL iterations) with 95% intervals, beside the teacher,
    the heuristic compaction and no edits; the student's call shares; the held-out loss per epoch."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    table = metrics["evaluations"]
    order = ["zero-shot", "sft", *sorted((n for n in table if n.startswith("rl-") and n[3:].isdigit()), key=lambda n: int(n[3:]))]
    order = [n for n in order if n in table]
    xs = list(range(len(order)))
    gates = {name: stage["held_out_agreement"] for name, stage in metrics["stages"].items() if "held_out_agreement" in stage}
    fig, (reward_ax, calls_ax, loss_ax, *gate_ax) = plt.subplots(1, 4 if gates else 3, figsize=(18 if gates else 14, 4))
    score = metrics.get("score", "reward")  # compaction: each question's QA proxy change on the compacted banks
    means = [table[n][score]["mean"] for n in order]
    errors = [[m - table[n][score]["low"] for n, m in zip(order, means, strict=True)], [table[n][score]["high"] - m for n, m in zip(order, means, strict=True)]]
    reward_ax.errorbar(xs, means, yerr=errors, fmt="o-", capsize=4, label="student")
    for name, colour in (("teacher", "C1"), ("heuristic", "C3")):
        if name in table:
            line = table[name][score]
            reward_ax.axhline(line["mean"], color=colour, linestyle="--", label="heuristic compaction" if name == "heuristic" else name)
            reward_ax.axhspan(line["low"], line["high"], color=colour, alpha=0.12)
    reward_ax.axhline(0.0, color="gray", linestyle=":", label="no edits")
    if "sft" in table:
        reward_ax.axhline(table["sft"][score]["mean"], color="C2", linestyle="-.", alpha=0.6, label="SFT alone")
    title = "QA change per question" if score == "qa_delta" else "reward"
    reward_ax.set(title=f"held-out {title}\n({metrics['held_out_questions']} questions, 95% CI)", xticks=xs, xticklabels=order)
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
    if loss_ax.lines:
        loss_ax.legend(fontsize=8)
    if gates:  # what chose each RL iteration: its start and each candidate rate, the one kept filled
        (ax,) = gate_ax
        labels, values, kept = [], [], []
        for name, gate in gates.items():
            labels.append(f"{name}\nstart")
            values.append(gate["start"]["agreement"])
            kept.append(gate["chosen"] is None)
            for rate, measure in gate["candidates"].items():
                labels.append(f"{name}\n{float(rate):g}")
                values.append(measure["agreement"])
                kept.append(gate["chosen"] is not None and float(rate) == gate["chosen"])
        xs = list(range(len(values)))
        ax.plot(xs, values, "o", color="C0", fillstyle="none")
        ax.plot([x for x in xs if kept[x]], [v for v, k in zip(values, kept, strict=True) if k], "o", color="C0", label="kept")
        ax.set(title="RL gate: turns agreeing with the rule\n(kept-out units)", xticks=xs, xticklabels=labels, ylim=(0, 1.05))
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_grpo_curve(metrics: dict[str, Any], path: Path) -> None:
    """The relation task's GRPO: the greedy judge's mean reward on the recipe units (kept out) and the
    training units at each reading, and the step chosen (0: the SFT judge)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    result = metrics["rl"]
    curve = result["curve"]
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.plot([p["step"] for p in curve], [p["recipe_reward"] for p in curve], marker="o", label="recipe units (kept out)")
    ax.plot([p["step"] for p in curve], [p["train_reward"] for p in curve], marker=".", label="training units")
    ax.axvline(result["chosen_step"], color="grey", linestyle=":", label="chosen step")
    ax.set_xlabel("GRPO step")
    ax.set_ylabel("mean reward of the greedy verdict")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plain_config(config: LearnConfig) -> dict[str, Any]:
    """`config` as JSON, for `metrics.json` (never a key: an endpoint's is dropped)."""
    plain = asdict(replace(config, api_key=None, reward=replace(config.reward, answerer_api_key=None)))
    return json.loads(json.dumps(plain))
