"""Trajectory forks: one namespace per rollout, made at its first tool call and dropped after its
reward; plus listing and pruning the forks that crashed runs left behind.

    from memupdate.rl.verl.forks import open_rollout_fork, finish_rollout, list_forks, prune_forks

    fork = await open_rollout_fork(agent_data, agent_data.extra_fields, RowBank.from_create_kwargs(kwargs))
    score = await finish_rollout(agent_data.extra_fields, extra_info)   # reward on the open fork, then drop
    score.reward, score.parts["performance_delta"], score.reason

    list_forks(store)                                   # every ".../traj/..." namespace, its base, age
    prune_forks(store, older_than=timedelta(hours=6))   # drop the inactive ones (memories and events)

A preprocessed verl row names one trajectory namespace (`locomo/conv-26/traj/conv-26-qa3-1a2b3c4d`)
for all n rollouts GRPO samples from it, in every epoch. Each rollout therefore forks the base into
that namespace plus a label of its own (`.../conv-26-qa3-1a2b3c4d/r5f0c9a1b2c3d`). The rollout's
record (fork path, tool-call counts) lives in verl's `agent_data.extra_fields`, which verl pickles
and hands to the reward; nothing lives on the tool objects, which verl shares between rollouts.

verl runs many rollouts per process on one event loop: database work goes to a small thread pool
of `WORKER_CONNECTIONS` threads over a pool of as many connections, so one agent-loop or reward
worker process holds at most `WORKER_CONNECTIONS` PostgreSQL connections.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import uuid
import weakref
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

from sqlalchemy import Engine, func, select

from memupdate.rl.scoring.reward import (
    RewardBreakdown,
    RewardConfig,
    compute_reward,
    questions_from_extra_info,
)
from memupdate.store import DatabaseError, MemoryStore, MemupdateError, to_namespace
from memupdate.store.memory_store import SEPARATOR, events, memories, namespace_path

log = logging.getLogger("memupdate.rl.verl.forks")
T = TypeVar("T")

# The label that marks a trajectory namespace: `<base>/traj/<trajectory id>[/<rollout label>]`
# (`rl.evaluate.trajectory_namespace`, `agent run`'s forks and the rollout forks below).
TRAJ_LABEL = "traj"
# Connections (and database threads) per agent-loop or reward worker process.
WORKER_CONNECTIONS = 4

# Keys of a rollout's record in verl's `agent_data.extra_fields` (merged into the reward's extra_info).
FORK_KEY = "memupdate_fork"  # the fork's namespace path, set once the fork exists
BASE_KEY = "memupdate_base"  # the base namespace path it was forked from
ERROR_KEY = "memupdate_fork_error"  # why no fork could be made
TOOL_CALLS_KEY = "memupdate_tool_calls"
FAILED_CALLS_KEY = "memupdate_failed_calls"
EDITS_KEY = "memupdate_edits"  # successful calls of a writing tool


# -- the process's store ----------------------------------------------------------------------------

_worker_store: MemoryStore | None = None
_executor: ThreadPoolExecutor | None = None


def worker_store() -> MemoryStore:
    """This process's root store: the configured database (MEMUPDATE_DATABASE_URL, which `memupdate rl
    train` puts in every Ray worker's environment) with a pool of `WORKER_CONNECTIONS` connections."""
    global _worker_store
    if _worker_store is None:
        from sqlalchemy import create_engine, text

        from memupdate.store.database import resolve_url
        from memupdate.store.embeddings import get_embedder

        url = resolve_url()
        # synchronous_commit=off: a rollout writes only its own throwaway fork, so a crash losing its last
        # few writes costs nothing, while waiting for every commit's WAL flush slows each tool call.
        engine = create_engine(
            url,
            pool_size=WORKER_CONNECTIONS,
            max_overflow=0,
            pool_pre_ping=True,
            connect_args={"connect_timeout": 5, "options": "-c synchronous_commit=off"},
        )
        try:
            with engine.connect() as conn:
                conn.execute(text("SELECT 1"))
        except Exception as exc:
            engine.dispose()
            reason = str(getattr(exc, "orig", None) or exc).strip().splitlines()[0]
            raise DatabaseError(
                f"this rollout worker cannot reach PostgreSQL at {url.render_as_string(hide_password=True)}: {reason}. "
                "Every Ray worker reads MEMUPDATE_DATABASE_URL from its runtime env (set by `memupdate rl train`); "
                "make the server reachable from every node, or fix the URL"
            ) from None
        _worker_store = MemoryStore(engine, get_embedder(), ("memupdate",))
    return _worker_store


def use_worker_store(store: MemoryStore | None) -> None:
    """Make `store` this process's root store (tests and benchmarks bring their own engine); None resets."""
    global _worker_store
    _worker_store = store


async def in_db_thread(fn: Callable[..., T], *args: Any) -> T:
    """Run `fn(*args)` on the process's database threads (never more than `WORKER_CONNECTIONS` at once),
    so rollouts waiting for the database queue on the event loop, not in verl's default executor."""
    global _executor
    if _executor is None:
        _executor = ThreadPoolExecutor(WORKER_CONNECTIONS, thread_name_prefix="memupdate-db")
    return await asyncio.get_running_loop().run_in_executor(_executor, functools.partial(fn, *args))


# -- one fork per rollout ---------------------------------------------------------------------------


class ForkError(MemupdateError):
    """A rollout's fork could not be made (bad row, missing base, name taken)."""


@dataclass(frozen=True)
class RowBank:
    """What a preprocessed row tells a tool (`tools_kwargs.<tool>.create_kwargs`): the base to fork and
    the row's trajectory namespace, shared by all rollouts of the row."""

    base: str
    namespace: str
    trajectory_id: str

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
        return cls(namespace_path(base), namespace_path(namespace), str(kwargs["trajectory_id"]))


def rollout_label() -> str:
    """A fresh label per rollout (48 random bits): rows repeat every epoch and n times per step."""
    return "r" + uuid.uuid4().hex[:12]


def rollout_namespace(row_namespace: str, label: str) -> tuple[str, ...]:
    return (*to_namespace(row_namespace), label)


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
            raise ForkError(
                f"base namespace {bank.base!r} holds no memories: load it with "
                f"`memupdate data load --locomo FILE --conversations {base.namespace[-1]}`"
            )
        _loaded_bases.add(bank.base)
    target = rollout_namespace(bank.namespace, label)
    return base.fork(target, episode=_episode(namespace_path(target))).path


def _episode(path: str) -> str:
    """The event log's episode tag of a fork: `<trajectory id>/<rollout label>`."""
    return SEPARATOR.join(path.split(SEPARATOR)[-2:])


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
    try:
        questions = questions_from_extra_info(dict(extra_info))
        base_path = state.get(BASE_KEY) or _base_of_row(extra_info)
        base = store.scoped(base_path)
        # The base's scores and snapshot are kept between rollouts while its version holds (`base_cache`).
        if fork_path:
            breakdown = compute_reward(base, store.scoped(fork_path), questions, config)
            reward, reason = breakdown.reward, None
        else:
            # Nothing was forked, so nothing was edited: the parts are the base's own (a no-op), reward 0.
            reason = state.get(ERROR_KEY) or "the rollout made no tool call, so nothing was forked or edited"
            breakdown = compute_reward(base, base, questions, config)
            reward = 0.0
            log.info("rollout %s scores 0: %s", extra_info.get("trajectory_id"), reason)
    finally:
        if fork_path:
            store.scoped(fork_path).drop()
    return RolloutScore(
        float(reward), reward_parts(breakdown, state, forked=bool(fork_path), crashed=crashed), reason
    )


async def drop_rollout_fork(state: Mapping[str, Any]) -> None:
    """Drop the rollout's fork without scoring it (a cancelled rollout)."""
    if state.get(FORK_KEY):
        await in_db_thread(lambda: worker_store().scoped(state[FORK_KEY]).drop())


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


# -- leftovers: list and prune ----------------------------------------------------------------------


@dataclass(frozen=True)
class ForkInfo:
    """A trajectory namespace still in the database: its base, size, and when it was last written."""

    namespace: str
    base: str
    memories: int
    events: int
    created_at: datetime | None  # its first event (the fork), else its oldest row
    last_write: datetime | None  # its newest event or row change

    def age(self, now: datetime | None = None) -> timedelta:
        """Time since the fork was last written (a live rollout writes every few seconds)."""
        now = now or datetime.now(UTC)
        return now - self.last_write if self.last_write else timedelta(0)


def fork_base(namespace: Sequence[str]) -> tuple[str, ...] | None:
    """The base a trajectory namespace was forked from (the labels before `traj`), or None for a base."""
    labels = tuple(namespace)
    for i in range(1, len(labels) - 1):
        if labels[i] == TRAJ_LABEL:
            return labels[:i]
    return None


def list_forks(store: MemoryStore, prefix: Sequence[str] | str | None = None) -> list[ForkInfo]:
    """Every trajectory namespace (optionally under `prefix`), with memories or only events, oldest write first."""
    under = namespace_path(to_namespace(prefix)) if prefix else None
    found: dict[str, dict[str, Any]] = {}
    with store.engine.connect() as conn:
        for table, newest in ((memories, func.max(func.greatest(memories.c.created_at, memories.c.updated_at))),
                              (events, func.max(events.c.created_at))):  # fmt: skip
            query = (
                select(table.c.namespace, func.count(), func.min(table.c.created_at), newest)
                .where(table.c.namespace.like(f"%{SEPARATOR}{TRAJ_LABEL}{SEPARATOR}%"))
                .group_by(table.c.namespace)
            )
            for namespace, count, first, last in conn.execute(query):
                if under and not (namespace == under or namespace.startswith(under + SEPARATOR)):
                    continue
                entry = found.setdefault(namespace, {"memories": 0, "events": 0, "first": {}, "last": []})
                entry["memories" if table is memories else "events"] = count
                entry["first"][table.name] = first
                entry["last"].append(last)
    forks = []
    for namespace, entry in found.items():
        base = fork_base(namespace.split(SEPARATOR))
        if base is None:
            continue
        # The fork event dates the fork; copied rows keep their base's created_at, so they only stand in.
        created = entry["first"].get(events.name) or entry["first"].get(memories.name)
        last = max((d for d in entry["last"] if d is not None), default=None)
        forks.append(
            ForkInfo(namespace, namespace_path(base), entry["memories"], entry["events"], created, last)
        )
    return sorted(forks, key=lambda f: (f.last_write or datetime.min.replace(tzinfo=UTC), f.namespace))


def prune_forks(
    store: MemoryStore, older_than: timedelta = timedelta(0), prefix: Sequence[str] | str | None = None
) -> list[ForkInfo]:
    """Drop (memories and events) every trajectory namespace not written for `older_than`; returns them."""
    now = datetime.now(UTC)
    pruned = [f for f in list_forks(store, prefix) if f.age(now) >= older_than]
    for fork in pruned:
        store.scoped(fork.namespace).drop()
    return pruned


def parse_duration(text: str) -> timedelta:
    """`90s`, `30m`, `6h`, `2d` (or a plain number of seconds) as a timedelta; ValueError naming the format."""
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
    value = text.strip().lower()
    try:
        if value and value[-1] in units:
            seconds = float(value[:-1]) * units[value[-1]]
        else:
            seconds = float(value)
    except ValueError:
        seconds = -1
    if not seconds >= 0:
        raise ValueError(f"duration {text!r} is not like 90s, 30m, 6h or 2d")
    return timedelta(seconds=seconds)


def namespace_summary(engine: Engine) -> dict[str, int]:
    """Namespaces and memories split into bases and trajectory forks (for `memupdate db status`)."""
    summary = {"bases": 0, "base_memories": 0, "forks": 0, "fork_memories": 0}
    with engine.connect() as conn:
        rows = conn.execute(select(memories.c.namespace, func.count()).group_by(memories.c.namespace))
        for namespace, count in rows:
            kind = "base" if fork_base(namespace.split(SEPARATOR)) is None else "fork"
            summary[f"{kind}s"] += 1
            summary[f"{kind}_memories"] += count
    return summary
