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
    from memupdate.migrations.schema import current_revision, upgrade
    from memupdate.store import get_engine

    engine = get_engine(url)
    upgrade(engine, revision)
    console.print(f"database at revision [bold]{current_revision(engine)}[/]")


@app.command("downgrade")
@user_errors
def db_downgrade(revision: str = typer.Argument("-1"), url: str | None = URL_OPTION) -> None:
    """Migrate the database down to REVISION (default: one step; `base` removes memupdate's tables)."""
    from memupdate.migrations.schema import current_revision, downgrade
    from memupdate.store import get_engine

    engine = get_engine(url)
    downgrade(engine, revision)
    console.print(f"database at revision [bold]{current_revision(engine) or 'base'}[/]")


@app.command("status")
@user_errors
def db_status(url: str | None = URL_OPTION, as_json: bool = typer.Option(False, "--json")) -> None:
    """Show the revision, PostgreSQL and pgvector versions, and namespace and memory counts (bases and
    trajectory forks apart)."""
    from memupdate.migrations.schema import status
    from memupdate.rl.leftover_forks import namespace_summary
    from memupdate.store import get_engine

    engine = get_engine(url)
    info = status(engine)
    if info["revision"] is not None:
        info |= namespace_summary(engine)
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
    if info["vector_operations"] != "ok":
        console.print(f"[red]vector operations: {info['vector_operations']}[/]", soft_wrap=True)
    if info["revision"] != info["head"]:
        console.print("[yellow]schema is not at head: run `memupdate db upgrade`[/]")
    elif info.get("forks"):
        console.print(f"{info['forks']} trajectory forks in the database: `memupdate db forks` lists them, `--prune` drops them")


@app.command("forks")
@user_errors
def db_forks(
    prune: bool = typer.Option(False, "--prune", help="Drop the listed forks (their memories and events)."),
    older_than: str = typer.Option("0s", "--older-than", help="Only forks not written for this long, e.g. 30m, 6h, 2d."),
    prefix: str | None = typer.Option(None, "--prefix", help="Only forks under this namespace, e.g. locomo/conv-26."),
    url: str | None = URL_OPTION,
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """List trajectory forks (`.../traj/...` namespaces) left by crashed runs or kept episodes; --prune drops them."""
    from datetime import UTC, datetime

    from memupdate.cli.common import open_store
    from memupdate.errors import MemupdateError
    from memupdate.rl.leftover_forks import list_forks, parse_duration, prune_forks

    try:
        threshold = parse_duration(older_than)
    except ValueError as exc:
        raise MemupdateError(f"--older-than: {exc}") from None
    store = open_store(url)
    now = datetime.now(UTC)
    found = prune_forks(store, threshold, prefix) if prune else [f for f in list_forks(store, prefix) if f.age(now) >= threshold]
    if as_json:
        rows = [{"namespace": f.namespace, "base": f.base, "memories": f.memories, "events": f.events,
                 "created_at": f.created_at, "last_write": f.last_write, "age_seconds": f.age(now).total_seconds()}
                for f in found]
        console.print_json(json.dumps({"pruned" if prune else "forks": rows}, default=str))
        return
    table = Table("fork", "base", "memories", "events", "last write", "age")
    for fork in found:
        last = fork.last_write.strftime("%Y-%m-%d %H:%M:%S") if fork.last_write else "-"
        table.add_row(fork.namespace, fork.base, str(fork.memories), str(fork.events), last, str(fork.age(now)).split(".")[0])
    if found:
        console.print(table)
    console.print(f"{'dropped' if prune else 'found'} {len(found)} trajectory forks" + (f" not written for {older_than}" if threshold else ""))


