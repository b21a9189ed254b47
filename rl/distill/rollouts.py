"""Rollouts: who edits (a group of seeded members of one policy), the trajectory log, and `collect`,
which runs a list of rollouts and logs each.

    from memupdate.rl.distill.rollouts import TrajectoryLog, collect, policy_group
    log = TrajectoryLog(out / "trajectories.jsonl")           # append-only; what is logged is not redone
    teacher = policy_group("heuristic", store, explore=0.5)   # any name of agent.policies.POLICIES
    records = collect(store, task, teacher, task.training_units(train, 10), 4, "teacher", log, seed=0)

A rollout (`task.rollout`: the targeted task's in `targeted.py`) forks the unit's base bank, lets the
policy edit the fork through the LangGraph graph and tools, scores the fork and drops it. Its record
holds the chat messages as the student's chat template takes them, each tool call with its result, the
counts behind the share of valid calls, and the reward with its parts.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, ToolMessage

from memupdate.agent.policies import make_policy, with_seed
from memupdate.agent.policies.batched import iter_together
from memupdate.errors import MemupdateError
from memupdate.rl.data.ingest import load_bank
from memupdate.rl.data.locomo import Conversation
from memupdate.rl.distill.task import Rollout
from memupdate.scoring.summaries import mean
from memupdate.store import MemoryStore

if TYPE_CHECKING:
    from memupdate.rl.distill.task import Task, Unit

Progress = Callable[[str, int, int], None]


@dataclass(frozen=True)
class PolicyGroup:
    """Who rolls out a group: `member(seed)` gives one member's chat model (None: no edits); `name` is
    logged with each of its trajectories. `run(member, job)` runs one rollout `job` with a member as it
    is decoded (the DAgger labeller wraps it here: `dagger.labelled`)."""

    name: str
    member: Callable[[int], BaseChatModel | None]
    run: Callable[[BaseChatModel | None, Callable[[BaseChatModel | None], Rollout]], Rollout] = lambda member, job: job(member)


def policy_group(name: str, store: MemoryStore, *, label: str | None = None, **options: Any) -> PolicyGroup:
    """The registry's policy `name` (`make_policy`'s options), loaded once; each member is it with its own
    seed (an hf checkpoint's weights are shared). `label` names it in the log (default: `name`)."""
    policy = make_policy(name, store, **options)
    return PolicyGroup(label or name, lambda seed: with_seed(policy, seed))


def member_seed(seed: int, key: str) -> int:
    """A seed per trajectory key: a resumed run draws the same rollouts as an uninterrupted one."""
    return int.from_bytes(hashlib.sha256(f"{seed}:{key}".encode()).digest()[:4], "big")


# The tools that look at a bank and change nothing.
LOOKS = frozenset({"sample_memory", "search_memory"})


def call_summary(messages: Sequence) -> dict[str, Any]:
    """Each tool call with its result, and the counts behind the share of valid calls. A result answers
    the latest call with its id: a repeated call has the id of the first (`agent/policies/hermes.py` makes
    it from the call's text), and a whole bank's messages are many episodes one after another."""
    calls: list[dict[str, Any]] = []
    invalid, waiting = 0, {}
    for message in messages:
        if isinstance(message, AIMessage):
            invalid += len(message.invalid_tool_calls)
            for call in message.tool_calls:
                waiting[call["id"]] = {"name": call["name"], "args": call["args"], "ok": False, "result": None}
                calls.append(waiting[call["id"]])
        elif isinstance(message, ToolMessage) and message.tool_call_id in waiting:
            call = waiting.pop(message.tool_call_id)
            call["ok"], call["result"] = message.status == "success", message.content
    ok = sum(c["ok"] for c in calls)
    return {
        "calls": calls,
        "valid_calls": len(calls),
        "invalid_calls": invalid,
        "ok_calls": ok,
        "failed_calls": len(calls) - ok + invalid,  # refused by a tool, or not parsed
    }


class TrajectoryLog:
    """An append-only JSONL of rollout records (`Rollout.as_json`) keyed by `key`; what is already there
    is not rolled out again."""

    def __init__(self, path: Path):
        self.path = path
        self.records: dict[str, Rollout] = {}
        if path.is_file():
            lines = path.read_text().splitlines()
            for number, line in enumerate(lines):
                try:
                    record = json.loads(line)
                except json.JSONDecodeError:
                    if number == len(lines) - 1:  # a run killed mid-write leaves a partial last line
                        break
                    raise MemupdateError(f"{path}, line {number + 1}, is not JSON: fix or delete that line to resume") from None
                self.records[record["key"]] = Rollout.from_json(record)
            # Rewrite without a partial tail, so appends start on a fresh line.
            path.write_text("".join(json.dumps(r.as_json()) + "\n" for r in self.records.values()))
        path.touch()  # the dataset's place exists from the start, even if the first rollout fails

    def __contains__(self, key: str) -> bool:
        return key in self.records

    def append(self, record: Rollout) -> None:
        self.records[record.key] = record
        with self.path.open("a") as f:
            f.write(json.dumps(record.as_json()) + "\n")


def collect(
    store: MemoryStore,
    task: Task,
    policy: PolicyGroup,
    units: Sequence[Unit],
    members: int,
    prefix: str,
    log: TrajectoryLog,
    seed: int = 0,
    progress: Progress | None = None,
    stage: str = "rollouts",
) -> list[Rollout]:
    """`members` rollouts of `policy` per unit, keyed `{prefix}/{group}/g{member}`; logged ones are reused.
    A local checkpoint's rollouts run together (up to 16 at once, across units and conversations), their
    turns decoded in batches (`agent.policies.batched`); each is logged in order as it and those before
    it are done."""
    todo = []  # (base, unit, member, key) in the order an uninterrupted run logs them
    for conversation, group in _by_conversation(units):
        base = load_bank(store, conversation)
        if base.count() == 0:
            raise MemupdateError(f"conversation {conversation.sample_id} has no facts to remember: leave it out of --conversations")
        todo += [(base, unit, member, f"{prefix}/{unit.group}/g{member}") for unit in group for member in range(members)]
    pending = [(base, unit, key, member_seed(seed, key)) for base, unit, _, key in todo if key not in log]
    chosen, failure = _members(policy, [(key, draw) for _, _, key, draw in pending])
    outcomes = iter_together(
        chosen,
        [lambda member, unit=unit, base=base: policy.run(member, lambda p: task.rollout(p, base, unit)) for base, unit, _, _ in pending[: len(chosen)]],
    )
    seeds = {key: draw for _, _, key, draw in pending}
    records: list[Rollout] = []
    for done, (_, _, member, key) in enumerate(todo, 1):
        if key in seeds:  # rolled out now, in order (the log keeps the order of an uninterrupted run)
            outcome = failure[1] if failure and failure[0] == key else next(outcomes)
            log.append(_record(policy, key, member, seeds[key], outcome, log))
        records.append(log.records[key])
        if progress:
            progress(stage, done, len(todo))
    return records


def _members(policy: PolicyGroup, pending: Sequence[tuple[str, int]]) -> tuple[list[Any], tuple[str, Exception] | None]:
    """Each pending rollout's member (key, seed), in order, up to the first that cannot be made: (members,
    (its key, its error) or None)."""
    members = []
    for key, draw in pending:
        try:
            members.append(policy.member(draw))
        except Exception as exc:
            return members, (key, exc)
    return members, None


def _record(policy: PolicyGroup, key: str, member: int, seed: int, outcome: Any, log: TrajectoryLog) -> Rollout:
    """One rollout's log record; a failing policy (an endpoint, a checkpoint) is one clear error, the log kept."""
    if isinstance(outcome, MemupdateError):
        raise outcome
    if isinstance(outcome, Exception):
        raise MemupdateError(
            f"policy {policy.name} failed on {key}: {type(outcome).__name__}: {outcome}. The {len(log.records)} "
            f"trajectories so far are kept in {log.path}; fix it and rerun the same command to resume"
        ) from outcome
    return replace(outcome, key=key, policy=policy.name, member=member, seed=seed)


def _by_conversation(units: Sequence[Unit]) -> list[tuple[Conversation, list[Unit]]]:
    grouped: dict[str, tuple[Conversation, list[Unit]]] = {}
    for unit in units:
        grouped.setdefault(unit.conversation.sample_id, (unit.conversation, []))[1].append(unit)
    return list(grouped.values())


# -- summaries ------------------------------------------------------------------------------------------


def summarize(records: Sequence[Rollout]) -> dict[str, Any]:
    valid = sum(r.valid_calls for r in records)
    invalid = sum(r.invalid_calls for r in records)
    tools = Counter(c["name"] for r in records for c in r.calls)
    tools_ok = Counter(c["name"] for r in records for c in r.calls if c["ok"])
    return {
        "questions": len(records),
        "reward_mean": mean([r.reward for r in records]),
        "qa_delta_mean": mean([r.reward_parts["performance_delta"] for r in records]),
        "valid_call_share": valid / (valid + invalid) if valid + invalid else None,
        "ok_call_share": sum(r.ok_calls for r in records) / valid if valid else None,
        "calls_per_episode": (valid + invalid) / len(records) if records else 0.0,
        "tool_calls": {name: {"calls": n, "ok": tools_ok[name]} for name, n in sorted(tools.items())},
        "stop_reasons": dict(Counter(str(r.stop_reason) for r in records)),
    }
