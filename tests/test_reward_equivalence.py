"""The reward's fast path (batched searches, the fork-vs-base diff in SQL merged into the base's kept hits,
kept base scores and snapshot) gives exactly the rewards of the plain path, `scoring/reward_spec.py`:
one `search_by_vector` per question, nothing kept, and two Python snapshots compared key by key.

Real database and real embedding model; the forks are edited through `run_tool`, as the agent edits them.
"""

from __future__ import annotations

import math
import random
from types import SimpleNamespace

import pytest

from memupdate.agent.tools import run_tool
from memupdate.scoring.base_cache import BaseCache, base_cache
from memupdate.scoring.questions import QAItem, collateral_sample
from memupdate.scoring.reward import RewardConfig, compute_reward
from memupdate.scoring.reward_spec import spec_reward
from memupdate.store import MemoryStore, NewMemory
from memupdate.text.dates import MONTHS

NAMES = ["Caroline", "Melanie", "Jon", "Gina"]
PLACES = ["Boston", "Lisbon", "Kyoto", "Denver", "Chicago", "Portland"]
ACTIVITIES = ["hiking", "camping", "kayaking", "surfing", "skiing", "cycling"]


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
        reference = spec_reward(base, fork, scored, config)
        base_cache.clear()
        for fast in (compute_reward(base, fork, scored, config), compute_reward(base, fork, scored, config)):  # cold, warm
            assert math.isclose(fast.reward, reference.reward, rel_tol=0.0, abs_tol=1e-9), edit
            assert fast.as_dict() | {"reward": None} == reference.as_dict() | {"reward": None}, f"{edit}: the breakdowns differ"
            assert (fast.base_scores, fast.fork_scores) == (reference.base_scores, reference.fork_scores), edit


def test_a_question_whose_hits_the_fork_left_alone_keeps_the_base_score(bank, monkeypatch) -> None:
    """Warm, only the questions whose top hits the edit moved are scored again; the rest keep the base's score."""
    from memupdate.scoring import qa_proxy

    base, questions = bank
    fork = base.fork((*base.namespace, "traj", "kept"))
    run_tool(fork, "manage_memory", {"action": "update", "memory_id": "f0001", "content": "Melanie surfed in Boston."})
    scored = [questions[1], *collateral_sample(questions, 1, 8)]
    compute_reward(base, fork, scored)  # warm: the base's hits and scores are kept
    scoring, calls = qa_proxy._score, []
    monkeypatch.setattr(qa_proxy, "_score", lambda question, context: calls.append(question) or scoring(question, context))
    fast = compute_reward(base, fork, scored)

    def top(store: MemoryStore, question: QAItem) -> list[str]:
        return [hit.memory.key for hit in store.search(question.question, RewardConfig().candidates)]

    moved = [q for q in scored if top(fork, q) != top(base, q) or "f0001" in top(base, q)]
    assert questions[1] in moved and len(moved) < len(scored)  # the update moved the target's hits, not all
    assert calls == moved
    assert fast.as_dict() | {"reward": None} == spec_reward(base, fork, scored).as_dict() | {"reward": None}
    fork.drop()


def test_reloading_the_base_invalidates_what_was_kept_of_it(bank) -> None:
    """A worker that outlives a reload of its base scores against the new base, not the one it kept."""
    base, questions = bank
    fork = base.fork((*base.namespace, "traj", "reload"))
    run_tool(fork, "manage_memory", {"action": "create", "content": "Caroline went hiking in Kyoto on 3 May 2022."})
    scored = [questions[1], *collateral_sample(questions, 1, 8)]
    kept = compute_reward(base, fork, scored)
    assert len(base_cache) > 0
    # The reload: the same keys, other texts (as a re-ingestion with other facts writes them).
    rows = base.snapshot()
    base.drop()
    base.create_many([NewMemory(f"{m.content} Later moved to Oslo.", kind=m.kind, metadata=m.metadata, key=m.key)
                      for m in rows.values()])
    reloaded = compute_reward(base, fork, scored)
    reference = spec_reward(base, fork, scored)
    assert math.isclose(reloaded.reward, reference.reward, rel_tol=0.0, abs_tol=1e-9)
    assert reloaded.as_dict() | {"reward": None} == reference.as_dict() | {"reward": None}
    assert reloaded.base_scores == reference.base_scores != kept.base_scores
    fork.drop()


def test_base_cache_keeps_a_value_for_one_version_of_one_base() -> None:
    cache, computed = BaseCache(max_entries=3), []
    base = SimpleNamespace(engine=SimpleNamespace(url="postgresql://db"), path="locomo/conv-26")
    other = SimpleNamespace(engine=base.engine, path="locomo/conv-30")

    def compute(keys: list[str]):
        def values(missing: list[int]) -> list[str]:
            computed.extend(keys[i] for i in missing)
            return [f"{keys[i]}@{len(computed)}" for i in missing]
        return values

    assert cache.lookup(base, (60, 7), ["a", "b"], compute(["a", "b"])) == ["a@2", "b@2"]
    assert cache.lookup(base, (60, 7), ["b", "a"], compute(["b", "a"])) == ["b@2", "a@2"]  # kept
    assert cache.lookup(base, (60, 9), ["a"], compute(["a"])) == ["a@3"]  # the base moved on
    assert cache.lookup(other, (60, 9), ["a"], compute(["a"])) == ["a@4"]  # another base
    assert computed == ["a", "b", "a", "a"] and len(cache) == 3
    cache.lookup(base, (60, 9), ["c"], compute(["c"]))
    assert len(cache) == 3  # bounded: the least recently used entry ("b") went
    assert cache.lookup(base, (60, 7), ["b"], compute(["b"])) == ["b@6"]


def test_batched_search_returns_the_same_hits(bank) -> None:
    base, questions = bank
    vectors = base.embedder.embed([q.question for q in questions[:10]] + ["Melanie", "a question about nothing"])
    batched = base.search_many_by_vector(vectors, 7)
    assert batched == [base.search_by_vector(vector, 7) for vector in vectors]
    assert base.search_many_by_vector([], 7) == []
