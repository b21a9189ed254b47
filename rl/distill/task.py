"""The seam between the learning pipeline and what it learns: a `Task` says which units a run rolls out
on and how one unit is rolled out and scored.

    from memupdate.rl.distill.targeted import TargetedTask
    task = TargetedTask(reward=RewardConfig(), max_turns=4, max_operations=6)
    units = task.training_units(conversations, 10)       # each unit's rollouts form one GRPO group
    record = task.rollout(policy, base, units[0])         # fork, edit, score, drop: the trajectory record

`learn.learn` runs any task unchanged: groups of rollouts per training unit (`rollouts.collect`),
advantages within each group, fine-tuning, and one greedy rollout per evaluation unit of the held-out
conversations. Today's task is `targeted.TargetedTask` (one question, visible to the policy); a new
task (e.g. compaction: one neighbourhood of a bank, blind, scored on every question its edits can reach)
is one new module with a class of the same three methods.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from langchain_core.language_models import BaseChatModel

from memupdate.rl.data.locomo import Conversation
from memupdate.store import MemoryStore


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

    def training_units(self, conversations: Sequence[Conversation], per_conversation: int) -> list[Unit]:
        """The units training rolls out groups on, up to `per_conversation` of each conversation."""
        ...

    def evaluation_units(self, conversations: Sequence[Conversation], per_conversation: int) -> list[Unit]:
        """The units a policy is evaluated on (one greedy rollout each), from held-out conversations."""
        ...

    def rollout(self, policy: BaseChatModel | None, base: MemoryStore, unit: Unit) -> dict[str, Any]:
        """Fork `base`, let `policy` edit the fork (None: no edits), score it, drop it. The record holds at
        least `group`, `messages` (chat dicts), `reward`, `reward_parts` and `rollouts.call_summary`'s counts."""
        ...
