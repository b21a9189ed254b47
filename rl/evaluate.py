"""Evaluation: does a policy's editing make the memory answer LoCoMo questions better?

    from memupdate.rl.evaluate import EvalConfig, evaluate
    report = evaluate(store, conversations, policy, EvalConfig(mode="targeted"))
    report["before"]["qa_score"], report["after"]["qa_score"], report["reward_mean"]

- targeted (the training setting): per question, fork the base, run the policy with the question
  visible, score that question and a sample of the conversation's other questions (collateral damage,
  `RewardConfig.collateral_questions`) on the fork, drop the fork.
- blind (the deployment setting): per conversation, fork once, run the policy with no question,
  then score every question on the edited fork.
`policy=None` makes no edits: before and after must then be identical (a check on the pipeline).
The base namespace is never written; each conversation is ingested first if it is not there yet.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Literal

from langchain_core.language_models import BaseChatModel

from memupdate.rl.data.conversation import Conversation
from memupdate.rl.data.ingest import ingest
from memupdate.rl.data.namespaces import trajectory_id
from memupdate.rl.episode import scored_episode
from memupdate.scoring.answer_report import answerer_report
from memupdate.scoring.answerer import LLMAnswerer
from memupdate.scoring.qa_proxy import QAScore
from memupdate.scoring.questions import QAItem, collateral_sample, scorable_questions
from memupdate.scoring.reward import (
    RewardBreakdown,
    RewardConfig,
    compute_reward,
    score,
)
from memupdate.scoring.summaries import by_category, mean
from memupdate.store import MemoryStore

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
    # A run whose share of failed episodes exceeds this is not a result: the report says so
    # (`failures["over_threshold"]`) and the CLI exits non-zero.
    max_failure_share: float = 0.1


def eval_questions(conversation: Conversation, config: EvalConfig) -> tuple[list[QAItem], list[dict]]:
    """The questions to score, and the ones skipped with the reason."""
    return scorable_questions(conversation, config.include_adversarial, config.max_questions)


def evaluate(
    store: MemoryStore,
    conversations: Sequence[Conversation],
    policy: BaseChatModel | None,
    config: EvalConfig = EvalConfig(),
    *,
    policy_name: str = "none",
    progress: Callable[[int, int], None] | None = None,
    answerer: LLMAnswerer | None = None,
) -> dict[str, Any]:
    """Run the evaluation and return the report (see `memupdate eval --help` for its shape).

    With `answerer`, an LLM also answers every question from the context the proxy read, before and
    after editing: `report["answerer"]` (see `answer_from_contexts`)."""
    started = time.perf_counter()
    rows: list[dict[str, Any]] = []
    episodes: list[RewardBreakdown] = []
    errors: list[dict[str, Any]] = []
    tool_counts: Counter = Counter()
    failed = Counter()  # episodes "run" and "failed": a policy failing every episode must not read as a result
    ingested: dict[str, dict[str, Any]] = {}
    plans = [(c, *eval_questions(c, config)) for c in conversations]
    total, done = sum(len(q) for _, q, _ in plans), 0
    for conversation, questions, skipped in plans:
        errors += skipped
        loaded = ingest(store, conversation)
        base = loaded.base
        ingested[conversation.sample_id] = {
            "added": loaded.added, "present": loaded.present, "removed_by_edit": loaded.removed_by_edit,
        }
        if base.count() == 0:
            errors.append({"sample_id": conversation.sample_id, "error": "conversation has no facts to remember"})
            continue
        if not questions:
            continue
        before = dict(zip((q.index for q in questions), score(base, questions, config.reward), strict=True))
        if config.mode == "blind":
            # One episode, every question weighed alike: the reward's target weight becomes 1/n.
            reward_config = replace(config.reward, target_weight=1 / len(questions))
            episode = Episode(base, conversation, "all", None, questions, before, reward_config)
            after, breakdown, failure = episode.run(policy, config, tool_counts, keep_going=True)
            failed["run"] += 1
            if failure:  # the questions were still scored on what the policy managed before it failed
                failed["failed"] += 1
                errors.append({"sample_id": conversation.sample_id, "episode_failed": True, "error": f"episode failed: {failure}"})
            episodes.append(breakdown)
            rows += [_row(conversation, qa, before[qa.index], a, breakdown) for qa, a in zip(questions, after, strict=True)]
            done += len(questions)
            if progress:
                progress(done, total)
            continue
        for qa in questions:
            scored = [qa, *collateral_sample(questions, qa.index, config.reward.collateral_questions)]
            episode = Episode(base, conversation, qa.index, qa.question, scored, before, config.reward)
            failed["run"] += 1
            try:
                after, breakdown, _ = episode.run(policy, config, tool_counts)
                episodes.append(breakdown)
                rows.append(_row(conversation, qa, before[qa.index], after[0], breakdown))
            except Exception as exc:  # one bad question must not end a long evaluation
                failed["failed"] += 1
                errors.append({
                    "sample_id": conversation.sample_id, "qa_index": qa.index, "episode_failed": True,
                    "error": f"{type(exc).__name__}: {exc}",
                })
            done += 1
            if progress:
                progress(done, total)
    report = _report(rows, episodes, errors, tool_counts, conversations, policy_name, config, time.perf_counter() - started)
    share = failed["failed"] / failed["run"] if failed["run"] else 0.0
    report["failures"] = {
        "episodes": failed["run"], "failed": failed["failed"], "share": round(share, 4),
        "threshold": config.max_failure_share, "over_threshold": share > config.max_failure_share,
    }
    report["ingested"] = ingested
    if answerer is not None:
        report["answerer"] = answer_from_contexts(answerer, rows, plans, progress)
        report["seconds"] = round(time.perf_counter() - started, 2)
    return report


@dataclass(frozen=True)
class Episode:
    """One editing episode of an evaluation: its base, the questions it is scored on (`scored[0]` the
    target) and their scores on the base."""

    base: MemoryStore
    conversation: Conversation
    qa_index: int | str
    question: str | None  # visible to the policy (targeted) or None (blind)
    scored: list[QAItem]
    before: dict[int, QAScore]
    reward: RewardConfig

    def run(
        self, policy: BaseChatModel | None, config: EvalConfig, tool_counts: Counter, *, keep_going: bool = False
    ) -> tuple[list[QAScore], RewardBreakdown, str | None]:
        """Fork the base, let the policy edit the fork, score it, drop it (`scored_episode`; kept with
        `config.keep_forks`, also after a failure, but never after Ctrl-C).

        With `keep_going`, a policy that raises is reported in the third value instead of raising.
        """

        def scorer(fork: MemoryStore) -> tuple[list[QAScore], RewardBreakdown]:
            breakdown = compute_reward(self.base, fork, self.scored, self.reward)
            return list(breakdown.fork_scores), breakdown

        done = scored_episode(
            policy,
            self.base,
            trajectory_id(self.conversation.sample_id, self.qa_index),
            self.question,
            scorer,
            max_turns=config.max_turns,
            max_operations=config.max_operations,
            keep=config.keep_forks,
            keep_failed=config.keep_forks,
            keep_going=keep_going,
        )
        if done.result is not None:
            tool_counts.update(done.result.tool_counts)
        after, breakdown = done.score
        return after, breakdown, done.failure


def _row(conversation: Conversation, qa: QAItem, before: QAScore, after: QAScore, breakdown: RewardBreakdown) -> dict[str, Any]:
    """One question of the report: its scores on the base and on the edited fork, and its episode's
    reward with every part (in blind mode the episode is the conversation's)."""
    parts = breakdown.as_dict()
    return {
        "sample_id": conversation.sample_id,
        "qa_index": qa.index,
        "category": qa.category,
        "question": qa.question,
        "answer": qa.answer,
        "before": asdict(before),
        "after": asdict(after),
        "reward": breakdown.reward,
        "parts": {k: v for k, v in parts.items() if k != "reward"},
    }


def _side(rows: list[dict[str, Any]], side: str) -> dict[str, Any]:
    def summary(selected: list[dict[str, Any]]) -> dict[str, Any]:
        scores = [r[side] for r in selected]
        recalls = [s["evidence_recall"] for s in scores if s["evidence_recall"] is not None]
        return {
            "questions": len(scores),
            "qa_score": mean([s["qa_score"] for s in scores]),
            "evidence_recall": mean(recalls),
            "context_tokens": mean([s["context_tokens"] for s in scores]),
        }

    overall = summary(rows)
    overall["by_category"] = by_category(rows, lambda row: row["category"], summary)
    return overall


def _report(rows, episodes, errors, tool_counts, conversations, policy_name, config, seconds) -> dict[str, Any]:
    """The evaluation's summary; `rows` (one per question, with its episode's reward parts) at the end."""
    return {
        "policy": policy_name,
        "mode": config.mode,
        "conversations": [c.sample_id for c in conversations],
        "questions": len(rows),
        "before": _side(rows, "before"),
        "after": _side(rows, "after"),
        "reward_mean": mean([r["reward"] for r in rows]),
        "episodes": len(episodes),
        "memories": {
            "before": mean([e.efficiency.memories_before for e in episodes]),
            "after": mean([e.efficiency.memories_after for e in episodes]),
        },
        "unsupported_tokens": mean([e.faithfulness.unsupported_tokens for e in episodes]),
        "collateral_delta": mean([e.collateral_delta for e in episodes if e.collateral_delta is not None]),
        "tool_calls": dict(sorted(tool_counts.items())),
        "errors": errors,
        "seconds": round(seconds, 2),
        "rows": rows,
    }


def answer_from_contexts(
    answerer: LLMAnswerer,
    rows: list[dict[str, Any]],
    plans: Sequence[tuple[Conversation, list[QAItem], list[dict]]],
    progress: Callable[[int, int], None] | None = None,
) -> dict[str, Any]:
    """The LLM answerer's pass over the scored rows: each question answered (and judged) from the exact
    context the proxy read before and after editing; LoCoMo F1, BLEU-1 and judge accuracy per side and
    category, and the Pearson r of proxy score and answerer F1. Each row gains its answers ("answerer")."""
    by_key = {(c.sample_id, qa.index): qa for c, questions, _ in plans for qa in questions}
    asked = [by_key[(row["sample_id"], row["qa_index"])] for row in rows]
    sides = ("before", "after")
    contexts = {side: [row[side]["context"] for row in rows] for side in sides}
    proxy = {side: [row[side]["qa_score"] for row in rows] for side in sides}
    section, answered = answerer_report(answerer, asked, contexts, proxy, progress)
    for row, answers in zip(rows, answered, strict=True):
        row["answerer"] = answers
    return section


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
    ax.set_ylabel("QA proxy (phrase-level LoCoMo F1 in the context)")
    ax.set_title(f"{report['policy']} policy, {report['mode']} mode: {', '.join(report['conversations'])}")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
