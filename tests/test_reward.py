"""The QA proxy and the reward's directions, on a real database with the real embedding model."""

from __future__ import annotations

import pytest

from memupdate.scoring.qa_proxy import build_context, phrase_f1, score_questions
from memupdate.scoring.questions import QAItem
from memupdate.scoring.reward import RewardConfig, combine, compute_reward, density_factor, size_factor
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


def test_phrase_credit_needs_the_answer_together() -> None:
    gold = ["7", "may", "2023"]
    assert phrase_f1(gold, [["she", "went", "on", "7", "may", "2023"]]) == 1.0
    assert phrase_f1(gold, [["in", "may"]]) == pytest.approx(0.4)
    scattered = [["7", "april", "june", "may", "1", "9", "2023"]]
    assert phrase_f1(gold, scattered) < 0.7, "tokens spread over a memory are not the phrase"
    assert phrase_f1(gold, [["7", "may"], ["2023"]]) < 1.0, "windows never cross memories"


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
    bloated.create_many([NewMemory(FACTS[(3, 5, 6)[i % 3]][0]) for i in range(20)])
    good, good_bloated = compute_reward(base, helpful, [QA]), compute_reward(base, bloated, [QA])
    assert good_bloated.performance_delta == good.performance_delta > 0
    assert 0 < good_bloated.reward < good.reward

    qa = QAItem(1, "What is Caroline researching?", "adoption agencies", None, ("D2:1",), 4)
    harmful = base.fork((*base.namespace, "traj", "harmful"))
    harmful.delete("f0002")
    harmful_bloated = base.fork((*base.namespace, "traj", "harmful-bloated"))
    harmful_bloated.delete("f0002")
    harmful_bloated.create_many([NewMemory(FACTS[(3, 5, 6)[i % 3]][0]) for i in range(20)])
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
    assert all(s.context_tokens <= 120 for s in score_questions(big, questions))
    before = score_questions(base, questions)
    after = score_questions(big, questions)
    assert sum(s.qa_score for s in after) <= sum(s.qa_score for s in before)
    assert compute_reward(base, big, questions).reward <= 0


def test_token_budget_and_whole_memory_recall(base: MemoryStore) -> None:
    hits = base.search(QA.question, 5)
    context = build_context(hits, budget=12)
    assert context.tokens <= 12 and len(context.whole) <= 1
    score = score_questions(base, [QA], context_tokens=120)[0]
    assert score.evidence_recall == 1.0 and score.context_tokens <= 120
    assert score.context.splitlines()[0] == hits[0].memory.content


def test_a_comma_joined_blob_is_one_token_of_the_budget(base: MemoryStore) -> None:
    """The budget counts the scorer's tokens, so punctuation cannot pack words past it."""
    blob = ",".join(["Caroline", "went", "to", "LGBTQ", "support", "group", "on", "7", "May", "2023"] * 20)
    hits = [type(hit)(memory=type(hit.memory)(key="blob", namespace=("t",), content=blob), score=1.0)
            for hit in base.search(QA.question, 1)]
    context = build_context(hits, budget=120)
    assert context.tokens == 1
    assert score_questions(base, [QA])[0].qa_score < 1.0


def test_reward_config_changes_the_efficiency(base: MemoryStore, fork: MemoryStore) -> None:
    fork.create_many([NewMemory("Caroline went to the support group on 7 May 2023") for _ in range(5)])
    lenient = compute_reward(base, fork, [QA], RewardConfig(size_penalty=0.0))
    strict = compute_reward(base, fork, [QA], RewardConfig(size_penalty=5.0))
    assert lenient.efficiency.size == 1.0 > strict.efficiency.size
    assert lenient.reward > strict.reward > 0


# -- legit edits earn a positive reward; their words are all supported ------------------------------


def test_anchoring_a_relative_date_earns_reward(base: MemoryStore, fork: MemoryStore) -> None:
    fork.update("f0000", content="Caroline went to a LGBTQ support group yesterday (7 May 2023) and found it powerful")
    breakdown = compute_reward(base, fork, [QA])
    assert breakdown.faithfulness.unsupported_tokens == 0, breakdown.faithfulness.examples
    assert breakdown.qa_after > breakdown.qa_before and breakdown.reward > 0


def test_merging_true_duplicates_earns_reward(store: MemoryStore) -> None:
    """Two copies of one fact fill a tight budget; merged, the budget reaches the answer."""
    duplicate = "Caroline moved to a new city four years ago to start over"
    store.create_many([
        NewMemory(duplicate, metadata={"dia_ids": ["D3:1"], "date": "2023-05-08"}, key="f0000"),
        NewMemory(duplicate + ".", metadata={"dia_ids": ["D3:1"], "date": "2023-05-08"}, key="f0001"),
        NewMemory("Caroline moved from Sweden", metadata={"dia_ids": ["D3:2"], "date": "2023-05-08"}, key="f0002"),
        *[NewMemory(text, key=f"f{i + 3:04d}") for i, (text, _) in enumerate(FACTS[1:5])],
    ])
    qa = QAItem(3, "Where did Caroline move to a new city from?", "Sweden", None, ("D3:2",), 4)
    ranked = [hit.memory.key for hit in store.search(qa.question, 3)]
    assert ranked[-1] == "f0002", f"the duplicates must outrank the answer for this test: {ranked}"
    config = RewardConfig(context_tokens=22)  # the two copies fill it; one copy and the answer fit
    fork = store.fork((*store.namespace, "traj", "dedup"))
    fork.replace(["f0000", "f0001"], [NewMemory(duplicate, metadata={"merged_from": ["f0000", "f0001"]})])
    breakdown = compute_reward(store, fork, [qa], config)
    # Proxy v3: the kept copy says all the question says and not the answer, above it: a rival, half the credit.
    assert breakdown.qa_before == 0.0 and breakdown.qa_after == 0.5
    assert breakdown.faithfulness.unsupported_tokens == 0 and breakdown.reward > 0


def test_a_memory_built_from_the_source_turns_earns_reward(store: MemoryStore) -> None:
    turn = "Caroline: I've been looking at Rainbow Families, an adoption agency in Portland."
    store.create_many([
        NewMemory("Caroline is researching adoption agencies", key="f0000",
                  metadata={"dia_ids": ["D2:1"], "date": "2023-05-08", "turns": {"D2:1": turn}}),
        *[NewMemory(text, key=f"f{i + 1:04d}") for i, (text, _) in enumerate(FACTS[3:])],
    ])
    qa = QAItem(1, "Which adoption agency is Caroline looking at?", "Rainbow Families", None, ("D2:1",), 4)
    fork = store.fork((*store.namespace, "traj", "turns"))
    fork.create("Caroline is looking at Rainbow Families, an adoption agency in Portland")
    breakdown = compute_reward(store, fork, [qa])
    assert breakdown.faithfulness.unsupported_tokens == 0, breakdown.faithfulness.examples
    assert breakdown.reward > 0


def test_invented_words_cost_reward_even_when_they_help(base: MemoryStore, fork: MemoryStore) -> None:
    """Writing the answer with words no source holds still gains QA, but pays per unsupported token."""
    qa = QAItem(1, "What is Caroline researching?", "adoption agencies in Oslo", None, ("D2:1",), 4)
    fork.update("f0002", content="Caroline is researching adoption agencies in Oslo")
    breakdown = compute_reward(base, fork, [qa])
    assert breakdown.performance_delta > 0
    assert breakdown.faithfulness.unsupported_tokens == 1 and breakdown.faithfulness.examples == ("oslo",)
    assert breakdown.unsupported_penalty == pytest.approx(RewardConfig().unsupported_token_cost)


def test_a_merge_of_a_merge_is_as_faithful_as_one_merge(base: MemoryStore, fork: MemoryStore) -> None:
    """A merge whose source an earlier merge of the episode made draws on that merge's sources too: the
    tool's own text pays nothing (before, the first merge's words counted as invented), and words no
    source holds still pay, however many merges deep."""
    from memupdate.agent.tools import run_tool

    qa = QAItem(1, "What is Caroline researching?", "adoption agencies", None, ("D2:1",), 4)
    first = run_tool(fork, "merge_memory", {"memory_ids": ["f0000", "f0001"]})
    assert first.ok, first.text
    (made,) = [m.key for m in fork.list() if m.key.startswith("m")]  # a handle the tool made (`new_key`)
    assert run_tool(fork, "merge_memory", {"memory_ids": [made, "f0002"]}).ok
    chained = compute_reward(base, fork, [qa]).faithfulness
    once = base.fork((*base.namespace, "traj", "once"))
    assert run_tool(once, "merge_memory", {"memory_ids": ["f0000", "f0001", "f0002"]}).ok
    assert chained.writes == 1 and chained.unsupported_tokens == 0, chained.examples
    assert chained.written_tokens == compute_reward(base, once, [qa]).faithfulness.written_tokens

    (last,) = [m.key for m in fork.list() if m.key.startswith("m")]  # the first merge is gone into it
    fork.update(last, content=fork.get(last).content + " Caroline is in Oslo.")
    assert compute_reward(base, fork, [qa]).faithfulness.examples == ("oslo",)
