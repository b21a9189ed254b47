"""`memupdate watch` over a LangGraph store of many people: a pass (batched across banks) supersedes the
fact one person changed and keeps everyone else's, can be stopped and resumed without compacting a bank
twice, and leaves the banks with nothing new alone. Real parts: LangGraph's PostgresStore on the test server, the embedded
PostgreSQL, the packaged embedding model and the local relation judge."""

from __future__ import annotations

import threading

from langgraph_source import backdate, langgraph_store
from sqlalchemy import select

from memupdate.agent import background
from memupdate.agent.background import COMPACTED_OP, BackgroundCompactor, CompactorSettings
from memupdate.bank.models import MemorySource
from memupdate.store import MemoryStore

PEOPLE = {
    "ana": ["Ana lives in Lisbon.", "Ana works as a nurse.", "Ana has a cat named Milo."],
    "ben": ["Ben plays tennis on Saturdays.", "Ben is learning Greek.", "Ben drives a red Fiat 500."],
    "chloe": ["Chloe supports Celtic.", "Chloe bakes sourdough on Sundays.", "Chloe grows basil on the balcony."],
    "dev": ["Dev lives in Denver.", "Dev is allergic to peanuts.", "Dev lives in Boston now."],
    "elif": ["Elif reads poetry before bed.", "Elif takes the tram to work.", "Elif dislikes olives."],
    "femi": ["Femi runs 5k every morning.", "Femi uses Vim for side projects.", "Femi volunteers at the library."],
}


def _fill(url: str, lg) -> None:
    from langgraph.store.base import PutOp

    lg.batch([PutOp(("memories", person), f"m{i}", {"content": text}) for person, texts in PEOPLE.items() for i, text in enumerate(texts)])
    backdate(url, ["m0", "m1"], days=30)  # each person's last memory stated a month after the others


def _marks(bank: MemoryStore) -> int:
    return len(bank.events(op=COMPACTED_OP))


def test_a_pass_over_many_people_stops_resumes_and_skips_the_unmoved(fresh_database, store: MemoryStore) -> None:
    with langgraph_store(fresh_database) as (url, lg):
        _fill(url, lg)
        into = (*store.namespace, "now")
        seen: list[tuple[int, int]] = []
        stopping = BackgroundCompactor(store, url, CompactorSettings(prefix=("memories",), into=into))

        def stop_after_three(done: int, total: int) -> None:
            seen.append((done, total))
            if done == 3:
                stopping.stop()

        stopping.on_progress = stop_after_three
        first = stopping.run_once()
        assert seen == [(1, 6), (2, 6), (3, 6)] and len(first) == 3
        resumed = BackgroundCompactor(store, url, CompactorSettings(prefix=("memories",), into=into)).run_once()
        assert [p.reason is None for p in resumed] == [True] * 3 + [False] * 3  # the first three are not compacted again
        banks = {person: store.scoped((*into, person)) for person in PEOPLE}
        assert all(_marks(bank) == 1 for bank in banks.values())

        # Dev's move supersedes where he lived; nobody else's facts change.
        dev = [p for p in first + resumed if p.bank.rsplit("/", 1)[-1] == "dev" and p.reason is not None]
        assert len(dev) == 1 and len(dev[0].applied) + len(dev[0].queued) >= 1
        for person, texts in PEOPLE.items():
            if person != "dev":
                assert sorted(m.content for m in banks[person].list()) == sorted(texts), person

        # Nothing new at the source: no bank is compacted, and no bank's source row is written again.
        def imported_at() -> dict[str, object]:
            with store.engine.connect() as conn:
                query = select(MemorySource.namespace, MemorySource.imported_at).where(MemorySource.namespace.like(f"{store.path}/now/%"))
                return dict(conn.execute(query).all())

        rows = imported_at()
        idle = BackgroundCompactor(store, url, CompactorSettings(prefix=("memories",), into=into)).run_once()
        assert [p.reason for p in idle] == [None] * 6 and all(p.imported and "unchanged" in p.imported for p in idle)
        assert imported_at() == rows and all(_marks(bank) == 1 for bank in banks.values())

        # One person writes: only that bank is imported again.
        from langgraph.store.base import PutOp

        lg.batch([PutOp(("memories", "elif"), "m3", {"content": "Elif started a pottery class."})])
        steady = BackgroundCompactor(store, url, CompactorSettings(prefix=("memories",), into=into)).run_once()
        moved = [p.bank.rsplit("/", 1)[-1] for p in steady if p.from_app]
        assert moved == ["elif"] and {k for k, v in imported_at().items() if v != rows[k]} == {banks["elif"].path}


def test_two_workers_import_a_live_store_side_by_side_never_one_bank_twice(fresh_database, store: MemoryStore, monkeypatch) -> None:
    """A claims its batch (ana, ben, chloe) and stops before importing it until B's pass is over: B skips
    that batch and imports and compacts the other; A then imports its own and finds B's done."""
    monkeypatch.setattr(background, "MIN_CLAIM_BATCH", 1)  # six people: two batches of three
    with langgraph_store(fresh_database) as (url, lg):
        _fill(url, lg)
        settings = CompactorSettings(prefix=("memories",), into=(*store.namespace, "now"))
        holding, other_done = threading.Event(), threading.Event()

        def hold_before_the_import(step: str, bank: str) -> None:
            if step == "import" and not holding.is_set():
                holding.set()
                assert other_done.wait(120)

        a_passes: list = []
        worker_a = threading.Thread(target=lambda: a_passes.extend(BackgroundCompactor(store, url, settings, on_step=hold_before_the_import).run_once()))
        worker_a.start()
        assert holding.wait(120)
        b = {p.bank.rsplit("/", 1)[-1]: p for p in BackgroundCompactor(store, url, settings).run_once()}
        other_done.set()
        worker_a.join(120)
        a = {p.bank.rsplit("/", 1)[-1]: p for p in a_passes}

        first, second = ["ana", "ben", "chloe"], ["dev", "elif", "femi"]
        assert all(b[person].elsewhere == "being compacted by another worker" and b[person].imported is None for person in first)
        assert all(b[person].from_app == "imported 3 items from the app" and b[person].reason for person in second)
        assert all(a[person].from_app == "imported 3 items from the app" and a[person].reason for person in first)
        assert all(a[person].from_app == "" and a[person].reason is None for person in second)  # B's, done
        banks = {person: store.scoped((*settings.into, person)) for person in PEOPLE}
        assert all(_marks(bank) == 1 for bank in banks.values())  # each compacted once
        # Dev's move applied by B and written to the app; A's later read of the store does not bring it back.
        assert sorted(m.content for m in banks["dev"].list()) == ["Dev is allergic to peanuts.", "Dev lives in Boston now."]
        assert all(sorted(m.content for m in bank.list()) == sorted(PEOPLE[person]) for person, bank in banks.items() if person != "dev")
