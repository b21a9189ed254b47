"""`memupdate history NAMESPACE [--change N]` and `memupdate undo NAMESPACE [--to CHANGE | --change N]`:
a bank's changes, what each one did (its sources -> results, with their texts), and undoing them.

Nothing here loads a model or the embedder: these commands only read and restore rows, and start fast."""

from __future__ import annotations

import json
from typing import Any

import typer
from rich.table import Table

from memupdate.cli.common import (
    URL_OPTION,
    changed_words,
    console,
    export_live,
    open_store,
    plural,
    require_bank,
    stated_line,
    user_errors,
)
from memupdate.errors import MemupdateError


@user_errors
def history_command(
    namespace: str = typer.Argument(..., help="The bank, e.g. imported/memories/alice."),
    change: int | None = typer.Option(None, "--change", help="Show what this change did: its sources -> results, with their texts."),
    url: str | None = URL_OPTION,
    as_json: bool = typer.Option(False, "--json", help="Print JSON to stdout instead of tables."),
) -> None:
    """List the bank's changes (proposed, applied, undone, discarded), or with --change N what one did."""
    from memupdate.bank.change_log import get_change, history
    from memupdate.bank.review_records import CHANGE_KINDS
    from memupdate.store import to_namespace

    bank = open_store(url, embed_on_demand=True).scoped(to_namespace(namespace))
    require_bank(bank, namespace)
    if change is not None:
        _show_change(bank, get_change(bank, change), as_json)
        return
    changes = history(bank)
    if as_json:
        console.print_json(json.dumps([_change_json(bank, c) for c in changes], ensure_ascii=False, default=str))
        return
    # Short cells so 80 columns show every one whole; `history --change N` shows the texts.
    table = Table("change", "status", "what", "memories", "when", "policy")
    for column in table.columns:
        column.overflow = "fold"
    for c in changes:
        when = c.undone_at or c.applied_at or c.created_at
        counts = c.summary.get("counts", {})
        applied = c.summary.get("applied") or counts
        memories = f"{applied.get('memories_before', '?')} -> {applied.get('memories_after', '?')}"
        what = ", ".join(plural(counts[k], k) for k in CHANGE_KINDS if counts.get(k)) or "-"
        table.add_row(str(c.id), c.status, what, memories, when.strftime("%m-%d %H:%M"), c.policy or "-")
    if changes:
        console.print(table)
    console.print(f"{plural(len(changes), 'change')} of {bank.path}"
                  + (f"; `memupdate history {bank.path} --change {changes[-1].id}` shows what one did" if changes else ""),
                  highlight=False, soft_wrap=True)


def change_edits(bank, change) -> list[dict[str, Any]]:
    """What a change does, group by group: {kind, reasons, sources: [{key, content}], results: [...],
    superseded_by: [Supersession]}. From its review (a part of the review queue, or a `memupdate compact`
    proposal); for a change without one, from the writes it made."""
    from memupdate.bank.change_log import change_writes
    from memupdate.bank.review_records import Change
    from memupdate.bank.supersessions import supersessions

    part = change.review_change
    groups = [part] if part else [Change.from_json(g) for g in (change.details.get("review") or {}).get("changes") or []]
    if groups:
        return [{"kind": g.kind, "reasons": list(g.reasons),
                 "sources": [{"key": m.key, "content": m.content} for m in g.sources],
                 "results": [{"key": m.key, "content": m.content} for m in g.results],
                 "superseded_by": supersessions(bank, g, fork=change.fork, change_id=change.id)} for g in groups]
    edits = []
    for key, op, before, after in change_writes(bank, change.id):
        sources = [{"key": key, "content": before["content"]}] if before else []
        results = [{"key": key, "content": after["content"]}] if after else []
        edits.append({"kind": op, "reasons": [], "sources": sources, "results": results, "superseded_by": []})
    return edits


def _change_json(bank, change, edits: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {
        "id": change.id, "bank": bank.path, "status": change.status, "policy": change.policy, "fork": change.fork,
        "summary": change.summary,
        **{k: getattr(change, k) and getattr(change, k).isoformat() for k in ("created_at", "applied_at", "undone_at")},
        "notes": _notes(change),
        "edits": [{**e, "superseded_by": [p.to_json() for p in e["superseded_by"]]}
                  for e in (edits if edits is not None else change_edits(bank, change))],
    }


def _notes(change) -> list[str]:
    """Why a change is where it is: held for review, rejected, dropped or undone by a conflict."""
    notes = [f"waits because {reason}" for reason in change.details.get("held") or [] if change.status == "proposed"]
    for source, field in ((change.details, "rejected"), (change.details, "conflict"), (change.summary, "conflict")):
        if source.get(field):
            notes.append(f"{field}: {source[field]}")
    return notes


def _show_change(bank, change, as_json: bool) -> None:
    edits = change_edits(bank, change)
    if as_json:
        console.print_json(json.dumps(_change_json(bank, change, edits), ensure_ascii=False, default=str))
        return
    when = " ".join(f"{label} {stamp:%Y-%m-%d %H:%M:%S}" for label, stamp in
                    (("proposed", change.created_at), ("applied", change.applied_at), ("undone", change.undone_at)) if stamp)
    console.print(f"change {change.id} of {bank.path}: {change.status} ({change.policy or 'no policy'}); {when}",
                  highlight=False, soft_wrap=True)
    for note in _notes(change):
        console.print(f"  {note}", highlight=False, soft_wrap=True)
    for memory, app_key in (change.summary.get("app_keys") or {}).items():
        console.print(f"  merged memory {memory} is the app's item {app_key} (the key of its newest source)", highlight=False, soft_wrap=True)
    table = Table("kind", "sources", "results", "what changed", show_lines=True)
    for column in table.columns:
        column.overflow = "fold"  # a long key breaks across lines rather than ending in "…"
    for edit in edits:
        sources = "\n".join(f"[{m['key']}] {m['content']}" for m in edit["sources"]) or "-"
        results = "\n".join(f"[{m['key']}] {m['content']}" for m in edit["results"]) or "-"
        if edit["superseded_by"]:  # the stale text kept as history, beside the statement that retired it
            sources = "\n".join(stated_line(pair.stale) for pair in edit["superseded_by"])
            results = "\n".join("superseded by " + stated_line(pair.newer) for pair in edit["superseded_by"])
        one_to_one = len(edit["sources"]) == len(edit["results"]) == 1
        what = changed_words(edit["sources"][0]["content"], edit["results"][0]["content"]) if one_to_one else "; ".join(edit["reasons"])
        table.add_row(edit["kind"], sources, results, what or "-")
    if edits:
        console.print(table, markup=False)
    if change.status == "applied":
        console.print(f"`memupdate undo {bank.path} --change {change.id}` reverts it", highlight=False, soft_wrap=True)


@user_errors
def undo_command(
    namespace: str = typer.Argument(..., help="The bank, e.g. imported/memories/alice."),
    to: int | None = typer.Option(
        None, "--to", help="Undo every applied change after this one (0: all); default: the latest applied change."
    ),
    change: int | None = typer.Option(
        None, "--change", help="Undo only this applied change (e.g. one `memupdate watch` applied), if nothing changed its memories since."
    ),
    source_url: str | None = typer.Option(None, "--source-url", help="A live LangGraph store's URL, if the recorded one lacks its password."),
    url: str | None = URL_OPTION,
) -> None:
    """Restore the bank as it was before its latest applied change (or after change --to), exactly:
    the rows an apply replaced come back with their ids, order, timestamps and embeddings. For a bank
    `memupdate watch` keeps in step with a LangGraph store, the store gets its items back too. An undone
    change is not proposed again while its sources are unchanged."""
    from memupdate.bank.change_log import undo, undo_change
    from memupdate.store import to_namespace

    bank = open_store(url, embed_on_demand=True).scoped(to_namespace(namespace))
    require_bank(bank, namespace)
    if change is not None and to is not None:
        raise MemupdateError("give --to or --change, not both")
    undone = [undo_change(bank, change)] if change is not None else undo(bank, to)
    console.print(
        f"undid change{'s' if len(undone) > 1 else ''} {', '.join(str(c.id) for c in undone)} of {bank.path}: "
        f"{plural(bank.count(), 'memory', 'memories')}",
        highlight=False,
    )
    export_live(bank, source_url)
