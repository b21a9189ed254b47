"""The reward: did the edits make the memory answer questions better, and at what cost?

    reward = performance_delta × memory_efficiency            (when performance_delta ≥ 0)
    reward = performance_delta × (2 − memory_efficiency)      (when performance_delta < 0)

- performance_delta = mean QA proxy on the edited fork − mean QA proxy on the untouched base,
  over the target question (plus, optionally, other questions of the same conversation).
- memory_efficiency = size × density × change, each in (0, 1]:
  - size    = 1 / (1 + size_penalty × growth), growth = max(0, after − before) / before memories.
              Bloat costs; shrinking is free (the QA delta already judges deletions).
  - density = 1 / (1 + density_penalty × share of memories longer than `max_memory_words`).
              Huge memories are hard to retrieve and read.
  - change  = 1 / (1 + change_penalty × max(0, edited − free_edits) / before).
              Rewriting half the memory for one question is a cost even when it helps.
An inefficient episode must never make a harmful edit look less harmful: on a negative delta the
inefficiency scales the penalty up (by at most 2×), never down. A no-op scores exactly 0: the fork
then holds the same rows and embeddings as the base, and search breaks ties by key.

    from memupdate.rl.reward import compute_reward
    breakdown = compute_reward(base_store, fork_store, [qa_item])
    breakdown.reward, breakdown.performance_delta, breakdown.efficiency.value
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from memupdate.rl.qa_proxy import DEFAULT_TOP_K, DEFAULT_WORD_BUDGET, QAScore, Question, score_questions
from memupdate.store import MemoryRecord, MemoryStore


@dataclass(frozen=True)
class RewardConfig:
    """Every knob of the reward, with its default; `configs/` and the CLI pass these through."""

    top_k: int = DEFAULT_TOP_K
    word_budget: int = DEFAULT_WORD_BUDGET
    size_penalty: float = 1.0
    density_penalty: float = 1.0
    max_memory_words: int = 60
    change_penalty: float = 1.0
    free_edits: int = 10
    # Targeted episodes also score this many other questions of the conversation (collateral damage).
    collateral_questions: int = 8


@dataclass(frozen=True)
class Efficiency:
    """memory_efficiency and its factors for one edited fork (see the module docstring)."""

    value: float
    size: float
    density: float
    change: float
    memories_before: int
    memories_after: int
    edited: int


@dataclass(frozen=True)
class RewardBreakdown:
    reward: float
    performance_delta: float
    qa_before: float
    qa_after: float
    efficiency: Efficiency

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def size_factor(before: int, after: int, penalty: float) -> float:
    growth = max(0, after - before) / max(before, 1)
    return 1.0 / (1.0 + penalty * growth)


def density_factor(word_counts: Sequence[int], max_words: int, penalty: float) -> float:
    if not word_counts:
        return 1.0
    long_share = sum(count > max_words for count in word_counts) / len(word_counts)
    return 1.0 / (1.0 + penalty * long_share)


def change_factor(edited: int, before: int, free_edits: int, penalty: float) -> float:
    return 1.0 / (1.0 + penalty * max(0, edited - free_edits) / max(before, 1))


def combine(performance_delta: float, efficiency: float) -> float:
    """The one place delta and efficiency meet (see the module docstring for why the sign matters)."""
    if performance_delta >= 0:
        return performance_delta * efficiency
    return performance_delta * (2.0 - efficiency)


def memory_efficiency(
    before: dict[str, MemoryRecord], after: dict[str, MemoryRecord], config: RewardConfig = RewardConfig()
) -> Efficiency:
    """size × density × change of going from the `before` snapshot to the `after` one."""
    edited = sum(before[k].as_event() != after[k].as_event() for k in before.keys() & after.keys())
    edited += len(before.keys() ^ after.keys())
    size = size_factor(len(before), len(after), config.size_penalty)
    density = density_factor(
        [len(m.content.split()) for m in after.values()], config.max_memory_words, config.density_penalty
    )
    change = change_factor(edited, len(before), config.free_edits, config.change_penalty)
    return Efficiency(size * density * change, size, density, change, len(before), len(after), edited)


def mean_qa(scores: Sequence[QAScore]) -> float:
    return sum(s.qa_score for s in scores) / len(scores) if scores else 0.0


def compute_reward(
    base: MemoryStore,
    fork: MemoryStore,
    questions: Sequence[Question],
    config: RewardConfig = RewardConfig(),
    *,
    base_scores: Sequence[QAScore] | None = None,
    base_snapshot: dict[str, MemoryRecord] | None = None,
) -> RewardBreakdown:
    """Score the edited `fork` against the untouched `base` on `questions`.

    When scoring many forks of one base, pass `base_scores` (`score_questions(base, questions)`) and
    `base_snapshot` (`base.snapshot()`), computed once: the base is never written during an episode.
    """
    if not questions:
        raise ValueError("compute_reward needs at least one question with an answer")
    if base_scores is None:
        base_scores = score_questions(base, questions, top_k=config.top_k, word_budget=config.word_budget)
    fork_scores = score_questions(fork, questions, top_k=config.top_k, word_budget=config.word_budget)
    qa_before, qa_after = mean_qa(base_scores), mean_qa(fork_scores)
    delta = qa_after - qa_before
    efficiency = memory_efficiency(base_snapshot or base.snapshot(), fork.snapshot(), config)
    return RewardBreakdown(
        reward=combine(delta, efficiency.value),
        performance_delta=delta,
        qa_before=qa_before,
        qa_after=qa_after,
        efficiency=efficiency,
    )


def collateral_sample(questions: Sequence[Question], target_index: int, k: int) -> list[Question]:
    """`k` questions other than the target (the one whose `.index` is `target_index`), the same sample
    for every rollout of that target: seeded by its index, so base and forks are scored alike."""
    import random

    others = [q for q in questions if getattr(q, "index", None) != target_index]
    return random.Random(target_index).sample(others, min(k, len(others)))


def questions_from_extra_info(extra_info: dict[str, Any]) -> list[Question]:
    """The scored questions of a preprocessed verl row: the target first, then `extra_info["collateral"]`
    (written by `memupdate data preprocess`); the shape `compute_reward` takes."""
    from memupdate.rl.locomo import QAItem

    def item(row: dict[str, Any]) -> QAItem:
        return QAItem(
            index=int(row.get("qa_index", row.get("index", -1))),
            question=str(row["question"]),
            answer=None if row.get("answer") is None else str(row["answer"]),
            adversarial_answer=row.get("adversarial_answer"),
            evidence=tuple(row.get("evidence") or ()),
            category=int(row.get("category", 0)),
        )

    return [item(extra_info)] + [item(row) for row in extra_info.get("collateral") or []]
