"""The memory-editing graph as a LangGraph server serves it: `langgraph.json` at the project's root
names `make_graph`, so `langgraph dev` (the in-memory LangGraph server) runs it and LangGraph's own
client calls it.

    langgraph dev --config langgraph.json --no-browser          # http://127.0.0.1:2024

    from langgraph_sdk import get_sync_client
    client = get_sync_client(url="http://127.0.0.1:2024")
    run = client.runs.wait(None, "memory_editor", input={"namespace": "scratch/alice"},
                           config={"configurable": {"policy": "heuristic"}})
    run["stop_reason"], run["operations"], run["tool_counts"]

Input: `namespace` (the bank the episode edits, in place: give it a fork or a scratch bank; `memupdate
compact` is the reviewed way to change a bank you keep) and optionally `question` (a targeted episode).
The first node writes the system and task prompts, then the graph of `agent/graph.py` runs: policy ->
tools -> back, within the turn and operation budgets. `configurable`: `policy` (heuristic, openai or
hf), `model`, `base_url`, `api_key`. The database is the configured one (`MEMUPDATE_DATABASE_URL`,
else the embedded server).
"""

from __future__ import annotations

import asyncio
from functools import lru_cache
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.graph import END, START, StateGraph

from memupdate.agent.graph import MemoryEditState, build_memory_graph, initial_state
from memupdate.errors import MemupdateError
from memupdate.store import MemoryStore


@lru_cache(maxsize=1)
def _root() -> MemoryStore:
    return MemoryStore.connect(("memupdate",))


def build_served_graph(policy_name: str = "heuristic", model: str | None = None, base_url: str | None = None,
                       api_key: str | None = None, root: MemoryStore | None = None):
    """The served graph: a `prepare` node (prompts for the input's namespace) before the editing graph."""
    from memupdate.agent.policies import make_policy

    root = root or _root()
    policy = make_policy(policy_name, root, model=model, base_url=base_url, api_key=api_key)
    if policy is None:
        raise MemupdateError(f"policy {policy_name!r} makes no edits: choose heuristic, openai or hf")
    editor = build_memory_graph(policy, root)

    def prepare(state: MemoryEditState) -> dict[str, Any]:
        if not state.get("namespace"):
            raise MemupdateError("the input needs a namespace: {\"namespace\": \"a/bank\"} (the bank to edit)")
        if state.get("messages"):
            return {}
        return initial_state(root.scoped(state["namespace"]), state.get("question"))

    graph = StateGraph(MemoryEditState)
    graph.add_node("prepare", prepare)
    graph.add_node("edit", editor)
    graph.add_edge(START, "prepare")
    graph.add_edge("prepare", "edit")
    graph.add_edge("edit", END)
    return graph.compile()


async def make_graph(config: RunnableConfig):
    """The graph factory `langgraph.json` names: the policy from `configurable`, built off the event loop
    (opening the database and loading the embedding model block)."""
    options = (config or {}).get("configurable", {})
    return await asyncio.to_thread(
        build_served_graph, options.get("policy", "heuristic"), options.get("model"), options.get("base_url"), options.get("api_key")
    )
