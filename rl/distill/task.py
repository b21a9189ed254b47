"""The seam between the learning pipeline and what it learns: a `Task` says which units a run rolls out
on, how one unit is rolled out and scored (a typed `Rollout`), and what its evaluations report.

    from memupdate.rl.distill.targeted import TargetedTask
    task = TargetedTask(reward=RewardConfig(), max_turns=4, max_operations=6)
    units = task.training_units(conversations, 10)       # each unit's rollouts form one GRPO group
    record = task.rollout(policy, base, units[0])         # fork, edit, score, drop: a Rollout
    record.reward, record.group, record.messages          # what learning reads; record.facts: the task's own

The student's stages (`learn.StudentStages`) learn any task of this protocol unchanged: groups of
rollouts per training unit (`rollouts.collect`), advantages within each group, fine-tuning, and one
greedy rollout per evaluation unit of the held-out conversations. These tasks: `compaction.CompactionTask`
(what users run: one neighbourhood of a bank, blind, a held-out bank compacted whole) and
`targeted.TargetedTask` (one question, visible to the policy). A new one is one module with a class of
this protocol and one entry of `learn.TASKS`; a task whose policy is no chat student (the relation judge,
a classifier: `relation.py`) brings its own stages instead, and its entry names them. What a run reads,
either way, is a `RunInputs`.

A rollout's record is written to the trajectory log as one flat JSON object (`Rollout.as_json`: the
typed fields and the task's facts side by side) and read back by `Rollout.from_json`, so a resumed run
reads the logs of an earlier one.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from langchain_core.language_models import BaseChatModel

from memupdate.rl.data.locomo import Conversation
from memupdate.store import MemoryStore

if TYPE_CHECKING:
    from memupdate.rl.distill.config import LearnConfig


def spread(items: Sequence[Any], n: int) -> list[Any]:
    """`n` items evenly spaced over `items` (LoCoMo lists questions by kind; the first n are alike)."""
    if n >= len(items):
        return list(items)
    return [items[math.floor(i * len(items) / n)] for i in range(n)]


@dataclass(frozen=True)
class RunInputs:
    """What a learning run reads: a chat task's conversations (LoCoMo's, FactConsolidation's banks) trained
    on and held out, or the relation task's development data folder (locomo/, memoryagentbench/, natural-updates/)."""

    train: Sequence[Conversation] = ()
    held_out: Sequence[Conversation] = ()
    data: Path | None = None


@dataclass(frozen=True)
class Rollout:
    """One rollout's record: what learning reads (typed) and the task's own `facts` (the question, the
    neighbourhood, a whole bank's evaluation). `key`, `policy`, `member` and `seed` are set by `collect`."""

    group: str  # the unit's id: the rollout's GRPO group
    messages: list[dict[str, Any]]  # chat dicts as the student's chat template takes them
    reward: float
    reward_parts: dict[str, Any]
    calls: list[dict[str, Any]] = field(default_factory=list)  # each tool call with its result (`call_summary`)
    valid_calls: int = 0
    invalid_calls: int = 0
    ok_calls: int = 0
    failed_calls: int = 0
    stop_reason: str | None = None
    turns: int = 0
    seconds: float = 0.0
    facts: dict[str, Any] = field(default_factory=dict)
    key: str = ""
    policy: str = ""
    member: int = 0
    seed: int = 0

    def as_json(self) -> dict[str, Any]:
        """The flat JSON object of the trajectory log."""
        record = asdict(self)
        facts = record.pop("facts")
        head = {name: record.pop(name) for name in ("key", "policy", "member", "seed")}
        return {**head, **record, **facts}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Rollout:
        """A logged record (`as_json`, or a log written before records were typed: the same flat keys)."""
        typed = {f.name for f in fields(cls)} - {"facts"}
        return cls(**{k: v for k, v in data.items() if k in typed}, facts={k: v for k, v in data.items() if k not in typed})


class Unit(Protocol):
    """One thing to roll out a group on, in one conversation's bank."""

    @property
    def conversation(self) -> Conversation: ...

    @property
    def group(self) -> str:
        """The unit's id: its rollouts' GRPO group, and the middle of their keys in the trajectory log."""
        ...


class Task(Protocol):
    name: str
    # What a held-out evaluation is compared on, per question: "reward", or "qa_delta" (each question's QA
    # proxy change on a compacted bank); the name of the metrics' column and the learning curve's score.
    score: str

    @classmethod
    def from_config(cls, config: LearnConfig, store: MemoryStore) -> Task:
        """The task of a learning run, with its budgets and reward (`learn.TASKS` holds this)."""
        ...

    def training_units(self, conversations: Sequence[Conversation], per_conversation: int) -> list[Unit]:
        """The units training rolls out groups on, up to `per_conversation` of each conversation."""
        ...

    def label_units(self, conversations: Sequence[Conversation], per_conversation: int, taken: Sequence[Unit]) -> list[Unit]:
        """Up to `per_conversation` more units of each conversation, not in `taken`, where the heuristic
        teacher acts: imitated whatever their reward (none: the task has no such units)."""
        ...

    def evaluation_units(self, conversations: Sequence[Conversation], per_conversation: int) -> list[Unit]:
        """The units a policy is evaluated on (one greedy rollout each), from held-out conversations."""
        ...

    def rollout(self, policy: BaseChatModel | None, base: MemoryStore, unit: Unit) -> Rollout:
        """Fork `base`, let `policy` edit the fork (None: no edits), score it, drop it."""
        ...

    def teacher_options(self, stepwise: int) -> dict[str, Any]:
        """The heuristic teacher's options for this task (`make_policy("heuristic", ...)`): what its first
        look shows (`stepwise`, the config's, for a task that shows the question) and how it edits."""
        ...

    def as_users_run(self) -> Task | None:
        """This task as users run it, evaluated with the heuristic policy as the run's reference
        (`eval-heuristic`); None: the task has no such reference."""
        ...

    def evaluation(self, records: Sequence[Rollout]) -> dict[str, Any]:
        """What an evaluation stage records beyond the shared summary (e.g. each question's QA change)."""
        ...

    def evaluation_row(self, result: dict[str, Any], reference: dict[str, Any] | None) -> dict[str, Any]:
        """The metrics table's columns of this task for one evaluation's `result` (`reference`: the
        `as_users_run` evaluation's, if there is one)."""
        ...

    def paired_values(self, result: dict[str, Any]) -> list[float]:
        """What two evaluations are compared on, per question, in the order of the held-out units."""
        ...

    def held_out_skipped(self) -> dict[str, Any]:
        """Held-out units left out, and why, per conversation (for the metrics)."""
        ...
