"""The review queue: a compaction's changes one by one, each its own change of the bank, applied on
its own or waiting for a person, across every bank of the database.

    from memupdate.bank.review_queue import propose_parts, pending, accept, reject

    parts = propose_parts(bank, fork, review.changes, policy="heuristic", live=False, held={...})
    pending(engine)                      # [QueuedChange(change=ChangeRecord(id=41, ...)), ...]; .review: a QueuedReview
    accept(root, 41)                     # applies only change 41's memories; the rest of the bank is untouched
    reject(root, 42, reason="not the same cat")   # discarded, and never proposed again

A part is a `memory_changes` row (status `proposed`) whose `details["keys"]` names the memories of one
change of the review (the sources it replaces and the results that replace them) in the compaction's
fork, and `details["review_change"]` that change as JSON (`Change.to_json`); `apply_change` applies just those keys, checking only them, so a write elsewhere in the bank (an
app's) never blocks it, and a write to one of them refuses it. The fork is kept while a part still
needs it, holding only the rows of pending parts (`shrink_fork`). `details["signature"]` (its kind and its
sources as they are) keeps a rejected, undone or pending change from being queued twice: it comes back only
once one of its sources changes.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Engine, insert, select, update

from memupdate.bank.change_log import (
    ChangeConflict,
    ChangeRecord,
    apply_change,
    change_record,
    changes,
    discard_change,
)
from memupdate.bank.review import replaced_by
from memupdate.bank.review_records import Change, QueuedReview
from memupdate.store import MemoryStore, keep_only


@dataclass(frozen=True)
class QueuedChange:
    """A pending change of one bank, with its review (sources, results, reasons, flags) and why it waits."""

    change: ChangeRecord

    @property
    def review(self) -> QueuedReview:
        held = tuple(self.change.details.get("held") or ())
        return QueuedReview(self.change.review_change, self.change.id, self.change.namespace, self.change.status, held)

    @property
    def confidence(self) -> float:
        """The judge's least confidence over the pairs this change acts on that it reads as the change
        (an update or a duplicate; 0 for a pair it read otherwise, or none): the review shows the surest
        first."""
        review_change = self.change.review_change
        facts = review_change.facts if review_change else None
        read = [p.confidence if p.relation in ("update", "duplicate") else 0.0 for p in facts.pairs if p.confidence is not None] if facts else []
        return min(read) if read else 0.0


def signature(review_change: Change) -> str:
    """What makes two proposals the same change: its kind and the memories it replaces as they are (a
    rejected merge of A and B is not proposed again, in any wording, until A or B changes)."""
    parts = [review_change.kind, sorted((s.key, s.content) for s in review_change.sources)]
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()[:24]


def known_signatures(bank: MemoryStore) -> set[str]:
    """Signatures of the bank's parts that are pending, were rejected or were undone: not to be queued
    again. An undo is a person's "no" like a rejection; an undo the live export made because the app
    wrote a source meanwhile (`summary["conflict"]`) is not, so that change may come back."""
    undone_by_a_person = (changes.c.status == "undone") & ~changes.c.summary.has_key("conflict")
    query = select(changes.c.details["signature"].astext).where(
        changes.c.namespace == bank.path,
        (changes.c.status == "proposed") | changes.c.details.has_key("rejected") | undone_by_a_person,
        changes.c.details.has_key("signature"),
    )
    with bank.engine.connect() as conn:
        return set(conn.execute(query).scalars())


def propose_parts(
    bank: MemoryStore, fork: MemoryStore, review_changes: Iterable[Change], *, policy: str | None,
    live: bool, held: dict[str, list[str]], compaction: dict[str, Any],
) -> list[ChangeRecord]:
    """One proposed change per review change (see the module docstring); `held[id]` are the reasons the
    safety rule keeps that change for review (none: it may apply itself)."""
    rows = []
    for change in review_changes:
        replaced = replaced_by([change])
        counts = {change.kind: 1}
        rows.append({
            "namespace": bank.path, "fork": fork.path, "status": "proposed", "policy": policy,
            "summary": {"counts": counts, "compaction": compaction},
            "details": {"keys": list(dict.fromkeys(change.keys)), "replaced": replaced, "review_change": change.to_json(),
                        "signature": signature(change), "held": held.get(change.id, []), "live": live},
        })
    if not rows:
        return []
    with bank.engine.begin() as conn:
        return [change_record(row) for row in conn.execute(insert(changes).returning(*changes.c), rows)]


def shrink_fork(bank: MemoryStore, fork_path: str) -> None:
    """Keep in a shared fork only the rows its pending parts name (a bank of 100k memories must not stay
    copied whole for one queued merge); its event log, which the parts' checks read, stays."""
    with bank.engine.begin() as conn:
        keep = [k for d in conn.execute(select(changes.c.details).where(changes.c.fork == fork_path, changes.c.status == "proposed")).scalars()
                for k in d.get("keys", [])]
        keep_only(conn, bank.scoped(fork_path), keep)


def pending(engine: Engine, under: str | None = None) -> list[QueuedChange]:
    """Every pending part across banks (optionally of banks under the path `under`), the judge's surest
    first (`QueuedChange.confidence`), then oldest first."""
    query = select(changes).where(changes.c.status == "proposed", changes.c.details.has_key("keys")).order_by(changes.c.id)
    if under:
        query = query.where((changes.c.namespace == under) | changes.c.namespace.startswith(under + "/"))
    with engine.connect() as conn:
        queued = [QueuedChange(change_record(row)) for row in conn.execute(query)]
    return sorted(queued, key=lambda q: -q.confidence)  # stable: equal confidences stay oldest first


def change_by_id(root: MemoryStore, change_id: int) -> tuple[MemoryStore, ChangeRecord]:
    """The bank a change belongs to, and the change; ChangeConflict naming the id if there is none."""
    with root.engine.connect() as conn:
        row = conn.execute(select(changes).where(changes.c.id == change_id)).first()
    if row is None:
        raise ChangeConflict(f"there is no change {change_id}: `memupdate review` lists the pending ones")
    return root.scoped(row.namespace), change_record(row)


def accept(root: MemoryStore, change_id: int) -> tuple[MemoryStore, ChangeRecord]:
    """Apply one pending change (only its memories, checked against the bank as it is now)."""
    bank, change = change_by_id(root, change_id)
    _require_pending(change)
    applied = apply_change(bank, change_id)
    if change.fork:
        shrink_fork(bank, change.fork)
    return bank, applied


def reject(root: MemoryStore, change_id: int, *, reason: str | None = None) -> tuple[MemoryStore, ChangeRecord]:
    """Discard one pending change; its signature keeps it from being proposed again. An undone change is
    kept out already: the reason is recorded with it, and it stays undone."""
    bank, change = change_by_id(root, change_id)
    if change.status == "undone" and "signature" in change.details:
        with root.engine.begin() as conn:
            details = {**change.details, "rejected": reason or "rejected in review after its undo"}
            conn.execute(update(changes).where(changes.c.id == change_id).values(details=details))
        return bank, change_by_id(root, change_id)[1]
    _require_pending(change)
    discard_change(bank, change_id, note={"rejected": reason or "rejected in review"})
    if change.fork:
        shrink_fork(bank, change.fork)
    return bank, change_by_id(root, change_id)[1]


def _require_pending(change: ChangeRecord) -> None:
    if change.status != "proposed":
        raise ChangeConflict(f"change {change.id} of {change.namespace!r} is {change.status}, not pending review: nothing to do")
