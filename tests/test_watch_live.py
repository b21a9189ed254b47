"""Nothing the app writes is lost (issue 28): LangMem writing from another process while the compactor
compacts and applies, and the compactor SIGKILLed at each step of a pass. Afterwards every item the
app wrote is in the store, or superseded with a record whose replacements are in the store; items it
deleted stay deleted; the bank mirrors the store, so no change is half applied there.

Real parts throughout: LangGraph's own PostgresStore in a database of its own on the test server,
LangMem's manage_memory tool in separate processes (tests/langmem_app_job.py), the compactor killed in
its own process (tests/watch_kill_job.py), the embedded PostgreSQL and the packaged embedding model.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from langgraph_source import langgraph_store, langmem_tool, remember

from memupdate.agent.background import BackgroundCompactor, CompactorSettings
from memupdate.bank.change_log import history, superseded_rows
from memupdate.bank.sources import read_source, store_key
from memupdate.store import MemoryStore, NewMemory
from memupdate.store.langgraph_store import PostgresMemoryStore

HERE = Path(__file__).parent
FACTS = [
    "Alice moved to Lisbon in 2021",
    "Alice moved to Lisbon in 2021.",
    "Alice has a dog called Rex",
    "Alice adopted a cat named Mia yesterday",
    "Alice works as a nurse at the city hospital",
]


def held(lg, user: str = "alice") -> dict[str, str]:
    return {item.key: item.value["content"] for item in lg.search(("memories", user), limit=1000)}


def app_writes(url: str, actions: list[dict]) -> list[str]:
    """LangMem's tool, run by another process; returns the keys it created."""
    job = subprocess.run([sys.executable, str(HERE / "langmem_app_job.py"), url, "alice", json.dumps(actions)],
                         capture_output=True, text=True, timeout=120)
    assert job.returncode == 0, job.stderr[-2000:]
    return json.loads(job.stdout.strip().splitlines()[-1])


def check_nothing_lost(lg, bank: MemoryStore, app_final: dict[str, str | None]) -> None:
    """The bank mirrors the store; each item the app wrote holds its text there, or an applied change
    superseded it with a record (its text kept whole) and its replacements are in the store; an item
    the app deleted is not there."""
    now = held(lg)
    # A merged item keeps its newest source's app key (the change's "app_keys"); when the app later
    # deletes that item, the source record drops it, and only the change still names the key.
    mapped = {k: v for c in history(bank) for k, v in (c.summary.get("app_keys") or {}).items()}
    mapped |= {state["key"]: source_key for source_key, state in read_source(bank)["items"].items()}

    def in_store(key: str) -> str:  # a memory's key as an item: the app's own, or the UUID memupdate gave it
        return mapped.get(key) or store_key(bank.path, key)

    assert {in_store(m.key): m.content for m in bank.list()} == now
    kept = [{**r, "key": in_store(r["key"]), "superseded_by": [in_store(k) for k in r["superseded_by"] or []]}
            for r in superseded_rows(bank)]
    for key, content in app_final.items():
        if content is None:
            assert key not in now, f"{key}, deleted by the app, came back"
        elif now.get(key) != content:
            records = [r for r in kept if r["key"] == key and r["content"] == content]
            assert records, f"the app's {key} ({content!r}) is neither in the store nor superseded"
            gone = {k for k, v in app_final.items() if v is None}  # the app deleted them: not lost
            assert any(all(_kept_on(k, now, kept, gone) for k in r["superseded_by"]) for r in records), f"what replaced {key} is lost"


def _kept_on(key: str, now: dict[str, str], kept: list[dict], gone: set[str] = frozenset(), depth: int = 0) -> bool:
    """`key` is in the store (or the app deleted it), or every memory a later change replaced it by is
    (followed through)."""
    if key in now or key in gone:
        return True
    later = [r for r in kept if r["key"] == key and r["superseded_by"]]
    return depth < 10 and any(all(_kept_on(k, now, kept, gone, depth + 1) for k in r["superseded_by"]) for r in later)


def test_langmem_writes_from_another_process_during_compaction_and_apply(fresh_database, store: MemoryStore) -> None:
    with langgraph_store(fresh_database) as (url, lg):
        keys = remember(lg, "alice", FACTS)
        final = dict(zip(keys, FACTS, strict=True))

        def app_at(step: str, bank: str) -> None:
            if step == "propose":  # the compaction ran on the bank as imported; now the app writes
                actions = [{"action": "update", "id": keys[1], "content": "Alice moved to Lisbon in 2021 and loves it"},
                           {"action": "delete", "id": keys[2]},
                           {"action": "create", "content": "Alice plays the cello"}]
                (cello,) = app_writes(url, actions)
                final.update({keys[1]: "Alice moved to Lisbon in 2021 and loves it", keys[2]: None, cello: "Alice plays the cello"})

        compactor = BackgroundCompactor(store, url, CompactorSettings(prefix=("memories",), into=store.namespace), on_step=app_at)
        (done,) = compactor.run_once()
        bank = store.scoped((*store.namespace, "alice"))
        merge = next(c for c in history(bank) if c.details.get("review_change", {}).get("kind") == "merge")
        assert done.dropped == {merge.id: f"item {keys[1]!r} was written by the app"}  # the merge of keys 0 and 1
        assert merge.status == "undone" and "app's version kept" in merge.summary["conflict"]
        assert len(done.export.written) == 1  # the dated update of the cat still applies
        now = held(lg)
        assert now[keys[1]] == "Alice moved to Lisbon in 2021 and loves it" and keys[2] not in now
        assert now[keys[0]] == FACTS[0] and "(" in now[keys[3]]
        compactor.on_step = None
        compactor.run_once()  # imports the app's writes
        check_nothing_lost(lg, bank, final)


def test_a_concurrent_langmem_writer_loses_nothing(fresh_database, store: MemoryStore, tmp_path) -> None:
    with langgraph_store(fresh_database) as (url, lg):
        final = dict(zip(remember(lg, "alice", FACTS), FACTS, strict=True))
        out = tmp_path / "app.json"
        writer = subprocess.Popen([sys.executable, str(HERE / "langmem_app_job.py"), url, "alice", "--loop", "60", str(out)],
                                  stderr=subprocess.PIPE, text=True)
        compactor = BackgroundCompactor(store, url, CompactorSettings(prefix=("memories",), into=store.namespace, grow_by=4))
        passes = 0
        while writer.poll() is None or passes < 2:
            compactor.run_once()
            passes += 1
        assert writer.returncode == 0, writer.stderr.read()[-2000:]
        final |= json.loads(out.read_text())
        compactor.run_once()
        bank = store.scoped((*store.namespace, "alice"))
        applied = [c for c in history(bank) if c.status == "applied"]
        assert applied, "the compactor applied nothing: the test proves nothing"
        check_nothing_lost(lg, bank, final)


def test_writes_through_memupdates_own_store_refuse_only_their_own_change(store: MemoryStore) -> None:
    """A bank of memupdate's database written by a LangGraph app through `PostgresMemoryStore`: the app
    rewrites a merge's source after the compaction forked the bank; the merge is dropped, the rest applies."""
    bank = store.scoped((*store.namespace, "bob"))
    bank.create_many([NewMemory(text.replace("Alice", "Bob"), metadata={"date": "2024-05-07"}) for text in FACTS])
    lisbon = [m.key for m in bank.list()][1]
    app = PostgresMemoryStore(store.engine, store.embedder)

    def app_at(step: str, path: str) -> None:
        if step == "propose":
            app.put(bank.namespace, lisbon, {"content": "Bob moved to Lisbon in 2021 and then to Faro"})
            app.put(bank.namespace, "new-note", {"content": "Bob learned to surf"})

    (done,) = BackgroundCompactor(store, bank.path, on_step=app_at).run_once()
    assert len(done.dropped) == 1 and "changed since the compaction forked it" in next(iter(done.dropped.values()))
    assert len(done.applied) == 1
    texts = {m.key: m.content for m in bank.list()}
    assert texts[lisbon] == "Bob moved to Lisbon in 2021 and then to Faro" and texts["new-note"] == "Bob learned to surf"
    assert len(texts) == 6


KILL_STEPS = ["compact", "propose", "apply", "export", "export-commit", "exported"]


@pytest.mark.parametrize("step", [pytest.param(s, marks=() if s in ("apply", "export-commit") else pytest.mark.slow) for s in KILL_STEPS])
def test_the_compactor_killed_at_each_step_loses_nothing(step, fresh_database, database_url, store: MemoryStore) -> None:
    with langgraph_store(fresh_database) as (url, lg):
        keys = remember(lg, "alice", FACTS)
        final = dict(zip(keys, FACTS, strict=True))
        job = subprocess.run([sys.executable, str(HERE / "watch_kill_job.py"), database_url, url, store.path, step],
                             capture_output=True, text=True, timeout=300)
        assert job.returncode == -9 and f"killed at {step}" in job.stdout, job.stdout + job.stderr[-2000:]
        # The app goes on writing before the compactor's next pass: a merge source, a delete, a new item.
        langmem_tool(lg, "update", "alice", id=keys[0], content="Alice moved to Lisbon in 2021, then to Porto")
        langmem_tool(lg, "delete", "alice", id=keys[2])
        cello = langmem_tool(lg, "create", "alice", content="Alice plays the cello").rsplit(" ", 1)[-1]
        final |= {keys[0]: "Alice moved to Lisbon in 2021, then to Porto", keys[2]: None, cello: "Alice plays the cello"}
        compactor = BackgroundCompactor(store, url, CompactorSettings(prefix=("memories",), into=store.namespace))
        compactor.run_once()
        compactor.run_once()
        bank = store.scoped((*store.namespace, "alice"))
        check_nothing_lost(lg, bank, final)
        assert not [c for c in history(bank) if c.status == "proposed" and not c.details.get("held")]


@pytest.mark.slow
def test_the_trial_a_langmem_app_beside_a_watcher_killed_at_random_with_undo_and_reject(
    fresh_database, database_url, store: MemoryStore, tmp_path
) -> None:
    """Issue 36's trial, rerun: LangMem writing from another process for every write (edits of the items
    the compactor wrote included), the watcher SIGKILLed at random steps and restarted, a person undoing
    and rejecting changes in between. Nothing is lost, nothing deleted comes back, an undone change is
    not applied again while its sources are unchanged."""
    import random
    import uuid

    from typer.testing import CliRunner

    from memupdate.cli import app

    rng = random.Random(36)
    runner = CliRunner()
    with langgraph_store(fresh_database) as (url, lg):
        seeds = [*FACTS, "Alice has a dog called Rex.", "Alice works as a nurse at the city hospital!",
                 "Alice visited Porto last week", "Alice visited Faro last week"]
        final: dict[str, str | None] = dict(zip(remember(lg, "alice", seeds), seeds, strict=True))
        out = tmp_path / "app.json"
        writer = subprocess.Popen([sys.executable, str(HERE / "langmem_app_job.py"), url, "alice", "--loop", "80", str(out)],
                                  stderr=subprocess.PIPE, text=True)
        bank = store.scoped((*store.namespace, "alice"))
        undone_by_a_person: list[int] = []
        edited = 0
        for round_ in range(6):
            step = rng.choice([*KILL_STEPS, "none"])
            job = subprocess.run([sys.executable, str(HERE / "watch_kill_job.py"), database_url, url, store.path, step],
                                 capture_output=True, text=True, timeout=600)
            assert job.returncode in (0, -9), job.stdout + job.stderr[-2000:]
            if round_ % 2 == 1:  # a person undoes the latest change that can be, and rejects it too
                for change in reversed([c for c in history(bank) if c.status == "applied"]):
                    done = runner.invoke(app, ["undo", bank.path, "--change", str(change.id), "--url", database_url])
                    if done.exit_code == 0:
                        undone_by_a_person.append(change.id)
                        rejected = runner.invoke(app, ["review", "--reject", str(change.id), "--url", database_url])
                        assert rejected.exit_code == 0 and "stays undone" in rejected.output, rejected.output
                        break
            # The app edits an item the compactor wrote, through LangMem's own tool (a UUID key it accepts).
            record = read_source(bank)
            now = held(lg)  # the items the bank maps to a key of its own are the ones memupdate wrote
            ours = sorted(k for k, state in (record["items"] if record else {}).items() if state["key"] != k and k in now)
            if ours:
                key = rng.choice(ours)
                assert str(uuid.UUID(key)) == key
                if rng.random() < 0.7:
                    text = f"Alice rewrote this merged memory in round {round_}"
                    assert key in langmem_tool(lg, "update", "alice", id=key, content=text)
                    final[key] = text
                else:
                    langmem_tool(lg, "delete", "alice", id=key)
                    final[key] = None
                edited += 1
        writer.wait(timeout=600)
        assert writer.returncode == 0, writer.stderr.read()[-2000:]
        final |= json.loads(out.read_text())
        compactor = BackgroundCompactor(store, url, CompactorSettings(prefix=("memories",), into=store.namespace))
        compactor.run_once()
        compactor.run_once()

        check_nothing_lost(lg, bank, final)
        changes = history(bank)
        assert [c for c in changes if c.status == "applied"], "the compactor applied nothing: the trial proves nothing"
        assert edited and undone_by_a_person, "no merged item was edited or no change undone: the trial proves nothing"
        by_id = {c.id: c for c in changes}
        for undone in undone_by_a_person:
            assert by_id[undone].status == "undone"
            again = [c.id for c in changes if c.id > undone and c.status == "applied"
                     and c.details.get("signature") == by_id[undone].details["signature"]]
            assert not again, f"change {undone} was undone, and applied again as {again} with its sources unchanged"
