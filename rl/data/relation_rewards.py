"""The relation task's reward table: what each decision a pair of memories asks of its bank (merge the two,
supersede the earlier-stated, keep both) does to the bank's answers, one typed row a unit, one JSON object
a line.

    from memupdate.rl.data.relation_rewards import read_rewards
    table = read_rewards(Path("runs/relation/rewards.jsonl"))   # unit key -> RewardRow
    row = table[key]
    row.reward("update"), row.informative                       # a verdict's reward (at REWARD_STEP); a signal?

The run that learns the relation judge writes it (`rl.distill.relation`: `rewards.jsonl` from the QA proxy,
`reader_rewards.jsonl` where a reader's answers reward a unit, the same rows) and its GRPO reads it; so
do verl's relation rows (`rl.data.relation_rows`) and their score (`rl.verl.relation_score`, through
`reward_of`, the one formula of a verdict's reward). `read_rewards` is the one reader of either file.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import MISSING, asdict, dataclass, fields
from pathlib import Path
from typing import Any

from memupdate.errors import MemupdateError
from memupdate.judge.verdict import DECISION_NAMES, DECISIONS, RELATIONS

REWARDS = "rewards.jsonl"
READER_REWARDS = "reader_rewards.jsonl"
REWARD_STEP = 0.01  # rewards are compared at this resolution: smaller QA changes are the proxy's noise


def reward_of(rewards: Mapping[str, float], relation: str) -> float:
    """The reward of a verdict of `relation` on a unit whose decisions earn `rewards` (by `DECISION_NAMES`),
    at `REWARD_STEP`."""
    return round(float(rewards[DECISIONS[relation]]) / REWARD_STEP) * REWARD_STEP


@dataclass(frozen=True)
class RewardRow:
    """One unit's row: its key (`relation_units.RelationUnit.key`), bank and part; what reports read (the
    pair's label, "" where none is known: the reward reads none; its source); and each decision's reward:
    `keep` 0 (nothing changes), `update` and `duplicate` the mean QA change on the `touched` questions
    (those whose context held either statement; 0 where none, or where the tool refused, its message in
    `update_error` / `duplicate_error`). `reward_by` is "reader" where a reader's answers gave them."""

    key: str
    group: str
    part: str
    label: str
    source: str
    keep: float
    touched: int
    update: float
    duplicate: float
    update_error: str | None = None
    duplicate_error: str | None = None
    reward_by: str | None = None  # None: the QA proxy

    @property
    def rewards(self) -> dict[str, float]:
        """Each decision's reward, by `DECISION_NAMES`."""
        return {name: getattr(self, name) for name in DECISION_NAMES}

    def reward(self, relation: str) -> float:
        """The reward of a verdict of `relation` (`reward_of`)."""
        return reward_of(self.rewards, relation)

    @property
    def informative(self) -> bool:
        """Whether the unit's decisions earn different rewards (a group on it can teach something)."""
        return len({self.reward(r) for r in RELATIONS}) > 1

    def to_json(self) -> dict[str, Any]:
        """The line's JSON object: the table's columns, an error or `reward_by` only where there is one."""
        return {k: v for k, v in asdict(self).items() if v is not None}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RewardRow:
        """A line of the table (`to_json`); KeyError naming a missing column."""
        known = {f.name for f in fields(cls)}
        row = {k: v for k, v in data.items() if k in known}
        missing = [f.name for f in fields(cls) if f.name not in row and f.default is MISSING]
        if missing:
            raise KeyError(missing)
        numbers = {name: float(row[name]) for name in DECISION_NAMES} | {"touched": int(row["touched"])}
        return cls(**row | numbers)


def read_rewards(path: Path) -> dict[str, RewardRow]:
    """The rows of a reward table (`REWARDS` or `READER_REWARDS`), by unit key; MemupdateError naming the
    file, the line and the fix."""
    path = Path(path)
    if not path.is_file():
        raise MemupdateError(f"reward table {path} does not exist: run `memupdate judge learn --out DIR` first (it writes DIR/{REWARDS})")
    rows = {}
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = RewardRow.from_json(json.loads(line))
        except json.JSONDecodeError as exc:
            raise MemupdateError(f"{path}:{number} is not JSON ({exc}): a run interrupted mid-line? delete that line and rerun") from None
        except KeyError as exc:
            raise MemupdateError(f"{path}:{number} lacks {exc.args[0]}: not a reward table written by `memupdate judge learn`") from None
        rows[row.key] = row
    return rows
