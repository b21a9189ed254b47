"""`memupdate history NAMESPACE` and `memupdate undo NAMESPACE [--to CHANGE]`: a bank's applied changes."""

from __future__ import annotations

import json

import typer
from rich.table import Table

from memupdate.cli.common import URL_OPTION, console, open_store, require_bank, user_errors
from memupdate.store.errors import MemupdateError


@user_errors
def history_command(
    namespace: str = typer.Argument(..., help="The bank, e.g. imported/memories/alice."),
    url: str | None = URL_OPTION,
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """List the bank's changes: proposed (a compaction awaiting review), applied, undone, discarded."""
    from memupdate.bank.change_log import history
    from memupdate.store import to_namespace

    bank = open_store(url).scoped(to_namespace(namespace))
    require_bank(bank, namespace)
    changes = history(bank)
    if as_json:
        rows = [{**{k: getattr(c, k) for k in ("id", "status", "policy", "fork", "summary")},
                 **{k: getattr(c, k) and getattr(c, k).isoformat() for k in ("created_at", "applied_at", "undone_at")}}
                for c in changes]
        console.print_json(json.dumps(rows))
        return
    from memupdate.bank.review import CHANGE_KINDS

    table = Table("change", "status", "policy", "when", "memories", *(f"{k}s" for k in CHANGE_KINDS))
    for change in changes:
        when = change.undone_at or change.applied_at or change.created_at
        counts = change.summary.get("counts", {})
        applied = change.summary.get("applied") or counts
        memories = f"{applied.get('memories_before', '?')} -> {applied.get('memories_after', '?')}"
        table.add_row(
            str(change.id), change.status, change.policy or "-", when.strftime("%Y-%m-%d %H:%M:%S"), memories,
            *(str(counts.get(k, 0)) for k in CHANGE_KINDS),
        )
    if changes:
        console.print(table)
    console.print(f"{len(changes)} changes of {bank.path}", highlight=False)


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
    `memupdate watch` keeps in step with a LangGraph store, the store gets its items back too."""
    from memupdate.bank.change_log import undo, undo_change
    from memupdate.cli.watch import export_live
    from memupdate.store import to_namespace

    bank = open_store(url).scoped(to_namespace(namespace))
    require_bank(bank, namespace)
    if change is not None and to is not None:
        raise MemupdateError("give --to or --change, not both")
    undone = [undo_change(bank, change)] if change is not None else undo(bank, to)
    console.print(
        f"undid change{'s' if len(undone) > 1 else ''} {', '.join(str(c.id) for c in undone)} of {bank.path}: "
        f"{bank.count()} memories",
        highlight=False,
    )
    export_live(bank, source_url)
