"""`memupdate db`: create, migrate and inspect the memory database."""

from __future__ import annotations

import json

import typer
from rich.table import Table

from memupdate.cli.common import URL_OPTION, console, user_errors

app = typer.Typer(help="Create, migrate and inspect the memory database.", no_args_is_help=True)


@app.command("upgrade")
@user_errors
def db_upgrade(revision: str = typer.Argument("head"), url: str | None = URL_OPTION) -> None:
    """Migrate the database up to REVISION (default: head), creating the vector extension."""
    from memupdate.store.database import get_engine
    from memupdate.store.migrate import current_revision, upgrade

    engine = get_engine(url)
    upgrade(engine, revision)
    console.print(f"database at revision [bold]{current_revision(engine)}[/]")


@app.command("downgrade")
@user_errors
def db_downgrade(revision: str = typer.Argument("-1"), url: str | None = URL_OPTION) -> None:
    """Migrate the database down to REVISION (default: one step; `base` removes memupdate's tables)."""
    from memupdate.store.database import get_engine
    from memupdate.store.migrate import current_revision, downgrade

    engine = get_engine(url)
    downgrade(engine, revision)
    console.print(f"database at revision [bold]{current_revision(engine) or 'base'}[/]")


@app.command("status")
@user_errors
def db_status(url: str | None = URL_OPTION, as_json: bool = typer.Option(False, "--json")) -> None:
    """Show the revision, PostgreSQL and pgvector versions, and namespace and memory counts."""
    from memupdate.store.database import get_engine
    from memupdate.store.migrate import status

    info = status(get_engine(url))
    if as_json:
        console.print_json(json.dumps(info))
        return
    # The URL on a line of its own, never cut to the table's width (the password is hidden already).
    console.print(f"url: {info['url']}", soft_wrap=True, highlight=False, markup=False)
    table = Table(show_header=False)
    for name, value in info.items():
        if name != "url":
            table.add_row(name, "-" if value is None else str(value))
    console.print(table)
    if info["revision"] != info["head"]:
        console.print("[yellow]schema is not at head: run `memupdate db upgrade`[/]")


