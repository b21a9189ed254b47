"""LoCoMo → verl's RL dataset: `train.parquet` and `test.parquet`, one row per QA pair.

    memupdate data preprocess --locomo locomo10.json --out data/locomo

Each row follows verl's RLHF dataset format: `data_source`, `prompt` (chat messages: the system
prompt and the task naming the trajectory's bank and target question), `ability`,
`reward_model.ground_truth` (the answer) and `extra_info` (sample_id, qa index, category, evidence,
`collateral`: other questions of the conversation the reward also scores, the unique trajectory id, the base and trajectory namespaces, and `tools_kwargs`: the per-tool
`create_kwargs` verl hands to each tool's `create`, which forks the base into the trajectory bank).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from memupdate.agent.prompts import system_prompt, task_prompt
from memupdate.agent.tools import MEMORY_TOOLS
from memupdate.rl.data.conversation import Conversation
from memupdate.rl.data.locomo import DATASET, split_conversations
from memupdate.rl.data.namespaces import base_namespace, trajectory_id, trajectory_namespace
from memupdate.scoring.questions import COLLATERAL_QUESTIONS, collateral_sample, qa_row, scorable_questions
from memupdate.store.records import namespace_path

DATA_SOURCE = DATASET
ABILITY = "memory_editing"


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


def preprocess(
    conversations: Sequence[Conversation], out_dir: Path, *, n_train: int = 7, include_adversarial: bool = False
) -> dict[str, int]:
    """Write `train.parquet` and `test.parquet` under `out_dir`; returns the row count of each."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    counts = {}
    for split, part in zip(("train", "test"), split_conversations(list(conversations), n_train), strict=True):
        rows = [row for c in part for row in qa_rows(c, split, include_adversarial)]
        for index, row in enumerate(rows):
            row["extra_info"]["index"] = index
        pq.write_table(pa.Table.from_pylist(rows), out_dir / f"{split}.parquet")
        counts[split] = len(rows)
    return counts
