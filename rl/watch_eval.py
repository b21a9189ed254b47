"""People's stores left to `memupdate watch`: what one `watch --once` pass does by itself to them.

    from memupdate.rl.watch_eval import watch_banks
    report = watch_banks(root, banks)          # banks: `rl.data.relations.store_banks(data)["eval"]`
    report.true_lost, report.updates_by_itself, report.waiting, report.asks_right

Each bank (a person) is written into a LangGraph `PostgresStore` of its own database on the same server,
one namespace a person (`("memories", person)`, as LangMem keeps them), each statement at its stated
time; then one pass of the background compactor runs over the store with the defaults (the heuristic
policy, the configured judge, the safety rule), as `memupdate watch URL --prefix memories --once`
does. Afterwards a true statement (any statement no labelled update retires) whose item is no longer in the
app's store (a dating rewrites an item in place; a supersession or a merge removes one) is a true fact
lost by itself; a labelled update whose older statement is gone and
whose newer is held is resolved by itself. A change waiting for review (an ask) is right where it retires
a statement a labelled update retires, or merges a labelled duplicate. The database is dropped after.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field

from memupdate.judge.pairs import Rate
from memupdate.judge.store_view import StoreBank
from memupdate.store import MemoryStore

NAMESPACE = "memories"


@dataclass
class WatchReport:
    """What one pass did by itself, per the module docstring."""

    people: int
    statements: int
    true_statements: int
    true_lost: Rate
    updates_by_itself: Rate
    applied: int  # changes applied by themselves
    waiting: int  # changes waiting for review: the questions the pass asks people
    asks_right: int  # of those, the ones a label asks for
    seconds: float
    lost: list[tuple[str, str]] = field(default_factory=list)  # (person, statement)

    def to_json(self) -> dict:
        return {"people": self.people, "statements": self.statements, "true_statements": self.true_statements,
                "true_lost": self.true_lost.to_json(), "updates_by_itself": self.updates_by_itself.to_json(),
                "applied": self.applied, "waiting": self.waiting, "asks_right": self.asks_right, "seconds": round(self.seconds, 1), "lost": self.lost[:50]}


def watch_banks(root: MemoryStore, banks: Sequence[StoreBank]) -> WatchReport:
    """Write `banks` into a fresh LangGraph store, run one watcher pass over it, read what changed."""
    from langgraph.store.postgres import PostgresStore
    from sqlalchemy import text

    from memupdate.agent.background import BackgroundCompactor, CompactorSettings
    from memupdate.bank.review_queue import pending

    name = f"mu_watch_{uuid.uuid4().hex[:10]}"
    with root.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    url = root.engine.url.set(database=name, drivername="postgresql").render_as_string(hide_password=False)
    into = ("watch-eval", name)
    try:
        with PostgresStore.from_conn_string(url) as lg:
            lg.setup()
            _write(lg, url, banks)
            started = time.perf_counter()
            passes = BackgroundCompactor(root, url, CompactorSettings(prefix=(NAMESPACE,), into=into)).run_once()
            seconds = time.perf_counter() - started
            held = {item.key for bank in banks for item in lg.search(_person(bank), limit=10_000)}
        asked = {q.change.id: q.change.review_change for q in pending(root.engine)}
        asks = [asked[i] for p in passes for i in p.queued if asked.get(i) is not None]
        return _report(banks, held, passes, seconds, sum(_ask_is_right(banks, change) for change in asks))
    finally:
        for namespace in root.list_namespaces(prefix=into):
            root.scoped(namespace).drop()
        with root.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


def _write(lg, url: str, banks: Sequence[StoreBank]) -> None:
    """Each statement put as LangMem puts a memory, then its write time set to when it was stated."""
    import psycopg

    stamps = []
    for bank in banks:
        for n, statement in enumerate(bank.statements):
            key = _key(bank, n)
            lg.put(_person(bank), key, {"content": statement.text})
            if statement.time:
                stamps.append((statement.time if "T" in statement.time else f"{statement.time}T12:00:00+00:00", key))
    with psycopg.connect(url) as conn:
        with conn.cursor() as cursor:
            cursor.executemany("UPDATE store SET created_at = %s, updated_at = %s WHERE key = %s", [(t, t, k) for t, k in stamps])


def _person(bank: StoreBank) -> tuple[str, str]:
    """A person's namespace: a label holds no "/" (BEAM's "beam-100K/4")."""
    return (NAMESPACE, bank.group.replace("/", "_"))


def _key(bank: StoreBank, n: int) -> str:
    return f"{_person(bank)[1]}-{n}"


def _ask_is_right(banks: Sequence[StoreBank], change) -> bool:
    """Whether a queued change is one a label asks for: it retires a statement a labelled update retires,
    or its sources are a labelled duplicate's two statements."""
    texts = {source.content for source in change.sources}
    for bank in banks:
        if any(bank.statements[i].text in texts for i in bank.stale):
            return True
        if any(label == "duplicate" and {bank.statements[i].text, bank.statements[j].text} <= texts for (i, j), label in bank.labels.items()):
            return True
    return False


def _report(banks: Sequence[StoreBank], held: set[str], passes, seconds: float, asks_right: int = 0) -> WatchReport:
    """`held`: the keys of the items still in the app's store (a statement dated in place keeps its item)."""
    true_total = lost = updates = resolved = 0
    lost_list = []
    for bank in banks:
        older = bank.stale
        for i, statement in enumerate(bank.statements):
            if i in older:
                continue
            true_total += 1
            if _key(bank, i) not in held:
                lost += 1
                lost_list.append((bank.group, statement.text))
        for (i, j), label in bank.labels.items():
            if label != "update":
                continue
            old, new = sorted((i, j), key=lambda k: bank.statements[k].time or "")
            updates += 1
            resolved += _key(bank, old) not in held and _key(bank, new) in held
    return WatchReport(
        people=len(banks), statements=sum(len(b.statements) for b in banks), true_statements=true_total,
        true_lost=Rate(lost, true_total), updates_by_itself=Rate(resolved, updates),
        applied=sum(len(p.applied) for p in passes), waiting=sum(len(p.queued) for p in passes), asks_right=asks_right, seconds=seconds, lost=lost_list,
    )
