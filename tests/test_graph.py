"""The LangGraph agent driven by a scripted chat model (LangChain's `FakeMessagesListChatModel`):
no pretrained LLM can be downloaded here, so the script plays the model's side of the conversation.
The store, the embeddings and the tools are real."""

from __future__ import annotations

from typing import Any

import pytest
from langchain_core.messages import AIMessage, ToolMessage
from scripted_chat import ScriptedModel

from memupdate.agent.graph import arun_episode, run_episode
from memupdate.store import MemoryStore, NewMemory


def call(name: str, i: int = 0, **args: Any) -> dict:
    return {"name": name, "args": args, "id": f"call_{name}_{i}", "type": "tool_call"}


@pytest.fixture
def bank(store: MemoryStore) -> MemoryStore:
    store.create_many(
        [
            NewMemory("Caroline went to a LGBTQ support group yesterday", metadata={"date": "2023-05-08"}, key="f0000"),
            NewMemory("Melanie painted a lake sunrise", key="f0001"),
            NewMemory("Melanie paints lake sunrises", key="f0002"),
        ]
    )
    return store


def test_multi_turn_tool_use_edits_the_bank(bank: MemoryStore) -> None:
    model = ScriptedModel(
        responses=[
            AIMessage("", tool_calls=[call("search_memory", query="support group")]),
            AIMessage(
                "",
                tool_calls=[
                    call("manage_memory", 1, action="update", memory_id="f0000",
                         content="Caroline went to a LGBTQ support group on 7 May 2023"),
                    call("merge_memory", 2, memory_ids=["f0001", "f0002"], strategy="concatenate"),
                ],
            ),
            AIMessage("Done."),
        ]
    )
    result = run_episode(model, bank, question="When did Caroline go to the support group?")
    assert result.stop_reason == "model_stopped"
    assert (result.turns, result.operations, result.failed_calls) == (3, 3, 0)
    assert result.tool_counts == {"search_memory": 1, "manage_memory": 1, "merge_memory": 1}
    assert [t["function"]["name"] for t in model.bound] == [
        "search_memory", "manage_memory", "delete_memory", "sample_memory", "merge_memory", "split_memory",
    ]
    tool_results = [m for m in result.messages if isinstance(m, ToolMessage)]
    assert "[f0000]" in tool_results[0].content
    assert bank.get("f0000").content.endswith("7 May 2023")
    assert bank.count() == 2
    assert "Target question: When did Caroline" in result.messages[1].content


def test_tool_error_mid_episode_is_reported_and_changes_nothing(bank: MemoryStore) -> None:
    before = bank.snapshot()
    model = ScriptedModel(
        responses=[
            AIMessage("", tool_calls=[call("delete_memory", memory_id="nope")]),
            AIMessage("", tool_calls=[call("merge_memory", 1, memory_ids=["f0001"])]),
            AIMessage("", tool_calls=[call("sample_memory", 2, k=500)]),
            AIMessage("", tool_calls=[call("no_such_tool", 3)]),
            AIMessage("I give up."),
        ]
    )
    result = run_episode(model, bank)
    errors = [m.content for m in result.messages if isinstance(m, ToolMessage)]
    assert errors[0].startswith("error: unknown memory id 'nope'")
    assert "at least two" in errors[1]
    assert "k" in errors[2] and errors[2].startswith("error: bad arguments for sample_memory")
    assert "unknown tool" in errors[3]
    assert result.failed_calls == 4 and result.operations == 4, "failed calls count against the budget"
    assert bank.snapshot() == before


def test_malformed_tool_call_becomes_an_error_for_the_model(bank: MemoryStore) -> None:
    bad = AIMessage(
        "",
        invalid_tool_calls=[{"name": None, "args": "{oops", "id": "bad_0", "error": "invalid JSON", "type": "invalid_tool_call"}],
    )
    result = run_episode(ScriptedModel(responses=[bad, AIMessage("ok")]), bank)
    replies = [m for m in result.messages if isinstance(m, ToolMessage)]
    assert replies[0].content == "error: malformed tool call: invalid JSON" and replies[0].status == "error"
    assert result.operations == 1


def test_operation_budget_stops_the_episode(bank: MemoryStore) -> None:
    searches = [call("search_memory", i, query=f"q{i}") for i in range(4)]
    model = ScriptedModel(responses=[AIMessage("", tool_calls=searches)] * 5)
    result = run_episode(model, bank, max_operations=3)
    assert result.stop_reason == "operation_budget"
    assert result.operations == 3 and result.turns == 1
    replies = [m.content for m in result.messages if isinstance(m, ToolMessage)]
    assert replies[-1].startswith("error: operation budget of 3 used up")


def test_turn_budget_stops_the_episode(bank: MemoryStore) -> None:
    model = ScriptedModel(responses=[AIMessage("", tool_calls=[call("sample_memory", i, k=1)]) for i in range(10)])
    result = run_episode(model, bank, max_turns=4)
    assert result.stop_reason == "turn_budget"
    assert result.turns == 4 and result.operations == 4


async def test_async_episode(bank: MemoryStore) -> None:
    model = ScriptedModel(
        responses=[AIMessage("", tool_calls=[call("delete_memory", memory_id="f0002", reason="duplicate")]), AIMessage("done")]
    )
    result = await arun_episode(model, bank)
    assert result.stop_reason == "model_stopped"
    assert bank.count() == 2
    assert bank.events()[-1].op == "delete"
