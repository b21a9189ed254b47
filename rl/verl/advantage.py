"""verl's GRPO outcome advantage over plain lists: the one place distillation touches verl.

Imported lazily by `advantages.group_advantages`; raises ImportError when verl is not installed.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

import numpy as np
import torch
from verl.trainer.ppo.core_algos import compute_grpo_outcome_advantage


def verl_group_advantages(
    rewards: Sequence[float], groups: Sequence[Hashable], epsilon: float = 1e-6, normalize_by_std: bool = True
) -> np.ndarray:
    """One scalar reward per trajectory, put on a one-token response as verl's outcome rewards are."""
    if len(rewards) != len(groups):
        raise ValueError(f"{len(rewards)} rewards but {len(groups)} group ids: give one group id per reward")
    if not rewards:
        return np.zeros(0)
    token_rewards = torch.tensor(rewards, dtype=torch.float64).unsqueeze(-1)
    index = np.array([str(g) for g in groups], dtype=object)
    advantages, _ = compute_grpo_outcome_advantage(
        token_rewards, torch.ones_like(token_rewards), index, epsilon=epsilon, norm_adv_by_std_in_grpo=normalize_by_std
    )
    return advantages.squeeze(-1).numpy()
