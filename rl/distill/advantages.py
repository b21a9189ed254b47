"""GRPO's group-relative advantage: each trajectory's reward against the others of its group.

    from memupdate.rl.distill.advantages import group_advantages
    advantages = group_advantages([0.2, 0.0, 0.1, 0.1], ["q7", "q7", "q9", "q9"])
    # q7: (r - mean) / (std + eps) -> [+0.707, -0.707]; q9 has zero variance -> [0, 0]

A group is the rollouts of one prompt (here: one question, forked G times). The statistics follow
verl's `compute_grpo_outcome_advantage` exactly, so a model distilled here and one trained by verl
see the same signal: the std is the unbiased one (n - 1), and a group of one has mean 0 and std 1
(its advantage is its reward). One implementation, in float64, whether verl is installed or not:
`tests/test_distill_advantages.py` checks it against verl's own function when verl is there.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Hashable, Sequence
from typing import TYPE_CHECKING

import numpy as np

from memupdate.agent.tools import MEMORY_TOOLS
from memupdate.scoring.summaries import mean

if TYPE_CHECKING:
    from memupdate.rl.distill.task import Rollout

EPSILON = 1e-6


def group_advantages(
    rewards: Sequence[float], groups: Sequence[Hashable], epsilon: float = EPSILON, normalize_by_std: bool = True
) -> np.ndarray:
    """(reward - group mean) / (group std + epsilon) per trajectory; without `normalize_by_std`, Dr. GRPO's
    reward - group mean."""
    if len(rewards) != len(groups):
        raise ValueError(f"{len(rewards)} rewards but {len(groups)} group ids: give one group id per reward")
    rewards_array = np.asarray(rewards, dtype=np.float64)
    members: dict[Hashable, list[int]] = defaultdict(list)
    for i, group in enumerate(groups):
        members[group].append(i)
    advantages = np.zeros_like(rewards_array)
    for rows in members.values():
        values = rewards_array[rows]
        mean, std = (values.mean(), values.std(ddof=1)) if len(rows) > 1 else (0.0, 1.0)
        advantages[rows] = (values - mean) / (std + epsilon) if normalize_by_std else values - mean
    return advantages


def zero_variance_groups(rewards: Sequence[float], groups: Sequence[Hashable], tolerance: float = 1e-9) -> list[Hashable]:
    """Groups of two or more whose rewards are all equal: their advantages are 0, they teach nothing."""
    by_group: dict[Hashable, list[float]] = defaultdict(list)
    for reward, group in zip(rewards, groups, strict=True):
        by_group[group].append(reward)
    return [g for g, values in by_group.items() if len(values) > 1 and max(values) - min(values) <= tolerance]


def assign_advantages(records: Sequence[Rollout]) -> tuple[list[float], dict]:
    """Each trajectory record's group-relative advantage (grouped by `group`), and the counts a report needs."""
    rewards = [r.reward for r in records]
    groups = [r.group for r in records]
    advantages = [float(a) for a in group_advantages(rewards, groups)] if records else []
    flat = zero_variance_groups(rewards, groups)
    return advantages, {
        "groups": len(set(groups)),
        "zero_variance_groups": len(flat),
        "trajectories": len(records),
        "positive": sum(a > 0 for a in advantages),
        "reward_mean": mean(rewards),
    }


def imitation_weights(records: Sequence[Rollout]) -> list[float]:
    """Distillation's weights: 1 for a trajectory with its group's best reward (ties included) when that
    reward is above 0, or is 0 and the trajectory only looked (where the teacher found nothing to edit,
    stopping is what to learn); else 0. Never negative: the teacher is far from the student. Not every
    trajectory that beat its group's mean: one that stopped early beats a group whose others stopped
    earlier, and teaches stopping early."""
    best: dict[str, float] = defaultdict(lambda: -math.inf)
    for r in records:
        best[r.group] = max(best[r.group], round(r.reward, 9))

    def imitated(r: Rollout) -> bool:
        reward = round(r.reward, 9)
        return reward == best[r.group] and (reward > 0 or (reward == 0 and not edited(r)))

    return [1.0 if imitated(r) else 0.0 for r in records]


def edited(record: Rollout) -> bool:
    """Whether a trajectory made a call to a writing tool that ran (not only looks)."""
    return any(c["ok"] and MEMORY_TOOLS[c["name"]].writes for c in record.calls)


def advantage_weights(advantages: Sequence[float]) -> list[float]:
    """An RL iteration's weights: each advantage scaled so the trained ones (non-zero) have mean |weight| 1,
    so the learning rate keeps its meaning; below the group's mean is negative (pushed down)."""
    nonzero = [abs(a) for a in advantages if a != 0]
    scale = len(nonzero) / sum(nonzero) if nonzero else 0.0
    return [a * scale for a in advantages]
