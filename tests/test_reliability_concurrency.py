"""Many agents at once on forks of one base (issue 10, reliability tests): random tool calls from threads
and from processes, then every fork must equal its base replayed through its own event log, no write may
cross a namespace, and the base is unchanged. Real embedded PostgreSQL and embedding model; the agents
are random tool-call generators (no LLM), calling the same `run_tool` the graph and verl call.

Default run: 4 agents x 40 calls on threads. `-m slow`: 16 x 200 on threads, and 16 x 200 in processes."""

from __future__ import annotations

import multiprocessing
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor

import pytest
from reliability_helpers import as_events, replay, run_random_agent, vector_sizes

from memupdate.store import MemoryStore, NewMemory

FACTS = [
    "Caroline went to a LGBTQ support group on 7 May 2023",
    "Melanie painted a lake sunrise in 2022",
    "Melanie ran a charity race for mental health",
    "Caroline is researching adoption agencies",
    "Caroline moved from Sweden four years ago",
    "Melanie's kids love the beach and dinosaurs",
    "Caroline gave a school speech about her journey",
    "Melanie signed up for a pottery class",
]


def run_agents(store: MemoryStore, agents: int, operations: int, processes: bool, database_url: str) -> None:
    base = store.scoped((*store.namespace, "base"))
    base.create_many([NewMemory(t, metadata={"source": "test", "dia_ids": [f"D1:{i}"]}, key=f"f{i:04d}")
                      for i, t in enumerate(FACTS)])
    base_state, base_events = as_events(base), len(base.events())
    forks = []
    for i in range(agents):
        episode = f"agent{i}"
        fork = base.fork((*store.namespace, "traj", episode), episode=episode)
        fork.create(f"agent {i} private note", key=f"own{i}", metadata={"source": "test"})
        forks.append(fork)
    plans = [
        (fork.namespace, fork.episode, operations, 1000 + i, [f"own{j}" for j in range(agents) if j != i])
        for i, fork in enumerate(forks)
    ]
    if processes:
        with ProcessPoolExecutor(agents, mp_context=multiprocessing.get_context("spawn")) as pool:
            results = list(pool.map(run_random_agent, *zip(*[(database_url, *plan) for plan in plans], strict=True)))
    else:
        with ThreadPoolExecutor(agents) as pool:
            results = list(pool.map(run_random_agent, *zip(*[(store, *plan) for plan in plans], strict=True)))

    assert all(r["foreign_ok"] == 0 for r in results), "a handle from another fork worked"
    assert sum(r["ok"] for r in results) > agents * operations // 3, results
    assert as_events(base) == base_state and len(base.events()) == base_events, "the base is unchanged"
    for i, fork in enumerate(forks):
        events = fork.events()
        assert {e.episode for e in events} == {fork.episode}, "only this agent wrote here"
        assert as_events(fork) == replay(base_state, events), f"fork {i} is what its event log says"
        assert not {f"own{j}" for j in range(agents) if j != i} & set(fork.snapshot()), "no write crossed forks"
        assert vector_sizes(fork) <= {384}
        assert all(m.metadata.get("source") for m in fork.list()), "provenance on every memory"


def test_agents_on_threads(store: MemoryStore, database_url) -> None:
    run_agents(store, agents=4, operations=40, processes=False, database_url=database_url)


@pytest.mark.slow
def test_sixteen_agents_on_threads(store: MemoryStore, database_url) -> None:
    run_agents(store, agents=16, operations=200, processes=False, database_url=database_url)


@pytest.mark.slow
def test_sixteen_agents_in_processes(store: MemoryStore, database_url) -> None:
    run_agents(store, agents=16, operations=200, processes=True, database_url=database_url)
