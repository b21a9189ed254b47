"""The QA proxy and the reward's directions, on a real database with the real embedding model."""

from __future__ import annotations

import pytest

from memupdate.rl.locomo import QAItem
from memupdate.rl.qa_proxy import answer_tokens, build_context, qa_overlap, score_questions
from memupdate.rl.reward import RewardConfig, combine, compute_reward, density_factor, size_factor
from memupdate.store import MemoryStore, NewMemory

QA = QAItem(
    index=0,
    question="When did Caroline go to the LGBTQ support group?",
    answer="7 May 2023",
    adversarial_answer=None,
    evidence=("D1:3",),
    category=2,
)
FACTS = [
    ("Caroline went to a LGBTQ support group yesterday and found it powerful", "D1:3"),
    ("Melanie painted a lake sunrise last year", "D1:8"),
    ("Caroline is researching adoption agencies", "D2:1"),
    ("Melanie ran a charity race for mental health", "D2:5"),
    ("Caroline moved from Sweden four years ago", "D3:2"),
    ("Melanie's kids love the beach", "D3:9"),
    ("Caroline gave a talk at a school about her transition", "D4:1"),
]


@pytest.fixture
def base(store: MemoryStore) -> MemoryStore:
    store.create_many(
        [NewMemory(text, metadata={"dia_ids": [dia], "date": "2023-05-08"}, key=f"f{i:04d}") for i, (text, dia) in enumerate(FACTS)]
    )
    return store


@pytest.fixture
def fork(base: MemoryStore) -> MemoryStore:
    return base.fork((*base.namespace, "traj", "t1"))


def test_answer_normalisation() -> None:
    assert answer_tokens("The 7th of May, 2023!") == {"7th", "may", "2023"}
    assert answer_tokens("the") == {"the"}, "function words kept when nothing else is left"
    assert qa_overlap("7 May 2023", ["on", "7", "May,", "2023."]) == 1.0
    assert qa_overlap("7 May 2023", ["in", "May"]) == pytest.approx(1 / 3)


def test_no_op_episode_scores_exactly_zero(base: MemoryStore, fork: MemoryStore) -> None:
    breakdown = compute_reward(base, fork, [QA])
    assert breakdown.reward == 0.0 and breakdown.performance_delta == 0.0
    assert breakdown.efficiency.value == 1.0


def test_adding_the_answer_scores_positive(base: MemoryStore, fork: MemoryStore) -> None:
    fork.create("Caroline went to the LGBTQ support group on 7 May 2023", metadata={"dia_ids": ["D1:3"]})
    breakdown = compute_reward(base, fork, [QA])
    assert breakdown.qa_after == 1.0 > breakdown.qa_before
    assert breakdown.reward > 0


def test_deleting_the_evidence_scores_negative(base: MemoryStore, fork: MemoryStore) -> None:
    qa = QAItem(1, "What is Caroline researching?", "adoption agencies", None, ("D2:1",), 4)
    fork.delete("f0002")
    assert compute_reward(base, fork, [qa]).reward < 0


def test_bloat_lowers_positive_and_never_softens_negative(base: MemoryStore) -> None:
    helpful = base.fork((*base.namespace, "traj", "helpful"))
    helpful.create("Caroline went to the LGBTQ support group on 7 May 2023")
    bloated = base.fork((*base.namespace, "traj", "bloated"))
    bloated.create("Caroline went to the LGBTQ support group on 7 May 2023")
    bloated.create_many([NewMemory(f"filler note number {i} about nothing") for i in range(20)])
    good, good_bloated = compute_reward(base, helpful, [QA]), compute_reward(base, bloated, [QA])
    assert good_bloated.performance_delta == good.performance_delta > 0
    assert 0 < good_bloated.reward < good.reward

    qa = QAItem(1, "What is Caroline researching?", "adoption agencies", None, ("D2:1",), 4)
    harmful = base.fork((*base.namespace, "traj", "harmful"))
    harmful.delete("f0002")
    harmful_bloated = base.fork((*base.namespace, "traj", "harmful-bloated"))
    harmful_bloated.delete("f0002")
    harmful_bloated.create_many([NewMemory(f"filler note number {i} about nothing") for i in range(20)])
    bad, bad_bloated = compute_reward(base, harmful, [qa]), compute_reward(base, harmful_bloated, [qa])
    assert bad.reward < 0 and bad_bloated.reward <= bad.reward


def test_efficiency_factors_point_the_right_way() -> None:
    assert size_factor(100, 100, 1.0) == 1.0 and size_factor(100, 150, 1.0) < 1.0
    assert size_factor(100, 50, 1.0) == 1.0, "shrinking is judged by the QA delta, not rewarded here"
    assert density_factor([10, 12], 60, 1.0) == 1.0 > density_factor([10, 200], 60, 1.0)
    for efficiency in (0.2, 0.7, 1.0):
        assert combine(0.5, efficiency) <= 0.5
        assert combine(-0.5, efficiency) <= -0.5


def test_merging_everything_into_giant_memories_does_not_raise_the_score(base: MemoryStore) -> None:
    questions = [
        QA,
        QAItem(1, "What is Caroline researching?", "adoption agencies", None, ("D2:1",), 4),
        QAItem(2, "What did Melanie run for?", "mental health", None, ("D2:5",), 4),
        QAItem(3, "Where did Caroline move from?", "Sweden", None, ("D3:2",), 4),
    ]
    big = base.fork((*base.namespace, "traj", "giant"))
    filler = " ".join(f"Assorted remark {i} about the weather and the news." for i in range(25))
    keys = [m.key for m in big.list()]
    # Five huge memories: filler first, so the facts fall past the word budget.
    big.replace(keys, [NewMemory(f"{filler} {FACTS[i][0]}. {filler}") for i in range(5)])
    assert all(s.context_words <= 150 for s in score_questions(big, questions))
    before = score_questions(base, questions)
    after = score_questions(big, questions)
    assert sum(s.qa_score for s in after) <= sum(s.qa_score for s in before)
    assert compute_reward(base, big, questions).reward <= 0


def test_word_budget_and_whole_memory_recall(base: MemoryStore) -> None:
    hits = base.search(QA.question, 5)
    words, whole = build_context(hits, word_budget=12)
    assert len(words) == 12
    assert len(whole) <= 1
    score = score_questions(base, [QA], word_budget=150)[0]
    assert score.evidence_recall == 1.0 and score.context_words <= 150


def test_reward_config_changes_the_efficiency(base: MemoryStore, fork: MemoryStore) -> None:
    fork.create_many([NewMemory(f"Caroline went to the support group on 7 May 2023, note {i}") for i in range(5)])
    lenient = compute_reward(base, fork, [QA], RewardConfig(size_penalty=0.0))
    strict = compute_reward(base, fork, [QA], RewardConfig(size_penalty=5.0))
    assert lenient.efficiency.size == 1.0 > strict.efficiency.size
    assert lenient.reward > strict.reward > 0
