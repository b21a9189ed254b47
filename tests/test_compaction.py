"""`memupdate compact`: neighbourhoods over a whole bank, blind episodes into one fork, the review, apply,
history and undo, on the real database and embedding model."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from locomo_fixtures import locomo_dev_file_fixture  # noqa: F401  (fixture `locomo_dev_file`)
from sqlalchemy import select, text
from typer.testing import CliRunner

from memupdate.agent.compaction import BankMoved, compact_bank, neighbourhoods
from memupdate.agent.policies.heuristic import HeuristicPolicy
from memupdate.agent.policies.planning import PlanningPolicy
from memupdate.bank.change_log import history
from memupdate.bank.review import build_review
from memupdate.bank.review_html import render_html
from memupdate.cli import app
from memupdate.rl.data.ingest import ingest
from memupdate.store import MemoryStore, NewMemory
from memupdate.store.statements import memories
from memupdate.text.dates import has_relative_time

runner = CliRunner()


def rows(bank: MemoryStore) -> list[tuple]:
    with bank.engine.connect() as conn:
        return [tuple(r) for r in conn.execute(
            select(memories.c.id, memories.c.key, memories.c.content, memories.c.kind, memories.c.metadata,
                   text("embedding::text"), memories.c.seq, memories.c.created_at, memories.c.updated_at)
            .where(memories.c.namespace == bank.path).order_by(memories.c.seq))]


def test_neighbourhoods_cover_every_memory_once_within_the_size_and_keep_near_duplicates_together() -> None:
    rng = np.random.default_rng(0)
    centres = rng.normal(size=(40, 16))
    vectors = np.repeat(centres, 3, axis=0) + rng.normal(scale=0.01, size=(120, 16))  # 40 triples of near-duplicates
    keys = [f"k{i:03d}" for i in range(120)]
    groups = neighbourhoods(keys, vectors, size=6)
    assert sorted(k for g in groups for k in g) == keys and all(len(g) <= 6 for g in groups)
    where = {k: i for i, g in enumerate(groups) for k in g}
    together = sum(len({where[keys[3 * t + j]] for j in range(3)}) == 1 for t in range(40))
    assert together == 40  # near-duplicates share an episode
    import memupdate.agent.compaction as compaction

    big = rng.normal(size=(5000, 16)).astype(np.float32)
    before, compaction.CELL_SIZE = compaction.CELL_SIZE, 800  # the k-means cut of a large bank
    try:
        cells = neighbourhoods([str(i) for i in range(5000)], big, size=20)
    finally:
        compaction.CELL_SIZE = before
    assert sorted(int(k) for g in cells for k in g) == list(range(5000)) and max(map(len, cells)) <= 20


def test_compaction_review_apply_and_undo_on_the_sample(store: MemoryStore, sample, tmp_path, database_url) -> None:
    bank = ingest(store, sample).base
    plain = [m for m in bank.list() if not has_relative_time(m.content)][:3]  # (anchoring goes first)
    bank.create_many([NewMemory(m.content + " ", kind=m.kind, metadata=m.metadata) for m in plain])  # duplicates
    start = rows(bank)
    page, data = tmp_path / "review.html", tmp_path / "review.json"
    result = runner.invoke(app, ["compact", bank.path, "--size", "12", "--review", str(page), "--out", str(data), "--url", database_url])
    assert result.exit_code == 0, result.output
    assert rows(bank) == start  # a review changes nothing
    review = json.loads(data.read_text())
    counts = review["counts"]
    assert counts["memories_after"] < counts["memories_before"] == len(start)
    # The duplicates go: merged, or (where the judge reads a paraphrase of one as its update) superseded.
    assert counts["merge"] >= 1 and counts["merge"] + counts["supersede"] >= 3
    assert review["qa"] is None or set(review["qa"]) >= {"before", "after"}
    for change in review["changes"]:
        assert change["reasons"] and change["tools"]
        if change["kind"] == "merge":
            assert len(change["sources"]) >= 2 and len(change["results"]) == 1
    html = page.read_text()
    assert all(f"id='{c['id']}'" in html for c in review["changes"]) and "<script" not in html
    (proposed,) = history(bank)
    assert proposed.status == "proposed" and proposed.details["replaced"]

    result = runner.invoke(app, ["compact", bank.path, "--apply", "--url", database_url])
    assert result.exit_code == 0 and "in one transaction" in result.output, result.output
    assert bank.count() == counts["memories_after"]
    listed = runner.invoke(app, ["history", bank.path, "--json", "--url", database_url])
    assert [c["status"] for c in json.loads(listed.output)] == ["applied"]
    result = runner.invoke(app, ["undo", bank.path, "--url", database_url])
    assert result.exit_code == 0, result.output
    assert rows(bank) == start  # exactly the bank before the apply, embeddings included


def test_coverage_flags_a_source_whose_words_no_result_holds(store: MemoryStore) -> None:
    bank = store.scoped((*store.namespace, "bank"))
    a, b, c = bank.create_many([
        NewMemory("Alice has a dog called Rex", metadata={"date": "2023-05-08"}),
        NewMemory("Alice went hiking yesterday", metadata={"date": "2023-05-08"}),
        NewMemory("Alice likes jazz"),
    ])
    fork = bank.fork((*bank.namespace, "f"))
    fork.update(b.key, content="Alice went hiking on 7 May 2023")  # anchored: nothing lost
    fork.replace([a.key], [NewMemory("Alice has a dog", metadata={"merged_from": [a.key]}, key="m1")])  # "rex" lost
    fork.delete(c.key)  # its words held by no memory
    review = build_review(bank, fork, [{"episode": "n0", "tool": "delete_memory", "args": {"memory_id": c.key, "reason": "stale"}, "result": f"deleted [{c.key}]", "reason": "stale"}])
    by_kind = {ch.kind: ch for ch in review.changes}
    assert set(by_kind) == {"update", "rewrite", "delete"}
    assert not by_kind["update"].coverage.flagged
    assert by_kind["rewrite"].coverage.missing == {a.key: ("called", "rex")}
    assert by_kind["delete"].coverage.flagged and by_kind["delete"].reasons == ("stale",)
    assert review.counts.flagged == 2
    assert "<mark>Rex</mark>" in render_html(review)


class WritesToTheBank(PlanningPolicy):
    """Plans nothing, but writes to the bank while the compaction runs, as another app would."""

    bank_path: str

    def plan(self, bank, question):
        self.store.scoped(self.bank_path).create("A memory written by another app meanwhile")
        return []


def test_a_bank_written_during_compaction_is_refused_and_nothing_is_left(store: MemoryStore, database_url) -> None:
    bank = store.scoped((*store.namespace, "bank"))
    bank.create_many([NewMemory(t) for t in ("Alice likes jazz", "Alice likes jazz music", "Bob plays chess")])
    fork_ns = (*bank.namespace, "compaction", "c1")
    with pytest.raises(BankMoved, match="was written while the compaction ran"):
        compact_bank(WritesToTheBank(store=store, bank_path=bank.path), bank, fork_ns, size=5)
    assert not store.list_namespaces(prefix=(*bank.namespace, "compaction")) and history(bank) == []  # fork, scratch: gone
    assert bank.count() == 4  # the other app's write is kept

    fork_result = compact_bank(HeuristicPolicy(store=store), bank, fork_ns, size=5)
    assert fork_result.episodes == 1 and fork_result.fork.count() >= 1
    fork_result.fork.drop()


def test_a_bank_written_during_compaction_is_one_line_from_the_cli(store: MemoryStore, database_url, monkeypatch, tmp_path) -> None:
    import memupdate.agent.policies as policies

    bank = store.scoped((*store.namespace, "bank"))
    bank.create_many([NewMemory(t) for t in ("Alice likes jazz", "Alice likes jazz music", "Bob plays chess")])
    start = rows(bank)
    monkeypatch.setattr(policies, "make_policy", lambda *args, **kwargs: WritesToTheBank(store=store, bank_path=bank.path))
    page = tmp_path / "review.html"
    result = runner.invoke(app, ["compact", bank.path, "--apply", "--review", str(page), "--url", database_url])
    assert result.exit_code == 2 and "was written while the compaction ran" in result.output, result.output
    said = [line for line in result.output.strip().splitlines() if not line.startswith("compacting ")]  # the bar
    assert len(said) == 1 and said[0].startswith("error:"), result.output
    assert rows(bank)[:3] == start and bank.count() == 4  # untouched but for the other app's write
    assert history(bank) == [] and not page.exists()
    assert not store.list_namespaces(prefix=(*bank.namespace, "compaction"))


def test_apply_interrupted_or_stale_gives_one_line_and_changes_nothing(store: MemoryStore, database_url, monkeypatch, tmp_path) -> None:
    import memupdate.bank.change_log as change_log

    bank = store.scoped((*store.namespace, "bank"))
    bank.create_many([NewMemory(t) for t in ("Alice likes jazz", "Alice likes jazz.", "Bob plays chess")])
    (tmp_path / "a-file").write_text("")
    bad = runner.invoke(app, ["compact", bank.path, "--review", str(tmp_path / "a-file" / "r.html"), "--url", database_url])
    assert bad.exit_code == 2 and "--review" in bad.output and history(bank) == []  # checked before any work
    page = str(tmp_path / "review.html")
    assert runner.invoke(app, ["compact", bank.path, "--review", page, "--url", database_url]).exit_code == 0
    start = rows(bank)
    real = change_log.apply_change

    def interrupted(bank_, change_id, **kwargs):
        def stop(conn):
            raise KeyboardInterrupt

        return real(bank_, change_id, before_commit=stop)

    monkeypatch.setattr(change_log, "apply_change", interrupted)
    result = runner.invoke(app, ["compact", bank.path, "--apply", "--url", database_url])
    assert result.exit_code == 130 and len(result.output.strip().splitlines()) == 1, result.output
    assert rows(bank) == start and history(bank)[-1].status == "proposed"
    monkeypatch.setattr(change_log, "apply_change", real)

    bank.create("Carol moved to Oslo")
    result = runner.invoke(app, ["compact", bank.path, "--apply", "--url", database_url])
    assert result.exit_code == 2 and "changed since the compaction forked it" in result.output, result.output
    assert len(result.output.strip().splitlines()) == 1 and bank.count() == 4
    missing = runner.invoke(app, ["compact", "no/such-bank", "--url", database_url])
    assert missing.exit_code == 2 and "'no/such-bank' does not exist" in missing.output
    emptied = store.scoped((*store.namespace, "emptied"))
    emptied.delete(emptied.create("Dan plays chess").key)  # it exists, but holds nothing to compact
    empty = runner.invoke(app, ["compact", emptied.path, "--url", database_url])
    assert empty.exit_code == 2 and "holds no memories" in empty.output and len(empty.output.strip().splitlines()) == 1


def test_an_llm_policys_reason_is_its_tool_argument_or_its_text_that_turn() -> None:
    from langchain_core.messages import AIMessage, ToolMessage

    from memupdate.agent.compaction import _calls

    messages = [
        AIMessage("These two say the same thing.", tool_calls=[
            {"name": "merge_memory", "args": {"memory_ids": ["a", "b"]}, "id": "1", "type": "tool_call"},
            {"name": "search_memory", "args": {"query": "x"}, "id": "2", "type": "tool_call"},
        ]),
        ToolMessage("merged 2 memories into [m1] text", tool_call_id="1", name="merge_memory"),
        ToolMessage("[a] text", tool_call_id="2", name="search_memory"),
        AIMessage("", tool_calls=[
            {"name": "delete_memory", "args": {"memory_id": "c", "reason": "contradicted by m1"}, "id": "3", "type": "tool_call"},
            {"name": "delete_memory", "args": {"memory_id": "zz"}, "id": "4", "type": "tool_call"},
        ]),
        ToolMessage("deleted [c]", tool_call_id="3", name="delete_memory"),
        ToolMessage("error: unknown memory id 'zz'", tool_call_id="4", name="delete_memory", status="error"),
    ]
    calls = _calls(messages, "n00003", policy=object())
    assert [(c["tool"], c["reason"], c["episode"]) for c in calls] == [
        ("merge_memory", "These two say the same thing.", "n00003"),  # reads and failed calls are left out
        ("delete_memory", "contradicted by m1", "n00003"),
    ]


def test_compacting_a_locomo_bank_keeps_every_word_and_does_not_lower_the_qa_proxy(
    store: MemoryStore, locomo_dev_file, tmp_path, database_url
) -> None:
    from dataclasses import replace

    from memupdate.rl.data.locomo import load_locomo

    (conversation,) = load_locomo(locomo_dev_file, ["conv-30"])
    conversation = replace(conversation, sample_id=f"conv-30-{store.namespace[-1]}")  # a bank of its own
    bank = ingest(store, conversation).base
    questions = tmp_path / "questions.jsonl"
    questions.write_text("".join(json.dumps({"question": q.question, "answer": q.answer, "category": q.category}) + "\n"
                                 for q in conversation.qa if q.answer))
    data = tmp_path / "review.json"
    args = ["compact", bank.path, "--questions", str(questions), "--review", str(tmp_path / "r.html"), "--out", str(data)]
    try:
        result = runner.invoke(app, [*args, "--url", database_url])
        assert result.exit_code == 0, result.output
        review = json.loads(data.read_text())
        assert review["counts"]["memories_before"] == len(conversation.facts) and review["counts"]["update"] > 0
        assert review["counts"]["flagged"] == 0 and review["qa"]["after"] >= review["qa"]["before"]
    finally:
        for ns in store.list_namespaces(prefix=bank.namespace):
            store.scoped(ns).drop()


def test_compact_with_a_reader_reports_its_f1_beside_the_proxy(store: MemoryStore, sample, tiny_model, tmp_path, database_url) -> None:
    """`--answerer hf:DIR` answers every question from the context the proxy read, before and after. The
    reader is conftest's tiny Qwen2 (random weights: its answers are noise), so this checks the plumbing
    and the figures' shape; the real reader's figures are in docs/student.md."""
    reader_model = shutil.copytree(tiny_model, tmp_path / "reader")  # answers cached under its own name
    bank = ingest(store, sample).base
    questions = tmp_path / "questions.jsonl"
    asked = [q for q in sample.qa if q.answer and q.category != 5]
    questions.write_text("".join(json.dumps({"question": q.question, "answer": q.answer, "category": q.category}) + "\n" for q in asked))
    data = tmp_path / "review.json"
    args = ["compact", bank.path, "--questions", str(questions), "--answerer", f"hf:{reader_model}", "--out", str(data),
            "--review", str(tmp_path / "r.html"), "--url", database_url]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    reader = json.loads(data.read_text())["qa"]["reader"]
    assert "reader F1" in result.output and reader["model"] == f"hf:{reader_model}"
    assert 0 <= reader["before"] <= 1 and 0 <= reader["after"] <= 1 and reader["change"]["n"] == len(asked)
    assert reader["better"] + reader["worse"] <= len(asked) and "proxy_f1_pearson" in reader

    unknown = runner.invoke(app, [*args[:4], "--answerer", f"hf:{tmp_path / 'no-model'}", "--url", database_url])
    assert unknown.exit_code == 2 and "--answerer hf:" in unknown.output and "Traceback" not in unknown.output
    bare = store.scoped("bare/bank")
    bare.create("Nadia runs.")
    without = runner.invoke(app, ["compact", bare.path, "--answerer", f"hf:{reader_model}", "--url", database_url])
    assert without.exit_code == 2 and "--questions FILE" in without.output


def test_a_fact_stated_five_times_keeps_only_its_newest_statement_across_neighbourhoods(store: MemoryStore) -> None:
    """Five statements of where Sam lives, on five days, in neighbourhoods of two: the chain is cut into
    three episodes, and the rounds over its live ends leave only the newest current, each older one
    superseded by a newer one whose own record leads on to the newest."""
    from memupdate.judge.rule import RuleJudge

    bank = store.scoped((*store.namespace, "chain"))
    cities = ["Paris", "Berlin", "Rome", "Oslo", "Madrid"]
    made = bank.create_many(
        [NewMemory(f"Sam lives in {city}.", metadata={"date": f"2024-0{day}-01"}) for day, city in enumerate(cities, 1)]
        + [NewMemory(text) for text in ("Sam has a dog named Rex.", "Sam plays chess on Sundays.", "Sam works as a nurse.",
                                        "Sam is allergic to cats.", "Sam drives a red Fiat.", "Sam likes jazz.")]
    )
    statements = [m.key for m in made[:5]]

    policy = HeuristicPolicy(store=store, judge=RuleJudge())
    result = compact_bank(policy, bank, (*bank.namespace, "traj", "f"), size=2)
    live = {m.key for m in result.fork.list()}
    by = {e.memory_key: e.before["metadata"]["superseded_by"] for e in result.fork.events(op="delete")
          if (e.before or {}).get("metadata", {}).get("superseded_by")}
    cut = sum(any(k in group for k in statements) for group in result.neighbourhoods[:3])
    result.fork.drop()
    assert cut >= 2  # the first neighbourhoods cut the chain
    assert live & set(statements) == {statements[-1]}
    for key in statements[:-1]:  # every older statement leads to the newest through the records
        seen = [key]
        while seen[-1] in by:
            seen.append(by[seen[-1]])
        assert seen[-1] == statements[-1], seen
    assert {m.key for m in made[5:]} <= live  # facts that did not change stay
