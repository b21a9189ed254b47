"""LoCoMo → verl's RL dataset: `train.parquet` and `test.parquet`, one row per QA pair.

    memupdate data preprocess --locomo locomo10.json --out data/locomo

Each row follows verl's RLHF dataset format: `data_source`, `prompt` (chat messages: the system
prompt and the task naming the trajectory's bank and target question), `ability`,
`reward_model.ground_truth` (the answer) and `extra_info` (sample_id, qa index, category, evidence,
`collateral`: other questions of the conversation the reward also scores, the unique trajectory id, the base and trajectory namespaces, and `tools_kwargs`: the per-tool
`create_kwargs` verl hands to each tool's `create`, which forks the base into the trajectory bank).

The compaction task (`--task compaction`) writes one row per neighbourhood of a bank instead
(`compaction_rows` of a `CompactionBank`), the units the offline learner trains on:
`rl.distill.compaction.preprocess_compaction` chooses them (`CompactionTask.training_units`: of the cut
`memupdate compact` makes of the bank's embeddings, the neighbourhoods that reach a question), so the
database must hold the banks (it loads them). Such a row has no target question (the episode is blind) and
its `extra_info` adds `task: "compaction"`, `neighbourhood` (the memory keys the rollout may edit, also in
each tool's `create_kwargs`) and `questions` (every scorable question of the bank, `qa_row` shape): its
rollout copies the neighbourhood into its fork and is scored by `compute_compaction_reward`.

    memupdate data preprocess --task compaction --locomo locomo10.json --factconsolidation fc.jsonl --out data/compaction

LoCoMo: the first `n_train` conversations' banks train, the others' validate. FactConsolidation
(`rl.data.factconsolidation.fact_banks`): a context nested in a larger one (the 6k context in the 32k)
is an evaluation bank and writes no row; each larger context gives a training bank holding its facts
that no nested context holds (`("factconsolidation", "<context id>-train")`), scored on its questions
except those an evaluation bank also asks.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from memupdate.agent.prompts import system_prompt, task_prompt
from memupdate.agent.tools import MEMORY_TOOLS
from memupdate.rl.data.conversation import Conversation
from memupdate.rl.data.locomo import DATASET, split_conversations
from memupdate.rl.data.namespaces import base_namespace, trajectory_id, trajectory_namespace
from memupdate.scoring.questions import COLLATERAL_QUESTIONS, collateral_sample, qa_row, scorable_questions
from memupdate.store import namespace_path

if TYPE_CHECKING:
    from memupdate.scoring.questions import QAItem
    from memupdate.store import MemoryStore

DATA_SOURCE = DATASET
ABILITY = "memory_editing"
# `extra_info["task"]` of a compaction row (a targeted row has none).
COMPACTION = "compaction"


def qa_rows(
    conversation: Conversation, split: str, include_adversarial: bool = False, collateral_questions: int = COLLATERAL_QUESTIONS
) -> list[dict[str, Any]]:
    questions, _ = scorable_questions(conversation, include_adversarial)
    base = namespace_path(base_namespace(conversation.sample_id))
    rows = []
    for qa in questions:
        trajectory = trajectory_id(conversation.sample_id, qa.index)
        bank = namespace_path(trajectory_namespace(base, trajectory))
        create_kwargs = {"base_namespace": base, "namespace": bank, "trajectory_id": trajectory}
        rows.append(
            {
                "data_source": DATA_SOURCE,
                "prompt": [
                    {"role": "system", "content": system_prompt()},
                    {"role": "user", "content": task_prompt(bank, qa.question, len(conversation.facts))},
                ],
                "ability": ABILITY,
                "reward_model": {"style": "rule", "ground_truth": qa.answer},
                "extra_info": {
                    "split": split,
                    "sample_id": conversation.sample_id,
                    **qa_row(qa),
                    # Other questions of the conversation, scored with the target for collateral damage.
                    "collateral": [
                        qa_row(o) for o in collateral_sample(questions, qa.index, collateral_questions)
                    ],
                    "trajectory_id": trajectory,
                    "base_namespace": base,
                    "namespace": bank,
                    "need_tools_kwargs": True,
                    "tools_kwargs": {name: {"create_kwargs": create_kwargs} for name in MEMORY_TOOLS},
                },
            }
        )
    return rows


def write_splits(splits: Mapping[str, list[dict[str, Any]]], out_dir: Path) -> dict[str, int]:
    """`<split>.parquet` under `out_dir` for each split, rows numbered (`extra_info.index`); the row counts."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    for split, rows in splits.items():
        for index, row in enumerate(rows):
            row["extra_info"]["index"] = index
        pq.write_table(pa.Table.from_pylist(rows), out_dir / f"{split}.parquet")
    return {split: len(rows) for split, rows in splits.items()}


def preprocess(
    conversations: Sequence[Conversation], out_dir: Path, *, n_train: int = 7, include_adversarial: bool = False
) -> dict[str, int]:
    """Write `train.parquet` and `test.parquet` under `out_dir`; returns the row count of each."""
    train, test = split_conversations(list(conversations), n_train)
    return write_splits(
        {
            "train": [row for c in train for row in qa_rows(c, "train", include_adversarial)],
            "test": [row for c in test for row in qa_rows(c, "test", include_adversarial)],
        },
        out_dir,
    )


# -- the compaction task: one row per neighbourhood of a bank -----------------------------------------


@dataclass(frozen=True)
class CompactionBank:
    """A loaded bank and the neighbourhoods of it that become rows: its base, the id rows name it by, its
    questions, and each unit's (index in the bank's cut, memory keys)."""

    base: MemoryStore
    sample_id: str
    data_source: str
    questions: tuple[QAItem, ...]
    units: tuple[tuple[int, tuple[str, ...]], ...]


def compaction_rows(bank: CompactionBank, split: str) -> list[dict[str, Any]]:
    """One row per unit of `bank`."""
    questions = [qa_row(q) for q in bank.questions]
    rows = []
    for unit, neighbourhood in bank.units:
        trajectory = f"{bank.sample_id}-n{unit:03d}-{uuid.uuid4().hex[:8]}"
        namespace = namespace_path(trajectory_namespace(bank.base.namespace, trajectory))
        create_kwargs = {
            "base_namespace": bank.base.path, "namespace": namespace, "trajectory_id": trajectory,
            "neighbourhood": list(neighbourhood),
        }
        rows.append(
            {
                "data_source": bank.data_source,
                # What a blind episode of the graph starts from (`agent.graph.initial_state`, no question).
                "prompt": [
                    {"role": "system", "content": system_prompt()},
                    {"role": "user", "content": task_prompt(namespace, None, len(neighbourhood))},
                ],
                "ability": ABILITY,
                "reward_model": {"style": "rule", "ground_truth": ""},  # no one answer: `questions` are scored
                "extra_info": {
                    "split": split,
                    "task": COMPACTION,
                    "sample_id": bank.sample_id,
                    "unit": unit,
                    "neighbourhood": list(neighbourhood),
                    "questions": questions,
                    "trajectory_id": trajectory,
                    "base_namespace": bank.base.path,
                    "namespace": namespace,
                    "need_tools_kwargs": True,
                    "tools_kwargs": {name: {"create_kwargs": create_kwargs} for name in MEMORY_TOOLS},
                },
            }
        )
    return rows


def is_compaction_row(extra_info: Mapping[str, Any]) -> bool:
    return extra_info.get("task") == COMPACTION


def compaction_unit(extra_info: Mapping[str, Any]) -> tuple[list[str], list[QAItem]]:
    """(the neighbourhood's memory keys, the questions to score) of a compaction row's extra_info."""
    from memupdate.scoring.questions import qa_from_row

    return [str(k) for k in extra_info["neighbourhood"]], [qa_from_row(q) for q in extra_info["questions"]]
