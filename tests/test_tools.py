"""The six memory tools against the real embedded database: effects, provenance, events, and each
bad-argument case returning an error and leaving the store unchanged."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from memupdate.agent.tools import MAX_RESULT_CHARS, MEMORY_TOOLS, run_tool, tool_schemas
from memupdate.store import MemoryStore, NewMemory


@pytest.fixture
def bank(store: MemoryStore) -> MemoryStore:
    store.create_many(
        [
            NewMemory(
                "Nadia works night shifts as an ER nurse.",
                metadata={"dia_ids": ["D1:2"], "session": 1, "date": "2024-03-03", "speaker": "Nadia"},
                key="f0000",
            ),
            NewMemory(
                "Nadia is an ER nurse who works night shifts.",
                metadata={"dia_ids": ["D3:1"], "session": 3, "date": "2024-03-30", "speaker": "Nadia"},
                key="f0001",
            ),
            NewMemory(
                "Owen bought a sailboat in 2019 and his favourite band is Wilco.",
                metadata={"dia_ids": ["D2:4"], "session": 2, "date": "2024-03-17", "speaker": "Owen"},
                key="f0002",
            ),
            NewMemory(
                "Nadia ran a half marathon last week. Yesterday Owen sailed to the island.",
                metadata={"dia_ids": ["D2:6", "D2:7"], "session": 2, "date": "2024-03-17", "speaker": "Nadia"},
                key="f0003",
            ),
        ]
    )
    return store


def ok(store: MemoryStore, name: str, **args) -> str:
    result = run_tool(store, name, args)
    assert result.ok, result.text
    return result.text


def test_search_shows_handles_scores_and_dates(bank: MemoryStore) -> None:
    text = ok(bank, "search_memory", query="sailboat", top_k=1)
    first = text.splitlines()[0]
    assert first.startswith("[f0002] ") and "(2024-03-17)" in first and "sailboat" in first
    assert len(text.splitlines()) == 1


def test_manage_create_and_update(bank: MemoryStore) -> None:
    text = ok(bank, "manage_memory", action="create", content="Owen teaches chemistry.", kind="semantic")
    key = text.split("[")[1].split("]")[0]
    assert bank.get(key).content == "Owen teaches chemistry." and key.startswith("m")
    ok(bank, "manage_memory", action="update", memory_id="f0000", content="Nadia works nights in the ER.", kind="episodic")
    updated = bank.get("f0000")
    assert updated.content == "Nadia works nights in the ER." and updated.kind == "episodic"
    assert updated.metadata["dia_ids"] == ["D1:2"], "provenance kept on update"


def test_delete_logs_the_event(bank: MemoryStore) -> None:
    assert ok(bank, "delete_memory", memory_id="f0001", reason="duplicate") == "deleted [f0001]"
    assert bank.count() == 3 and bank.events()[-1].op == "delete"


@pytest.mark.parametrize("strategy", ["random", "diverse", "recent"])
def test_sample_strategies(bank: MemoryStore, strategy: str) -> None:
    lines = [line for line in ok(bank, "sample_memory", strategy=strategy, k=3).splitlines() if not line.startswith("to date")]
    assert len(lines) == 3 and all(line.startswith("[f") for line in lines)
    if strategy == "recent":
        assert "(2024-03-30)" in lines[0]


@pytest.mark.parametrize(
    ("strategy", "expect"),
    [
        ("concatenate", ["night shifts as an ER nurse.", "ER nurse who works night shifts."]),
        ("summarize", ["ER nurse"]),
        ("extract_common", ["ER nurse"]),
    ],
)
def test_merge_strategies_union_provenance(bank: MemoryStore, strategy: str, expect: list[str]) -> None:
    text = ok(bank, "merge_memory", memory_ids=["f0000", "f0001"], strategy=strategy)
    key = text.split("into [")[1].split("]")[0]
    merged = bank.get(key)
    assert all(fragment in merged.content for fragment in expect)
    assert merged.metadata["dia_ids"] == ["D1:2", "D3:1"] and merged.metadata["sessions"] == [1, 3]
    assert merged.metadata["merged_from"] == ["f0000", "f0001"]
    # Each source's day is kept; no single date stands for facts from different sessions.
    assert merged.metadata["dates"] == ["2024-03-03", "2024-03-30"] and merged.metadata["date"] is None
    assert "(2024-03-03..2024-03-30)" in text
    assert bank.count() == 3
    ops = [e.op for e in bank.events()[-3:]]
    assert ops == ["delete", "delete", "create"], "sources deleted and merge created in one transaction"


def test_merge_without_content_keeps_every_facts_date(bank: MemoryStore) -> None:
    """A merge of several days carries no single date, so its default text dates each fact; relative time
    is anchored to its own memory's day. One day's memories keep that day as the merge's date instead."""
    one_day = ok(bank, "merge_memory", memory_ids=["f0002", "f0003"])
    assert one_day.endswith(
        "(2024-03-17) Owen bought a sailboat in 2019 and his favourite band is Wilco. Nadia ran a half marathon "
        "last week (the week before 17 March 2024). Yesterday (16 March 2024) Owen sailed to the island."
    )
    two_days = ok(bank, "merge_memory", memory_ids=["f0001", "f0000"])
    assert two_days.endswith(
        "(30 March 2024) Nadia is an ER nurse who works night shifts. (3 March 2024) Nadia works night shifts as an ER nurse."
    )


def test_update_without_content_dates_the_memory(bank: MemoryStore) -> None:
    """The tool does the date arithmetic: a policy names the memory, the text is anchored to its own day."""
    text = ok(bank, "manage_memory", action="update", memory_id="f0003")
    content = bank.get("f0003").content
    assert content in text
    assert content == "Nadia ran a half marathon last week (the week before 17 March 2024). Yesterday (16 March 2024) Owen sailed to the island."


def test_memories_the_update_would_date_are_marked(bank: MemoryStore) -> None:
    """`(date; relative time)` marks exactly the memories an update without content dates, and a first
    `to date` line names them: the mark goes once the memory is dated, and a look without such memories
    has no such line."""
    text = ok(bank, "sample_memory", strategy="recent", k=4)
    first, *rest = text.splitlines()
    assert first == "to date (relative time): [f0003]" and len(rest) == 4
    lines = {line[1:6]: line for line in rest}
    assert "(2024-03-17; relative time) Nadia ran" in lines["f0003"]
    assert all("relative time" not in lines[key] for key in ("f0000", "f0001", "f0002"))
    assert "relative time" not in ok(bank, "manage_memory", action="update", memory_id="f0003")
    assert "relative time" not in ok(bank, "search_memory", query="half marathon", top_k=4)


def test_a_dating_update_names_the_memories_left_to_date(bank: MemoryStore) -> None:
    """After an update without content, a bank a look shows whole gets the `to date` line of what is left
    (newest first); none once all are dated, none after an update with content, none in a larger bank."""
    owen = {"dia_ids": ["D3:5"], "session": 3, "date": "2024-03-30", "speaker": "Owen"}
    bank.create_many([NewMemory("Owen went fishing last Sunday.", metadata=owen, key="f0004")])
    assert ok(bank, "manage_memory", action="update", memory_id="f0004").splitlines()[1:] == ["to date (relative time): [f0003]"]
    assert "to date" not in ok(bank, "manage_memory", action="update", memory_id="f0000", content="Nadia works nights.")
    assert len(ok(bank, "manage_memory", action="update", memory_id="f0003").splitlines()) == 1
    bank.create_many([NewMemory(f"Owen sailed last week, trip {i}.", metadata=owen, key=f"f01{i:02d}") for i in range(20)])
    assert len(ok(bank, "manage_memory", action="update", memory_id="f0100").splitlines()) == 1


def test_merge_keep_fullest_keeps_the_longer_words_dated(bank: MemoryStore) -> None:
    ok(bank, "merge_memory", memory_ids=["f0001", "f0000"], strategy="keep_fullest")
    merged = [m for m in bank.list() if m.key not in ("f0002", "f0003")]
    assert [m.content for m in merged] == ["Nadia is an ER nurse who works night shifts."]
    assert sorted(merged[0].metadata["dia_ids"]) == ["D1:2", "D3:1"]


def test_merge_uses_the_models_content(bank: MemoryStore) -> None:
    text = ok(bank, "merge_memory", memory_ids=["f0000", "f0001"], content="Nadia is a night-shift ER nurse.")
    assert "Nadia is a night-shift ER nurse." in text


@pytest.mark.parametrize(
    ("memory_id", "strategy", "expect"),
    [
        ("f0002", "thematic", ["sailboat in 2019", "Wilco"]),
        ("f0003", "temporal", ["last week", "Yesterday"]),
        ("f0003", "speaker", ["Nadia ran", "Owen sailed"]),
    ],
)
def test_split_strategies_copy_provenance(bank: MemoryStore, memory_id: str, strategy: str, expect: list[str]) -> None:
    source = bank.get(memory_id)
    text = ok(bank, "split_memory", memory_id=memory_id, strategy=strategy)
    parts = [bank.get(line.split("[")[1].split("]")[0]) for line in text.splitlines()[1:]]
    assert len(parts) == 2
    for part, fragment in zip(parts, expect, strict=True):
        assert fragment in part.content
        assert part.metadata["dia_ids"] == source.metadata["dia_ids"] and part.metadata["split_from"] == memory_id
    with pytest.raises(KeyError):
        bank.get(memory_id)


def test_split_uses_the_models_parts(bank: MemoryStore) -> None:
    text = ok(bank, "split_memory", memory_id="f0002", parts=["Owen bought a sailboat in 2019.", "Owen's favourite band is Wilco."])
    assert "Owen's favourite band is Wilco." in text and bank.count() == 5


BAD_CALLS = [
    ("search_memory", {"query": ""}, "query"),
    ("search_memory", {"query": "x", "top_k": 0}, "top_k"),
    ("manage_memory", {"action": "create", "content": ""}, "content"),
    ("manage_memory", {"action": "rename", "content": "x"}, "action"),
    ("manage_memory", {"action": "update", "content": "x"}, "needs memory_id"),
    ("manage_memory", {"action": "update", "content": "x", "memory_id": "f9999"}, "unknown memory id 'f9999'"),
    ("manage_memory", {"action": "create", "content": "x", "memory_id": "f0000"}, "leave memory_id out"),
    ("manage_memory", {"action": "create", "content": "x", "kind": "dream"}, "kind"),
    ("manage_memory", {"action": "create"}, "create needs content"),
    ("manage_memory", {"action": "update", "memory_id": "f0002"}, "[f0002] has no relative time to date"),
    ("manage_memory", {"action": "update", "memory_id": "f9999"}, "unknown memory id 'f9999'"),
    ("delete_memory", {"memory_id": "nope"}, "unknown memory id 'nope'"),
    ("delete_memory", {}, "memory_id"),
    ("sample_memory", {"k": 0}, "k"),
    ("sample_memory", {"k": 99}, "k"),
    ("sample_memory", {"strategy": "newest"}, "strategy"),
    ("merge_memory", {"memory_ids": ["f0000"]}, "at least two"),
    ("merge_memory", {"memory_ids": ["f0000", "f0000"]}, "at least two"),
    ("merge_memory", {"memory_ids": ["f0000", "zzz"]}, "unknown memory id 'zzz'"),
    ("merge_memory", {"memory_ids": ["f0000", "f\x000"]}, "unknown memory id"),  # NUL: found by hypothesis
    ("delete_memory", {"memory_id": "\x00"}, "unknown memory id"),
    ("merge_memory", {"memory_ids": ["f0002", "f0003"], "strategy": "extract_common"}, "share no fact"),
    ("split_memory", {"memory_id": "f0000", "strategy": "thematic"}, "nothing to split"),
    ("split_memory", {"memory_id": "f0002", "parts": ["only one"]}, "two or more"),
    ("split_memory", {"memory_id": "f0002", "parts": ["a", " "]}, "two or more"),
    ("split_memory", {"memory_id": "gone"}, "unknown memory id"),
    ("no_such_tool", {}, "unknown tool"),
]


@pytest.mark.parametrize(("name", "args", "message"), BAD_CALLS, ids=[f"{c[0]}-{i}" for i, c in enumerate(BAD_CALLS)])
def test_bad_arguments_return_an_error_and_change_nothing(bank: MemoryStore, name: str, args: dict, message: str) -> None:
    before, events = bank.snapshot(), len(bank.events())
    result = run_tool(bank, name, args)
    assert not result.ok and result.text.startswith("error: ") and message in result.text
    assert bank.snapshot() == before and len(bank.events()) == events


def test_handle_from_another_namespace_is_unknown(bank: MemoryStore) -> None:
    other = bank.scoped((*bank.namespace, "other"))
    foreign = other.create("Somebody else's memory", key="mforeign1")
    result = run_tool(bank, "delete_memory", {"memory_id": foreign.key})
    assert not result.ok and "unknown memory id 'mforeign1'" in result.text
    assert other.count() == 1


def test_arguments_as_a_json_string_and_result_cap(bank: MemoryStore) -> None:
    assert run_tool(bank, "search_memory", json.dumps({"query": "nurse"})).ok
    bank.create_many([NewMemory("x " * 900 + str(i)) for i in range(3)])
    assert len(run_tool(bank, "sample_memory", {"k": 7}).text) <= MAX_RESULT_CHARS
    assert not run_tool(bank, "search_memory", "{not json").ok


def test_tool_yaml_matches_the_argument_models() -> None:
    """configs/tool_config/memory_tools.yaml (verl's tool config) is generated from the same models."""
    config = yaml.safe_load((Path(__file__).parents[1] / "configs/tool_config/memory_tools.yaml").read_text())
    schemas = [tool["tool_schema"] for tool in config["tools"]]
    assert schemas == tool_schemas()
    assert [s["function"]["name"] for s in schemas] == list(MEMORY_TOOLS)


async def test_langchain_tools_wrap_the_same_functions(bank: MemoryStore) -> None:
    from memupdate.agent.tools import langchain_tools

    tools = {tool.name: tool for tool in langchain_tools(bank)}
    assert list(tools) == list(MEMORY_TOOLS)
    assert tools["search_memory"].invoke({"query": "sailboat", "top_k": 1}).startswith("[f0002]")
    assert tools["delete_memory"].invoke({"memory_id": "nope"}).startswith("error: unknown memory id")
    assert len([line for line in (await tools["sample_memory"].ainvoke({"k": 2})).splitlines() if line.startswith("[")]) == 2
