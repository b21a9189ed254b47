"""What every command group shares: consoles, the one-line error wrapper, shared options, and opening
the configured store."""

from __future__ import annotations

import contextlib
import functools
import json
import os
import signal
import sys
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from rich.console import Console
from typer.core import TyperGroup

from memupdate.agent.policies import model_help, policy_help
from memupdate.errors import MemupdateError

if TYPE_CHECKING:
    from memupdate.bank.review_records import StatedMemory

# Library progress bars ("Loading weights", Hub downloads) on every command are noise: ours show progress.
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

console = Console()
# soft_wrap: an error piped to a file or another program stays one line, not cut at 80 columns.
err_console = Console(stderr=True, soft_wrap=True)

# Exit codes: 0 done, 1 a run that is not a result (too many failed episodes), 2 bad input, 130 Ctrl-C.
EXIT_FAILED_RUN, EXIT_USER_ERROR, EXIT_INTERRUPTED = 1, 2, 130
_interrupted = threading.Event()


def user_errors(fn):
    """Turn memupdate's errors into one red line and exit code 2, and Ctrl-C into one line and exit
    code 130, not a traceback. The code under it drops what it forked before the interrupt goes on."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        _interrupted.clear()
        previous = _watch_interrupts()
        try:
            return fn(*args, **kwargs)
        except MemupdateError as exc:
            err_console.print(f"[bold red]error:[/] {exc}", highlight=False)
            raise typer.Exit(EXIT_USER_ERROR) from None
        except KeyboardInterrupt:
            err_console.print("[bold red]interrupted[/] (Ctrl-C): stopped; forks of unfinished episodes were dropped", highlight=False)
            raise typer.Exit(EXIT_INTERRUPTED) from None
        finally:
            if previous is not None:
                signal.signal(signal.SIGINT, previous)

    return wrapper


def _watch_interrupts():
    """Remember Ctrl-C as well as raising it: a KeyboardInterrupt raised inside a finalizer is printed and
    swallowed by Python, so `raise_if_interrupted` raises it again at the next safe point."""
    if threading.current_thread() is not threading.main_thread():
        return None

    def on_sigint(signum, frame):
        _interrupted.set()
        raise KeyboardInterrupt

    return signal.signal(signal.SIGINT, on_sigint)


def raise_if_interrupted() -> None:
    """Raise KeyboardInterrupt if Ctrl-C was pressed during this command (called between episodes)."""
    if _interrupted.is_set():
        raise KeyboardInterrupt


# -- one --json convention: a switch printing JSON to stdout; a file is --out PATH --------------------------

# Commands whose --json took a file until issue 55: that file is now --out PATH.
OUT_FILE_COMMANDS = ("compact", "eval", "bench")


def old_json_path(args: Sequence[str]) -> str | None:
    """The file an old-style `--json PATH` (or `--json=PATH`) names, if `args` hold one."""
    for i, arg in enumerate(args):
        if arg.startswith("--json="):
            return arg.split("=", 1)[1]
        if arg == "--json" and i + 1 < len(args) and args[i + 1].lower().endswith(".json"):
            return args[i + 1]
    return None


class CommandLine(TyperGroup):
    """The `memupdate` group: refuses the old `--json PATH` in one line before any command runs."""

    def parse_args(self, ctx, args: list[str]) -> list[str]:
        path = old_json_path(args)
        if path is not None:
            command = next((a for a in args if not a.startswith("-")), "")
            fix = f"write the file with --out {path}" if command in OUT_FILE_COMMANDS else f"redirect it: --json > {path}"
            err_console.print(f"[bold red]error:[/] --json takes no file: it is a switch printing JSON to stdout; {fix}",
                              highlight=False)
            raise typer.Exit(EXIT_USER_ERROR)
        return super().parse_args(ctx, args)


@contextlib.contextmanager
def json_to_stdout(as_json: bool) -> Iterator[None]:
    """With --json, stdout carries the JSON alone: what the command prints meanwhile goes to stderr."""
    if not as_json:
        yield
        return
    with contextlib.redirect_stdout(sys.stderr):
        yield


def print_json(data: Any) -> None:
    """One JSON document on stdout (not through rich: a pipe gets it unwrapped and uncoloured)."""
    sys.stdout.write(json.dumps(data, indent=1, ensure_ascii=False, default=str) + "\n")


URL_OPTION = typer.Option(
    None, "--url", help="Database URL; default MEMUPDATE_DATABASE_URL or DATABASE_URL, else the embedded server."
)
SEED_OPTION = typer.Option(0, "--seed", help="Seed of the policy's choices (heuristic: which memories it samples; hf: sampling).")
LOCOMO_OPTION = typer.Option(None, "--locomo", help="LoCoMo's locomo10.json (default: $MEMUPDATE_LOCOMO_FILE).")
DEV_DATA = Path("../shared/data")  # the development data folder's default (locomo/, memoryagentbench/, natural-updates/)
CONVERSATIONS_OPTION = typer.Option(None, "--conversations", help="Comma-separated ids, e.g. conv-26,conv-30.")
POLICY_OPTION = typer.Option("heuristic", "--policy", help=policy_help())
EDITING_POLICY_OPTION = typer.Option("heuristic", "--policy", help=policy_help(editing=True))
MODEL_OPTION = typer.Option(None, "--model", help=model_help())
BASE_URL_OPTION = typer.Option(None, "--base-url", help="openai: the endpoint, e.g. http://localhost:30000/v1.")
API_KEY_OPTION = typer.Option(None, "--api-key", help="openai: the key (default $OPENAI_API_KEY, else EMPTY).")
MAX_NEW_TOKENS_OPTION = typer.Option(512, "--max-new-tokens", min=1, help="hf: tokens per turn at most.")
MAX_PROSE_TOKENS_OPTION = typer.Option(
    None, "--max-prose-tokens", min=1,
    help="hf: cut a turn that wrote this many tokens without a tool call (as `rl learn` rolls its student out).",
)
ANSWERER_OPTION = typer.Option(
    None, "--answerer", help="Also answer each question with this model, from the context the proxy read, and "
    "report LoCoMo F1 and BLEU-1: a model on an OpenAI-compatible endpoint, or hf:DIR, a local checkpoint on the CPU "
    "(hf:qwen2.5-coder-0.5b: the packaged reader, make reader; hf:smollm2). Answers are cached in the database.",
)
ANSWERER_BASE_URL_OPTION = typer.Option(
    None, "--answerer-base-url", help="The answerer's endpoint, e.g. http://localhost:30000/v1 (default: OpenAI)."
)
ANSWERER_API_KEY_OPTION = typer.Option(
    None, "--answerer-api-key", help="The answerer's key (default $OPENAI_API_KEY if not blank, else EMPTY)."
)


def load_conversations(locomo, conversations: str | None):
    from memupdate.rl.data.locomo import default_locomo_path, load_locomo

    path = locomo or default_locomo_path()
    if path is None:
        raise MemupdateError("no LoCoMo file: pass --locomo FILE or set MEMUPDATE_LOCOMO_FILE")
    ids = conversation_ids(conversations)
    try:
        chosen = load_locomo(path, ids)
    except ValueError as exc:  # LocomoError: names the file and the fix
        raise MemupdateError(str(exc)) from None
    check_sample_ids(chosen)
    return chosen


def conversation_ids(conversations: str | None) -> list[str] | None:
    """`--conversations a,b` as a list (None: all); a value naming no id at all is an error, not "run nothing"."""
    if conversations is None:
        return None
    ids = [c.strip() for c in conversations.split(",") if c.strip()]
    if not ids:
        raise MemupdateError(f"--conversations {conversations!r} names no conversation: give ids such as conv-26,conv-30")
    return ids


def check_sample_ids(conversations) -> None:
    """Every conversation's trajectory namespaces must be valid labels: a long sample id would make every
    fork fail one by one, so say so before the run."""
    from memupdate.rl.data.namespaces import base_namespace, trajectory_id, trajectory_namespace
    from memupdate.store import InvalidNamespace

    for conversation in conversations:
        widest = trajectory_id(conversation.sample_id, max((qa.index for qa in conversation.qa), default=0))
        try:
            trajectory_namespace(base_namespace(conversation.sample_id), widest)
        except InvalidNamespace:
            room = len(conversation.sample_id) - (len(widest) - 64)
            raise MemupdateError(
                f"conversation id {conversation.sample_id!r} ({len(conversation.sample_id)} characters) is too long "
                f"or holds characters a namespace label cannot: trajectory namespaces need ids of at most {room} "
                "letters, digits and _ . : @ + = -; rename sample_id in the file"
            ) from None


def check_output(path: Path | None, option: str, suffixes: tuple[str, ...] | None = None) -> None:
    """Before a long run: the output's folder exists (created if missing) and is writable, and its
    suffix is one the writer accepts, so a finished run never fails at its last step."""
    if path is None:
        return
    if suffixes and path.suffix.lower() not in suffixes:
        raise MemupdateError(f"{option} {str(path)!r} must end in one of {', '.join(suffixes)}")
    if path.is_dir():
        raise MemupdateError(f"{option} {str(path)!r} is a folder: give a file name")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise MemupdateError(f"{option} {str(path)!r}: cannot create its folder ({exc.strerror})") from None
    if not os.access(path.parent, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise MemupdateError(f"{option} {str(path)!r} is not writable: choose another path")


def checked_answerer(model: str | None, base_url: str | None, api_key: str | None, judge: str | None = None, engine=None):
    """The LLM answerer (and judge), checked with one cheap request (a checkpoint: its folder); None
    without --answerer. With `engine`, replies are cached in its database."""
    if model is None:
        if judge is not None or base_url is not None:
            raise MemupdateError("--judge and --answerer-base-url need --answerer MODEL (the model that answers)")
        return None
    from memupdate.scoring.answerer import make_answerer
    from memupdate.scoring.readers import HF_PREFIX

    if base_url is not None and model.startswith(HF_PREFIX) and (judge is None or judge.startswith(HF_PREFIX)):
        raise MemupdateError(f"--answerer {model} runs on this machine: drop --answerer-base-url {base_url}")
    reader = make_answerer(model, base_url, api_key, judge=judge, engine=engine)
    reader.check()
    return reader


def check_policy_endpoint(policy: str, model: str | None, base_url: str | None, api_key: str | None) -> None:
    """For `--policy openai`: the endpoint answers and serves the model, checked before any fork is made."""
    if policy != "openai" or not model:
        return
    from memupdate.agent.policies.openai import check_openai_endpoint

    check_openai_endpoint(model, base_url, api_key)


def open_store(url: str | None = None, *, embed_on_demand: bool = False):
    """The root store on the configured database, migrated to head first (the embedded one needs it).
    `embed_on_demand`: load the embedding model only when something is embedded (commands that read or
    restore rows, `history`, `undo`, `review`, an idle `watch` pass, never pay for torch and the model)."""
    from memupdate.migrations.schema import current_revision, head_revision, upgrade
    from memupdate.store import MemoryStore, get_embedder, get_engine

    engine = get_engine(url)
    if current_revision(engine) != head_revision():
        upgrade(engine)
    return MemoryStore(engine, EmbedderOnFirstUse() if embed_on_demand else get_embedder(), ("memupdate",))


def require_bank(bank, namespace: str) -> None:
    """Refuse a mistyped bank name (no memories, events or changes were ever there) with one line naming
    it and the banks nearest it, before a command reads or writes anything."""
    from memupdate.bank.namespaces import COMPACTION_LABEL, bank_exists
    from memupdate.rl.data.namespaces import TRAJ_LABEL
    from memupdate.store import nearest_namespaces

    if bank_exists(bank.engine, bank.path):
        return
    near = nearest_namespaces(bank.engine, bank.path, fork_labels=(COMPACTION_LABEL, TRAJ_LABEL))
    hint = f"did you mean {' or '.join(near)}?" if near else "the database holds no banks yet (memupdate data import)"
    raise MemupdateError(f"namespace {namespace!r} does not exist (no memories, no history): check the name; {hint}")


def progress_bar(description: str):
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    return Progress(TextColumn(description), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=err_console)




def bank_questions(bank, path: Path | None, locomo: Path | None) -> list[Any]:
    """Questions for the QA proxy: the user's file, else the LoCoMo conversation a `locomo/<id>` bank is."""
    if path is not None:
        from memupdate.scoring.questions import read_questions

        return read_questions(path)
    from memupdate.rl.data.namespaces import conversation_of

    sample_id = conversation_of(bank.namespace)
    if sample_id is None:
        return []
    from memupdate.rl.data.locomo import default_locomo_path, load_locomo

    source = locomo or default_locomo_path()
    if source is None:
        return []
    try:
        (conversation,) = load_locomo(source, [sample_id])
    except ValueError:
        return []
    return list(conversation.qa)


def plural(count: int, noun: str, nouns: str | None = None) -> str:
    """`1 change`, `2 changes`: a count with its noun in the right number."""
    return f"{count} {noun if count == 1 else nouns or noun + 's'}"


def changed_words(before: str, after: str) -> str:
    """The words that differ between two texts, as `old -> new` (`+ new`, `- old`) joined by `; `; '' when
    none do. A dating that appends "(8 May 2023)" to a long text shows as `+ (8 May 2023)`."""
    import difflib

    a, b = before.split(), after.split()
    parts = []
    for op, i1, i2, j1, j2 in difflib.SequenceMatcher(a=a, b=b, autojunk=False).get_opcodes():
        old, new = " ".join(a[i1:i2]), " ".join(b[j1:j2])
        if op == "replace":
            parts.append(f"{old} -> {new}")
        elif op == "insert":
            parts.append(f"+ {new}")
        elif op == "delete":
            parts.append(f"- {old}")
    return "; ".join(parts)


def stated_line(memory: StatedMemory) -> str:
    """`[key] text (stated 2024-06-02 18:30:00)`: a memory of a supersession, with when it was said."""
    text = memory.content if memory.content is not None else "(no longer held anywhere)"
    return f"[{memory.key}] {text} (stated {memory.stated_at or 'at an unknown time'})"


def export_live(bank, source_url: str | None) -> None:
    """Write a live bank's pending changes to its LangGraph store now (after `undo` or `review --accept`);
    if the store cannot be reached, say that the watcher's next pass will."""
    from memupdate.bank.live_sync import export_changes, is_live
    from memupdate.bank.source_kinds import SourceError

    if not is_live(bank):
        return
    try:
        report = export_changes(bank, url=source_url)
    except SourceError as exc:
        err_console.print(f"{exc}; the store gets the change at `memupdate watch`'s next pass", highlight=False)
        return
    if report.written or report.already or report.conflicts:
        console.print(report.summary(), highlight=False, soft_wrap=True)


class EmbedderOnFirstUse:
    """The configured embedder, loaded at its first `embed`. Until then it stands for the configured model
    and vector size; the loaded model must make vectors of that size."""

    def __init__(self) -> None:
        from memupdate.settings import get_settings

        settings = get_settings()
        self.name, self.dims = settings.embedding_model, settings.embedding_dims
        self._loaded = None
        self._lock = threading.Lock()

    def embed(self, texts):
        with self._lock:  # a watcher's thread and its caller may embed at once: load the model once
            if self._loaded is None:
                from memupdate.store import get_embedder

                loaded = get_embedder()
                if loaded.dims != self.dims:
                    raise MemupdateError(
                        f"embedding model {loaded.name!r} makes {loaded.dims}-dim vectors but MEMUPDATE_EMBEDDING_DIMS "
                        f"is {self.dims}: set MEMUPDATE_EMBEDDING_DIMS={loaded.dims} (and run `memupdate db upgrade`)"
                    )
                self._loaded = loaded
        return self._loaded.embed(texts)
