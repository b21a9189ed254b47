"""The `memupdate` command line. Every command has `--help`.

    memupdate db upgrade            # migrate the configured (or embedded) database
    memupdate db status
"""

from __future__ import annotations

import functools
import json
from typing import Any

import typer
from rich.console import Console
from rich.table import Table

from memupdate.store.errors import MemupdateError

app = typer.Typer(help="Train and run an agent that edits a long-term memory database.", no_args_is_help=True)
db_app = typer.Typer(help="Create, migrate and inspect the memory database.", no_args_is_help=True)
app.add_typer(db_app, name="db")
console = Console()
err_console = Console(stderr=True)


def user_errors(fn):  # noqa: ANN001, ANN201
    """Turn memupdate's errors into one red line and exit code 2, not a traceback."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except MemupdateError as exc:
            err_console.print(f"[bold red]error:[/] {exc}", highlight=False)
            raise typer.Exit(2) from None

    return wrapper


URL_OPTION = typer.Option(None, "--url", help="Database URL; default MEMUPDATE_DATABASE_URL, else embedded.")


@db_app.command("upgrade")
@user_errors
def db_upgrade(revision: str = typer.Argument("head"), url: str | None = URL_OPTION) -> None:
    """Migrate the database up to REVISION (default: head), creating the vector extension."""
    from memupdate.store.database import get_engine
    from memupdate.store.migrate import current_revision, upgrade

    engine = get_engine(url)
    upgrade(engine, revision)
    console.print(f"database at revision [bold]{current_revision(engine)}[/]")


@db_app.command("downgrade")
@user_errors
def db_downgrade(revision: str = typer.Argument("-1"), url: str | None = URL_OPTION) -> None:
    """Migrate the database down to REVISION (default: one step; `base` removes memupdate's tables)."""
    from memupdate.store.database import get_engine
    from memupdate.store.migrate import current_revision, downgrade

    engine = get_engine(url)
    downgrade(engine, revision)
    console.print(f"database at revision [bold]{current_revision(engine) or 'base'}[/]")


@db_app.command("status")
@user_errors
def db_status(url: str | None = URL_OPTION, as_json: bool = typer.Option(False, "--json")) -> None:
    """Show the revision, PostgreSQL and pgvector versions, and namespace and memory counts."""
    from memupdate.store.database import get_engine
    from memupdate.store.migrate import status

    info = status(get_engine(url))
    if as_json:
        console.print_json(json.dumps(info))
        return
    table = Table(show_header=False)
    for name, value in info.items():
        table.add_row(name, "-" if value is None else str(value))
    console.print(table)
    if info["revision"] != info["head"]:
        console.print("[yellow]schema is not at head: run `memupdate db upgrade`[/]")


if __name__ == "__main__":
    app()
