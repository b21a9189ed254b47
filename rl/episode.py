"""One scored episode: fork the base, let a policy edit the fork through the LangGraph agent, score the
fork while it is open, drop it.

    from memupdate.rl.episode import scored_episode
    from memupdate.rl.data.namespaces import trajectory_id

    done = scored_episode(policy, base, trajectory_id("conv-26", 3), question,
                          lambda fork: compute_reward(base, fork, questions, config))
    done.score.reward, done.result.tool_counts, done.fork.path, done.failure

Evaluation, distillation and `memupdate agent run` run their episodes through it. verl's rollouts are
opened and closed by separate callbacks (`rl.verl.forks`), so they cannot; they drop their forks with
the same `drop_fork`. The fork is dropped however the episode ends (`MemoryStore.forked`), unless kept.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from langchain_core.language_models import BaseChatModel

from memupdate.agent.graph import EpisodeResult, run_episode
from memupdate.rl.data.namespaces import trajectory_namespace
from memupdate.store import MemoryStore

T = TypeVar("T")


@dataclass(frozen=True)
class ScoredEpisode(Generic[T]):
    """What an episode left: its fork (dropped unless kept), the agent's run, and the fork's score."""

    fork: MemoryStore
    result: EpisodeResult | None  # None: no policy, or the policy failed (`failure`)
    score: T
    failure: str | None = None  # `Type: message` of a policy error survived with `keep_going`


def scored_episode(
    policy: BaseChatModel | None,
    base: MemoryStore,
    trajectory: str,
    question: str | None,
    scorer: Callable[[MemoryStore], T],
    *,
    max_turns: int | None = None,
    max_operations: int | None = None,
    checkpointer: Any = None,
    keep: bool = False,
    keep_failed: bool = False,
    keep_going: bool = False,
) -> ScoredEpisode[T]:
    """Fork `base` into `<base>/traj/<trajectory>`, run `policy` on the fork (`question` visible to it, or
    None), then `scorer(fork)` while the fork is open, then drop it.

    `policy=None` makes no edits (the score is the base's own). With `keep_going`, a policy that raises
    is reported in `failure` and the fork is still scored on what it managed; otherwise the error
    propagates. `keep` / `keep_failed`: see `MemoryStore.forked`. With a LangGraph `checkpointer`, the
    graph's state is saved under the fork's path as thread id.
    """
    namespace = trajectory_namespace(base.namespace, trajectory)
    with base.forked(namespace, episode=trajectory, keep=keep, keep_failed=keep_failed) as fork:
        result, failure = None, None
        if policy is not None:
            try:
                result = run_episode(
                    policy,
                    fork,
                    question,
                    max_turns=max_turns,
                    max_operations=max_operations,
                    checkpointer=checkpointer,
                    thread_id=fork.path if checkpointer is not None else None,
                )
            except Exception as exc:
                if not keep_going:
                    raise
                failure = f"{type(exc).__name__}: {exc}"
        score = scorer(fork)
    return ScoredEpisode(fork, result, score, failure)
