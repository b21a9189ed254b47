"""`compute_score` for verl's `custom_reward_function` hook: the reward route of verl's stock
`tool_agent` loop (memupdate's own `memupdate_agent` loop sets the reward itself and skips this).

    reward:
      custom_reward_function:
        path: pkg://memupdate.rl.verl.compute_score     # pkg://, not a file path: see VERL.md
        name: compute_score
        reward_kwargs: {collateral_questions: 8}  # memupdate.scoring.reward.RewardConfig fields

verl's reward worker calls it once per finished rollout with the row's `extra_info`, into which it
has merged the rollout's `extra_fields`: the fork the rollout's first tool call made
(`memupdate.rl.verl.forks.FORK_KEY`). The fork is scored against its base while it is open, then dropped.
A rollout without a fork (no tool call, or the fork failed) scores 0, and the reason is logged. A
compaction row's fork is folded into a fork of the whole bank and scored by `compute_compaction_reward`.
A relation row (`memupdate data preprocess --task relation`) has no fork: its verdict is scored from the
rewards the row carries (`memupdate.rl.verl.relation_score`), with no database.
It is a coroutine (verl's naive, dapo and limited reward managers await it), so reward work queues
for the worker's few database threads instead of filling verl's executor.
"""

from __future__ import annotations

from typing import Any

from memupdate.rl.data.relation_rows import is_relation_row
from memupdate.rl.verl.forks import count_unrun_calls, finish_rollout, reward_config


async def compute_score(
    data_source: str,
    solution_str: str,
    ground_truth: Any,
    extra_info: dict[str, Any] | None = None,
    **kwargs: Any,
) -> dict[str, float]:
    """`{"score": reward, ...parts}`: the parts (delta, efficiency factors, memory counts, calls) have the
    same keys for every rollout, as verl's reward_extra_info needs. `kwargs`: RewardConfig fields."""
    if is_relation_row(extra_info or {}):
        from memupdate.rl.verl.relation_score import score_verdict

        return score_verdict(solution_str, extra_info or {}, reward_config(kwargs))
    state = dict(extra_info or {})
    count_unrun_calls(state, solution_str)  # the response: what the model wrote, and the tool results
    score = await finish_rollout(state, extra_info or {}, reward_config(kwargs))
    return {"score": score.reward, **score.parts}
