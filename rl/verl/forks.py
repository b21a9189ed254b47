"""Trajectory forks of verl's rollouts: one namespace per rollout, made at its first tool call,
scored while it is open, then dropped.

    from memupdate.rl.verl.forks import open_rollout_fork, finish_rollout

    fork = await open_rollout_fork(agent_data, agent_data.extra_fields, RowBank.from_create_kwargs(kwargs))
    score = await finish_rollout(agent_data.extra_fields, extra_info)   # reward on the open fork, then drop
    score.reward, score.parts["performance_delta"], score.reason

A preprocessed verl row names one trajectory namespace (`locomo/conv-26/traj/conv-26-qa3-1a2b3c4d`)
for all n rollouts GRPO samples from it, in every epoch. Each rollout therefore forks the base into
that namespace plus a label of its own (`.../conv-26-qa3-1a2b3c4d/r5f0c9a1b2c3d`, `rl.data.namespaces`). The
rollout's record (fork path, tool-call counts) lives in verl's `agent_data.extra_fields`, which verl
pickles and hands to the reward; nothing lives on the tool objects, which verl shares between rollouts.

A compaction row (`memupdate data preprocess --task compaction`) names a neighbourhood: the rollout's
first call copies only those memories into its fork (`MemoryStore.fork_keys`, as `memupdate compact`'s
scratch namespace holds one neighbourhood), so a search or a sample sees what the episode may edit.
Its reward folds the fork's edits into a fork of the whole bank (`MemoryStore.fold`, as
`agent.compaction.neighbourhood_episode` does) and scores that with `compute_compaction_reward` on every
question of the bank, as the offline learner scores the same unit (`rl.distill.compaction`).

Unlike an evaluation's episode (`rl.episode`), a rollout is opened by one verl callback and closed by
another, so it cannot sit in `MemoryStore.forked`; it drops its fork with the same `drop_fork`, after
scoring or when verl cancels it. Database work runs on the worker's threads (`rl.verl.worker_db`).
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from memupdate.errors import MemupdateError
from memupdate.rl.data.namespaces import TRAJ_LABEL, rollout_label, rollout_namespace
from memupdate.rl.data.preprocess import compaction_unit, is_compaction_row
from memupdate.rl.verl.worker_db import in_db_thread, worker_store
from memupdate.scoring.reward import (
    RewardBreakdown,
    RewardConfig,
    compute_compaction_reward,
    compute_reward,
    questions_from_extra_info,
)
from memupdate.store import SEPARATOR, MemoryStore, drop_fork, namespace_path, to_namespace

log = logging.getLogger("memupdate.rl.verl.forks")

# Keys of a rollout's record in verl's `agent_data.extra_fields` (merged into the reward's extra_info).
FORK_KEY = "memupdate_fork"  # the fork's namespace path, set once the fork exists
BASE_KEY = "memupdate_base"  # the base namespace path it was forked from
ERROR_KEY = "memupdate_fork_error"  # why no fork could be made
TOOL_CALLS_KEY = "memupdate_tool_calls"
FAILED_CALLS_KEY = "memupdate_failed_calls"
EDITS_KEY = "memupdate_edits"  # successful calls of a writing tool
HERMES_CALL = "<tool_call>"  # what opens a call in the Hermes format verl parses


# -- one fork per rollout ---------------------------------------------------------------------------


class ForkError(MemupdateError):
    """A rollout's fork could not be made (bad row, missing base, name taken)."""


@dataclass(frozen=True)
class RowBank:
    """What a preprocessed row tells a tool (`tools_kwargs.<tool>.create_kwargs`): the base to fork and
    the row's trajectory namespace, shared by all rollouts of the row; a compaction row's neighbourhood."""

    base: str
    namespace: str
    trajectory_id: str
    neighbourhood: tuple[str, ...] = ()  # the memory keys a compaction rollout's fork holds; () for all

    @classmethod
    def from_create_kwargs(cls, create_kwargs: Mapping[str, Any] | None) -> RowBank:
        kwargs = dict(create_kwargs or {})
        missing = [k for k in ("base_namespace", "namespace", "trajectory_id") if not kwargs.get(k)]
        if missing:
            raise ForkError(
                f"the row's tools_kwargs create_kwargs lack {', '.join(missing)} (got {sorted(kwargs)}): "
                "write the dataset with `memupdate data preprocess`"
            )
        base, namespace = to_namespace(kwargs["base_namespace"]), to_namespace(kwargs["namespace"])
        if namespace[: len(base)] != base or TRAJ_LABEL not in namespace[len(base) :]:
            raise ForkError(
                f"trajectory namespace {namespace_path(namespace)!r} is not under {namespace_path(base)!r}/{TRAJ_LABEL}: "
                "write the dataset with `memupdate data preprocess`"
            )
        neighbourhood = tuple(str(key) for key in kwargs.get("neighbourhood") or ())
        return cls(namespace_path(base), namespace_path(namespace), str(kwargs["trajectory_id"]), neighbourhood)


# One lock per rollout, keyed by the object verl keeps for it (its AgentData): extra_fields must stay
# picklable, and the n rollouts of a row share everything else (tools_kwargs, namespace).
_fork_locks: weakref.WeakKeyDictionary[object, asyncio.Lock] = weakref.WeakKeyDictionary()
# Bases already checked to hold memories in this process (the base is never written during training).
_loaded_bases: set[str] = set()


async def open_rollout_fork(rollout: object, state: dict[str, Any], bank: RowBank) -> MemoryStore:
    """The rollout's fork of `bank.base`, made on the first call: concurrent first calls of one rollout
    (verl's `max_parallel_calls` > 1) make one fork. `state` is the rollout's record (extra_fields)."""
    lock = _fork_locks.setdefault(rollout, asyncio.Lock())
    store = worker_store()
    async with lock:
        if FORK_KEY not in state:
            if ERROR_KEY in state:
                raise ForkError(state[ERROR_KEY])
            try:
                path = await in_db_thread(_fork, store, bank, rollout_label())
            except MemupdateError as exc:
                state[ERROR_KEY] = str(exc)
                raise
            state.update({FORK_KEY: path, BASE_KEY: bank.base})
    return store.scoped(state[FORK_KEY], episode=_episode(state[FORK_KEY]))


def _fork(store: MemoryStore, bank: RowBank, label: str) -> str:
    base = store.scoped(bank.base)
    if bank.base not in _loaded_bases:
        if base.count() == 0:
            raise ForkError(f"base namespace {bank.base!r} holds no memories: {load_hint(bank.base)}")
        _loaded_bases.add(bank.base)
    target = rollout_namespace(bank.namespace, label)
    episode = _episode(namespace_path(target))
    if not bank.neighbourhood:
        return base.fork(target, episode=episode).path
    part = store.scoped(target, episode=episode)
    copied = base.fork_keys(part, bank.neighbourhood)
    if copied != len(bank.neighbourhood):
        drop_fork(part)
        raise ForkError(
            f"base namespace {bank.base!r} holds {copied} of the row's {len(bank.neighbourhood)} neighbourhood "
            "memories: the bank changed since the dataset was written; write it again with "
            "`memupdate data preprocess --task compaction`"
        )
    return part.path


def load_hint(base: str) -> str:
    """How to load a base namespace a dataset forks from."""
    labels = base.split(SEPARATOR)
    if labels[0] == "factconsolidation":
        return "load it with `memupdate data preprocess --task compaction --factconsolidation FILE --out DIR`"
    return f"load it with `memupdate data load --locomo FILE --conversations {labels[-1]}`"


def _episode(path: str) -> str:
    """The event log's episode tag of a fork: `<trajectory id>/<rollout label>`."""
    return SEPARATOR.join(path.split(SEPARATOR)[-2:])


def count_unrun_calls(state: dict[str, Any], written: str) -> None:
    """Count as failed the tool calls the model wrote (`written`: its own tokens, decoded) that verl never
    ran: its parser drops a block it cannot read (and ends the episode), and it runs at most
    `max_parallel_calls` a turn. The graph counts a call it cannot parse as failed too, so the compaction
    reward charges the same calls on both paths."""
    unrun = written.count(HERMES_CALL) - state.get(TOOL_CALLS_KEY, 0)
    if unrun > 0:
        state[FAILED_CALLS_KEY] = state.get(FAILED_CALLS_KEY, 0) + unrun


def count_call(state: dict[str, Any], ok: bool, writes: bool) -> None:
    """Add one tool call to the rollout's record."""
    state[TOOL_CALLS_KEY] = state.get(TOOL_CALLS_KEY, 0) + 1
    if not ok:
        state[FAILED_CALLS_KEY] = state.get(FAILED_CALLS_KEY, 0) + 1
    elif writes:
        state[EDITS_KEY] = state.get(EDITS_KEY, 0) + 1


# -- reward, then drop ------------------------------------------------------------------------------


@dataclass(frozen=True)
class RolloutScore:
    """A rollout's reward and its parts (flat numbers, the same keys for every rollout, as verl's
    `reward_extra_info` needs); `reason` says why a reward is 0 without scoring, else None."""

    reward: float
    parts: dict[str, float]
    reason: str | None = None


# Keywords verl itself adds to a custom reward function's call, beside the config's reward_kwargs.
VERL_REWARD_KEYWORDS = frozenset({"reward_router_address", "reward_model_tokenizer"})


def reward_config(kwargs: Mapping[str, Any] | None) -> RewardConfig:
    """A RewardConfig from verl's `reward_kwargs`; ValueError naming an unknown key (a typo would
    otherwise train with a default silently)."""
    return RewardConfig.from_kwargs(
        {k: v for k, v in (kwargs or {}).items() if k not in VERL_REWARD_KEYWORDS}
    )


async def finish_rollout(
    state: Mapping[str, Any],
    extra_info: Mapping[str, Any],
    config: RewardConfig | None = None,
    *,
    crashed: bool = False,
) -> RolloutScore:
    """Score the rollout's fork against its base while it is open, then drop it (also when scoring
    fails). A rollout that made no fork, or whose fork could not be made, scores exactly 0."""
    return await in_db_thread(finish_rollout_sync, state, extra_info, config or RewardConfig(), crashed)


def finish_rollout_sync(
    state: Mapping[str, Any], extra_info: Mapping[str, Any], config: RewardConfig, crashed: bool = False
) -> RolloutScore:
    store = worker_store()
    fork_path = state.get(FORK_KEY)
    bank_path = None  # a compaction rollout's whole bank, its neighbourhood's edits folded in
    try:
        base_path = state.get(BASE_KEY) or _base_of_row(extra_info)
        base = store.scoped(base_path)
        if is_compaction_row(extra_info):
            keys, questions = compaction_unit(extra_info)
            failed_calls = int(state.get(FAILED_CALLS_KEY, 0))

            def score(fork: MemoryStore) -> RewardBreakdown:
                return compute_compaction_reward(base, fork, questions, keys, config, failed_calls)
        else:
            questions = questions_from_extra_info(dict(extra_info))

            def score(fork: MemoryStore) -> RewardBreakdown:
                return compute_reward(base, fork, questions, config)

        # The base's scores and snapshot are kept between rollouts while its version holds (`base_cache`).
        if fork_path and is_compaction_row(extra_info):
            bank_path = fold_into_bank(store, base, fork_path)
            breakdown = score(store.scoped(bank_path))
            reward, reason = breakdown.reward, None
        elif fork_path:
            breakdown = score(store.scoped(fork_path))
            reward, reason = breakdown.reward, None
        else:
            # Nothing was forked, so nothing was edited: the parts are the base's own (a no-op), reward 0
            # (a compaction rollout's calls that never ran still cost, as offline, unless the fork failed).
            reason = state.get(ERROR_KEY) or "the rollout made no tool call, so nothing was forked or edited"
            breakdown = score(base)
            charged = is_compaction_row(extra_info) and ERROR_KEY not in state
            reward = breakdown.reward if charged else 0.0
            log.info("rollout %s scores %s: %s", extra_info.get("trajectory_id"), reward, reason)
    finally:
        for path in (fork_path, bank_path):
            if path:
                drop_fork(store.scoped(path))
    return RolloutScore(
        float(reward), reward_parts(breakdown, state, forked=bool(fork_path), crashed=crashed), reason
    )


def fold_into_bank(store: MemoryStore, base: MemoryStore, part_path: str) -> str:
    """A fork of the whole `base` beside the rollout's fork of part of it, with that part's edits and event
    rows folded in (the part is dropped); its path."""
    part = store.scoped(part_path)
    bank = base.fork((*part.namespace[:-1], f"{part.namespace[-1]}-bank"), episode=_episode(part_path))
    try:
        bank.fold(part)
    except BaseException:
        drop_fork(bank)
        raise
    return bank.path


async def drop_rollout_fork(state: Mapping[str, Any]) -> None:
    """Drop the rollout's fork without scoring it (a cancelled rollout)."""
    if state.get(FORK_KEY):
        await in_db_thread(drop_fork, worker_store().scoped(state[FORK_KEY]))


def reward_parts(
    breakdown: RewardBreakdown, state: Mapping[str, Any], *, forked: bool, crashed: bool
) -> dict[str, float]:
    """The breakdown's numbers, flattened (`efficiency_size`), plus the rollout's tool-call counts."""
    parts = {"reward": float(breakdown.reward)} | _flatten(breakdown.as_dict())
    return parts | {
        "tool_calls": float(state.get(TOOL_CALLS_KEY, 0)),
        "failed_calls": float(state.get(FAILED_CALLS_KEY, 0)),
        "edits": float(state.get(EDITS_KEY, 0)),
        "forked": float(forked),
        "crashed": float(crashed),
    }


def _flatten(values: Mapping[str, Any], prefix: str = "") -> dict[str, float]:
    """Numbers only (lists such as example tokens are left out); None -> 0.0, so that every rollout
    reports the same keys (a row scored without collateral questions has no collateral delta)."""
    flat: dict[str, float] = {}
    for key, value in values.items():
        if isinstance(value, Mapping):
            flat |= _flatten(value, f"{prefix}{key}_")
        elif value is None or isinstance(value, bool | int | float):
            flat[f"{prefix}{key}"] = float(value or 0.0)
    return flat


def _base_of_row(extra_info: Mapping[str, Any]) -> str:
    base = extra_info.get("base_namespace")
    if not base:
        raise ForkError(
            f"the row's extra_info has no base_namespace (keys: {sorted(extra_info)}): write the dataset with "
            "`memupdate data preprocess`"
        )
    return str(base)
