"""The `memupdate` command line. Every command has `--help`.

    memupdate demo                                   # the main job: embedded DB, sample conversation, heuristic
    memupdate db upgrade && memupdate db status      # migrate the configured (or embedded) database
    memupdate data load --locomo locomo10.json       # facts -> base namespaces ("locomo", conv-id)
    memupdate eval --locomo locomo10.json --conversations conv-48 --policy heuristic --json out.json
    memupdate agent run --namespace locomo/conv-26 --question "When did ...?" --policy heuristic
    memupdate tools schema                           # the six tools' OpenAI function schemas
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.table import Table

from memupdate.store.errors import MemupdateError

app = typer.Typer(help="Train and run an agent that edits a long-term memory database.", no_args_is_help=True)
db_app = typer.Typer(help="Create, migrate and inspect the memory database.", no_args_is_help=True)
data_app = typer.Typer(help="Load LoCoMo, print its statistics, and write verl's parquet files.", no_args_is_help=True)
agent_app = typer.Typer(help="Run the memory-editing agent on a live memory bank.", no_args_is_help=True)
tools_app = typer.Typer(help="Inspect the six memory tools.", no_args_is_help=True)
app.add_typer(db_app, name="db")
app.add_typer(data_app, name="data")
app.add_typer(agent_app, name="agent")
app.add_typer(tools_app, name="tools")
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


# -- shared pieces -----------------------------------------------------------------------------------

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


# -- data ----------------------------------------------------------------------------------------------


@data_app.command("stats")
@user_errors
def data_stats(
    locomo: Path | None = LOCOMO_OPTION,
    conversations: str | None = CONVERSATIONS_OPTION,
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of tables."),
) -> None:
    """Count conversations, sessions, turns, facts and QA per category."""
    from memupdate.rl.locomo import locomo_stats

    stats = locomo_stats(load_conversations(locomo, conversations))
    if as_json:
        console.print_json(json.dumps(stats))
        return
    table = Table("conversation", "sessions", "turns", "facts", "qa")
    for row in stats["per_conversation"]:
        table.add_row(row["sample_id"], *(str(row[k]) for k in ("sessions", "turns", "facts", "qa")))
    table.add_row("all", *(f"[bold]{stats[k]}[/]" for k in ("sessions", "turns", "facts", "qa")))
    console.print(table)
    console.print("QA per category: " + ", ".join(f"{k} {v}" for k, v in stats["qa_by_category"].items()))


@data_app.command("load")
@user_errors
def data_load(
    locomo: Path | None = LOCOMO_OPTION,
    conversations: str | None = CONVERSATIONS_OPTION,
    url: str | None = URL_OPTION,
) -> None:
    """Put each conversation's observation facts into its base namespace ("locomo", id). Idempotent."""
    from memupdate.rl.ingest import ingest_conversation

    chosen = load_conversations(locomo, conversations)
    store = open_store(url)
    with progress_bar("loading") as bar:
        task = bar.add_task("load", total=len(chosen))
        for conversation in chosen:
            base = ingest_conversation(store, conversation)
            bar.advance(task)
            console.print(f"{base.path}: {base.count()} memories")


@data_app.command("preprocess")
@user_errors
def data_preprocess(
    out: Path = typer.Option(..., "--out", help="Folder for train.parquet and test.parquet."),
    locomo: Path | None = LOCOMO_OPTION,
    conversations: str | None = CONVERSATIONS_OPTION,
    n_train: int = typer.Option(7, "--n-train", help="The first N conversations train, the rest test."),
    include_adversarial: bool = typer.Option(False, "--include-adversarial", help="Keep category 5 items."),
) -> None:
    """Write verl's RL dataset (one row per QA pair, unique trajectory ids)."""
    from memupdate.rl.preprocess import preprocess

    counts = preprocess(
        load_conversations(locomo, conversations), out, n_train=n_train, include_adversarial=include_adversarial
    )
    console.print(f"wrote {out}/train.parquet ({counts['train']} rows) and {out}/test.parquet ({counts['test']} rows)")


# -- eval ----------------------------------------------------------------------------------------------


@app.command("eval")
@user_errors
def eval_command(
    locomo: Path | None = LOCOMO_OPTION,
    conversations: str | None = CONVERSATIONS_OPTION,
    policy: str = POLICY_OPTION,
    mode: str = typer.Option("targeted", "--mode", help="targeted (question visible) | blind (once per conversation)"),
    model: str | None = MODEL_OPTION,
    base_url: str | None = BASE_URL_OPTION,
    api_key: str | None = API_KEY_OPTION,
    max_questions: int | None = typer.Option(None, "--max-questions", help="Per conversation, for quick runs."),
    max_operations: int | None = typer.Option(None, "--max-operations", help="Tool calls per episode (default 30)."),
    include_adversarial: bool = typer.Option(False, "--include-adversarial", help="Score category 5 too."),
    generalization: int = typer.Option(
        0, "--generalization", help="Targeted: also reward N other questions of the conversation."
    ),
    seed: int = typer.Option(0, "--seed"),
    json_out: Path | None = typer.Option(None, "--json", help="Write the report as JSON here."),
    plot: Path | None = typer.Option(None, "--plot", help="Write before/after bars per category (PNG)."),
    url: str | None = URL_OPTION,
) -> None:
    """Score a policy's edits with the QA proxy, before -> after, per category."""
    from memupdate.agent.policies import make_policy
    from memupdate.rl.evaluate import EvalConfig, plot_report

    if mode not in ("targeted", "blind"):
        raise MemupdateError(f"--mode {mode!r} is not targeted or blind")
    chosen = load_conversations(locomo, conversations)
    store = open_store(url)
    chat_model = make_policy(
        policy, store, model=model, base_url=base_url, api_key=api_key, seed=seed, max_operations=max_operations
    )
    config = EvalConfig(
        mode=mode,
        include_adversarial=include_adversarial,
        max_questions=max_questions,
        max_operations=max_operations,
        generalization=generalization,
    )
    report = evaluate_with_progress(f"eval {policy} ({mode})", store, chosen, chat_model, config, policy)
    print_report(report)
    if json_out:
        json_out.write_text(json.dumps(report, indent=2))
        console.print(f"report written to {json_out}")
    if plot:
        plot_report(report, str(plot))
        console.print(f"plot written to {plot}")


def evaluate_with_progress(description: str, store, conversations, policy, config, policy_name: str) -> dict[str, Any]:  # noqa: ANN001
    """`evaluate` under a progress bar of questions done."""
    from memupdate.rl.evaluate import evaluate

    with progress_bar(description) as bar:
        task = bar.add_task(description, total=None)
        return evaluate(
            store, conversations, policy, config, policy_name=policy_name,
            progress=lambda done, total: bar.update(task, completed=done, total=total),
        )  # fmt: skip


def print_report(report: dict[str, Any]) -> None:
    table = Table(title=f"{report['policy']} policy, {report['mode']} mode, {report['questions']} questions")
    for column in ("category", "questions", "QA before", "QA after", "recall before", "recall after"):
        table.add_column(column, justify="right")
    before, after = report["before"], report["after"]
    for name, b in before["by_category"].items():
        a = after["by_category"][name]
        table.add_row(
            name, str(b["questions"]), f"{b['qa_score']:.3f}", f"{a['qa_score']:.3f}",
            f"{b['evidence_recall']:.3f}", f"{a['evidence_recall']:.3f}",
        )  # fmt: skip
    table.add_row(
        "[bold]all[/]", str(report["questions"]), f"[bold]{before['qa_score']:.3f}[/]", f"[bold]{after['qa_score']:.3f}[/]",
        f"{before['evidence_recall']:.3f}", f"{after['evidence_recall']:.3f}",
    )  # fmt: skip
    console.print(table)
    console.print(
        f"reward mean {report['reward_mean']:+.4f} | memories {report['memories']['before']:.1f} -> "
        f"{report['memories']['after']:.1f} | context words {before['context_words']:.1f} -> "
        f"{after['context_words']:.1f} | tool calls {report['tool_calls'] or '-'} | {report['seconds']} s"
    )
    if report["errors"]:
        console.print(f"[yellow]{len(report['errors'])} questions skipped or failed[/] (see the JSON report)")


# -- agent ---------------------------------------------------------------------------------------------


@agent_app.command("run")
@user_errors
def agent_run(
    namespace: str = typer.Option(..., "--namespace", help="The bank, e.g. locomo/conv-26."),
    question: str | None = typer.Option(None, "--question", help="A target question to prepare the bank for."),
    answer: str | None = typer.Option(None, "--answer", help="Its answer, to print the QA proxy before -> after."),
    policy: str = POLICY_OPTION,
    model: str | None = MODEL_OPTION,
    base_url: str | None = BASE_URL_OPTION,
    api_key: str | None = API_KEY_OPTION,
    fork: bool = typer.Option(True, "--fork/--in-place", help="Edit a fork (kept for inspection) or the bank itself."),
    checkpoint: bool = typer.Option(
        False, "--checkpoint", help="Keep the graph's state in LangGraph's Postgres checkpointer (same database)."
    ),
    seed: int = typer.Option(0, "--seed"),
    url: str | None = URL_OPTION,
) -> None:
    """Run one editing episode, printing every tool call and result."""
    from langchain_core.messages import AIMessage, ToolMessage

    from memupdate.agent.graph import run_episode
    from memupdate.agent.policies import make_policy
    from memupdate.rl.evaluate import trajectory_id
    from memupdate.rl.qa_proxy import score_questions
    from memupdate.store import to_namespace

    root = open_store(url)
    bank = root.scoped(to_namespace(namespace))
    if bank.count() == 0:
        raise MemupdateError(f"namespace {namespace!r} holds no memories: load it first (memupdate data load)")
    chat_model = make_policy(policy, root, model=model, base_url=base_url, api_key=api_key, seed=seed)
    if chat_model is None:
        raise MemupdateError("--policy none makes no edits: choose heuristic, openai or hf")
    target = bank.fork((*bank.namespace, "traj", trajectory_id("run", "x"))) if fork else bank
    probe = [_Probe(question, answer)] if question and answer else []
    before = score_questions(bank, probe)[0].qa_score if probe else None
    count_before = target.count()
    if checkpoint:
        from langgraph.checkpoint.postgres import PostgresSaver

        conninfo = root.engine.url.set(drivername="postgresql").render_as_string(hide_password=False)
        with PostgresSaver.from_conn_string(conninfo) as saver:
            saver.setup()
            result = run_episode(chat_model, target, question, checkpointer=saver, thread_id=target.path)
        console.print(f"graph state checkpointed under thread_id {target.path!r}")
    else:
        result = run_episode(chat_model, target, question)
    for message in result.messages[2:]:
        if isinstance(message, AIMessage):
            for call in message.tool_calls:
                console.print(f"[cyan]> {call['name']}[/] {json.dumps(call['args'])}", highlight=False)
            if message.content:
                console.print(f"[green]{message.content}[/]", highlight=False)
        elif isinstance(message, ToolMessage):
            style = "red" if message.status == "error" else "dim"
            console.print(f"[{style}]{message.content}[/]", highlight=False)
    console.print(
        f"stopped: {result.stop_reason} after {result.turns} turns, {result.operations} operations | "
        f"memories {count_before} -> {target.count()} in {target.path}"
    )
    if probe:
        after = score_questions(target, probe)[0].qa_score
        console.print(f"QA proxy for the question: {before:.3f} -> {after:.3f}")


class _Probe:
    """A question with its answer, in the shape the QA proxy reads."""

    def __init__(self, question: str, answer: str):
        self.question, self.answer, self.evidence = question, answer, ()


# -- tools ---------------------------------------------------------------------------------------------


@tools_app.command("schema")
def tools_schema(as_yaml: bool = typer.Option(False, "--yaml", help="Print verl's tool config instead.")) -> None:
    """Print the six tools' OpenAI function schemas (the source of configs/tool_config/memory_tools.yaml)."""
    if as_yaml:
        from memupdate.rl.tool_config import verl_tool_config_yaml

        print(verl_tool_config_yaml(), end="")
        return
    from memupdate.agent.tools import tool_schemas

    print(json.dumps(tool_schemas(), indent=2))


# -- demo ----------------------------------------------------------------------------------------------


@app.command("demo")
@user_errors
def demo(
    locomo: Path | None = typer.Option(None, "--locomo", help="Use this LoCoMo file instead of the shipped sample."),
    conversations: str | None = CONVERSATIONS_OPTION,
    questions: int | None = typer.Option(
        None, "--questions", help="Questions per conversation (default: all of the sample, 8 of a LoCoMo file)."
    ),
    url: str | None = URL_OPTION,
) -> None:
    """The main job: start the embedded database, migrate, load a conversation, let the heuristic
    policy edit the memory for a few questions, and print QA before -> after."""
    from memupdate.agent.policies import make_policy
    from memupdate.rl.evaluate import EvalConfig
    from memupdate.rl.locomo import load_sample

    chosen = load_conversations(locomo, conversations) if locomo else load_sample()
    if locomo:
        chosen = chosen if conversations else chosen[:1]
        questions = questions or 8
    store = open_store(url)
    console.print(f"database: {store.engine.url.render_as_string(hide_password=True)}")
    policy = make_policy("heuristic", store)
    config = EvalConfig(mode="targeted", max_questions=questions)
    print_report(evaluate_with_progress("demo: heuristic policy, targeted", store, chosen, policy, config, "heuristic"))


if __name__ == "__main__":
    app()
