"""`memupdate agent run`: one editing episode on a live memory bank, every call and result printed."""

from __future__ import annotations

import json

import typer

from memupdate.cli.common import (
    API_KEY_OPTION,
    BASE_URL_OPTION,
    MODEL_OPTION,
    POLICY_OPTION,
    URL_OPTION,
    console,
    open_store,
    user_errors,
)
from memupdate.store.errors import MemupdateError

app = typer.Typer(help="Run the memory-editing agent on a live memory bank.", no_args_is_help=True)



@app.command("run")
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
    """A question with its answer, in the shape the QA proxy reads (scored as one plain answer, like
    LoCoMo's single-hop category)."""

    def __init__(self, question: str, answer: str):
        self.question, self.answer, self.evidence, self.category = question, answer, (), 4


