"""Loading a conversation never resurrects what an in-place edit removed, says what it did, and is safe
when two loads of the same new conversation run at once (issue 10, items 10 and 11). Real embedded
PostgreSQL and the real embedding model; the shipped sample conversation."""

from __future__ import annotations

import subprocess
import sys
import threading
from dataclasses import replace
from pathlib import Path

import pytest

from memupdate.agent.tools import run_tool
from memupdate.rl.data import ingest as ingest_module
from memupdate.rl.data.ingest import ingest
from memupdate.rl.data.locomo import load_sample, sample_conversation_path
from memupdate.store import MemoryStore


def test_reload_after_an_in_place_merge_does_not_resurrect_the_sources(store: MemoryStore, sample) -> None:
    first = ingest(store, sample)
    assert (first.added, first.present, first.removed_by_edit) == (len(sample.facts), 0, [])
    base = first.base
    merged = run_tool(base, "merge_memory", {"memory_ids": ["f0000", "f0001"], "strategy": "concatenate"})
    deleted = run_tool(base, "delete_memory", {"memory_id": "f0003"})
    assert merged.ok and deleted.ok
    count, events = base.count(), len(base.events())

    again = ingest(store, sample)
    assert base.count() == count == len(sample.facts) - 2, "merged-away and deleted facts stay away"
    assert len(base.events()) == events, "nothing written"
    assert (again.added, again.present, again.removed_by_edit) == (0, len(sample.facts) - 3, ["f0000", "f0001", "f0003"])
    assert "3 skipped as removed by an edit (f0000, f0001, f0003)" in again.summary()


def test_reload_after_a_drop_loads_everything_again(store: MemoryStore, sample) -> None:
    base = ingest(store, sample).base
    base.delete("f0002")
    base.drop(keep_events=True)  # the bank is emptied on purpose: a new load starts afresh
    report = ingest(store, sample)
    assert report.added == len(sample.facts) and report.removed_by_edit == []


def test_a_missing_fact_with_no_delete_event_is_added_back(store: MemoryStore, sample) -> None:
    """Only the event log decides: a bank loaded from a shorter file gets the new facts."""
    short = replace(sample, facts=sample.facts[:5])
    assert ingest(store, short).added == 5
    report = ingest(store, sample)
    assert (report.added, report.present) == (len(sample.facts) - 5, 5)


def test_two_loads_of_the_same_new_conversation_at_once(store: MemoryStore, sample, monkeypatch) -> None:
    """Both threads read the empty base before either inserts (a barrier holds them): once the second
    died with "a memory with one of the keys ... already exists: update it, or create without a key"."""
    barrier = threading.Barrier(2, timeout=60)
    real_create_many = MemoryStore.create_many

    def create_many_together(self, items, **kwargs):
        barrier.wait()
        return real_create_many(self, items, **kwargs)

    monkeypatch.setattr(MemoryStore, "create_many", create_many_together)
    reports, failures = [], []

    def load() -> None:
        try:
            reports.append(ingest_module.ingest(store, sample))
        except Exception as exc:  # any error: the assertion below says which were expected
            failures.append(exc)

    threads = [threading.Thread(target=load) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert failures == []
    base = store.scoped(("locomo", sample.sample_id))
    assert base.count() == len(sample.facts)
    assert sorted(r.added for r in reports) == [0, len(sample.facts)]
    assert sorted(r.present for r in reports) == [0, len(sample.facts)]
    assert [e.op for e in base.events()] == ["create"] * len(sample.facts), "one create event per fact"


@pytest.mark.slow
def test_two_processes_load_the_same_new_conversation(store: MemoryStore, database_url, tmp_path) -> None:
    """`memupdate data load` twice at once, as two evals of a new conversation would (the CLI loads
    torch and the model: ~15 s each on this machine's two cores)."""
    import json

    data = json.loads(sample_conversation_path().read_text())
    sample_id = f"sample-{store.namespace[-1]}"
    data[0]["sample_id"] = sample_id
    path = tmp_path / "one.json"
    path.write_text(json.dumps(data))
    command = [str(Path(sys.executable).parent / "memupdate"), "data", "load", "--locomo", str(path), "--url", database_url]
    try:
        procs = [subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
        outputs = [p.communicate(timeout=300) for p in procs]
        assert [p.returncode for p in procs] == [0, 0], outputs
        base = store.scoped(("locomo", sample_id))
        facts = len(load_sample()[0].facts)
        assert base.count() == facts and len(base.events()) == facts
    finally:
        store.scoped(("locomo", sample_id)).drop()
