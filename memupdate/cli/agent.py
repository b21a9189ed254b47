"""`memupdate agent run`: one editing episode on a live memory bank, every call and result printed."""

from __future__ import annotations

import json
from contextlib import contextmanager

import typer

from memupdate.cli.common import (
    API_KEY_OPTION,
    BASE_URL_OPTION,
    EDITING_POLICY_OPTION,
    MODEL_OPTION,
    SEED_OPTION,
    URL_OPTION,
    check_policy_endpoint,
    console,
    open_store,
    user_errors,
)
from memupdate.errors import MemupdateError
from memupdate.scoring.categories import SINGLE_HOP

app = typer.Typer(help="Run the memory-editing agent on a live memory bank.", no_args_is_help=True)



@app.command("run")
@user_errors
def agent_run(
    namespace: str = typer.Option(..., "--namespace", help="The bank, e.g. locomo/conv-26."),
    question: str | None = typer.Option(None, "--question", help="A target question to prepare the bank for."),
    answer: str | None = typer.Option(None, "--answer", help="Its answer, to print the QA proxy before -> after."),
    policy: str = EDITING_POLICY_OPTION,
    model: str | None = MODEL_OPTION,
    base_url: str | None = BASE_URL_OPTION,
    api_key: str | None = API_KEY_OPTION,
    fork: bool = typer.Option(True, "--fork/--in-place", help="Edit a fork (kept for inspection) or the bank itself."),
    checkpoint: bool = typer.Option(
        False, "--checkpoint", help="Keep the graph's state in LangGraph's Postgres checkpointer (same database)."
    ),
    seed: int = SEED_OPTION,
    url: str | None = URL_OPTION,
) -> None:
    """Run one editing episode, printing every tool call and result.

    A fork is kept for inspection when the episode ends; if it fails or is interrupted, the fork is dropped.
    """
    from langchain_core.messages import AIMessage, ToolMessage

    from memupdate.agent.graph import run_episode
    from memupdate.agent.policies import make_policy, policy_kind
    from memupdate.rl.data.namespaces import trajectory_id, trajectory_namespace
    from memupdate.rl.episode import scored_episode
    from memupdate.scoring.qa_proxy import score_questions
    from memupdate.store import namespace_path, to_namespace

    policy_kind(policy, editing=True)
    root = open_store(url)
    bank = root.scoped(to_namespace(namespace))
    count_before = bank.count()  # a fork starts as a copy of the bank
    if count_before == 0:
        raise MemupdateError(f"namespace {namespace!r} holds no memories: load it first (memupdate data load)")
    chat_model = make_policy(policy, root, model=model, base_url=base_url, api_key=api_key, seed=seed)
    check_policy_endpoint(policy, model, base_url, api_key)
    probe = [_Probe(question, answer)] if question and answer else []
    before = score_questions(bank, probe)[0].qa_score if probe else None

    def outcome(target):
        """What the episode left in `target`: its memory count and the probe question's QA proxy."""
        return target.count(), score_questions(target, probe)[0].qa_score if probe else None

    trajectory = trajectory_id("run", "x")
    target_path = namespace_path(trajectory_namespace(bank.namespace, trajectory)) if fork else bank.path
    try:
        with _checkpointer(root if checkpoint else None) as saver:
            if fork:  # kept for inspection when the episode ends; dropped if it fails or is interrupted
                done = scored_episode(chat_model, bank, trajectory, question, outcome, checkpointer=saver, keep=True)
                result, (count_after, after) = done.result, done.score
            else:
                result = run_episode(chat_model, bank, question, checkpointer=saver, thread_id=bank.path)
                count_after, after = outcome(bank)
    except Exception as exc:
        if isinstance(exc, MemupdateError):
            raise
        where = f"; its fork {target_path} was dropped" if fork else f"; {target_path} keeps the edits made before"
        raise MemupdateError(f"the episode failed: {type(exc).__name__}: {_first_line(exc)}{where}") from None
    if checkpoint:
        console.print(f"graph state checkpointed under thread_id {target_path!r}", highlight=False)
    for message in result.messages[2:]:
        # Tool text is printed as it is, never as Rich markup: `[f0007]` is a memory handle, not a style.
        if isinstance(message, AIMessage):
            for call in message.tool_calls:
                console.print(f"> {call['name']} {json.dumps(call['args'])}", style="cyan", markup=False, highlight=False)
            if message.content:
                console.print(message.content, style="green", markup=False, highlight=False)
        elif isinstance(message, ToolMessage):
            style = "red" if message.status == "error" else "dim"
            console.print(message.content, style=style, markup=False, highlight=False)
    console.print(
        f"stopped: {result.stop_reason} after {result.turns} turns, {result.operations} operations | "
        f"memories {count_before} -> {count_after} in {target_path}"
    )
    if probe:
        console.print(f"QA proxy for the question: {before:.3f} -> {after:.3f}")


@contextmanager
def _checkpointer(store):
    """LangGraph's Postgres checkpointer on `store`'s database, set up; None when no store is given."""
    if store is None:
        yield None
        return
    from langgraph.checkpoint.postgres import PostgresSaver

    conninfo = store.engine.url.set(drivername="postgresql").render_as_string(hide_password=False)
    with PostgresSaver.from_conn_string(conninfo) as saver:
        saver.setup()
        yield saver


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else "no message"


class _Probe:
    """A question with its answer, in the shape the QA proxy reads (scored as one plain answer, like
    LoCoMo's single-hop category)."""

    def __init__(self, question: str, answer: str):
        self.question, self.answer, self.evidence, self.category = question, answer, (), SINGLE_HOP


