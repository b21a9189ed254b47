"""Where memupdate's memory banks live: a conversation's base, its trajectory forks, verl's rollout forks.

    from memupdate.rl.data.namespaces import (
        base_namespace, conversation_of, fork_base, rollout_label, rollout_namespace, trajectory_id, trajectory_namespace,
    )

    base_namespace("conv-26")                                  # ("locomo", "conv-26")
    conversation_of(("locomo", "conv-26"))                     # "conv-26"; None for any other bank
    trajectory = trajectory_id("conv-26", 3)                   # "conv-26-qa3-1a2b3c4d"
    trajectory_namespace(("locomo", "conv-26"), trajectory)    # ("locomo", "conv-26", "traj", "conv-26-qa3-1a2b3c4d")
    rollout_namespace("locomo/conv-26/traj/conv-26-qa3-1a2b3c4d", rollout_label())   # (..., "r5f0c9a1b2c3d")
    fork_base(("locomo", "conv-26", "traj", "conv-26-qa3-1a2b3c4d", "r5f0c9a1b2c3d"))   # ("locomo", "conv-26")

A trajectory namespace is `<base>/traj/<trajectory id>[/<rollout label>]`: evaluation, distillation and
`memupdate agent run` fork one per episode; a verl row names one for all the rollouts GRPO samples from
it, and each rollout adds a label of its own. `memupdate db forks` finds leftovers by the `traj` label.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence

from memupdate.rl.data.locomo import DATASET
from memupdate.store import Namespace, to_namespace

# The first label of every LoCoMo conversation's base namespace: the dataset's name.
BASE_PREFIX = DATASET
# The label between a base and the trajectories forked from it.
TRAJ_LABEL = "traj"


def base_namespace(sample_id: str) -> tuple[str, str]:
    """The namespace a LoCoMo conversation's facts are loaded into."""
    return (BASE_PREFIX, sample_id)


def conversation_of(namespace: Sequence[str]) -> str | None:
    """The LoCoMo conversation a base namespace holds (`base_namespace`'s inverse), or None for another."""
    labels = tuple(namespace)
    return labels[1] if len(labels) == 2 and labels[0] == BASE_PREFIX else None


def trajectory_id(sample_id: str, qa_index: int | str) -> str:
    """`{sample_id}-qa{idx}-{uuid8}`: unique per rollout, so forks of one question never collide."""
    return f"{sample_id}-qa{qa_index}-{uuid.uuid4().hex[:8]}"


def trajectory_namespace(base: Sequence[str] | str, trajectory: str) -> Namespace:
    """The namespace an episode on `base` edits: `<base>/traj/<trajectory>`; InvalidNamespace if the
    trajectory id is not a valid label or the path grows too deep."""
    return to_namespace((*to_namespace(base), TRAJ_LABEL, trajectory))


def rollout_label() -> str:
    """A fresh label per verl rollout (48 random bits): rows repeat every epoch and n times per step."""
    return "r" + uuid.uuid4().hex[:12]


def rollout_namespace(row_namespace: Sequence[str] | str, label: str) -> Namespace:
    """One rollout's fork: the row's trajectory namespace plus the rollout's label."""
    return to_namespace((*to_namespace(row_namespace), label))


def fork_base(namespace: Sequence[str]) -> Namespace | None:
    """The base a trajectory namespace was forked from (the labels before `traj`), or None for a base."""
    labels = tuple(namespace)
    for i in range(1, len(labels) - 1):
        if labels[i] == TRAJ_LABEL:
            return labels[:i]
    return None
