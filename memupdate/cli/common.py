"""What every command group shares: consoles, the one-line error wrapper, shared options, and opening
the configured store."""

from __future__ import annotations

import functools
from typing import Any

import typer
from rich.console import Console

from memupdate.store.errors import MemupdateError

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
LOCOMO_OPTION = typer.Option(None, "--locomo", help="LoCoMo's locomo10.json (default: $MEMUPDATE_LOCOMO_FILE).")
CONVERSATIONS_OPTION = typer.Option(None, "--conversations", help="Comma-separated ids, e.g. conv-26,conv-30.")
POLICY_OPTION = typer.Option("heuristic", "--policy", help="heuristic | openai | hf | none")
MODEL_OPTION = typer.Option(None, "--model", help="openai: the served model name; hf: a checkpoint directory.")
BASE_URL_OPTION = typer.Option(None, "--base-url", help="openai: the endpoint, e.g. http://localhost:30000/v1.")
API_KEY_OPTION = typer.Option(None, "--api-key", help="openai: the key (default $OPENAI_API_KEY, else EMPTY).")


def load_conversations(locomo, conversations: str | None):  # noqa: ANN001, ANN201
    from memupdate.rl.locomo import default_locomo_path, load_locomo

    path = locomo or default_locomo_path()
    if path is None:
        raise MemupdateError("no LoCoMo file: pass --locomo FILE or set MEMUPDATE_LOCOMO_FILE")
    ids = [c.strip() for c in conversations.split(",") if c.strip()] if conversations else None
    try:
        return load_locomo(path, ids)
    except ValueError as exc:  # LocomoError: names the file and the fix
        raise MemupdateError(str(exc)) from None


def open_store(url: str | None = None):  # noqa: ANN201
    """The root store on the configured database, migrated to head first (the embedded one needs it)."""
    from memupdate.store import MemoryStore
    from memupdate.store.database import get_engine
    from memupdate.store.embeddings import get_embedder
    from memupdate.store.migrate import current_revision, head_revision, upgrade

    engine = get_engine(url)
    if current_revision(engine) != head_revision():
        upgrade(engine)
    return MemoryStore(engine, get_embedder(), ("memupdate",))


def progress_bar(description: str):  # noqa: ANN201
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    return Progress(TextColumn(description), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=err_console)


