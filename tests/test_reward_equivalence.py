"""The reward's fast path (batched searches, the fork-vs-base diff in SQL, cached tokenisation) gives
exactly the rewards of the plain path it replaced, kept here as the reference: one `search_by_vector`
per question, the words tokenised one by one, and two Python snapshots compared key by key.

Real database and real embedding model; the forks are edited through `run_tool`, as the agent edits them.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence

import pytest

from memupdate.agent.dates import MONTHS
from memupdate.agent.tools import run_tool
from memupdate.rl.data.locomo import QAItem
from memupdate.rl.scoring.faithfulness import check_faithfulness
from memupdate.rl.scoring.metrics import normalized_tokens
from memupdate.rl.scoring.qa_proxy import Context, QAScore, evidence_recall, qa_score, score_questions
from memupdate.rl.scoring.reward import (
    RewardBreakdown,
    RewardConfig,
    collateral_sample,
    combine,
    compute_reward,
    memory_efficiency,
    performance_delta,
    unsupported_penalty,
)
from memupdate.store import MemoryStore, NewMemory, ScoredMemory

NAMES = ["Caroline", "Melanie", "Jon", "Gina"]
PLACES = ["Boston", "Lisbon", "Kyoto", "Denver", "Chicago", "Portland"]
ACTIVITIES = ["hiking", "camping", "kayaking", "surfing", "skiing", "cycling"]


# -- the reference: the plain path, as it was before the fast path -------------------------------


def reference_context(hits: Sequence[ScoredMemory], budget: int) -> Context:
    segments, texts, keys, whole = [], [], [], []
    used = 0
    for hit in hits:
        if used >= budget:
            break
        words, tokens = [], []
        for word in hit.memory.content.split():
            word_tokens = normalized_tokens(word)
            if used + len(tokens) + len(word_tokens) > budget:
                break
            words.append(word)
            tokens.extend(word_tokens)
        if not words:
            break
        if len(words) == len(hit.memory.content.split()):
            whole.append(hit)
        used += len(tokens)
        segments.append(tuple(tokens))
        texts.append(" ".join(words))
        keys.append(hit.memory.key)
    return Context(tuple(segments), tuple(texts), tuple(keys), tuple(whole))


def reference_scores(store: MemoryStore, questions: Sequence[QAItem], config: RewardConfig) -> list[QAScore]:
    vectors = store.embedder.embed([q.question for q in questions])
    results = []
    for question, vector in zip(questions, vectors, strict=True):
        context = reference_context(store.search_by_vector(vector, config.candidates), config.context_tokens)
        results.append(
            QAScore(qa_score(question, context), evidence_recall(question.evidence, context.whole), context.tokens,
                    context.keys, context.text)
        )
    return results


def reference_reward(base: MemoryStore, fork: MemoryStore, questions: Sequence[QAItem], config: RewardConfig) -> RewardBreakdown:
    before, after = reference_scores(base, questions, config), reference_scores(fork, questions, config)
    base_snapshot, fork_snapshot = base.snapshot(), fork.snapshot()
    delta, target_delta, collateral_delta = performance_delta(before, after, config)
    efficiency = memory_efficiency(base_snapshot, fork_snapshot, config)
    faithfulness = check_faithfulness(base, base_snapshot, fork_snapshot)
    penalty = unsupported_penalty(faithfulness, config)
    return RewardBreakdown(
        combine(delta, efficiency.value) - penalty, delta, target_delta, collateral_delta, before[0].qa_score,
        after[0].qa_score, before[0].context_tokens, after[0].context_tokens, efficiency, faithfulness, penalty,
    )


# -- a base, its questions and edited forks ---------------------------------------------------


def facts(n: int, seed: int = 0) -> list[tuple[NewMemory, QAItem]]:
    rng, out, seen = random.Random(seed), [], set()
    while len(out) < n:
        name, place, activity = rng.choice(NAMES), rng.choice(PLACES), rng.choice(ACTIVITIES)
        day, month, year = rng.randint(1, 28), rng.randrange(12), rng.randint(2021, 2023)
        text = f"{name} went {activity} in {place} on {day} {MONTHS[month]} {year}."
        if text in seen:
            continue
        seen.add(text)
        i = len(out)
        dia = f"D{i // 5 + 1}:{i % 5 + 1}"
        metadata = {"dia_ids": [dia], "date": f"{year}-{month + 1:02d}-{day:02d}", "speaker": name,
                    "turns": {dia: f"{name}: I went {activity} last week in {place}!"}}
        question = QAItem(index=i, question=f"Where did {name} go {activity} on {day} {MONTHS[month]} {year}?",
                          answer=place, adversarial_answer=None, evidence=(dia,), category=4 if i % 3 else 2)
        out.append((NewMemory(text, kind="episodic", metadata=metadata, key=f"f{i:04d}"), question))
    return out


EDITS = {
    "no-op": [],
    "create the answer": [("manage_memory", {"action": "create", "content": "Caroline went hiking in Kyoto on 3 May 2022."})],
    "create invented words": [("manage_memory", {"action": "create", "content": "Not mentioned: zebra quasar 1999 dates."})],
    "update": [("manage_memory", {"action": "update", "memory_id": "f0001", "content": "Melanie surfed in Boston."})],
    "delete two": [("delete_memory", {"memory_id": "f0000"}), ("delete_memory", {"memory_id": "f0002"})],
    "merge": [("merge_memory", {"memory_ids": ["f0003", "f0004"], "strategy": "concatenate"})],
    "split": [("split_memory", {"memory_id": "f0005", "parts": ["Someone went out.", "It was in a city."]})],
    "delete most": [],
    "giant memory": [("manage_memory", {"action": "create", "content": " ".join(["Gina went kayaking in Denver"] * 20)})],
    "mixed": [
        ("manage_memory", {"action": "update", "memory_id": "f0006", "content": "Jon went camping in Lisbon on 9 June 2021."}),
        ("manage_memory", {"action": "create", "content": "Jon went camping in Lisbon."}),
        ("delete_memory", {"memory_id": "f0007"}),
        ("merge_memory", {"memory_ids": ["f0008", "f0009"], "strategy": "summarize"}),
    ],
}


@pytest.fixture
def bank(store: MemoryStore) -> tuple[MemoryStore, list[QAItem]]:
    items = facts(60)  # more than the base hits kept per question (2 x 20): the merge must not see them all
    store.create_many([memory for memory, _ in items])
    return store, [question for _, question in items]


@pytest.mark.parametrize("edit", sorted(EDITS))
def test_fast_reward_equals_the_plain_path(bank, edit: str) -> None:
    base, questions = bank
    fork = base.fork((*base.namespace, "traj", edit.replace(" ", "-")))
    for name, arguments in EDITS[edit]:
        result = run_tool(fork, name, arguments)
        assert result.ok, result.text
    if edit == "delete most":  # more than the base hits kept: the fork is searched directly
        fork.replace([f"f{i:04d}" for i in range(45)], [])
    assert_rewards_equal(base, fork, questions, edit)
    fork.drop()


def test_a_base_written_after_scoring_is_read_again(bank) -> None:
    """The base's hits are kept between rewards while its version (count, last seq, last update) holds."""
    base, questions = bank
    fork = base.fork((*base.namespace, "traj", "t"))
    run_tool(fork, "manage_memory", {"action": "create", "content": "Caroline went hiking in Kyoto on 3 May 2022."})
    assert_rewards_equal(base, fork, questions, "before the base is written")
    base.update("f0001", content="Melanie went surfing in Boston.")
    base.delete("f0002")
    base.create("Jon went camping in Lisbon on 9 June 2021.", metadata={"dia_ids": ["D9:9"]})
    assert_rewards_equal(base, fork, questions, "after the base is written")


def assert_rewards_equal(base: MemoryStore, fork: MemoryStore, questions: list[QAItem], edit: str) -> None:
    config = RewardConfig()
    for target in questions[:6]:
        scored = [target, *collateral_sample(questions, target.index, config.collateral_questions)]
        reference = reference_reward(base, fork, scored, config).as_dict()
        base_scores = score_questions(base, scored, context_tokens=config.context_tokens, candidates=config.candidates)
        for fast in (
            compute_reward(base, fork, scored, config).as_dict(),
            compute_reward(base, fork, scored, config, base_scores=base_scores, base_snapshot=base.snapshot()).as_dict(),
        ):
            assert math.isclose(fast["reward"], reference["reward"], rel_tol=0.0, abs_tol=1e-9), edit
            assert fast | {"reward": None} == reference | {"reward": None}, f"{edit}: the breakdowns differ"


def test_batched_search_returns_the_same_hits(bank) -> None:
    base, questions = bank
    vectors = base.embedder.embed([q.question for q in questions[:10]] + ["Melanie", "a question about nothing"])
    batched = base.search_many_by_vector(vectors, 7)
    assert batched == [base.search_by_vector(vector, 7) for vector in vectors]
    assert base.search_many_by_vector([], 7) == []
