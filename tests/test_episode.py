"""One scored episode and the one way a fork is dropped: `MemoryStore.forked` drops its fork through
`drop_fork` on success, on an error, on Ctrl-C and on asyncio cancellation (kept only when asked, and
never after an interrupt); `scored_episode` runs a policy on such a fork and scores it while it is open.
Real embedded PostgreSQL and embedding model; the policies are scripted chat models."""

from __future__ import annotations

import asyncio
from contextlib import nullcontext

import pytest
from langchain_core.messages import AIMessage
from test_reliability_cli import ScriptedModel, edit_then_fail

from memupdate.rl.data.namespaces import trajectory_namespace
from memupdate.rl.episode import scored_episode
from memupdate.store import InvalidNamespace, MemoryStore, NewMemory, memory_store
from memupdate.store.records import namespace_path

FACTS = ["Ann adopted a dog named Rex in March 2021.", "Ann works as a nurse at the city hospital."]


@pytest.fixture
def base(store: MemoryStore) -> MemoryStore:
    store.create_many([NewMemory(text, key=f"f{i:04d}") for i, text in enumerate(FACTS)])
    return store


@pytest.fixture
def drops(monkeypatch) -> list[str]:
    """The paths `drop_fork` dropped, in order (the real function still runs)."""
    dropped: list[str] = []
    real = memory_store.drop_fork

    def spy(fork: MemoryStore) -> int:
        dropped.append(fork.path)
        return real(fork)

    monkeypatch.setattr(memory_store, "drop_fork", spy)
    return dropped


def namespaces(base: MemoryStore) -> list[tuple[str, ...]]:
    return base.list_namespaces(prefix=base.namespace)


@pytest.mark.parametrize("error", [None, RuntimeError("policy crashed"), KeyboardInterrupt()], ids=["success", "error", "ctrl-c"])
def test_forked_drops_its_fork_however_the_block_ends(base, drops, error) -> None:
    target = trajectory_namespace(base.namespace, "t1")
    with pytest.raises(type(error)) if error else nullcontext():
        with base.forked(target, episode="t1") as fork:
            fork.create("Ann moved to Lisbon in 2020.")
            assert namespaces(base) == [base.namespace, target] and fork.count() == 3
            if error:
                raise error
    assert drops == [fork.path] and namespaces(base) == [base.namespace]
    assert base.scoped(target).events() == [], "its event log went with it"
    assert base.count() == 2 and {e.op for e in base.events()} == {"create"}, "the base is untouched"


async def test_forked_drops_its_fork_when_its_task_is_cancelled(base, drops) -> None:
    target = trajectory_namespace(base.namespace, "cancelled")
    inside = asyncio.Event()

    async def episode() -> None:
        with base.forked(target) as fork:
            await asyncio.to_thread(fork.create, "Ann moved to Lisbon in 2020.")
            inside.set()
            await asyncio.Event().wait()  # a rollout waiting on a server that never answers

    task = asyncio.create_task(episode())
    await asyncio.wait_for(inside.wait(), timeout=30)
    assert namespaces(base) == [base.namespace, target]
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert drops == [namespace_path(target)] and namespaces(base) == [base.namespace]


def test_keep_keeps_a_finished_fork_keep_failed_a_failed_one_and_an_interrupt_drops_either(base, drops) -> None:
    finished, failed, interrupted = (trajectory_namespace(base.namespace, t) for t in ("done", "failed", "ctrl-c"))
    with base.forked(finished, keep=True) as fork:
        fork.create("Ann moved to Lisbon in 2020.")
    with pytest.raises(RuntimeError), base.forked(failed, keep=True, keep_failed=True):
        raise RuntimeError("policy crashed")
    with pytest.raises(KeyboardInterrupt), base.forked(interrupted, keep=True, keep_failed=True):
        raise KeyboardInterrupt
    assert drops == [namespace_path(interrupted)]
    assert namespaces(base) == [base.namespace, finished, failed] and base.scoped(finished).count() == 3
    with pytest.raises(RuntimeError), base.forked(trajectory_namespace(base.namespace, "t"), keep=True):
        raise RuntimeError("keep alone keeps only a finished episode")
    assert namespaces(base) == [base.namespace, finished, failed]


def test_a_name_that_cannot_be_forked_is_left_as_it_is(base, drops) -> None:
    taken = trajectory_namespace(base.namespace, "taken")
    base.fork(taken).create("someone else's edit")
    with pytest.raises(InvalidNamespace, match="already has memories"), base.forked(taken):
        pytest.fail("the block must not run")
    with pytest.raises(InvalidNamespace, match="onto itself"), base.forked(base.namespace):
        pytest.fail("the block must not run")
    assert drops == [] and base.scoped(taken).count() == 3 and base.count() == 2


def test_drop_fork_tries_again_on_a_fresh_connection(base, monkeypatch) -> None:
    fork = base.fork(trajectory_namespace(base.namespace, "broken"))
    real_drop, calls = MemoryStore.drop, []

    def drop_once_broken(self: MemoryStore, **kwargs) -> int:
        calls.append(self.path)
        if len(calls) == 1:
            raise ConnectionError("server closed the connection unexpectedly")
        return real_drop(self, **kwargs)

    monkeypatch.setattr(MemoryStore, "drop", drop_once_broken)
    assert memory_store.drop_fork(fork) == 2
    assert calls == [fork.path, fork.path] and namespaces(base) == [base.namespace]


# -- scored_episode ---------------------------------------------------------------------------------

CREATE = {
    "name": "manage_memory",
    "args": {"action": "create", "content": "Ann moved to Lisbon in 2020."},
    "id": "c1",
    "type": "tool_call",
}


def test_scored_episode_scores_the_edited_fork_while_open_then_drops_it(base, drops) -> None:
    policy = ScriptedModel(responses=[AIMessage("", tool_calls=[CREATE]), AIMessage("Added where Ann moved.")])
    done = scored_episode(policy, base, "t-qa0", "Where did Ann move in 2020?", lambda fork: sorted(m.content for m in fork.list()))
    assert "Ann moved to Lisbon in 2020." in done.score and len(done.score) == 3
    assert done.result.tool_counts == {"manage_memory": 1} and done.failure is None
    assert done.fork.namespace == trajectory_namespace(base.namespace, "t-qa0")
    assert drops == [done.fork.path] and namespaces(base) == [base.namespace]


def test_no_policy_scores_the_untouched_fork(base, drops) -> None:
    done = scored_episode(None, base, "t-none", None, base.diff)
    assert done.result is None and done.score.is_empty and drops == [done.fork.path]


def test_a_failing_policy_is_reported_with_keep_going_and_raised_without(base, drops) -> None:
    done = scored_episode(edit_then_fail(RuntimeError("Connection refused")), base, "t-going", None, MemoryStore.count, keep_going=True)
    assert done.failure == "RuntimeError: Connection refused" and done.result is None
    assert done.score == 3, "scored on the edit made before the failure"
    with pytest.raises(RuntimeError, match="Connection refused"):
        scored_episode(edit_then_fail(RuntimeError("Connection refused")), base, "t-raise", None, MemoryStore.count)
    assert len(drops) == 2 and namespaces(base) == [base.namespace]


def test_ctrl_c_mid_episode_drops_the_fork_even_when_kept(base, drops) -> None:
    scored: list[str] = []
    with pytest.raises(KeyboardInterrupt):
        policy = edit_then_fail(KeyboardInterrupt())
        scored_episode(policy, base, "t-ctrl-c", None, scored.append, keep=True, keep_failed=True, keep_going=True)
    assert scored == [], "an interrupt is not a failure to score"
    assert drops == [namespace_path(trajectory_namespace(base.namespace, "t-ctrl-c"))]
    assert namespaces(base) == [base.namespace]
