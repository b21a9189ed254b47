"""The score of a relation row's rollout (`rl.data.relation_rows`): the reward of the decision its verdict asks.

    from memupdate.rl.verl.relation_score import score_verdict
    score_verdict('{"relation": "update", "current": "second", "confidence": 0.9}', row["extra_info"])
    # {"score": <the unit's update reward, at 0.01>, "readable": 1.0, "duplicate": 0.0, "update": 1.0, "keep": 0.0, "best": ...}

`compute_score` routes a relation row here; no database is read (the row carries its unit's rewards).
The reply is read as the endpoint judge reads it (`judge.endpoint.read_reply`: the first JSON object,
its `relation` one of the four), and the verdict's reward is `rl.data.relation_rewards.reward_of` (at
`REWARD_STEP`), as the offline learner rewards it. An unreadable reply is what `EndpointJudge` makes
of it, both memories kept, less the cost of a failed call (`RewardConfig.failed_call_cost`), the format
term every verl task here charges: a refused tool call in the editing tasks, an unreadable verdict here.
`current` is read but not rewarded: the table's update decision always supersedes the earlier-stated memory.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from memupdate.judge.verdict import DECISION_NAMES
from memupdate.rl.data.relation_rewards import reward_of
from memupdate.scoring.reward import RewardConfig


def score_verdict(solution_str: str, extra_info: Mapping[str, Any], config: RewardConfig | None = None) -> dict[str, float]:
    """`{"score": reward, ...}` with the same keys for every reply (verl's reward_extra_info needs it):
    `readable`, one 0/1 flag per decision taken, and `best` (1.0 when no decision earns more)."""
    from memupdate.judge.endpoint import read_reply
    from memupdate.judge.verdict import DECISIONS, Statement

    config = config or RewardConfig()
    rewards = extra_info["rewards"]
    # The times only orient `current`, which is not rewarded: blank statements read the relation alike.
    verdict = read_reply(solution_str, Statement(""), Statement(""))
    relation = verdict.relation if verdict is not None else "compatible"  # EndpointJudge's reading of a bad reply
    score = reward_of(rewards, relation) - (0.0 if verdict is not None else config.failed_call_cost)
    best = max(reward_of(rewards, r) for r in DECISIONS)
    taken = DECISIONS[relation] if verdict is not None else None
    return {
        "score": score,
        "readable": float(verdict is not None),
        **{name: float(taken == name) for name in DECISION_NAMES},
        "best": float(verdict is not None and reward_of(rewards, relation) >= best),
    }
