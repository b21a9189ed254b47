"""The relation task's reward table row (`rl.data.relation_rewards.RewardRow`): it reads back as it was
written, a table written before rows were typed reads unchanged, and a verdict's reward is, to the last
bit, what the learner paid before (its `reward_of` over a row's dict, restated below) on every row,
rounding edges included. No database, no model."""

from __future__ import annotations

import json
import random

import pytest

from memupdate.judge.verdict import DECISIONS, RELATIONS
from memupdate.rl.data.relation_rewards import RewardRow, read_rewards, reward_of


def old_reward_of(row: dict, relation: str) -> float:
    """`rl.distill.relation.reward_of` before the one learning pipeline, verbatim (REWARD_STEP 0.01)."""
    return round(float(row[DECISIONS[relation]]) / 0.01) * 0.01


def old_informative(row: dict) -> bool:
    return len({old_reward_of(row, r) for r in RELATIONS}) > 1


KEY = json.dumps(["jenverse-ben_02", "Sam lives in Paris.", "Sam moved to Berlin last month."])
# Lines as the relation run wrote them before its rows were typed: a proxy row, one where a tool refused,
# one a reader rewarded.
OLD_LINES = [
    {"key": KEY, "group": "jenverse-ben_02", "part": "train", "label": "update", "source": "jenverse", "keep": 0.0,
     "touched": 2, "update": 0.214286, "duplicate": -0.005},
    {"key": KEY + "x", "group": "locomo-conv-26", "part": "recipe", "label": "", "source": "locomo", "keep": 0.0,
     "touched": 1, "update": 0.0, "update_error": "no memory m3 in this namespace", "duplicate": 0.015},
    {"key": KEY + "y", "group": "longmemeval-1a2b3c4d", "part": "train", "label": "", "source": "longmemeval-knowledge-update",
     "keep": 0.0, "touched": 1, "update": 1.0, "duplicate": 0.0, "reward_by": "reader"},
]


def test_a_reward_row_round_trips_and_an_old_table_reads_unchanged(tmp_path) -> None:
    path = tmp_path / "rewards.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in OLD_LINES))
    rows = read_rewards(path)
    assert list(rows) == [line["key"] for line in OLD_LINES]
    for line in OLD_LINES:
        row = rows[line["key"]]
        assert row.to_json() == line  # the same columns and values, nothing added
        assert RewardRow.from_json(json.loads(json.dumps(row.to_json()))) == row
    assert rows[KEY + "x"].update_error.startswith("no memory") and rows[KEY + "y"].reward_by == "reader"
    assert rows[KEY].reward_by is None and rows[KEY].rewards == {"duplicate": -0.005, "update": 0.214286, "keep": 0.0}


# Rewards at and beside the rounding edges of REWARD_STEP (x.5 steps, float representation), and plain ones.
EDGES = [0.0, 0.005, -0.005, 0.015, -0.015, 0.025, 0.0049999, 0.0050001, 0.035, 0.045, 1e-7, -1e-7, 0.214286, -0.123456, 0.3, 1.0, -1.0]


@pytest.mark.parametrize("update", EDGES)
def test_a_verdicts_reward_is_the_old_reward_of_on_the_same_row(update: float) -> None:
    rng = random.Random(update)
    for duplicate in [*EDGES, *(round(rng.uniform(-1, 1), 6) for _ in range(50))]:
        line = OLD_LINES[0] | {"update": update, "duplicate": duplicate}
        row = RewardRow.from_json(line)
        for relation in RELATIONS:
            assert row.reward(relation) == old_reward_of(line, relation)  # equal, not only within 1e-9
            assert reward_of(row.rewards, relation) == old_reward_of(line, relation)  # verl's score reads this one
        assert row.informative == old_informative(line)
