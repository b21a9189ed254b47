"""The reward computed the plain way: the executable specification of `reward.compute_reward`.

    from memupdate.scoring.reward_spec import spec_reward
    spec_reward(base, fork, [target, *collateral]).reward == compute_reward(base, fork, [...]).reward  # to 1e-9

Nothing here is fast, on purpose: one `search_by_vector` per question on each side, nothing kept
between calls, and the fork's snapshot compared with the base's key by key in Python. The fast path
(batched searches, the fork-vs-base diff in SQL merged into the base's kept hits, kept base scores and
snapshot) must give the same breakdown; `tests/test_reward_equivalence.py` holds it to that on real
forks, and `bench/reward.py` times it as the baseline. What does not read the store is shared: the
context a list of hits fills (`build_context`), the QA credit, and the formula (`combine`, the
efficiency factors, the penalty). The QA proxy only (`qa="proxy"`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from memupdate.scoring.faithfulness import Faithfulness, faithfulness_of_writes
from memupdate.scoring.qa_proxy import QAScore, Question, build_context, evidence_recall, qa_score
from memupdate.scoring.reward import (
    Efficiency,
    RewardBreakdown,
    RewardConfig,
    combine,
    efficiency_of_changes,
    performance_delta,
    unsupported_penalty,
)
from memupdate.store import MemoryRecord, MemoryStore, NamespaceChanges


def spec_scores(store: MemoryStore, questions: Sequence[Question], config: RewardConfig) -> list[QAScore]:
    """Each question's QA proxy score on `store`, one search per question."""
    if config.qa != "proxy":
        raise ValueError(f"the reward's specification covers qa='proxy' only, not qa={config.qa!r}")
    vectors = store.embedder.embed([q.question for q in questions])
    results = []
    for question, vector in zip(questions, vectors, strict=True):
        context = build_context(store.search_by_vector(vector, config.candidates), config.context_tokens)
        results.append(
            QAScore(qa_score(question, context), evidence_recall(question.evidence, context.whole), context.tokens,
                    context.keys, context.text)
        )
    return results


def written_memories(before: Mapping[str, MemoryRecord], after: Mapping[str, MemoryRecord]) -> list[MemoryRecord]:
    """The fork's memories whose text the base does not hold under the same key."""
    return [m for key, m in after.items() if key not in before or before[key].content != m.content]


def memory_efficiency(
    before: Mapping[str, MemoryRecord], after: Mapping[str, MemoryRecord], config: RewardConfig = RewardConfig()
) -> Efficiency:
    """size x density x change of going from the `before` snapshot to the `after` one."""
    edited = sum(before[k].as_event() != after[k].as_event() for k in before.keys() & after.keys())
    edited += len(before.keys() ^ after.keys())
    changes = NamespaceChanges(len(before), len(after), edited, written_memories(before, after))
    return efficiency_of_changes(changes, config)


def check_faithfulness(
    base: MemoryStore, before: Mapping[str, MemoryRecord], after: Mapping[str, MemoryRecord]
) -> Faithfulness:
    """Unsupported tokens of the fork's writes, found by comparing the two snapshots."""
    return faithfulness_of_writes(base, before, written_memories(before, after))


def spec_reward(
    base: MemoryStore,
    fork: MemoryStore,
    questions: Sequence[Question],
    config: RewardConfig = RewardConfig(),
    *,
    base_scores: Sequence[QAScore] | None = None,
    base_snapshot: Mapping[str, MemoryRecord] | None = None,
) -> RewardBreakdown:
    """The reward of `fork` against `base`, read the plain way. `base_scores` (`spec_scores(base, ...)`)
    and `base_snapshot` may be given when one base is scored against many forks."""
    before = list(base_scores) if base_scores is not None else spec_scores(base, questions, config)
    after = spec_scores(fork, questions, config)
    base_snapshot = base_snapshot if base_snapshot is not None else base.snapshot()
    fork_snapshot = fork.snapshot()
    delta, target_delta, collateral_delta = performance_delta(before, after, config)
    efficiency = memory_efficiency(base_snapshot, fork_snapshot, config)
    faithfulness = check_faithfulness(base, base_snapshot, fork_snapshot)
    penalty = unsupported_penalty(faithfulness, config)
    return RewardBreakdown(
        combine(delta, efficiency.value) - penalty, delta, target_delta, collateral_delta, before[0].qa_score,
        after[0].qa_score, before[0].context_tokens, after[0].context_tokens, efficiency, faithfulness, penalty,
        tuple(before), tuple(after),
    )
