"""Several `memupdate watch` workers share one pass over many banks through PostgreSQL (`bank.claims`:
a row lock per bank, `SKIP LOCKED`): no bank is compacted twice, a bank another worker holds is skipped,
and a worker killed while it holds a bank loses nothing and leaves the bank to the next pass. Real parts:
the embedded PostgreSQL, the packaged embedding model, the heuristic policy; the rule judge
(MEMUPDATE_JUDGE=rule) keeps the passes fast."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from memupdate.agent import background
from memupdate.agent.background import COMPACTED_OP, BackgroundCompactor
from memupdate.bank.change_log import history, superseded_rows
from memupdate.bank.claims import claim, claim_many
from memupdate.store import MemoryStore, NewMemory, to_namespace

HERE = Path(__file__).parent
PEOPLE = ["ana", "ben", "chloe", "dev"]
# A fact told twice (a merge applies itself) and a relative date (dated), as in test_watch.py.
FACTS = [
    "{name} moved to Lisbon in 2021",
    "{name} moved to Lisbon in 2021.",
    "{name} has a dog called Rex",
    "{name} adopted a cat named Mia yesterday",
    "{name} works as a nurse at the city hospital",
]


@pytest.fixture
def rule_judge(monkeypatch):
    from memupdate.settings import get_settings

    monkeypatch.setenv("MEMUPDATE_JUDGE", "rule")
    get_settings.cache_clear()
    yield
    monkeypatch.undo()
    get_settings.cache_clear()


def fill(store: MemoryStore) -> tuple[str, dict[str, MemoryStore]]:
    """One bank per person under `<store>/people`, each with the same five facts in its own words."""
    banks = {}
    for person in PEOPLE:
        bank = banks[person] = store.scoped((*store.namespace, "people", person))
        texts = [fact.format(name=person.title()) for fact in FACTS]
        bank.create_many([NewMemory(text, metadata={"date": "2023-05-08"}) for text in texts])
    return f"{store.path}/people", banks


def compactions(bank: MemoryStore) -> list[int]:
    """The compactions whose changes the bank holds (each change names the compaction that made it)."""
    return sorted({c.summary["compaction"]["fork_change"] for c in history(bank)})


def kept_everything(bank: MemoryStore, person: str) -> bool:
    """Every fact is in the bank, or kept whole as a row an applied change superseded (undo restores it)."""
    held = {m.content for m in bank.list()} | {row["content"] for row in superseded_rows(bank)}
    return {fact.format(name=person.title()) for fact in FACTS} <= held


def test_two_workers_at_once_never_compact_a_bank_twice(store: MemoryStore, rule_judge, monkeypatch) -> None:
    """A claims its first batch (`claim_batches`: 2 banks) and stops in its first bank until B's pass is
    over; B skips A's batch and does the rest; A, reaching those, leaves them alone."""
    monkeypatch.setattr(background, "CLAIM_BATCH", 2)
    path, banks = fill(store)
    first = sorted(banks.values(), key=lambda b: b.path)[0]
    holding, other_done = threading.Event(), threading.Event()

    def hold_the_first_bank(step: str, bank: str) -> None:
        if step == "claimed" and bank == first.path and not holding.is_set():
            holding.set()  # worker A holds its batch until worker B's pass is over
            assert other_done.wait(120)

    a = BackgroundCompactor(store, path, on_step=hold_the_first_bank)
    a_passes: list = []
    worker_a = threading.Thread(target=lambda: a_passes.extend(a.run_once()))
    worker_a.start()
    assert holding.wait(120)
    b_passes = BackgroundCompactor(store, path).run_once()
    other_done.set()
    worker_a.join(120)

    by_a, by_b = {p.bank: p for p in a_passes}, {p.bank: p for p in b_passes}
    a_did = {bank for bank, p in by_a.items() if p.reason is not None}
    b_did = {bank for bank, p in by_b.items() if p.reason is not None}
    assert first.path in a_did and a_did and b_did and not a_did & b_did and a_did | b_did == {b.path for b in banks.values()}
    for bank in a_did:  # B found them held
        assert by_b[bank].elsewhere == "being compacted by another worker" and by_a[bank].applied
    for bank in b_did:  # A, reaching them after B's pass, leaves them alone
        assert by_a[bank].elsewhere == "compacted by another worker during this pass" and by_b[bank].applied
    for person, bank in banks.items():
        assert len(bank.events(op=COMPACTED_OP)) == 1 and len(compactions(bank)) == 1, person
        assert kept_everything(bank, person), person
    # Every bank got the same changes from its one compaction, whichever worker did it.
    assert len({len([c for c in history(bank) if c.status == "applied"]) for bank in banks.values()}) == 1


def test_a_worker_killed_holding_a_bank_loses_nothing_and_the_next_pass_does_it(
    store: MemoryStore, database_url: str, rule_judge
) -> None:
    path, banks = fill(store)
    env = {**os.environ, "MEMUPDATE_JUDGE": "rule"}
    # Killed at "apply": the bank's changes are proposed (its fork kept), none applied yet.
    job = subprocess.Popen([sys.executable, str(HERE / "watch_worker_job.py"), database_url, path, "apply"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        line = job.stdout.readline()
        assert line.startswith("holding "), line + job.stderr.read()
        held = line.split(" ", 1)[1].strip()
        assert any(c.status == "proposed" for c in history(store.scoped(to_namespace(held))))

        meanwhile = {p.bank: p for p in BackgroundCompactor(store, path).run_once()}  # a second worker, at the same time
        skipped = {bank for bank, p in meanwhile.items() if p.elsewhere == "being compacted by another worker"}
        assert held in skipped and len(skipped) < len(banks)  # the killed worker's batch, not the whole pass
        assert all(p.applied for bank, p in meanwhile.items() if bank not in skipped)
    finally:
        os.kill(job.pid, signal.SIGKILL)
        job.wait(30)
    assert job.returncode == -signal.SIGKILL

    deadline = time.monotonic() + 30  # PostgreSQL ends the killed worker's transaction as its connection closes
    while True:
        with claim(store.engine, held) as free:
            if free:
                break
        assert time.monotonic() < deadline, "the killed worker's claim was never released"
        time.sleep(0.2)

    after = {p.bank: p for p in BackgroundCompactor(store, path).run_once()}
    assert after[held].elsewhere is None and after[held].applied  # the killed worker's safe changes, applied now
    assert all(after[bank].elsewhere is None and after[bank].applied for bank in skipped)  # its batch, done now
    assert all(p.reason is None and not p.applied for bank, p in after.items() if bank not in skipped)
    for person, bank in banks.items():
        assert len(bank.events(op=COMPACTED_OP)) == 1, person
        assert kept_everything(bank, person), person
    # The killed bank ends as its siblings did: the same changes applied, none twice, nothing left proposed.
    kinds = {tuple(sorted(c.details["review_change"]["kind"] for c in history(bank) if c.status == "applied")) for bank in banks.values()}
    assert len(kinds) == 1 and next(iter(kinds))
    assert not [c for c in history(store.scoped(to_namespace(held))) if c.status == "proposed"]
    texts = {tuple(sorted(m.content.replace(person.title(), "X") for m in bank.list())) for person, bank in banks.items()}
    assert len(texts) == 1


@pytest.mark.slow
def test_two_watch_commands_started_at_once_share_the_banks(store: MemoryStore, database_url: str) -> None:
    """Two `memupdate watch PATH --once` processes, started together against one database."""
    path, banks = fill(store)
    env = {**os.environ, "MEMUPDATE_JUDGE": "rule"}
    command = [sys.executable, "-m", "memupdate.cli", "watch", path, "--once", "--url", database_url]
    jobs = [subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env) for _ in range(2)]
    outputs = [job.communicate(timeout=300) for job in jobs]
    assert all(job.returncode == 0 for job in jobs), outputs
    for person, bank in banks.items():
        assert len(bank.events(op=COMPACTED_OP)) == 1 and len(compactions(bank)) == 1, person
        assert kept_everything(bank, person), person


def test_a_batch_claim_holds_what_no_other_worker_holds(store: MemoryStore) -> None:
    """`claim_many` holds the names free now (rows added for new ones), another worker's batch gets the
    rest, and a single claim of a held name is refused until the batch's block ends."""
    names = [f"{store.path}/batch/{n}" for n in range(4)]
    with claim(store.engine, names[0]) as first:
        assert first
        with claim_many(store.engine, names[:3]) as mine, claim_many(store.engine, names) as theirs:
            assert mine == set(names[1:3]) and theirs == {names[3]}
            with claim(store.engine, names[1]) as again:
                assert not again
    with claim_many(store.engine, names) as everything:
        assert everything == set(names)


def test_claim_batches_hold_claim_batch_banks_with_work(monkeypatch) -> None:
    monkeypatch.setattr(background, "CLAIM_BATCH", 200)
    banks = list(range(1000))  # every other bank has work
    runs = background.claim_batches(banks, lambda bank: bank % 2 == 0)
    assert [sum(b % 2 == 0 for b in run) for _, run in runs] == [200, 200, 100]
    assert [start for start, _ in runs] == [0, 399, 799] and sum(len(run) for _, run in runs) == 1000
    assert background.claim_batches(banks[:10], lambda bank: True) == [(0, banks[:10])]  # fewer than CLAIM_BATCH: one run
