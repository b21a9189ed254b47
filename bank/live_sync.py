"""A bank kept in step with the live LangGraph store it was imported from, while an app keeps writing
there: each applied (or undone) change goes to the store whole or not at all, and never over an item
the app wrote since.

    from memupdate.bank.live_sync import export_changes

    report = export_changes(bank)          # every live change of the bank not yet in the store
    report.written, report.already, report.conflicts    # change ids; conflicts: id -> what the app did

A change is *live* when `memupdate watch` or `memupdate review` made it (`details["live"]`). Its
writes are its event rows (`change:<id>`, or `undo:<id>` once undone): each names a memory and what it
held before and after. In ONE transaction on the store, the items involved are locked (`FOR UPDATE`:
an app's `put` waits and lands after), then each change is

- *already there* when every item holds what the change wrote, or the items only it creates do (a
  run killed after the store committed; the app may have written the others since): nothing is
  written, the bank's record catches up, and the next import brings the app's writes;
- *clean* when every item holds what the change saw (and, for items the bank has seen, the very value
  it saw): its puts and deletes are written through LangGraph's own `batch`, in that transaction;
- *in conflict* otherwise (the app changed, deleted or re-created one of them): nothing of it is
  written, and the change is undone in the bank (its rows restored from `superseded_memories`), so the
  app's version comes in with the next import and a later compaction may propose the change anew.

A merge of items the app holds keeps, for its merged item, the app's key of its newest source (that item
is updated in place, the other sources deleted; the change's summary records it under "app_keys"), so an
app holding that key finds the merged text. An undo puts items back as the app had them, their `created_at` and `updated_at` included: a restored
stale statement never reads as newer than the one that superseded it.

The store commits before the bank records what it wrote; if the run dies between the two, the next
run finds those changes *already there*. So a change is never half applied at the store, and an item
the app wrote is never overwritten, deleted or brought back.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from sqlalchemy import and_, or_, select, update

from memupdate.bank.change_log import ChangeConflict, ChangeRecord, change_record, changes, undo_change
from memupdate.bank.source_kinds import Source, source_kind, value_hash
from memupdate.bank.source_reports import LiveExport
from memupdate.bank.sources import (
    iso_time,
    item_value,
    memory_digest,
    memory_text,
    read_source,
    store_key,
    write_source,
)
from memupdate.store import MemoryRecord, MemoryStore


def is_live(bank: MemoryStore) -> bool:
    """Whether the bank mirrors a store an app keeps writing (imported by a live kind: a `postgresql://` URL)."""
    record = read_source(bank)
    return record is not None and source_kind(record["kind"]).live


def banks_with_pending_writes(engine, paths: Sequence[str]) -> list[str]:
    """Of the banks `paths`, those holding a live change the store has not had (what `pending_jobs` finds),
    in one query: a pass over many banks resumes only those."""
    if not paths:
        return []
    exported = changes.c.summary["exported"].astext == "true"
    unexported = changes.c.summary["unexported"].astext == "true"
    query = select(changes.c.namespace).distinct().where(
        changes.c.namespace.in_(list(paths)), changes.c.details["live"].astext == "true",
        or_(and_(changes.c.status == "applied", or_(changes.c.summary["exported"].is_(None), ~exported)),
            and_(changes.c.status == "undone", exported, or_(changes.c.summary["unexported"].is_(None), ~unexported))),
    )
    with engine.connect() as conn:
        return sorted(conn.execute(query).scalars())


def pending_jobs(bank: MemoryStore) -> list[tuple[ChangeRecord, str]]:
    """The live changes whose writes the store has not had: (change, event episode), in event order."""
    query = select(changes).where(changes.c.namespace == bank.path, changes.c.details["live"].astext == "true")
    jobs = []
    with bank.engine.connect() as conn:
        for change in map(change_record, conn.execute(query.order_by(changes.c.id))):
            if change.status == "applied" and not change.summary.get("exported"):
                jobs.append((change, f"change:{change.id}"))
            elif change.status == "undone" and change.summary.get("exported") and not change.summary.get("unexported"):
                jobs.append((change, f"undo:{change.id}"))
    first = {episode: next((e.id for e in bank.events(episode=episode)), 0) for _, episode in jobs}
    return sorted(jobs, key=lambda job: first[job[1]])


def export_changes(
    bank: MemoryStore, *, url: str | None = None, before_commit: Callable[[], None] | None = None,
    after_commit: Callable[[], None] | None = None,
) -> LiveExport:
    """Write the bank's pending live changes to the store it mirrors, through its kind (nothing for a bank
    no app writes to). `before_commit()` runs last inside the store's transaction, `after_commit()` after
    it commits and before the bank records it (tests kill the run at both)."""
    record = read_source(bank)
    if record is None or not source_kind(record["kind"]).live:
        return LiveExport(bank.path)
    return source_kind(record["kind"]).export_changes(bank, record, url=url, before_commit=before_commit, after_commit=after_commit)


def write_live_changes(
    bank: MemoryStore, record: dict[str, Any], open_store: Callable[[], tuple[Any, Any]], *,
    before_commit: Callable[[], None] | None = None, after_commit: Callable[[], None] | None = None,
) -> LiveExport:
    """LangGraph's `export_changes`: the pending changes written to its `PostgresStore` (see the module
    docstring); `open_store()` gives (context manager, store), called only when a change is pending."""
    report = LiveExport(bank.path)
    jobs = pending_jobs(bank)
    if not jobs:
        return report
    namespace = tuple(record["source_namespace"])
    seen: dict[str, Any] = dict(record["items"])
    source_of = {state["key"]: source_key for source_key, state in seen.items()}
    steps = [(change, episode, _events(bank, episode)) for change, episode in jobs]
    for change, episode, logged in steps:
        if episode.startswith("change:") and (kept := merged_keeps(logged, source_of, seen)):
            source_of.update(kept)
            report.kept_keys[change.id] = kept
    for _change, _episode, logged in steps:  # memories new to the store get keys its app's tools accept
        for key, _op, before, after in logged:
            if key not in source_of:
                source_of[key] = store_key(bank.path, key, (after or before or {}).get("metadata"))
    # What each change's superseded memories are replaced by must be in the store once it is written (a
    # merge's result another change of the compaction made, an item the app deleted): locked and read too.
    needs = {change.id: replacements(change, logged, source_of) for change, _episode, logged in steps}
    keys = sorted({source_of.get(key, key) for _, _, logged in steps for key, *_ in logged}
                  | {k for wanted in needs.values() for k in wanted if k is not None})
    manager, store = open_store()
    try:
        with store.conn.transaction():
            current = _locked_items(store, namespace, keys)
            outcome, ops = _plan(steps, current, seen, source_of, namespace, needs)
            if ops:
                store.batch(ops)
                _keep_stated_times(store, namespace, steps, outcome, source_of)
            after = _locked_items(store, namespace, keys)
            if before_commit is not None:
                before_commit()
    finally:
        manager.__exit__(None, None, None)
    if after_commit is not None:
        after_commit()
    _record(bank, record, seen, source_of, steps, outcome, after, report)
    return report


def _events(bank: MemoryStore, episode: str) -> list[tuple[str, str, dict | None, dict | None]]:
    return [(e.memory_key, e.op, e.before, e.after) for e in bank.events(episode=episode)]


def merged_keeps(logged, source_of: dict[str, str], seen: dict[str, Any]) -> dict[str, str]:
    """For each memory a change's merge created: the app's key of its newest source, which the merged item
    takes in the store (so an app holding that key finds the merged text, not "not found"). Only a source
    the app holds (an item of the store) and this change deletes can lend its key; the same events always
    choose the same key, so a rerun finds what a killed run wrote."""
    from memupdate.text.facts import stated_at

    deleted = {key: before for key, op, before, _after in logged if op == "delete" and before is not None}
    kept: dict[str, str] = {}
    for key, op, before, after in logged:
        if op != "create" or before is not None or after is None:
            continue
        lenders = [k for k in (after.get("metadata") or {}).get("merged_from") or []
                   if k in deleted and source_of.get(k) in seen and source_of[k] not in kept.values()]
        if lenders:
            def stated(k: str) -> str:
                memory = MemoryRecord(k, (), deleted[k]["content"], deleted[k].get("kind", "semantic"), deleted[k].get("metadata") or {})
                return stated_at(memory) or ""
            newest = max(lenders, key=lambda k: (stated(k), lenders.index(k)))
            kept[key] = source_of[newest]
    return kept


def replacements(change: ChangeRecord, logged, source_of: dict[str, str]) -> list[str | None]:
    """The store keys of the memories an applied change names as replacing the ones it supersedes
    (`details["replaced"]`), other than those it writes itself; None for one the store never had."""
    if not change.details.get("live") or change.status != "applied":
        return []
    own = {key for key, *_ in logged}
    wanted = dict.fromkeys(k for why in (change.details.get("replaced") or {}).values() for k in why.get("by") or [] if k not in own)
    return [source_of.get(k) for k in wanted]


def _locked_items(store, namespace: tuple[str, ...], keys: list[str]) -> dict[str, dict[str, Any]]:
    """The store's items `keys` of `namespace`, locked until the transaction ends (LangGraph keeps a
    namespace as its labels joined by dots in the `prefix` column)."""
    if not keys:
        return {}
    with store.conn.cursor() as cur:
        cur.execute(
            "SELECT key, value, updated_at FROM store WHERE prefix = %s AND key = ANY(%s) FOR UPDATE",
            (".".join(namespace), keys),
        )
        return {row["key"]: {"value": row["value"], "updated_at": iso_time(row["updated_at"])} for row in cur.fetchall()}


def _keep_stated_times(store, namespace: tuple[str, ...], steps, outcome: dict[int, str], source_of) -> None:
    """An undo puts an item back as the app last had it, times included: a `put` stamps it now, which
    would make a restored stale statement read as the newest (a re-import then retires the current one)."""
    with store.conn.cursor() as cur:
        for change, episode, logged in steps:
            if outcome[change.id] != "clean" or not episode.startswith("undo:"):
                continue
            for key, _op, _before, after in logged:
                origin = ((after or {}).get("metadata") or {}).get("imported_from") or {}
                if after is not None and origin.get("created_at"):
                    cur.execute(
                        "UPDATE store SET created_at = %s, updated_at = %s WHERE prefix = %s AND key = %s",
                        (origin["created_at"], origin.get("updated_at") or origin["created_at"], ".".join(namespace),
                         source_of.get(key, key)),
                    )


def _plan(steps, current, seen, source_of, namespace, needs: dict[int, list[str | None]] | None = None) -> tuple[dict[int, str], list]:
    """Each change's state (`already`, `clean` or a conflict's description) and the ops of the clean ones,
    taking the changes in order over the store as each clean one leaves it. A clean change whose
    replacements (`needs`) the store lacks is a conflict: written, it would supersede a memory by one that
    is nowhere (another change of its compaction dropped, or the app deleted it meanwhile)."""
    from langgraph.store.base import PutOp

    now = {key: item["value"] for key, item in current.items()}
    written: set[str] = set()
    outcome: dict[int, str] = {}
    ops = []
    for change, _episode, logged in steps:
        state = _state(logged, now, seen, source_of, written)
        if state == "clean" and (missing := [k for k in (needs or {}).get(change.id, []) if k is None or k not in now]):
            state = (f"item {missing[0]!r}, which replaces what the change supersedes, is not in the store"
                     if missing[0] else "a memory replacing what the change supersedes is not in the store")
        outcome[change.id] = state
        if state != "clean":
            continue
        for key, _op, _before, after in logged:
            source_key = source_of.get(key, key)
            if after is None:
                value = None
            else:
                memory = MemoryRecord(key, (), after["content"], after.get("kind", "semantic"), after.get("metadata") or {})
                value = item_value(memory, now.get(source_key))
            ops.append(PutOp(namespace, source_key, value))
            now[source_key] = value
            if value is None:
                now.pop(source_key)
            written.add(source_key)
    return outcome, list({(op.namespace, op.key): op for op in ops}.values())  # a key's last put wins, as LangGraph's batch does


def _state(logged, now, seen, source_of, written: set[str]) -> str:
    """`already`, `clean` or what the app did: each event is checked against the store as the change's
    earlier events leave it (a merge's item takes the key of a source it deletes)."""
    clean = True
    conflict = ""
    mine: dict[str, str | None] = {}  # source key -> the text this change's events so far leave there
    first: dict[str, dict | None] = {}  # source key -> what the change's first event of it expects
    for key, _op, before, after in logged:
        source_key = source_of.get(key, key)
        expected = before["content"] if before else None
        if source_key in mine:
            clean &= mine[source_key] == expected
        else:
            first[source_key] = before
            value = now.get(source_key)
            text = memory_text(value) if value is not None else None
            unmoved = value is None or source_key in written or source_key not in seen or value_hash(value) == seen[source_key].get("value_hash")
            if not (text == expected and unmoved):
                clean = False
                conflict = conflict or (f"item {source_key!r} was deleted by the app" if value is None and before
                                        else f"item {source_key!r} was written by the app")
        mine[source_key] = after["content"] if after else None
    already = all((memory_text(now[k]) if k in now else None) == text for k, text in mine.items())
    # Items only this change creates (a merge's or split's result, under a fresh key) hold its text: its
    # transaction committed, and what differs elsewhere the app wrote after it (the next import reads it).
    created = [(k, text) for k, text in mine.items() if first[k] is None and text is not None]
    committed = bool(created) and all(
        (value := now.get(k)) is not None and memory_text(value) == text and k not in written for k, text in created
    )
    return "already" if already or committed else "clean" if clean else conflict


def _record(bank, record, seen, source_of, steps, outcome, after, report: LiveExport) -> None:
    """The bank's side, after the store committed: the source state as written, each change marked, and
    the changes in conflict undone here."""
    for change, _episode, logged in steps:
        state = outcome[change.id]
        if state not in ("clean", "already"):
            report.conflicts[change.id] = state
            continue
        (report.written if state == "clean" else report.already).append(change.id)
        for key, _op, _before, written in logged:
            source_key = source_of.get(key, key)
            item = after.get(source_key)
            if written is None or item is None:
                seen.pop(source_key, None)
            else:
                seen[source_key] = {"key": key, "updated_at": item["updated_at"], "value_hash": value_hash(item["value"]),
                                    "content_hash": memory_digest(written["content"], written.get("kind", "semantic"))}
    write_source(bank, Source(record["kind"], record["uri"]), tuple(record["source_namespace"]), seen, exported=True)
    for change, episode, _logged in steps:
        state = outcome[change.id]
        mark = "unexported" if episode.startswith("undo:") else "exported"
        if state in ("clean", "already"):
            _mark(bank, change, {mark: True, **({"app_keys": report.kept_keys[change.id]} if change.id in report.kept_keys else {})})
        elif mark == "exported":
            try:
                undo_change(bank, change.id, note={"conflict": f"{state} while the change waited: undone here, the app's version kept"})
            except ChangeConflict as exc:
                _mark(bank, change, {"conflict": str(exc)})
        else:  # an undo the store cannot take back: the app's later write stays there
            _mark(bank, change, {"unexported": True, "conflict": f"{state}: the undo was not written to the store"})


def _mark(bank: MemoryStore, change: ChangeRecord, fields: dict[str, Any]) -> None:
    with bank.engine.begin() as conn:
        current = conn.execute(select(changes.c.summary).where(changes.c.id == change.id)).scalar_one()
        conn.execute(update(changes).where(changes.c.id == change.id).values(summary={**current, **fields}))
