"""Evaluation: does a policy's editing make the memory answer LoCoMo questions better?

    from memupdate.rl.evaluate import EvalConfig, evaluate
    report = evaluate(store, conversations, policy, EvalConfig(mode="targeted"))
    report["before"]["qa_score"], report["after"]["qa_score"], report["reward_mean"]

- targeted (the training setting): per question, fork the base, run the policy with the question
  visible, score that question on the fork, drop the fork.
- blind (the deployment setting): per conversation, fork once, run the policy with no question,
  then score every question on the edited fork.
`policy=None` makes no edits: before and after must then be identical (a check on the pipeline).
The base namespace is never written; each conversation is ingested first if it is not there yet.
"""

from __future__ import annotations

import random
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from langchain_core.language_models import BaseChatModel

from memupdate.agent.graph import run_episode
from memupdate.rl.ingest import base_namespace, ingest
from memupdate.rl.locomo import ADVERSARIAL, Conversation, QAItem, category_name
from memupdate.rl.qa_proxy import QAScore, score_questions
from memupdate.rl.reward import Efficiency, RewardConfig, combine, mean_qa, memory_efficiency
from memupdate.store import MemoryRecord, MemoryStore, to_namespace

Mode = Literal["targeted", "blind"]


@dataclass(frozen=True)
class EvalConfig:
    mode: Mode = "targeted"
    reward: RewardConfig = field(default_factory=RewardConfig)
    include_adversarial: bool = False
    max_questions: int | None = None  # per conversation, for quick runs
    max_turns: int | None = None
    max_operations: int | None = None
    keep_forks: bool = False
    # Targeted mode: also score N other questions of the conversation in the reward, so memory that
    # helps future questions is rewarded, not only memory for the question the policy saw.
    generalization: int = 0
    # A run whose share of failed episodes exceeds this is not a result: the report says so
    # (`failures["over_threshold"]`) and the CLI exits non-zero.
    max_failure_share: float = 0.1


def trajectory_id(sample_id: str, qa_index: int | str) -> str:
    """`{sample_id}-qa{idx}-{uuid8}`: unique per rollout, so forks of one question never collide."""
    return f"{sample_id}-qa{qa_index}-{uuid.uuid4().hex[:8]}"


def trajectory_namespace(sample_id: str, trajectory: str) -> tuple[str, ...]:
    return (*base_namespace(sample_id), "traj", trajectory)


def eval_questions(conversation: Conversation, config: EvalConfig) -> tuple[list[QAItem], list[dict]]:
    """The questions to score, and the ones skipped with the reason."""
    kept, skipped = [], []
    for qa in conversation.qa:
        if qa.category == ADVERSARIAL and not config.include_adversarial:
            continue
        answer = qa.answer if qa.category != ADVERSARIAL else (qa.answer or "not mentioned")
        if not answer:
            skipped.append({"sample_id": conversation.sample_id, "qa_index": qa.index, "error": "question has no answer"})
            continue
        kept.append(qa if answer == qa.answer else replace(qa, answer=answer))
    return kept[: config.max_questions], skipped


def evaluate(
    store: MemoryStore,
    conversations: Sequence[Conversation],
    policy: BaseChatModel | None,
    config: EvalConfig = EvalConfig(),
    *,
    policy_name: str = "none",
    progress: Callable[[int, int], None] | None = None,
) -> dict[str, Any]:
    """Run the evaluation and return the report (see `memupdate eval --help` for its shape)."""
    started = time.perf_counter()
    rows: list[dict[str, Any]] = []
    errors: list[dict[str, Any]] = []
    tool_counts: Counter = Counter()
    episodes = Counter()  # "run" and "failed": a policy failing every episode must not read as a result
    ingested: dict[str, dict[str, Any]] = {}
    plans = [(c, *eval_questions(c, config)) for c in conversations]
    total, done = sum(len(q) for _, q, _ in plans), 0
    for conversation, questions, skipped in plans:
        errors += skipped
        loaded = ingest(store, conversation)
        base = loaded.base
        ingested[conversation.sample_id] = {
            "added": loaded.added, "present": loaded.present, "removed_by_edit": loaded.removed_by_edit,
        }  # fmt: skip
        if base.count() == 0:
            errors.append({"sample_id": conversation.sample_id, "error": "conversation has no facts to remember"})
            continue
        before = score_questions(base, questions, top_k=config.reward.top_k, word_budget=config.reward.word_budget)
        base_snapshot = base.snapshot()  # the base is never written, so once per conversation
        if config.mode == "blind":
            known_errors = len(errors)
            rows += _blind(base, base_snapshot, conversation, questions, before, policy, config, tool_counts, errors)
            episodes["run"] += 1
            episodes["failed"] += any(e.get("episode_failed") for e in errors[known_errors:])
            done += len(questions)
            if progress:
                progress(done, total)
            continue
        for index, (qa, score) in enumerate(zip(questions, before, strict=True)):
            others = [i for i in range(len(questions)) if i != index]
            held = random.Random(qa.index).sample(others, min(config.generalization, len(others)))
            extra = [(questions[i], before[i]) for i in held]
            episodes["run"] += 1
            try:
                rows.append(_targeted(base, base_snapshot, conversation, qa, score, extra, policy, config, tool_counts))
            except Exception as exc:  # one bad question must not end a long evaluation
                episodes["failed"] += 1
                errors.append({
                    "sample_id": conversation.sample_id, "qa_index": qa.index, "episode_failed": True,
                    "error": f"{type(exc).__name__}: {exc}",
                })  # fmt: skip
            done += 1
            if progress:
                progress(done, total)
    report = _report(rows, errors, tool_counts, conversations, policy_name, config, time.perf_counter() - started)
    share = episodes["failed"] / episodes["run"] if episodes["run"] else 0.0
    report["failures"] = {
        "episodes": episodes["run"], "failed": episodes["failed"], "share": round(share, 4),
        "threshold": config.max_failure_share, "over_threshold": share > config.max_failure_share,
    }  # fmt: skip
    report["ingested"] = ingested
    return report


def _targeted(
    base: MemoryStore,
    base_snapshot: dict[str, MemoryRecord],
    conversation: Conversation,
    qa: QAItem,
    before: QAScore,
    extra: list[tuple[QAItem, QAScore]],
    policy: BaseChatModel | None,
    config: EvalConfig,
    tool_counts: Counter,
) -> dict[str, Any]:
    """One question: fork, edit with the question visible, score it (and the `extra` questions), drop."""
    scored = [qa] + [q for q, _ in extra]
    after, efficiency, _ = _edit_and_score(
        base, base_snapshot, conversation, qa.index, qa.question, scored, policy, config, tool_counts
    )
    row = _row(conversation, qa, before, after[0], efficiency)
    if extra:
        delta = mean_qa(after) - mean_qa([before] + [score for _, score in extra])
        row["reward"] = combine(delta, efficiency.value)
    return row


def _blind(
    base: MemoryStore,
    base_snapshot: dict[str, MemoryRecord],
    conversation: Conversation,
    questions: list[QAItem],
    before: list[QAScore],
    policy: BaseChatModel | None,
    config: EvalConfig,
    tool_counts: Counter,
    errors: list[dict[str, Any]],
) -> list[dict[str, Any]]:
    """One episode per conversation with no question visible, then every question scored."""
    after, efficiency, failure = _edit_and_score(
        base, base_snapshot, conversation, "all", None, questions, policy, config, tool_counts, keep_going=True
    )
    if failure:  # the questions were still scored on what the policy managed before it failed
        errors.append({"sample_id": conversation.sample_id, "episode_failed": True, "error": f"episode failed: {failure}"})
    return [_row(conversation, qa, b, a, efficiency) for qa, b, a in zip(questions, before, after, strict=True)]


def _edit_and_score(
    base: MemoryStore,
    base_snapshot: dict[str, MemoryRecord],
    conversation: Conversation,
    qa_index: int | str,
    question: str | None,
    scored: list[QAItem],
    policy: BaseChatModel | None,
    config: EvalConfig,
    tool_counts: Counter,
    *,
    keep_going: bool = False,
) -> tuple[list[QAScore], Efficiency, str | None]:
    """Fork the base, let the policy edit the fork, score `scored` on it and its efficiency, drop it.

    With `keep_going`, a policy that raises is reported in the third value instead of raising.
    """
    trajectory = trajectory_id(conversation.sample_id, qa_index)
    fork_namespace = to_namespace(trajectory_namespace(conversation.sample_id, trajectory))
    failure = None
    try:
        # Inside the try: an interrupt landing just after the fork commits must still drop it.
        fork = base.fork(fork_namespace, episode=trajectory)
        if policy is not None:
            try:
                episode = run_episode(policy, fork, question, max_turns=config.max_turns, max_operations=config.max_operations)
                tool_counts.update(episode.tool_counts)
            except Exception as exc:
                if not keep_going:
                    raise
                failure = f"{type(exc).__name__}: {exc}"
        after = score_questions(fork, scored, top_k=config.reward.top_k, word_budget=config.reward.word_budget)
        efficiency = memory_efficiency(base_snapshot, fork.snapshot(), config.reward)
    except BaseException as exc:
        if not config.keep_forks or not isinstance(exc, Exception):  # Ctrl-C: always drop, then re-raise
            _drop_fork(base, fork_namespace)
        raise
    if not config.keep_forks:
        _drop_fork(base, fork_namespace)
    return after, efficiency, failure


def _drop_fork(base: MemoryStore, namespace: tuple[str, ...]) -> None:
    """Drop a fork, once more on a fresh connection if the first try fails: an interrupt can break the
    connection the episode was using, and a leftover fork must not outlive the run."""
    try:
        base.scoped(namespace).drop()
    except Exception:
        base.engine.dispose()
        base.scoped(namespace).drop()


def _row(conversation: Conversation, qa: QAItem, before: QAScore, after: QAScore, efficiency) -> dict[str, Any]:  # noqa: ANN001
    return {
        "sample_id": conversation.sample_id,
        "qa_index": qa.index,
        "category": qa.category,
        "before": before,
        "after": after,
        "reward": combine(after.qa_score - before.qa_score, efficiency.value),
        "memories_before": efficiency.memories_before,
        "memories_after": efficiency.memories_after,
    }


def _side(rows: list[dict[str, Any]], side: str) -> dict[str, Any]:
    def summary(selected: list[dict[str, Any]]) -> dict[str, Any]:
        scores = [r[side] for r in selected]
        recalls = [s.evidence_recall for s in scores if s.evidence_recall is not None]
        return {
            "questions": len(scores),
            "qa_score": _mean([s.qa_score for s in scores]),
            "evidence_recall": _mean(recalls),
            "context_words": _mean([s.context_words for s in scores]),
        }

    by_category: dict[int, list] = defaultdict(list)
    for row in rows:
        by_category[row["category"]].append(row)
    overall = summary(rows)
    overall["by_category"] = {category_name(c): summary(by_category[c]) for c in sorted(by_category)}
    return overall


def _report(rows, errors, tool_counts, conversations, policy_name, config, seconds) -> dict[str, Any]:  # noqa: ANN001
    return {
        "policy": policy_name,
        "mode": config.mode,
        "conversations": [c.sample_id for c in conversations],
        "questions": len(rows),
        "before": _side(rows, "before"),
        "after": _side(rows, "after"),
        "reward_mean": _mean([r["reward"] for r in rows]),
        "memories": {
            "before": _mean([r["memories_before"] for r in rows]),
            "after": _mean([r["memories_after"] for r in rows]),
        },
        "tool_calls": dict(sorted(tool_counts.items())),
        "errors": errors,
        "seconds": round(seconds, 2),
    }


def _mean(values: Sequence[float]) -> float:
    return float(sum(values) / len(values)) if values else 0.0


def plot_report(report: dict[str, Any], path: str) -> None:
    """Before/after bars of the QA proxy per category, saved as a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(report["before"]["by_category"])
    before = [report["before"]["by_category"][n]["qa_score"] for n in names]
    after = [report["after"]["by_category"].get(n, {}).get("qa_score", 0.0) for n in names]
    xs = range(len(names))
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.bar([x - 0.2 for x in xs], before, width=0.4, label="before")
    ax.bar([x + 0.2 for x in xs], after, width=0.4, label="after")
    ax.set_xticks(list(xs), names)
    ax.set_ylabel("QA proxy (share of answer tokens retrieved)")
    ax.set_title(f"{report['policy']} policy, {report['mode']} mode: {', '.join(report['conversations'])}")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
