"""The relation task → verl's RL dataset: one row per candidate pair of memories, its rewards carried in it.

    from memupdate.rl.data.relation_rows import preprocess_relation
    from memupdate.rl.distill.relation import RelationConfig, relation_banks
    counts = preprocess_relation(Path("runs/relation/rewards.jsonl"), relation_banks(data, RelationConfig()), Path("data/relation"))

    memupdate data preprocess --task relation --rewards runs/relation/rewards.jsonl --data ../shared/data --out data/relation

A unit of the relation task (`rl.distill.relation`) is a candidate pair of a training bank; the run's
reward table (`rewards.jsonl`, written by `memupdate judge learn`) holds what each decision (merge,
supersede the earlier-stated, keep both) does to the bank's answers. A row here is that unit for a chat
LLM: the prompt is the endpoint judge's own (`judge.endpoint.prompt_for`: both statements with their
times, a JSON reply naming one of the four relations), so a checkpoint trained on these rows serves as
an `EndpointJudge` unchanged. `extra_info` carries `task: "relation"`, the unit's `key`, `part`,
`source`, `label` (empty where none is known: the reward reads none) and `rewards` (per decision), so
scoring needs no database (`rl.verl.relation_score`). `data_source` is `relation/<source>` (jenverse,
longmemeval-..., locomo, factconsolidation), so verl reports validation per source.

The table's keys hold the two texts, not their times, so the pairs come from the banks the run's data
gives (`relation_banks`, with the run's config). Rows are the units whose decisions earn different
rewards (on any other a group has no signal and every judge scores the same), as the offline learner
reads them: the training part's (`train.parquet`, the pool it draws from) and the recipe part's
(`test.parquet`, where it reads its greedy judge).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from memupdate.errors import MemupdateError

if TYPE_CHECKING:
    from memupdate.judge.pairs import LabelledPair
    from memupdate.rl.distill.relation import RelationBank

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


def relation_row(table_row: Mapping[str, Any], pair: LabelledPair, split: str) -> dict[str, Any]:
    """One verl row for the unit `table_row` (a line of `rewards.jsonl`) whose pair is `pair`."""
    from memupdate.judge.endpoint import prompt_for
    from memupdate.rl.distill.relation import DECISION_NAMES

    source = str(table_row.get("source") or pair.source or "unknown")
    return {
        "data_source": f"{RELATION}/{source}",
        "prompt": [{"role": "user", "content": prompt_for(*pair.statements)}],  # as EndpointJudge asks
        "ability": ABILITY,
        "reward_model": {"style": "rule", "ground_truth": str(table_row.get("label") or "")},
        "extra_info": {
            "split": split,
            "task": RELATION,
            "key": table_row["key"],
            "group": table_row["group"],
            "part": table_row["part"],
            "source": source,
            "label": str(table_row.get("label") or ""),
            "rewards": {name: float(table_row[name]) for name in DECISION_NAMES},
        },
    }


def is_relation_row(extra_info: Mapping[str, Any]) -> bool:
    return extra_info.get("task") == RELATION


def read_table(path: Path) -> list[dict[str, Any]]:
    """The lines of a run's `rewards.jsonl`; MemupdateError naming the file and the fix."""
    path = Path(path)
    if not path.is_file():
        raise MemupdateError(f"reward table {path} does not exist: run `memupdate judge learn --out DIR` first (it writes DIR/rewards.jsonl)")
    rows = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            missing = [k for k in ("key", "group", "part", "keep", "update", "duplicate") if k not in row]
        except json.JSONDecodeError as exc:
            raise MemupdateError(f"{path}:{number} is not JSON ({exc}): a run interrupted mid-line? delete that line and rerun") from None
        if missing:
            raise MemupdateError(f"{path}:{number} lacks {missing}: not a reward table written by `memupdate judge learn`")
        rows.append(row)
    return rows


def relation_splits(table: Iterable[Mapping[str, Any]], banks: Sequence[RelationBank]) -> tuple[dict[str, list[dict[str, Any]]], int, int]:
    """(rows by split, unmatched table rows, uninformative units left out); see the module docstring."""
    from memupdate.rl.distill.relation import RelationUnit, informative

    pairs = {RelationUnit(b.group, b.part, p).key: p for b in banks for p in b.pairs}
    splits: dict[str, list[dict[str, Any]]] = {split: [] for split in SPLITS.values()}
    unmatched = uninformative = 0
    for row in table:
        split = SPLITS.get(row["part"])
        if split is None:  # an evaluation unit never reaches a table, but never train on one
            continue
        pair = pairs.get(row["key"])
        if pair is None:
            unmatched += 1
            continue
        if not informative(row):
            uninformative += 1
            continue
        splits[split].append(relation_row(row, pair, split))
    return splits, unmatched, uninformative


def preprocess_relation(rewards: Path, banks: Sequence[RelationBank], out_dir: Path) -> RelationExport:
    """Write `train.parquet` and `test.parquet` under `out_dir` from the reward table `rewards` and the
    banks its units came from (`relation_banks`)."""
    from memupdate.rl.data.preprocess import write_splits

    table = read_table(rewards)
    splits, unmatched, uninformative = relation_splits(table, banks)
    if not splits["train"]:
        raise MemupdateError(
            f"none of the {len(table)} units of {rewards} is a training unit whose decisions earn different rewards "
            f"and whose pair the data holds ({unmatched} pairs not found): give the --data folder and the run folder "
            "the table was written with (its metrics.json holds the run's seed and unit counts)"
        )
    return RelationExport(write_splits(splits, out_dir), unmatched, uninformative)


def run_config(rewards: Path):
    """The RelationConfig the run that wrote `rewards` used (its `metrics.json` beside it), else the default:
    the seed and unit counts decide which LoCoMo and FactConsolidation pairs the banks hold."""
    from memupdate.rl.distill.relation import RelationConfig

    metrics = Path(rewards).parent / "metrics.json"
    if metrics.is_file():
        saved = json.loads(metrics.read_text()).get("config") or {}
        known = RelationConfig.__dataclass_fields__
        return RelationConfig(**{k: v for k, v in saved.items() if k in known})
    return RelationConfig()
