"""The heuristic policy's plans on the shipped sample conversation (real database and embeddings)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from memupdate.agent.graph import run_episode
from memupdate.agent.policies.heuristic import HeuristicPolicy
from memupdate.judge import Verdict, later
from memupdate.judge.decision import AutoApply, operation
from memupdate.rl.data.ingest import ingest_conversation
from memupdate.rl.data.locomo import load_sample
from memupdate.store import MemoryStore, NewMemory
from memupdate.text.dates import anchored


@pytest.fixture
def base(store: MemoryStore):
    conversation = replace(load_sample()[0], sample_id=f"sample-{store.namespace[-1]}")
    base = ingest_conversation(store, conversation)
    yield base
    for ns in store.list_namespaces(prefix=base.namespace):
        store.scoped(ns).drop()


def test_targeted_plan_searches_consolidates_and_anchors(base: MemoryStore) -> None:
    plan = HeuristicPolicy(store=base).plan(base, "When did Nadia run the half marathon?")
    names = [name for name, _ in plan]
    assert names[0] == "search_memory" and "merge_memory" in names and "manage_memory" in names
    assert "split_memory" not in names, "splitting is off by default"
    digest = plan[names.index("merge_memory")][1]
    assert "content" not in digest, "the digest is the tool's own text: each fact's words and date, nothing written"
    assert len(plan) <= 30
    touched = [k for name, args in plan for k in args.get("memory_ids", [args.get("memory_id")]) if k]
    assert len(touched) == len(set(touched)), "no step touches a memory an earlier step changed"


def test_blind_plan_is_seedable_and_dates_through_the_tool(base: MemoryStore) -> None:
    policy = HeuristicPolicy(store=base, max_operations=6, seed=1)
    plan = policy.plan(base, None)
    assert plan == HeuristicPolicy(store=base, max_operations=6, seed=1).plan(base, None)
    assert len(plan) == 6 and plan[0][0] == "sample_memory"
    by_key = {m.key: m for m in base.list()}
    datings = [args for name, args in plan[1:] if name == "manage_memory"]
    assert datings and all(name in ("manage_memory", "delete_memory") for name, _ in plan[1:])
    for args in datings:
        assert "content" not in args, "the tool dates the memory: no text written"
        assert anchored(by_key[args["memory_id"]]) != by_key[args["memory_id"]].content, "relative dates anchored first"


def test_split_packed_splits_through_the_tool(base: MemoryStore) -> None:
    policy = HeuristicPolicy(store=base, split_packed=True, max_operations=60)
    splits = [args for name, args in policy.plan(base, None) if name == "split_memory"]
    assert splits and all(len(args["parts"]) >= 2 for args in splits)
    fork = base.fork((*base.namespace, "traj", "split"))
    result = run_episode(policy, fork, max_operations=60)
    assert result.tool_counts["split_memory"] == len(splits) and result.failed_calls == 0
    assert fork.count() > base.count() - result.tool_counts["merge_memory"]


def test_anchored_uses_the_memory_date(base: MemoryStore) -> None:
    relative = next(m for m in base.list() if "yesterday" in m.content.lower())
    text = anchored(relative)
    assert text != relative.content and "2024" in text
    assert anchored(replace(relative, metadata={})) == relative.content


def test_stepwise_teacher_edits_only_what_its_search_showed(base: MemoryStore) -> None:
    """The teacher a language model imitates: search alone first, then edit only the handles it showed."""
    from langchain_core.messages import AIMessage, ToolMessage

    policy = HeuristicPolicy(store=base, seed=1, stepwise=8, look_first=True, max_operations=4)
    fork = base.fork(base.namespace + ("traj", "stepwise"), episode="stepwise")
    try:
        episode = run_episode(policy, fork, "When did Nadia run the half marathon?")
    finally:
        fork.drop()
    turns = [m for m in episode.messages if isinstance(m, AIMessage)]
    assert [c["name"] for c in turns[0].tool_calls] == ["search_memory"] and turns[0].tool_calls[0]["args"]["top_k"] == 8
    shown = next(m.content for m in episode.messages if isinstance(m, ToolMessage))
    edits = [c for t in turns[1:] for c in t.tool_calls]
    assert edits, "the teacher made no edit after its search"
    for call in edits:
        for key in [*call["args"].get("memory_ids", []), call["args"].get("memory_id")]:
            assert key is None or f"[{key}]" in shown



class _Reads:
    """A judge that reads every pair as `relation` at `confidence`, giving the update `update`."""

    name = "scripted"

    def __init__(self, relation: str, confidence: float, update: float):
        self.relation, self.confidence, self.update = relation, confidence, update
        self.auto_apply = AutoApply(update=0.9, rule_update=0.9, duplicate=0.9, ask=0.2)

    def judge(self, pairs):
        return [Verdict(self.relation, self.confidence, later(*pair) if self.relation == "update" else None,
                        {"update": self.update, self.relation: self.confidence}) for pair in pairs]


@pytest.mark.parametrize(("reading", "asks", "supersedes"), [
    (("update", 0.95, 0.95), False, True), (("update", 0.8, 0.8), False, False), (("update", 0.8, 0.8), True, True),
    (("update", 0.15, 0.15), True, False),  # too little chance to ask a person about
    (("compatible", 0.7, 0.3), False, False), (("compatible", 0.7, 0.3), True, False), (("compatible", 0.9, 0.1), True, False),
])
def test_unreviewed_plans_act_only_where_the_judge_would_by_itself(store: MemoryStore, reading: tuple, asks: bool, supersedes: bool) -> None:
    bank = store.scoped((*store.namespace, "ana"))
    old, new = bank.create_many([NewMemory("Ana lives in Paris.", metadata={"date": "2024-01-01"}),
                                 NewMemory("Ana moved to Berlin last month.", metadata={"date": "2024-06-01"})])
    plan = HeuristicPolicy(store=bank, judge=_Reads(*reading), asks=asks).plan(bank, None)
    superseded = [args for name, args in plan if name == "delete_memory"]
    # Where the judge's decision asks a person (unsure of an update, or half reading two true facts as
    # one), only a reviewed plan (the watcher's) proposes the change; where it leaves, no plan does.
    assert superseded == ([{"reason": superseded[0]["reason"], "memory_id": old.key, "superseded_by": new.key}] if supersedes else [])


def test_a_merge_never_drops_a_name(store: MemoryStore) -> None:
    """Two people's alike facts read as one fact told twice are not merged: the kept wording would lose a
    person ("Gina's ..." / "Jon's ..."); the same fact of one person told twice is."""
    bank = store.scoped((*store.namespace, "dance"))
    bank.create_many([NewMemory("Gina's favorite dance style is contemporary.", metadata={"date": "2023-01-20"}),
                      NewMemory("Jon's favorite dance style is contemporary.", metadata={"date": "2023-01-20"}),
                      NewMemory("Gina loves contemporary dance the most.", metadata={"date": "2023-01-20"})])
    plan = HeuristicPolicy(store=bank, judge=_Reads("duplicate", 0.95, 0.0)).plan(bank, None)
    merged = [{m.content for m in bank.get_many(args["memory_ids"])} for name, args in plan if name == "merge_memory"]
    assert merged and all(not {"Gina's favorite dance style is contemporary.", "Jon's favorite dance style is contemporary."} <= m
                          for m in merged)


class _Holds:
    """A judge that reads every pair as a sure update whose current statement is `holds` (whatever the times)."""

    name = "scripted"
    auto_apply = AutoApply(update=0.9, rule_update=0.9, duplicate=0.9, ask=0.2)

    def __init__(self, holds: str):
        self.holds = holds

    def judge(self, pairs):
        return [Verdict("update", 0.99, "first" if a.text == self.holds else "second", {"update": 0.99}) for a, _ in pairs]


@pytest.mark.parametrize("holds", ["Ana lives in Paris.", "Ana moved to Berlin last month."])
def test_the_direction_of_an_update_is_the_judges_current(store: MemoryStore, holds: str) -> None:
    """The plan supersedes the statement the verdict's `current` does not name, in whichever order the pair
    was read (here the judge says the earlier holds in one case: a correction of a later mistake)."""
    bank = store.scoped((*store.namespace, "ana"))
    paris, berlin = bank.create_many([NewMemory("Ana lives in Paris.", metadata={"date": "2024-01-01"}),
                                      NewMemory("Ana moved to Berlin last month.", metadata={"date": "2024-06-01"})])
    policy = HeuristicPolicy(store=bank, judge=_Holds(holds))
    kept, retired = (paris, berlin) if holds == paris.content else (berlin, paris)
    for _ in range(2):  # the second plan reads the remembered verdict
        superseded = [args for name, args in policy.plan(bank, None) if name == "delete_memory"]
        assert [(a["memory_id"], a["superseded_by"]) for a in superseded] == [(retired.key, kept.key)]


def test_a_decision_is_one_bank_operation() -> None:
    pair = ("Ana lives in Paris.", "Ana moved to Berlin last month.")
    assert operation("update", "second", pair).of(pair) == (pair[0], pair[1])  # (retired, kept)
    assert operation("update", "first", pair).of(pair) == (pair[1], pair[0])
    assert operation("update", None, pair) is None  # neither stated later: nothing says which holds
    assert operation("duplicate", None, ("Ana likes tea.", "Ana likes green tea.")).kept == 1  # the fuller wording
    assert operation("duplicate", None, ("Ana likes tea.", "Ana likes tea!")).kept == 0  # the first on a tie
    assert operation("compatible", None, pair) is None and operation("events", "second", pair) is None


class _Carded(_Reads):
    """A sure reader of updates with a checkpoint's card (its digest: what a screen is trained on), counting
    the pairs it reads."""

    card = {"digest": "carded"}

    def __init__(self):
        super().__init__("update", 0.95, 0.95)
        self.read = 0

    def judge(self, pairs):
        self.read += len(pairs)
        return super().judge(pairs)


@pytest.mark.parametrize("digest", ["carded", "another"])
def test_a_compaction_reads_only_the_pairs_its_judges_screen_keeps(store: MemoryStore, tmp_path, monkeypatch, digest: str) -> None:
    """A screen trained on the plan's judge that drops every pair (from the stored vectors and words) leaves
    the judge nothing to read and the bank as it was; one trained on another judge drops nothing."""
    import numpy as np

    import memupdate.judge.screen as screen_module
    from memupdate.judge.screen import FEATURES, WORD_FEATURES, Screen

    dims = store.embedder.dims
    dropping = Screen(np.zeros((2 * dims + 1 + WORD_FEATURES, 1), np.float32), np.zeros(1, np.float32), np.ones(1, np.float32),
                      0.0, 1.0, {"digest": digest, "features": FEATURES})
    monkeypatch.setattr(screen_module, "SHIPPED_SCREEN", dropping.save(tmp_path / "relation-screen.npz"))
    bank = store.scoped((*store.namespace, "ana"))
    bank.create_many([NewMemory("Ana lives in Paris.", metadata={"date": "2024-01-01"}),
                      NewMemory("Ana moved to Berlin last month.", metadata={"date": "2024-06-01"})])
    judge = _Carded()
    plan = HeuristicPolicy(store=bank, judge=judge).plan(bank, None)
    superseded = [name for name, _ in plan if name == "delete_memory"]
    assert (judge.read, len(superseded)) == ((0, 0) if digest == "carded" else (1, 1))
