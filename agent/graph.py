"""The memory-editing agent: a LangGraph `StateGraph`, policy node → tool node → back.

    from memupdate.agent.graph import run_episode
    result = run_episode(policy, store.scoped(("locomo", "conv-26")), question="When did ...?")
    result.stop_reason, result.turns, result.operations, result.tool_counts

The episode ends when the policy stops calling tools, after `max_turns` assistant turns, or once
`max_operations` tool calls have run (every call counts, a failed one too). The tool node runs the
same `run_tool` functions verl's tools wrap, on the namespace held in the state.
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal, TypedDict

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage, SystemMessage, ToolMessage
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages

from memupdate.agent.prompts import system_prompt, task_prompt
from memupdate.agent.tools import run_tool, tool_schemas
from memupdate.settings import get_settings
from memupdate.store import MemoryStore

StopReason = Literal["model_stopped", "turn_budget", "operation_budget"]


class MemoryEditState(TypedDict, total=False):
    messages: Annotated[list[AnyMessage], add_messages]
    namespace: str  # `a/b/c` path of the bank being edited
    question: str | None
    turns: int
    operations: int
    tool_counts: dict[str, int]
    failed_calls: int
    stop_reason: StopReason | None


@dataclass
class EpisodeResult:
    messages: list[AnyMessage]
    turns: int
    operations: int
    tool_counts: Counter = field(default_factory=Counter)
    failed_calls: int = 0
    stop_reason: StopReason | None = None


def build_memory_graph(
    policy: BaseChatModel,
    store: MemoryStore,
    *,
    max_turns: int | None = None,
    max_operations: int | None = None,
    checkpointer: Any = None,
):
    """Compile the graph. `store` gives the database and embedder; the state names the namespace."""
    settings = get_settings()
    max_turns = max_turns or settings.max_turns
    max_operations = max_operations or settings.max_operations
    model = policy.bind_tools(tool_schemas())

    def policy_node(state: MemoryEditState) -> dict:
        reply = model.invoke(state["messages"])
        return {"messages": [reply], "turns": state.get("turns", 0) + 1}

    def tool_node(state: MemoryEditState) -> dict:
        bank = store.scoped(state["namespace"])
        message = state["messages"][-1]
        operations = state.get("operations", 0)
        counts = Counter(state.get("tool_counts", {}))
        failed = state.get("failed_calls", 0)
        replies: list[ToolMessage] = []
        for call in _calls(message):
            if operations >= max_operations:
                text, ok = f"error: operation budget of {max_operations} used up; this call was not run", False
            elif call.get("error"):
                text, ok = f"error: malformed tool call: {call['error']}", False
                operations += 1
            else:
                result = run_tool(bank, call["name"], call["args"])
                text, ok = result.text, result.ok
                operations += 1
                counts[call["name"]] += 1
            failed += not ok
            replies.append(ToolMessage(text, tool_call_id=call["id"], name=call.get("name") or "invalid", status="success" if ok else "error"))
        return {"messages": replies, "operations": operations, "tool_counts": dict(counts), "failed_calls": failed}

    def after_policy(state: MemoryEditState) -> str:
        return "tools" if _calls(state["messages"][-1]) else "stop"

    def after_tools(state: MemoryEditState) -> str:
        if state.get("operations", 0) >= max_operations:
            return "operation_budget"
        if state.get("turns", 0) >= max_turns:
            return "turn_budget"
        return "policy"

    def stop(reason: StopReason):
        return lambda state: {"stop_reason": reason}

    graph = StateGraph(MemoryEditState)
    graph.add_node("policy", policy_node)
    graph.add_node("tools", tool_node)
    for reason in ("model_stopped", "turn_budget", "operation_budget"):
        graph.add_node(reason, stop(reason))
        graph.add_edge(reason, END)
    graph.add_edge(START, "policy")
    graph.add_conditional_edges("policy", after_policy, {"tools": "tools", "stop": "model_stopped"})
    graph.add_conditional_edges(
        "tools", after_tools, {"policy": "policy", "turn_budget": "turn_budget", "operation_budget": "operation_budget"}
    )
    return graph.compile(checkpointer=checkpointer)


def initial_state(store: MemoryStore, question: str | None = None, *, max_turns: int | None = None, max_operations: int | None = None) -> MemoryEditState:
    settings = get_settings()
    messages: Sequence[AnyMessage] = [
        SystemMessage(system_prompt(max_turns or settings.max_turns, max_operations or settings.max_operations)),
        HumanMessage(task_prompt(store.path, question, store.count())),
    ]
    return {"messages": list(messages), "namespace": store.path, "question": question, "turns": 0, "operations": 0}


def run_episode(
    policy: BaseChatModel,
    store: MemoryStore,
    question: str | None = None,
    *,
    max_turns: int | None = None,
    max_operations: int | None = None,
    checkpointer: Any = None,
    thread_id: str | None = None,
) -> EpisodeResult:
    """Run one editing episode on `store`'s namespace (edit a fork, not a base you want to keep)."""
    graph, state, config = _prepare(policy, store, question, max_turns, max_operations, checkpointer, thread_id)
    try:
        return _result(graph.invoke(state, config))
    finally:
        _finished(policy)


def run_episodes(
    policies: Sequence[BaseChatModel],
    stores: Sequence[MemoryStore],
    questions: Sequence[str | None] | None = None,
    *,
    max_turns: int | None = None,
    max_operations: int | None = None,
    width: int = 16,
) -> list[EpisodeResult | BaseException]:
    """`run_episode(policies[i], stores[i], questions[i])` for every i, results in order (an episode that
    raised gives its exception in its place). Episodes of one local checkpoint run together, their turns
    decoded in batches (`policies.batched`), at most `width` at once; any other policy runs them in turn."""
    from memupdate.agent.policies.batched import advance_together

    questions = list(questions) if questions is not None else [None] * len(stores)
    jobs = [
        lambda policy, store=store, question=question: run_episode(
            policy, store, question, max_turns=max_turns, max_operations=max_operations
        )
        for store, question in zip(stores, questions, strict=True)
    ]
    return advance_together(policies, jobs, width=width)


async def arun_episode(
    policy: BaseChatModel,
    store: MemoryStore,
    question: str | None = None,
    *,
    max_turns: int | None = None,
    max_operations: int | None = None,
    checkpointer: Any = None,
    thread_id: str | None = None,
) -> EpisodeResult:
    """Async twin of `run_episode`."""
    graph, state, config = _prepare(policy, store, question, max_turns, max_operations, checkpointer, thread_id)
    return _result(await graph.ainvoke(state, config))


def _prepare(policy, store, question, max_turns, max_operations, checkpointer, thread_id):
    """The compiled graph, its first state and its run config."""
    graph = build_memory_graph(policy, store, max_turns=max_turns, max_operations=max_operations, checkpointer=checkpointer)
    state = initial_state(store, question, max_turns=max_turns, max_operations=max_operations)
    return graph, state, _config(thread_id, max_turns)


def _finished(policy: BaseChatModel) -> None:
    """Tell a policy whose episodes advance together that this one ended, so the others stop waiting."""
    finished = getattr(policy, "episode_finished", None)
    if callable(finished):
        finished()


def _config(thread_id: str | None, max_turns: int | None) -> dict:
    # Each turn is two graph steps (policy, tools) plus the stop node; leave LangGraph's recursion limit room.
    turns = max_turns or get_settings().max_turns
    return {"configurable": {"thread_id": thread_id or uuid.uuid4().hex}, "recursion_limit": 2 * turns + 5}


def _calls(message: AnyMessage) -> list[dict]:
    """Valid and malformed tool calls of an assistant message, in order (malformed ones carry `error`)."""
    if not isinstance(message, AIMessage):
        return []
    return list(message.tool_calls) + [dict(call) for call in message.invalid_tool_calls]


def _result(final: dict) -> EpisodeResult:
    return EpisodeResult(
        messages=final["messages"],
        turns=final.get("turns", 0),
        operations=final.get("operations", 0),
        tool_counts=Counter(final.get("tool_counts", {})),
        failed_calls=final.get("failed_calls", 0),
        stop_reason=final.get("stop_reason"),
    )
