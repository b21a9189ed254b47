"""GRPO group-relative advantages: hand-worked groups, zero-variance groups, and agreement with verl."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from memupdate.rl.distill.advantages import (
    advantage_weights,
    assign_advantages,
    group_advantages,
    imitation_weights,
    zero_variance_groups,
)
from memupdate.rl.distill.task import Rollout


def test_hand_worked_groups() -> None:
    # q1: rewards 1, 0 -> mean 0.5, unbiased std sqrt(0.5) -> +-0.5 / 0.7071 = +-0.7071.
    # q2: 0.3, 0.3, 0.3 -> zero variance -> 0 each.
    # q3: 0, 0.1, 0.2, 0.5 -> mean 0.2, std sqrt((0.04 + 0.01 + 0 + 0.09) / 3) = 0.21602.
    rewards = [1.0, 0.0, 0.3, 0.3, 0.3, 0.0, 0.1, 0.2, 0.5]
    groups = ["q1", "q1", "q2", "q2", "q2", "q3", "q3", "q3", "q3"]
    expected = [0.70711, -0.70711, 0, 0, 0, -0.92582, -0.46291, 0.0, 1.38873]
    np.testing.assert_allclose(group_advantages(rewards, groups), expected, atol=1e-4)
    assert zero_variance_groups(rewards, groups) == ["q2"]


def test_single_member_group_and_dr_grpo() -> None:
    # verl's convention: a group of one has mean 0 and std 1, so its advantage is its reward.
    np.testing.assert_allclose(group_advantages([0.4], ["alone"]), [0.4 / (1 + 1e-6)])
    assert zero_variance_groups([0.4], ["alone"]) == []
    # Dr. GRPO: no division by the std.
    np.testing.assert_allclose(group_advantages([1.0, 0.0], ["g", "g"], normalize_by_std=False), [0.5, -0.5])


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("normalize", [True, False])
def test_ours_equals_verl(seed: int, normalize: bool) -> None:
    pytest.importorskip("verl")
    rng = random.Random(seed)
    groups = [f"q{rng.randrange(6)}" for _ in range(40)]
    rewards = [rng.choice([0.0, 0.0, rng.uniform(-1, 1)]) for _ in groups]
    groups += ["flat", "flat", "flat"]
    rewards += [0.25, 0.25, 0.25]
    ours = group_advantages(rewards, groups, normalize_by_std=normalize)
    theirs = verl_advantages(rewards, groups, normalize_by_std=normalize)
    np.testing.assert_allclose(ours, theirs, rtol=1e-9, atol=1e-9)
    assert np.all(ours[-3:] == 0)


def verl_advantages(rewards: list[float], groups: list[str], *, normalize_by_std: bool) -> np.ndarray:
    """verl's `compute_grpo_outcome_advantage`, one scalar reward per trajectory put on a one-token response
    as verl's outcome rewards are."""
    import torch
    from verl.trainer.ppo.core_algos import compute_grpo_outcome_advantage

    token_rewards = torch.tensor(rewards, dtype=torch.float64).unsqueeze(-1)
    advantages, _ = compute_grpo_outcome_advantage(
        token_rewards, torch.ones_like(token_rewards), np.array(groups, dtype=object), epsilon=1e-6,
        norm_adv_by_std_in_grpo=normalize_by_std,
    )
    return advantages.squeeze(-1).numpy()


def test_mismatched_lengths_are_a_clear_error() -> None:
    with pytest.raises(ValueError, match="3 rewards but 2 group ids"):
        group_advantages([1.0, 2.0, 3.0], ["a", "b"])


def test_imitation_and_advantage_weights() -> None:
    look = {"name": "sample_memory", "ok": True}
    date = {"name": "manage_memory", "ok": True}
    records = [Rollout(group=g, messages=[], reward=reward, reward_parts={}, calls=calls) for g, reward, calls in [
        ("a", 0.4, []), ("a", 0.0, []), ("b", 0.2, []), ("b", 0.2, []), ("c", 0.0, [look]), ("c", 0.0, [look, date]),
        ("d", 0.3, []), ("d", 0.1, []), ("d", 0.0, []),
    ]]
    advantages, stats = assign_advantages(records)
    assert (stats["groups"], stats["zero_variance_groups"], stats["positive"]) == (4, 2, 2)
    # Distillation imitates each group's best: above 0, or a look and no edit where nothing gained (not an
    # edit that gained nothing); not d's 0.1, though it beat its group's mean. It never pushes down.
    assert imitation_weights(records) == [1.0, 0.0, 1.0, 1.0, 1.0, 0.0, 1.0, 0.0, 0.0]
    # An RL iteration keeps the sign of each advantage; the trained ones average |weight| 1.
    weights = advantage_weights([0.7, -0.7, 0.0, 0.1])
    assert weights[0] > weights[3] > 0 > weights[1] and weights[2] == 0.0
    assert math.isclose(sum(abs(w) for w in weights) / 3, 1.0)  # the learning rate keeps its meaning
    assert advantage_weights([0.0, 0.0]) == [0.0, 0.0]
