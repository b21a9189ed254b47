"""`memupdate data import` and `data export`: banks from a LangGraph store or a file, and back."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from memupdate.cli.common import URL_OPTION, console, open_store, require_bank, user_errors
from memupdate.errors import MemupdateError


@user_errors
def import_command(
    source: str = typer.Argument(
        ...,
        help="A LangGraph PostgresStore URL (postgresql://user@host/db), or a .json/.jsonl file: LangGraph items "
        "({namespace, key, value, created_at, updated_at}) or texts ({text, created_at?, user?}).",
    ),
    prefix: str = typer.Option("", "--prefix", help="LangGraph: the namespace prefix to import, e.g. memories or memories/alice."),
    into: str | None = typer.Option(
        None, "--into", help="Bank root replacing the prefix (default imported/<prefix>; a text file: imported/<file name>)."
    ),
    url: str | None = URL_OPTION,
    as_json: bool = typer.Option(False, "--json", help="Print the reports as JSON."),
) -> None:
    """Make memupdate banks of memories kept elsewhere, one per source namespace, with provenance.

    Importing again is idempotent: it reports what changed at the source since the last import,
    writes those changes, and leaves alone memories edited here since.
    """
    from memupdate.bank.source_import import import_source
    from memupdate.store import to_namespace

    prefix_labels = tuple(label for label in prefix.split("/") if label)
    root = open_store(url, embed_on_demand=True)  # first: the source may live on the embedded server this starts
    reports = import_source(root, source, prefix_labels, to_namespace(into) if into else None)
    if as_json:
        console.print_json(json.dumps([r.as_dict() for r in reports]))
        return
    for report in reports:
        console.print(report.summary(), highlight=False, markup=False, soft_wrap=True)


@user_errors
def export_command(
    namespace: str = typer.Argument(..., help="The bank, e.g. imported/memories/alice."),
    apply: bool = typer.Option(False, "--apply", help="Also delete at the source the items removed here."),
    out: Path | None = typer.Option(None, "--out", help="Write a JSON list of LangGraph items here instead."),
    source_url: str | None = typer.Option(None, "--source-url", help="The LangGraph store's URL, if the recorded one lacks its password."),
    url: str | None = URL_OPTION,
    as_json: bool = typer.Option(False, "--json", help="Print the report as JSON."),
) -> None:
    """Write a bank back to the LangGraph store it was imported from, under the same keys.

    New and changed memories are written; items removed here are deleted there only with --apply;
    an item changed at the source since the import is reported and left alone.
    """
    from memupdate.bank.file_source import export_file
    from memupdate.bank.source_export import export_bank
    from memupdate.cli.common import check_output
    from memupdate.store import to_namespace

    bank = open_store(url, embed_on_demand=True).scoped(to_namespace(namespace))
    require_bank(bank, namespace)
    if bank.count() == 0:
        raise MemupdateError(
            f"namespace {namespace!r} holds no memories: nothing to export; `memupdate history {namespace}` shows what removed them"
        )
    if out is not None:
        check_output(out, "--out", (".json",))
        report = export_file(bank, out)
    else:
        report = export_bank(bank, apply_deletes=apply, url=source_url)
    if as_json:
        console.print_json(json.dumps(report.as_dict()))
    else:
        console.print(report.summary(), highlight=False, markup=False, soft_wrap=True)
