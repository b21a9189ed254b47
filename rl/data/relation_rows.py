"""The relation task → verl's RL dataset: one row per candidate pair of memories, its rewards carried in it.

    from memupdate.rl.data.relation_rows import preprocess_relation
    from memupdate.rl.distill.relation import banks_of, run_config
    banks = banks_of(data, run_config(Path("runs/relation")))      # the run's seed and unit counts decide its pairs
    counts = preprocess_relation(Path("runs/relation/rewards.jsonl"), banks, Path("data/relation"))

    memupdate data preprocess --task relation --rewards runs/relation/rewards.jsonl --data ../shared/data --out data/relation

A unit of the relation task (`rl.data.relation_units`) is a candidate pair of a training bank; the run's
reward table (`rewards.jsonl`, written by `memupdate rl learn --task relation`, one `RewardRow` a line:
`rl.data.relation_rewards`) holds what each decision (merge, supersede the earlier-stated, keep both)
does to the bank's answers. A row here is that unit for a chat LLM: the prompt is the endpoint judge's
own (`judge.endpoint.prompt_for`: both statements with their times, a JSON reply naming one of the four
relations), so a checkpoint trained on these rows serves as an `EndpointJudge` unchanged. `extra_info`
carries `task: "relation"`, the unit's `key`, `part`, `source`, `label` (empty where none is known: the
reward reads none) and `rewards` (per decision), so scoring needs no database (`rl.verl.relation_score`).
`data_source` is `relation/<source>` (jenverse, longmemeval-..., locomo, factconsolidation), so verl
reports validation per source.

The table's keys hold the two texts, not their times, so the pairs come from the banks the run's data
gives (`relation.banks_of`, with the run's config). Rows are the units whose decisions earn different
rewards (on any other a group has no signal and every judge scores the same), as the offline learner
reads them: the training part's (`train.parquet`, the pool it draws from) and the recipe part's
(`test.parquet`, where it reads its greedy judge).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from memupdate.errors import MemupdateError
from memupdate.rl.data.relation_rewards import RewardRow, read_rewards

if TYPE_CHECKING:
    from memupdate.judge.pairs import LabelledPair
    from memupdate.rl.data.relation_units import RelationBank

# `extra_info["task"]` of a relation row; `data_source` is RELATION + "/" + the pair's source.
RELATION = "relation"
ABILITY = "relation_judging"
SPLITS = {"train": "train", "recipe": "test"}  # a unit's part -> the parquet it goes to


@dataclass(frozen=True)
class RelationExport:
    """What `preprocess_relation` wrote: rows per split, and the table's units it could not place."""

    counts: dict[str, int]
    unmatched: int  # table rows whose pair the banks do not hold (another seed or unit count?)
    uninformative: int  # units left out: every decision earns the same reward


def relation_row(table_row: RewardRow, pair: LabelledPair, split: str) -> dict[str, Any]:
    """One verl row for the unit `table_row` (a row of `rewards.jsonl`) whose pair is `pair`."""
    from memupdate.judge.endpoint import prompt_for

    source = table_row.source or pair.source or "unknown"
    return {
        "data_source": f"{RELATION}/{source}",
        "prompt": [{"role": "user", "content": prompt_for(*pair.statements)}],  # as EndpointJudge asks
        "ability": ABILITY,
        "reward_model": {"style": "rule", "ground_truth": table_row.label},
        "extra_info": {
            "split": split,
            "task": RELATION,
            "key": table_row.key,
            "group": table_row.group,
            "part": table_row.part,
            "source": source,
            "label": table_row.label,
            "rewards": table_row.rewards,
        },
    }


def is_relation_row(extra_info: Mapping[str, Any]) -> bool:
    return extra_info.get("task") == RELATION


def relation_splits(table: Iterable[RewardRow], banks: Sequence[RelationBank]) -> tuple[dict[str, list[dict[str, Any]]], int, int]:
    """(rows by split, unmatched table rows, uninformative units left out); see the module docstring."""
    from memupdate.rl.data.relation_units import RelationUnit

    pairs = {RelationUnit(b.group, b.part, p).key: p for b in banks for p in b.pairs}
    splits: dict[str, list[dict[str, Any]]] = {split: [] for split in SPLITS.values()}
    unmatched = uninformative = 0
    for row in table:
        split = SPLITS.get(row.part)
        if split is None:  # an evaluation unit never reaches a table, but never train on one
            continue
        pair = pairs.get(row.key)
        if pair is None:
            unmatched += 1
            continue
        if not row.informative:
            uninformative += 1
            continue
        splits[split].append(relation_row(row, pair, split))
    return splits, unmatched, uninformative


def preprocess_relation(rewards: Path, banks: Sequence[RelationBank], out_dir: Path) -> RelationExport:
    """Write `train.parquet` and `test.parquet` under `out_dir` from the reward table `rewards` and the
    banks its units came from (`relation.banks_of`)."""
    from memupdate.rl.data.preprocess import write_splits

    table = list(read_rewards(rewards).values())
    splits, unmatched, uninformative = relation_splits(table, banks)
    if not splits["train"]:
        raise MemupdateError(
            f"none of the {len(table)} units of {rewards} is a training unit whose decisions earn different rewards "
            f"and whose pair the data holds ({unmatched} pairs not found): give the --data folder and the run folder "
            "the table was written with (its metrics.json holds the run's seed and unit counts)"
        )
    return RelationExport(write_splits(splits, out_dir), unmatched, uninformative)
