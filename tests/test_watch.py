"""The background compactor (`memupdate watch`, `BackgroundCompactor`) on real parts: LangGraph's own
PostgresStore (a database of its own on the test server) filled through LangMem's tools, the embedded
PostgreSQL, the packaged embedding model, the heuristic policy; a scripted "merge everything" policy
stands in for a student that merges unrelated memories (no LLM can be downloaded here)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
from langchain_core.messages import AIMessage, ToolMessage
from langgraph_source import langgraph_store, langmem_tool, remember
from typer.testing import CliRunner

from memupdate.agent.background import BackgroundCompactor, CompactorSettings
from memupdate.bank.change_log import history, superseded_rows
from memupdate.cli import app
from memupdate.store import MemoryStore, NewMemory

runner = CliRunner()
FACTS = [
    "Alice moved to Lisbon in 2021",
    "Alice moved to Lisbon in 2021.",
    "Alice has a dog called Rex",
    "Alice adopted a cat named Mia yesterday",
    "Alice works as a nurse at the city hospital",
]
SAM = [
    "Sam has been dealing with health problems and saw a doctor",
    "Sam is writing a short story collection",
    "Sam feels stressed by his work deadlines",
    "Sam said he likes trying new things",
]


def invoke(*args: Any, code: int = 0) -> str:
    result = runner.invoke(app, [str(a) for a in args])
    assert result.exit_code == code, result.output
    return result.output


def held(lg, user: str = "alice") -> dict[str, str]:
    return {item.key: item.value["content"] for item in lg.search(("memories", user), limit=100)}


class MergeEverything(FakeMessagesListChatModel):
    """Samples its neighbourhood and merges every memory it saw into one (what the student of issue 28
    did with Sam's health, writing, work and tastes): every word kept, so no coverage flag."""

    responses: list = []

    def bind_tools(self, tools: Any, **kwargs: Any) -> MergeEverything:
        return self

    def _generate(self, messages, stop=None, run_manager=None, **kwargs):
        from langchain_core.outputs import ChatGeneration, ChatResult

        seen = [m for m in messages if isinstance(m, ToolMessage)]
        if not seen:
            reply = AIMessage("", tool_calls=[{"name": "sample_memory", "args": {"strategy": "random", "k": 20}, "id": "s1", "type": "tool_call"}])
        elif len(seen) == 1 and len(keys := re.findall(r"^\[([^\]]+)\]", str(seen[0].content), re.M)) > 1:
            args = {"memory_ids": keys, "strategy": "concatenate"}
            reply = AIMessage("", tool_calls=[{"name": "merge_memory", "args": args, "id": "m1", "type": "tool_call"}])
        else:
            reply = AIMessage("Done.")
        return ChatResult(generations=[ChatGeneration(message=reply)])


def test_live_store_safe_changes_apply_in_place_and_undo_restores_the_store(fresh_database, database_url, store: MemoryStore) -> None:
    with langgraph_store(fresh_database) as (url, lg):
        keys = dict(zip(FACTS, remember(lg, "alice", FACTS), strict=True))
        compactor = BackgroundCompactor(store, url, CompactorSettings(prefix=("memories",), into=store.namespace))
        (done,) = compactor.run_once()
        bank = store.scoped((*store.namespace, "alice"))
        assert done.bank == bank.path and done.reason.startswith("never compacted")
        assert len(done.applied) == 2 and done.queued == [] and done.export.written == done.applied
        now = held(lg)
        assert len(now) == 4 and keys[FACTS[0]] not in now and now[keys[FACTS[1]]] in FACTS[:2]  # the merge keeps the newest key
        assert now[keys[FACTS[3]]].startswith("Alice adopted a cat named Mia") and "(" in now[keys[FACTS[3]]]
        assert sorted(bank_texts(bank)) == sorted(now.values())  # the bank mirrors the store (its merge under the app's key)
        kept = {row["key"] for row in superseded_rows(bank)}
        assert {keys[FACTS[0]], keys[FACTS[1]], keys[FACTS[3]]} <= kept
        assert compactor.run_once()[0].reason is None  # nothing new: left alone

        langmem_tool(lg, "create", "alice", content="Alice started learning Portuguese")
        again = compactor.run_once()[0]
        # A new fact meeting an old one may be compacted (the judge reads a pair it is unsure of), but
        # nothing true is retired by itself.
        assert not again.applied and "Alice started learning Portuguese" in bank_texts(bank)

        merge = next(c for c in history(bank) if c.status == "applied" and c.details["review_change"]["kind"] == "merge")
        output = invoke("undo", bank.path, "--change", merge.id, "--url", database_url)  # one change, not the latest
        assert "1 change written to the store" in output
        lisbon = held(lg)
        assert lisbon[keys[FACTS[0]]] == FACTS[0] and lisbon[keys[FACTS[1]]] == FACTS[1] and len(lisbon) == 6
        output = invoke("undo", bank.path, "--to", "0", "--url", database_url)
        assert "1 change written to the store" in output
        restored = held(lg)
        assert sorted(restored.values()) == sorted([*FACTS, "Alice started learning Portuguese"])
        assert all(restored[k] == fact for fact, k in keys.items())  # same keys, same texts


def bank_texts(bank: MemoryStore) -> list[str]:
    return [m.content for m in bank.list()]


def test_a_merge_of_unrelated_memories_waits_for_review_and_is_decided_there(store: MemoryStore, tmp_path, database_url) -> None:
    bank = store.scoped((*store.namespace, "sam"))
    bank.create_many([NewMemory(text) for text in SAM])
    compactor = BackgroundCompactor(store, bank.path, CompactorSettings(policy=MergeEverything()))
    (done,) = compactor.run_once()
    assert done.applied == [] and len(done.queued) == 1 and bank.count() == 4  # nothing applied itself
    (queued,) = [c for c in history(bank) if c.status == "proposed"]
    review = queued.details["review_change"]
    assert review["kind"] == "merge" and review["coverage"]["flagged"] is False  # coverage alone would pass it
    assert review["alike"]["unrelated"] and review["alike"]["min_similarity"] < 0.75
    assert any("not alike" in reason for reason in queued.details["held"])

    page = tmp_path / "queue.html"
    under = store.namespace[0] + "/" + store.namespace[1]
    output = invoke("review", "--under", under, "--html", page, "--url", database_url)
    assert "1 change waits for review" in output
    assert "…" not in output and all(word in output for text in SAM for word in text.split())  # whole texts
    (pending,) = json.loads(invoke("review", "--under", under, "--json", "--url", database_url))["pending"]
    assert pending["id"] == queued.id and pending["bank"] == bank.path
    assert f"id='{queued.id}'" in page.read_text() and "sources not alike" in page.read_text()

    forget_compactions(bank)  # as if never compacted: the same merge comes again, and is not queued twice
    again = compactor.run_once()[0]
    assert again.known == 1 and again.queued == [] and again.applied == []

    invoke("review", "--reject", queued.id, "--reason", "four different things", "--url", database_url)
    assert bank.count() == 4 and history(bank)[-1].details["rejected"] == "four different things"
    forget_compactions(bank)
    assert compactor.run_once()[0].known == 1  # rejected: never proposed again
    invoke("review", "--accept", queued.id, "--url", database_url, code=2)  # decided already: one line
    assert "0 changes wait for review" in invoke("review", "--url", database_url, "--under", bank.path)


def forget_compactions(bank: MemoryStore) -> None:
    from sqlalchemy import delete

    from memupdate.store.statements import events

    with bank.engine.begin() as conn:
        conn.execute(delete(events).where(events.c.namespace == bank.path, events.c.op == "compacted"))


def test_bad_sources_and_ids_give_one_line(database_url, store: MemoryStore) -> None:
    output = invoke("watch", "nothere/atall", "--once", "--url", database_url, code=2)
    assert "neither a postgresql:// URL nor a path holding banks" in output and len(output.strip().splitlines()) == 1
    output = invoke("watch", "postgresql://nobody@127.0.0.1:1/none", "--once", "--url", database_url, code=2)
    assert "cannot connect to LangGraph store" in output and len(output.strip().splitlines()) == 1
    output = invoke("review", "--accept", "987654321", "--url", database_url, code=2)
    assert "there is no change 987654321" in output
    output = invoke("watch", "x", "--auto-kinds", "merge,squash", "--once", "--url", database_url, code=2)
    assert "squash" in output and "choose from" in output


def test_the_safety_rule_names_each_reason_a_change_waits() -> None:
    import pytest

    from memupdate.agent.safety import SafetyRule
    from memupdate.bank.review_records import Change
    from memupdate.scoring.qa_change import QAChange

    def read(change: dict) -> Change:  # a review change as the change log stores it
        return Change.from_json(change)

    merge = {"kind": "merge", "sources": [{"key": "a"}, {"key": "b"}], "results": [{"key": "m"}],
             "coverage": {"flagged": False, "missing": {}}, "unsupported": [],
             "alike": {"min_similarity": 0.93, "shared_words": ["lisbon"], "unrelated": False}}
    rule = SafetyRule()
    assert rule.holds(read(merge)) == []
    assert rule.holds(read({**merge, "unsupported": ["porto"]})) == ["words no source holds: porto"]
    assert rule.holds(read({**merge, "coverage": {"flagged": True, "missing": {"a": ["dog"]}}})) == ["coverage flag: a loses dog"]
    assert rule.holds(read({**merge, "alike": {"min_similarity": 0.8, "shared_words": [], "unrelated": True}})) == ["sources share no content word"]
    assert rule.holds(read(merge), frozenset({"b"})) == ["a question it touches scores lower on the QA proxy"]
    assert SafetyRule(min_similarity=0.95).holds(read(merge)) == ["sources not alike: least similarity 0.93 < 0.95"]
    assert SafetyRule.review_everything().holds(read(merge)) == ["a merge never applies itself under this rule"]
    with pytest.raises(ValueError, match="choose from"):
        SafetyRule(kinds=("squash",))

    class Score:
        def __init__(self, qa_score, retrieved):
            self.qa_score, self.retrieved = qa_score, retrieved

    # bank: both answered; fork: the second one lost
    effect = QAChange(["q1", "q2"], [Score(1.0, ("a",)), Score(1.0, ("b",))], [Score(1.0, ("a",)), Score(0.0, ("m",))])
    assert effect.summary()["worse"] == 1 and effect.worse_keys == {"b", "m"}


def test_an_undone_change_stays_undone_until_its_sources_change(store: MemoryStore, database_url) -> None:
    """Issue 36: `undo --change N` put the originals back and the next pass applied the same merge again.
    An undo is a "no": the change is not proposed again while its sources are what they were."""
    bank = store.scoped((*store.namespace, "alice"))
    bank.create_many([NewMemory(text, metadata={"date": "2023-05-08"}) for text in FACTS])  # "yesterday" gets dated
    compactor = BackgroundCompactor(store, bank.path)
    (done,) = compactor.run_once()
    merge = next(c for c in history(bank) if c.id in done.applied and c.details["review_change"]["kind"] == "merge")
    dating = next(c for c in history(bank) if c.id in done.applied and c.details["review_change"]["kind"] == "update")

    listing = invoke("history", bank.path, "--url", database_url)  # 80 columns under the test runner
    assert "…" not in listing and "applied" in listing and "1 merge" in listing and "heuristic" in listing
    shown = invoke("history", bank.path, "--change", dating.id, "--url", database_url)
    assert FACTS[3] in shown.replace("\n", " ") or all(w in shown for w in FACTS[3].split())
    assert "+ (7 May 2023)" in shown and f"undo {bank.path} --change {dating.id}" in shown.replace("\n", "")
    (edit,) = json.loads(invoke("history", bank.path, "--change", merge.id, "--json", "--url", database_url))["edits"]
    assert edit["kind"] == "merge" and sorted(s["content"] for s in edit["sources"]) == sorted(FACTS[:2])
    assert edit["results"][0]["content"] in FACTS[:2]
    listed = json.loads(invoke("history", bank.path, "--json", "--url", database_url))
    assert {c["id"] for c in listed} >= {merge.id, dating.id} and all(c["edits"] for c in listed)

    invoke("undo", bank.path, "--change", merge.id, "--url", database_url)
    assert FACTS[0] in bank_texts(bank) and FACTS[1] in bank_texts(bank)

    forget_compactions(bank)  # the next pass compacts the bank again: the same merge comes, and is known
    again = compactor.run_once()[0]
    assert again.applied == [] and again.queued == [] and again.known >= 1
    assert FACTS[0] in bank_texts(bank) and FACTS[1] in bank_texts(bank)
    output = invoke("review", "--reject", merge.id, "--reason", "two visits", "--url", database_url)
    assert "undone" in output and history(bank)[[c.id for c in history(bank)].index(merge.id)].details["rejected"] == "two visits"

    source = next(m for m in bank.list() if m.content == FACTS[1])
    bank.update(source.key, content="Alice moved to Lisbon in 2021!")  # a source changed: the merge may come back
    forget_compactions(bank)
    assert compactor.run_once()[0].applied
    assert FACTS[0] not in bank_texts(bank)


def test_the_app_edits_what_the_compactor_wrote_with_langmem(fresh_database, store: MemoryStore) -> None:
    """Issue 36: merged items got keys like `m3592f718`, which LangMem's tool refuses (`id Input should be
    a valid UUID`). Items memupdate writes get UUIDs, and the bank maps them back to its memories."""
    import uuid

    with langgraph_store(fresh_database) as (url, lg):
        keys = remember(lg, "alice", FACTS)
        compactor = BackgroundCompactor(store, url, CompactorSettings(prefix=("memories",), into=store.namespace))
        compactor.run_once()
        bank = store.scoped((*store.namespace, "alice"))
        (merged,) = [key for key, text in held(lg).items() if text in FACTS[:2]]
        assert merged == keys[1]  # the merge's item keeps the key of its newest source
        assert all(str(uuid.UUID(key)) == key for key in held(lg))
        bank_key = next(m.key for m in bank.list() if m.content == held(lg)[merged])
        assert bank_key != merged  # the bank keeps its own key and maps the item to it

        reply = langmem_tool(lg, "update", "alice", id=merged, content="Alice moved to Porto in 2021")
        assert merged in reply
        compactor.run_once()
        assert bank.get(bank_key).content == "Alice moved to Porto in 2021"
        assert bank_texts(bank).count("Alice moved to Porto in 2021") == 1  # the same memory, not a copy

        langmem_tool(lg, "delete", "alice", id=merged)
        compactor.run_once()
        assert "Alice moved to Porto in 2021" not in bank_texts(bank) and merged not in held(lg)
        assert {m.content for m in bank.list()} == set(held(lg).values())


def loaded_by(commands: list[list[str]], modules: tuple[str, ...]) -> subprocess.CompletedProcess:
    """`commands` run one after another by the `memupdate` app in a fresh process, which prints
    `LOADED [...]`: those of `modules` imported by then."""
    script = (
        "import sys\nfrom memupdate.cli import app\n"
        f"for args in {commands!r}:\n    app(args, standalone_mode=False)\n"
        f"print('LOADED', [m for m in {modules!r} if m in sys.modules])"
    )
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    return run


def test_commands_that_only_read_rows_load_no_model(store: MemoryStore, database_url) -> None:
    """Issue 36: `review` took 11-24 s, an idle `watch --once` 13 s, loading torch and the embedding model
    to read rows. `review`, `history`, `undo` and an idle pass load neither (nor the scorers' nltk)."""
    bank = store.scoped((*store.namespace, "alice"))
    bank.create_many([NewMemory(text) for text in FACTS])
    (done,) = BackgroundCompactor(store, bank.path).run_once()  # compacted: the pass below has nothing to do
    commands = [["review", "--url", database_url], ["history", bank.path, "--url", database_url],
                ["history", bank.path, "--change", str(done.applied[0]), "--url", database_url],
                ["watch", bank.path, "--once", "--url", database_url],
                ["undo", bank.path, "--change", str(done.applied[0]), "--url", database_url]]
    run = loaded_by(commands, ("torch", "sentence_transformers", "nltk"))
    assert "LOADED []" in run.stdout and "undid change" in run.stdout and "pass over 1 bank" in run.stdout


def test_a_new_memory_the_judge_left_is_not_read_again(store: MemoryStore, database_url) -> None:
    """Issue 70: a bank whose new memory the judge read and left was judged again by every later pass, so a
    `watch --once` command loaded torch and the judge for it each time. A pass marks what it read and left;
    the next reads only newer memories (an unchanged store loads no model), and growth still counts from
    the last compaction."""
    from memupdate.agent.background import JUDGED_OP, _needs_work_unjudged

    bank = store.scoped((*store.namespace, "judged", "alice"))
    bank.create_many([NewMemory(text) for text in FACTS])
    watcher = BackgroundCompactor(store, bank.path, CompactorSettings(grow_by=3))
    watcher.run_once()  # never compacted: compacted now
    bank.create_many([NewMemory("Alice started a pottery class on Tuesdays")])
    assert isinstance(_needs_work_unjudged([bank], 3)[bank.path], list)  # its pairs wait for the judge
    # The judge reads them and leaves them: the command builds no policy (imports no chat model).
    run = loaded_by([["watch", bank.path, "--once", "--url", database_url]], ("torch", "memupdate.agent.policies.heuristic"))
    assert "LOADED ['torch']" in run.stdout and "pass over 1 bank" in run.stdout, run.stdout
    assert not bank.events(op="compacted")[1:]
    created = max(e.id for e in bank.events(op="create"))
    assert [e.after["through"] for e in bank.events(op=JUDGED_OP)] == [created]
    assert _needs_work_unjudged([bank], 3)[bank.path] is None  # read: nothing for the judge
    run = loaded_by([["watch", bank.path, "--once", "--url", database_url]], ("torch",))
    assert "LOADED []" in run.stdout and "pass over 1 bank" in run.stdout, run.stdout
    bank.create_many([NewMemory("Alice is learning Portuguese at an evening school")])
    pairs = _needs_work_unjudged([bank], 3)[bank.path]
    assert pairs and {fresh.content for _, fresh in pairs} == {"Alice is learning Portuguese at an evening school"}
    bank.create_many([NewMemory("Alice runs along the river on Sundays")])
    assert _needs_work_unjudged([bank], 3)[bank.path] == "grown by 3 memories since its last compaction"


def test_the_policy_judges_no_pair_the_trigger_read(store: MemoryStore, monkeypatch) -> None:
    """The pass's trigger reads a bank's new pairs before the heuristic is built (`_trigger_judge`); the
    heuristic built after it answers those pairs from the trigger's memory, not by reading them again."""
    import memupdate.agent.background as background

    read: list[tuple[str, str]] = []

    class Counting:  # the real judge, each pair it reads counted
        def __init__(self, inner: Any):
            self.inner = inner

        def __getattr__(self, name: str) -> Any:
            return getattr(self.inner, name)

        def judge(self, pairs):
            read.extend((a.text, b.text) for a, b in pairs)
            return self.inner.judge(pairs)

    import memupdate.agent.policies.heuristic as heuristic

    counting = Counting(background.make_judge())
    for module in (background, heuristic):  # the trigger's judge, and the policy's if it made its own
        monkeypatch.setattr(module, "make_judge", lambda: counting)
    bank = store.scoped((*store.namespace, "trigger", "alice"))
    bank.create_many([NewMemory(text) for text in FACTS])
    watcher = BackgroundCompactor(store, bank.path)
    watcher.run_once()
    bank.create_many([NewMemory("Alice moved to Porto last month")])
    read.clear()
    (done,) = BackgroundCompactor(store, bank.path).run_once()  # a new watcher: its policy not built yet
    assert done.reason and "new memory" in done.reason  # the trigger read an update: compacted
    porto = [pair for pair in read if "Alice moved to Porto last month" in pair]
    assert porto and len(porto) == len(set(porto))  # each pair with the new memory read once in the pass


def test_a_pass_that_compacts_imports_neither_transformers_nor_nltk(store: MemoryStore, database_url) -> None:
    """Issue 70: a `watch --once` command paid 7.3 s importing sentence-transformers for a few new texts, and
    1.4 s importing nltk (scipy with it) that no watch pass uses. Both are read without them now."""
    from memupdate.judge.local import ensure_judge

    # Built once on first use (from the shipped weights, with transformers): not what a pass pays.
    ensure_judge(Path(os.environ["MEMUPDATE_DATA_DIR"]) / "models" / "relation-judge")
    bank = store.scoped((*store.namespace, "alice"))
    bank.create_many([NewMemory(text) for text in FACTS])  # never compacted: the pass embeds, judges and compacts it
    run = loaded_by([["watch", bank.path, "--once", "--url", database_url]], ("transformers", "sentence_transformers", "nltk", "scipy"))
    assert "LOADED []" in run.stdout and "pass over 1 bank" in run.stdout, run.stdout
    assert bank.events(op="compacted"), "the pass compacted the bank"


def test_threads_gives_a_worker_its_share_of_the_cores(database_url, store: MemoryStore) -> None:
    """`watch --threads N`: the worker's models read on N threads (several workers on one machine each take
    their share, not every core)."""
    import torch

    before = torch.get_num_threads()
    bank = store.scoped((*store.namespace, "threads", "alice"))
    bank.create_many([NewMemory(text) for text in FACTS[2:4]])
    try:
        invoke("watch", bank.path, "--once", "--threads", before + 1, "--url", database_url)
        assert torch.get_num_threads() == before + 1
    finally:
        torch.set_num_threads(before)
    assert "--threads" in invoke("watch", "--help") and invoke("watch", bank.path, "--threads", 0, "--url", database_url, code=2)
