"""The memory tools as verl tools, loaded by verl's own registry and run against the real embedded
PostgreSQL with the real embedding model: one fork per rollout, made at its first call; the reward
on the open fork, then the fork dropped; listing and pruning leftovers.

verl's `AgentData` is the real class; no LLM is involved here (the agent loop tests drive one).
"""

from __future__ import annotations

import asyncio
import uuid
from datetime import timedelta
from pathlib import Path

import pytest

pytest.importorskip("verl")

from verl.experimental.agent_loop.tool_agent_loop import AgentData
from verl.tools.tool_registry import initialize_tools_from_config

from memupdate.agent.tools import MEMORY_TOOLS
from memupdate.rl import leftover_forks
from memupdate.rl.data.namespaces import fork_base, rollout_namespace, trajectory_namespace
from memupdate.rl.verl import forks, worker_db
from memupdate.rl.verl.tools import MemoryEditTool
from memupdate.store import DatabaseError, MemoryStore, NewMemory
from memupdate.store.records import namespace_path

TOOL_CONFIG = Path(__file__).resolve().parents[1] / "configs" / "tool_config" / "memory_tools.yaml"
FACTS = [
    "Ann adopted a dog named Rex in March 2021.",
    "Ann works as a nurse at the city hospital.",
    "Ben started learning the violin last spring.",
    "Ben and Ann went hiking in the Alps together.",
    "Ann likes green tea in the morning and coffee after lunch; Ben plays chess on Sundays.",
]


@pytest.fixture
def root(worker_root):
    """This process's rollout store is the test database (what `worker_store()` gives a Ray worker)."""
    return worker_root


@pytest.fixture
def row(store, root):
    """A loaded base and one preprocessed row on it (what `memupdate data preprocess` writes)."""
    # Fact i told in turn D1:i+1: the QA proxy credits an answer from the memory of the question's evidence.
    store.create_many([
        NewMemory(text, kind="episodic", key=f"f{i:04d}", metadata={"dia_ids": [f"D1:{i + 1}"]})
        for i, text in enumerate(FACTS)
    ])
    trajectory = f"t-qa0-{uuid.uuid4().hex[:8]}"
    create_kwargs = {
        "base_namespace": store.path,
        "namespace": namespace_path(trajectory_namespace(store.namespace, trajectory)),
        "trajectory_id": trajectory,
    }
    extra_info = {
        "question": "Where did Ann move in 2020?", "answer": "Lisbon", "qa_index": 0, "category": 4,
        "evidence": [], "collateral": [{"qa_index": 1, "question": "What is Ann's job?", "answer": "nurse", "evidence": ["D1:2"]}],
        "trajectory_id": trajectory, "base_namespace": store.path, "namespace": create_kwargs["namespace"],
        "tools_kwargs": {name: {"create_kwargs": create_kwargs} for name in MEMORY_TOOLS},
    }
    return extra_info


@pytest.fixture(scope="module")
def tools():
    return {tool.name: tool for tool in initialize_tools_from_config(str(TOOL_CONFIG))}


def agent_data(extra_info: dict) -> AgentData:
    """verl's per-rollout state, as `ToolAgentLoop.run` builds it."""
    return AgentData(
        messages=[], image_data=None, video_data=None, audio_data=None, mm_processor_kwargs=None,
        metrics={}, request_id=uuid.uuid4().hex, tools_kwargs=extra_info["tools_kwargs"],
    )


async def call(tool: MemoryEditTool, data: AgentData, arguments) -> str:
    """One call exactly as verl's `ToolAgentLoop._call_tool` makes it: create -> execute -> release."""
    instance_id, _ = await tool.create(create_kwargs=data.tools_kwargs[tool.name]["create_kwargs"])
    try:
        response, _, _ = await tool.execute(instance_id, arguments, agent_data=data)
    finally:
        await tool.release(instance_id)
    return response.text


def forks_of(store: MemoryStore, extra_info: dict) -> list:
    return store.list_namespaces(prefix=tuple(extra_info["namespace"].split("/")))


def test_verl_registry_loads_our_tool_config(tools) -> None:
    assert list(tools) == list(MEMORY_TOOLS)
    assert all(isinstance(tool, MemoryEditTool) for tool in tools.values())
    schema = tools["manage_memory"].get_openai_tool_schema()
    assert schema.function.parameters.properties["action"].enum == ["create", "update"]


async def test_each_tool_runs_create_execute_release_on_one_fork(tools, row, store) -> None:
    data = agent_data(row)
    results = {
        "search_memory": await call(tools["search_memory"], data, {"query": "Ann's dog"}),
        "sample_memory": await call(tools["sample_memory"], data, {"strategy": "diverse", "k": 3}),
        "manage_memory": await call(tools["manage_memory"], data, {"action": "create", "content": "Ann moved to Lisbon in 2020."}),
        "delete_memory": await call(tools["delete_memory"], data, {"memory_id": "f0003"}),
        "merge_memory": await call(tools["merge_memory"], data, {"memory_ids": ["f0000", "f0001"]}),
        "split_memory": await call(tools["split_memory"], data, {"memory_id": "f0004",
                                                                 "parts": ["Ann likes green tea.", "Ben plays chess on Sundays."]}),
    }
    assert "[f0000]" in results["search_memory"] and results["sample_memory"].count("[") == 3
    assert results["manage_memory"].startswith("created [m") and results["delete_memory"] == "deleted [f0003]"
    assert results["merge_memory"].startswith("merged 2 memories") and results["split_memory"].startswith(
        "split [f0004]"
    )
    assert all(not tool._calls for tool in tools.values())  # every call released its instance
    state = data.extra_fields
    assert (
        state[forks.TOOL_CALLS_KEY] == 6
        and state[forks.EDITS_KEY] == 4
        and forks.FAILED_CALLS_KEY not in state
    )
    fork_path = state[forks.FORK_KEY]
    assert forks_of(store, row) == [tuple(fork_path.split("/"))] and state[forks.BASE_KEY] == store.path
    assert store.count() == len(FACTS) and {m.key for m in store.list()} == {f"f{i:04d}" for i in range(5)}
    assert store.scoped(fork_path).count() == 5 - 1 + 1 - 2 + 1 - 1 + 2  # create, delete, merge, split

    score = await forks.finish_rollout(state, row)
    assert score.reward > 0 and score.parts["performance_delta"] > 0 and score.reason is None
    assert score.parts["edits"] == 4 and score.parts["forked"] == 1.0
    assert forks_of(store, row) == [] and store.count() == len(FACTS)


async def test_bad_arguments_come_back_as_text_and_change_nothing(tools, row, store) -> None:
    data = agent_data(row)
    bad_json = await call(tools["manage_memory"], data, '{"action": "create", "content": ')
    assert bad_json.startswith("error: bad arguments for manage_memory")
    assert (await call(tools["delete_memory"], data, ["f0000"])).startswith("error: bad arguments")
    assert "unknown memory id 'nope'" in await call(tools["delete_memory"], data, {"memory_id": "nope"})
    fork = store.scoped(data.extra_fields[forks.FORK_KEY])
    assert store.diff(fork).is_empty
    assert data.extra_fields[forks.FAILED_CALLS_KEY] == 3 and forks.EDITS_KEY not in data.extra_fields
    score = await forks.finish_rollout(data.extra_fields, row)
    assert score.reward == 0.0 and score.parts["failed_calls"] == 3


async def test_concurrent_first_calls_of_one_rollout_make_one_fork(tools, row, store) -> None:
    data = agent_data(row)
    texts = await asyncio.gather(
        *(call(tools["search_memory"], data, {"query": f"Ann {i}"}) for i in range(4))
    )
    assert all("[f00" in text for text in texts)
    assert len(forks_of(store, row)) == 1
    await forks.finish_rollout(data.extra_fields, row)
    assert forks_of(store, row) == []


async def test_four_rollouts_of_one_row_never_see_each_others_edits(tools, row, store) -> None:
    rollouts = [agent_data(row) for _ in range(4)]

    async def episode(i: int, data: AgentData) -> str:
        await call(
            tools["manage_memory"],
            data,
            {"action": "create", "content": f"Ann keeps secret number {i} in a box."},
        )
        await call(tools["delete_memory"], data, {"memory_id": f"f000{i}"})
        return await call(
            tools["search_memory"], data, {"query": "Ann's secret number in a box", "top_k": 20}
        )

    seen = await asyncio.gather(*(episode(i, data) for i, data in enumerate(rollouts)))
    for i, text in enumerate(seen):
        assert f"secret number {i}" in text
        assert not any(f"secret number {j}" in text for j in range(4) if j != i)
        assert f"[f000{i}]" not in text and all(f"[f000{j}]" in text for j in range(4) if j != i)
    assert len(forks_of(store, row)) == 4 and store.count() == len(FACTS)
    scores = await asyncio.gather(*(forks.finish_rollout(data.extra_fields, row) for data in rollouts))
    assert len({tuple(sorted(s.parts)) for s in scores}) == 1  # the same keys for every rollout
    assert forks_of(store, row) == [] and store.count() == len(FACTS)


async def test_a_rollout_that_never_edits_scores_exactly_zero(tools, row, store) -> None:
    silent, reader = agent_data(row), agent_data(row)
    await call(tools["search_memory"], reader, {"query": "Where did Ann move?"})
    await call(tools["sample_memory"], reader, {"strategy": "random"})
    no_call = await forks.finish_rollout(silent.extra_fields, row)
    read_only = await forks.finish_rollout(reader.extra_fields, row)
    assert no_call.reward == 0.0 and "made no tool call" in no_call.reason and no_call.parts["forked"] == 0.0
    assert (
        read_only.reward == 0.0
        and read_only.parts["performance_delta"] == 0.0
        and read_only.parts["forked"] == 1.0
    )
    assert sorted(no_call.parts) == sorted(read_only.parts)
    assert forks_of(store, row) == []


async def test_missing_base_is_a_clear_message_and_scores_zero(tools, row, store) -> None:
    for memory in store.list():
        store.delete(memory.key)
    data = agent_data(row)
    text = await call(tools["search_memory"], data, {"query": "Ann"})
    assert f"base namespace {store.path!r} holds no memories" in text and "memupdate data load" in text
    assert "holds no memories" in await call(tools["sample_memory"], data, {})  # no second fork attempt
    score = await forks.finish_rollout(data.extra_fields, row)
    assert score.reward == 0.0 and "holds no memories" in score.reason and forks_of(store, row) == []


async def test_a_fork_name_that_exists_is_reported_and_left_alone(tools, row, store, monkeypatch) -> None:
    monkeypatch.setattr(forks, "rollout_label", lambda: "rtaken")
    taken = store.scoped((*row["namespace"].split("/"), "rtaken"))
    taken.create("someone else's fork")
    data = agent_data(row)
    text = await call(tools["manage_memory"], data, {"action": "create", "content": "Ann moved to Lisbon."})
    assert "already has memories" in text and forks.FORK_KEY not in data.extra_fields
    score = await forks.finish_rollout(data.extra_fields, row)
    assert score.reward == 0.0 and "already has memories" in score.reason
    assert taken.count() == 1  # not ours: never dropped by this rollout


async def test_a_row_without_create_kwargs_is_a_clear_message(tools, row) -> None:
    data = agent_data({**row, "tools_kwargs": {name: {"create_kwargs": {}} for name in MEMORY_TOOLS}})
    text = await call(tools["search_memory"], data, {"query": "Ann"})
    assert "lack base_namespace, namespace, trajectory_id" in text and "memupdate data preprocess" in text


@pytest.fixture
def configured_worker(monkeypatch):
    """Point `worker_store()` at a URL through MEMUPDATE_DATABASE_URL, as in a Ray worker. No store
    before the test; after it (also when it fails) the store it made is closed and forgotten."""
    from memupdate.settings import get_settings

    def forget() -> None:
        if worker_db._worker_store is not None:
            worker_db._worker_store.engine.dispose()
        worker_db.use_worker_store(None)

    def configure(url: str) -> None:
        forget()
        monkeypatch.setenv("MEMUPDATE_DATABASE_URL", url)
        get_settings.cache_clear()

    worker_db.use_worker_store(None)
    try:
        yield configure
    finally:
        forget()
        monkeypatch.undo()
        get_settings.cache_clear()


def test_worker_store_has_a_small_pool_and_names_an_unreachable_database(database_url, configured_worker) -> None:
    configured_worker(database_url)
    store = worker_db.worker_store()
    assert store.engine.pool.size() == worker_db.WORKER_CONNECTIONS and store.engine.pool._max_overflow == 0
    configured_worker("postgresql://nobody@127.0.0.1:1/none")
    with pytest.raises(DatabaseError, match="rollout worker cannot reach PostgreSQL at .*127.0.0.1:1.*runtime env"):
        worker_db.worker_store()


def test_list_and_prune_leftover_forks(root, store) -> None:
    base = store
    base.create("a fact")
    old = base.fork(rollout_namespace(trajectory_namespace(base.namespace, "crashed-qa1-aaaa0000"), "r1"))
    live = base.fork(trajectory_namespace(base.namespace, "running-qa2-bbbb0000"))
    live.create("edited just now")
    emptied = base.fork(trajectory_namespace(base.namespace, "emptied-qa3-cccc0000"))
    emptied.delete(emptied.list()[0].key)  # no memories left, only its events
    found = {f.namespace: f for f in leftover_forks.list_forks(root, base.namespace)}
    assert set(found) == {old.path, live.path, emptied.path}
    assert found[emptied.path].memories == 0 and found[emptied.path].events == 2
    assert all(f.base == base.path and f.created_at is not None for f in found.values())
    assert leftover_forks.prune_forks(root, older_than=timedelta(hours=1), prefix=base.namespace) == []
    pruned = leftover_forks.prune_forks(root, older_than=timedelta(0), prefix=base.namespace)
    assert {f.namespace for f in pruned} == set(found)
    assert leftover_forks.list_forks(root, base.namespace) == [] and base.count() == 1


def test_fork_base_and_durations() -> None:
    assert fork_base(("locomo", "conv-26", "traj", "conv-26-qa3-1a2b3c4d", "r1")) == (
        "locomo",
        "conv-26",
    )
    assert fork_base(("locomo", "conv-26")) is None and fork_base(("traj", "x")) is None
    assert leftover_forks.parse_duration("90s") == timedelta(seconds=90) and leftover_forks.parse_duration("6h") == timedelta(
        hours=6
    )
    assert leftover_forks.parse_duration("2d") == timedelta(days=2) and leftover_forks.parse_duration("30") == timedelta(
        seconds=30
    )
    with pytest.raises(ValueError, match="like 90s, 30m, 6h or 2d"):
        leftover_forks.parse_duration("soon")


def test_reward_kwargs_become_the_reward_config_and_typos_are_named() -> None:
    config = forks.reward_config({"target_weight": 1.0, "collateral_questions": "4", "reward_router_address": None})
    assert config.target_weight == 1.0 and config.collateral_questions == 4
    with pytest.raises(ValueError, match="unknown reward option.*colateral_questions"):
        forks.reward_config({"colateral_questions": 4})


async def test_target_weight_from_reward_kwargs_changes_the_reward(tools, row, store) -> None:
    harmful = agent_data(row)
    await call(tools["delete_memory"], harmful, {"memory_id": "f0001"})  # the collateral answer, not the target
    both = await forks.finish_rollout(dict(harmful.extra_fields), row)
    harmful2 = agent_data(row)
    await call(tools["delete_memory"], harmful2, {"memory_id": "f0001"})
    target_only = await forks.finish_rollout(harmful2.extra_fields, row, forks.reward_config({"target_weight": 1.0}))
    assert both.reward < 0 and target_only.reward > both.reward
