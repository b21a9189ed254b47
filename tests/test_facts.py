"""Facts change: updates are not duplicates, a supersession keeps the older statement as history (undo
brings it back), the rule resolves updates newest-first, and a live LangMem store keeps the newest state.

Real parts: the embedded PostgreSQL, the packaged embedding model, LangGraph's PostgresStore written
through LangMem's own manage_memory tool.
"""

from __future__ import annotations

import pytest
from langgraph_source import backdate, langgraph_store, remember

from memupdate.agent.compaction import compact
from memupdate.agent.policies.heuristic import HeuristicPolicy
from memupdate.agent.safety import SafetyRule
from memupdate.agent.tools import run_tool
from memupdate.bank.change_log import (
    apply_change,
    history,
    next_change_id,
    propose_change,
    superseded_rows,
    undo_change,
)
from memupdate.bank.review import replaced_by
from memupdate.bank.review_records import Change
from memupdate.store import MemoryStore, NewMemory
from memupdate.text.facts import relation, shared_head


@pytest.mark.parametrize(("older", "newer", "expected"), [
    ("Alice is vegetarian", "Alice is no longer vegetarian", "update"),
    ("Carol finished reading The Overstory", "Carol is reading The Overstory again", "update"),
    ("The chief executive officer of Apple Inc. is Tim Cook.", "The chief executive officer of Apple Inc. is Steve Jobs.", "update"),
    ("Goaltender is associated with the sport of ice hockey.", "Goaltender is associated with the sport of pesäpallo.", "update"),
    ("Alice moved to Lisbon in 2021", "Alice moved to Lisbon in 2021.", "duplicate"),
    ("Mel ran a 10k race", "Mel ran a 10k race in Berlin", "duplicate"),
    ("Alta IF is associated with the sport of association football.", "Galwegians RFC is associated with the sport of rugby union.", "compatible"),
    ("The head of state in Soviet Union is Mikhail Gorbachev.", "The head of state in United Kingdom is Elizabeth II.", "compatible"),
    ("Mel went camping with her kids", "Mel painted a sunset", "compatible"),
])
def test_the_rule_tells_an_update_from_a_duplicate_and_compatible_facts(older, newer, expected) -> None:
    assert relation(older, newer) == expected
    assert relation(newer, older) == expected


def test_a_supersession_names_the_words_the_two_statements_share() -> None:
    # The rule's reason for a supersession: what a reader (or a student, before it names the pair) sees changed.
    assert shared_head("The author of 1984 is George Orwell.", "The author of 1984 is Constantine VII.") == "The author of 1984 is"
    assert shared_head("alice is vegetarian", "Alice is no longer vegetarian") == "Alice is"
    assert shared_head("Bob likes tea", "Ann likes tea") == ""


def test_another_detail_of_an_event_is_another_event_not_an_update() -> None:
    older, newer = "Caroline went to the park with her kids", "Caroline went to the park with her friends"
    assert relation(older, newer) == "update" and relation(older, newer, events=True) == "compatible"
    assert relation("Mel is vegetarian", "Mel is no longer vegetarian", events=True) == "update"


def _facts(store: MemoryStore, texts_and_times: list[tuple[str, str]]) -> list[str]:
    made = store.create_many([NewMemory(text, metadata={"time": time, "date": time[:10]}) for text, time in texts_and_times])
    return [m.key for m in made]


def test_a_supersession_leaves_retrieval_and_the_tool_names_no_judgement(store: MemoryStore) -> None:
    old, new, other = _facts(store, [("Alice is vegetarian", "2026-11-01T09:00:00"),
                                     ("Alice is no longer vegetarian", "2026-11-20T18:30:05"),
                                     ("Alice works as a nurse", "2026-11-02T10:00:00")])
    look = run_tool(store, "sample_memory", {"strategy": "recent", "k": 5}).text
    assert "(2026-11-20 18:30:05)" in look and "(2026-11-01 09:00:00)" in look  # what orders them is visible
    assert "supersed" not in look and "stale" not in look  # no tool result names the stale one

    for bad, error in [({"memory_id": new, "superseded_by": old}, "stated before"),
                       ({"memory_id": old, "superseded_by": old}, "cannot supersede itself"),
                       ({"memory_id": old, "superseded_by": "nope"}, "unknown memory id 'nope'")]:
        result = run_tool(store, "delete_memory", bad)
        assert not result.ok and error in result.text
    assert store.count() == 3  # refused calls change nothing

    result = run_tool(store, "delete_memory", {"memory_id": old, "superseded_by": new})
    assert result.ok and result.text == f"[{old}] superseded by [{new}]"
    assert old not in {hit.memory.key for hit in store.search("Is Alice vegetarian?", 5)}
    assert {m.key for m in store.list()} == {new, other}


def test_the_rule_supersedes_the_older_statement_and_undo_brings_it_back(store: MemoryStore) -> None:
    bank = store
    old, new, hockey, pesapallo, nurse = _facts(bank, [
        ("Alice is vegetarian", "2026-11-01T09:00:00"),
        ("Alice is no longer vegetarian", "2026-11-20T18:30:05"),
        ("Goaltender is associated with the sport of ice hockey.", "2026-11-01T10:00:00"),
        ("Goaltender is associated with the sport of pesäpallo.", "2026-11-03T10:00:00"),
        ("Alice works as a nurse at the city hospital", "2026-11-02T10:00:00"),
    ])
    change_id = next_change_id(bank)
    done = compact(HeuristicPolicy(store=bank), bank, (*bank.namespace, "compaction", f"c{change_id}"))
    kinds = {c.kind for c in done.review.changes}
    assert kinds == {"supersede"}, done.review.changes
    by = {s.key: c for c in done.review.changes for s in c.sources}
    assert set(by) == {old, hockey}
    assert by[old].coverage.superseded_by == {old: new} and not by[old].coverage.flagged
    assert all(c.facts.clear and SafetyRule().holds(c) == [] for c in done.review.changes)

    change = propose_change(bank, done.fork, change_id=change_id, policy="heuristic", summary={},
                            details={"replaced": replaced_by(done.review.changes), "review": done.review.to_json()})
    apply_change(bank, change.id)
    assert {m.key for m in bank.list()} == {new, pesapallo, nurse}
    kept = {r["key"]: r for r in superseded_rows(bank)}
    assert kept[old]["content"] == "Alice is vegetarian" and kept[old]["superseded_by"] == [new]
    assert kept[hockey]["superseded_by"] == [pesapallo]
    undo_change(bank, change.id)
    assert {m.key for m in bank.list()} == {old, new, hockey, pesapallo, nurse}
    assert history(bank)[-1].status == "undone"


def test_an_ambiguous_supersession_or_a_merge_of_an_update_waits_for_review() -> None:
    base = {"kind": "supersede", "sources": [{"key": "a"}], "results": [], "unsupported": [],
            "coverage": {"flagged": False, "missing": {}, "superseded_by": {"a": "b"}},
            "alike": {"min_similarity": None, "shared_words": [], "unrelated": False}}
    clear = Change.from_json({**base, "facts": {"pairs": [], "clear": True}})
    unclear = Change.from_json({**base, "facts": {"pairs": [], "clear": False}})
    assert SafetyRule().holds(clear) == []
    assert SafetyRule().holds(unclear) == ["not a clear update: the two read as different facts, or the newer is not stated later"]
    assert SafetyRule(allow_unclear_facts=True).holds(unclear) == []
    assert SafetyRule(kinds=("merge",)).holds(clear) == ["a supersede never applies itself under this rule"]


def test_a_live_langmem_store_keeps_the_newest_statement(fresh_database, store: MemoryStore) -> None:
    """The two cases of the live trial (issue 34), written by LangMem's own tool as an app writes them:
    the watcher supersedes the older statement in the app's store; it never merges them into the older text."""
    from memupdate.agent.background import BackgroundCompactor, CompactorSettings

    with langgraph_store(fresh_database) as (url, lg):
        first = remember(lg, "carol", ["Carol finished reading The Overstory", "Alice is vegetarian"])
        backdate(url, first, days=1)  # written a day before (writes seconds apart are one batch, not ordered)
        second = remember(lg, "carol", ["Carol is reading The Overstory again", "Alice is no longer vegetarian"])
        (done,) = BackgroundCompactor(store, url, CompactorSettings(prefix=("memories",), into=store.namespace)).run_once()
        assert done.applied and not done.queued, done
        held = {item.key: item.value["content"] for item in lg.search(("memories", "carol"), limit=100)}
        assert sorted(held.values()) == ["Alice is no longer vegetarian", "Carol is reading The Overstory again"]
        assert set(held) == set(second)
        bank = store.scoped((*store.namespace, "carol"))
        kept = {r["key"]: r for r in superseded_rows(bank)}
        assert set(kept) == set(first) and {k for r in kept.values() for k in r["superseded_by"]} == set(second)
