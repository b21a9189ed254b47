"""verl's `AgentLoopWorker` (built directly, no Ray) from our parquet to per-rollout `rm_scores`, for both
reward routes, and verl's GRPO advantages on those rewards.

Route 1: `memupdate_agent` sets the reward in the loop. Route 2: verl's stock `tool_agent` loop, with
verl's own `RewardLoopWorker` calling our `compute_score` (its Ray handle stood in for by an object
that pickles the batch, as Ray would). The rollout server is scripted (token ids of Hermes tool calls,
tiny locally trained tokenizer, no LLM weights); the dataset, loops, tools, reward manager, database
and embedding model are real.
"""

from __future__ import annotations

import pickle
import uuid

import numpy as np
import pytest

pytest.importorskip("verl")

from verl_support import (
    HELPFUL_FACT,
    QUESTION,
    ScriptedServer,
    compose,
    cpu_overrides,
    load_base,
    row_for,
    tool_call,
    write_parquet,
)

from memupdate.rl.data.namespaces import TRAJ_LABEL

OTHER_QUESTION, OTHER_ANSWER = "What instrument did Ben start learning?", "violin"
N = 4
# Per question, one script per rollout: what each of the n rollouts of that row does.
SCRIPTS = {
    QUESTION: [
        [tool_call("manage_memory", {"action": "create", "content": HELPFUL_FACT}), "Added where Ann moved."],
        ["Nothing to change."],
        [tool_call("delete_memory", {"memory_id": "f0001"}), "Removed a memory."],
        [tool_call("search_memory", {"query": "Ann Lisbon"}), "Looked around."],
    ],
    OTHER_QUESTION: [[tool_call("sample_memory", {"k": 2}), "Fine as it is."]] + [["All good."]] * (N - 1),
}
KIND = {"Added where Ann moved.": "helps", "Nothing to change.": "silent", "Removed a memory.": "harms",
        "Looked around.": "reads", "Fine as it is.": "reads", "All good.": "silent"}


@pytest.fixture
def dataset(store, worker_root, tmp_path):
    load_base(store)
    rows = [
        row_for(store, qa_index=0),
        row_for(store, question=OTHER_QUESTION, answer=OTHER_ANSWER, qa_index=1),
    ]
    write_parquet(rows, tmp_path / "train.parquet")
    write_parquet(rows[:1], tmp_path / "test.parquet")
    return tmp_path, rows


class InProcessReward:
    """Stands in for a Ray handle of verl's RewardLoopWorker: `.compute_score.remote(data)`, with the
    batch pickled on the way as Ray serialises it (each call gets its own copy of extra_info)."""

    def __init__(self, worker):
        self.compute_score = self
        self.worker = worker

    async def remote(self, data):
        return await self.worker.compute_score(pickle.loads(pickle.dumps(data)))


def batch_from_parquet(config, tokenizer):
    """What verl's trainer hands the agent loop: RLHFDataset rows, a uid each, repeated n times interleaved."""
    from verl.protocol import DataProto
    from verl.utils.dataset.rl_dataset import RLHFDataset, collate_fn

    dataset = RLHFDataset(
        data_files=[config.data.train_files], tokenizer=tokenizer, config=config.data, processor=None
    )
    batch = DataProto.from_single_dict(collate_fn([dataset[i] for i in range(len(dataset))]))
    batch.non_tensor_batch["uid"] = np.array([str(uuid.uuid4()) for _ in range(len(batch))], dtype=object)
    return batch.repeat(repeat_times=N, interleave=True)


async def generate(agent: str, tiny_model, data_dir, *, reward_route: bool):
    from verl.experimental.agent_loop.agent_loop import AgentLoopWorker
    from verl.experimental.reward_loop.reward_loop import RewardLoopWorker

    config = compose("locomo_memory_grpo", cpu_overrides(tiny_model, data_dir, agent=agent, n=N))
    handles = [InProcessReward(RewardLoopWorker(config))] if reward_route else None
    server = ScriptedServer(None, by_question={q: list(s) for q, s in SCRIPTS.items()})
    worker = AgentLoopWorker(config, llm_client=server, reward_loop_worker_handles=handles)
    server.tokenizer = worker.tokenizer  # the tokenizer verl loaded from the model folder
    batch = batch_from_parquet(config, worker.tokenizer)
    output = await worker.generate_sequences(batch)
    return output, batch, worker.tokenizer


def kinds_of(output, tokenizer) -> list[str]:
    """What each rollout did, read back from the text the model wrote (response_mask == 1)."""
    kinds = []
    for ids, mask in zip(output.batch["responses"], output.batch["response_mask"], strict=True):
        written = tokenizer.decode(ids[mask.bool()])
        (kind,) = [k for reply, k in KIND.items() if reply in written]
        kinds.append(kind)
    return kinds


def check_rewards(output, batch, tokenizer, store) -> dict[str, list[float]]:
    scores = output.batch["rm_scores"].sum(dim=-1).tolist()
    assert len(scores) == 2 * N and output.batch["rm_scores"].shape == output.batch["response_mask"].shape
    kinds = kinds_of(output, tokenizer)
    by_kind: dict[str, list[float]] = {}
    for kind, score in zip(kinds, scores, strict=True):
        by_kind.setdefault(kind, []).append(score)
    assert all(s > 0 for s in by_kind["helps"]) and all(s < 0 for s in by_kind["harms"])
    assert all(s == 0.0 for s in by_kind["silent"] + by_kind["reads"])
    # Each group (uid) holds the n rollouts of one row, in dataset order.
    uids = batch.non_tensor_batch["uid"]
    assert all(len(set(uids[i * N : (i + 1) * N])) == 1 for i in range(2))
    assert store.list_namespaces(prefix=(*store.namespace, TRAJ_LABEL)) == []  # every fork dropped
    return {"scores": scores, "kinds": kinds}


def grpo_advantages(output, batch) -> list[float]:
    """verl's GRPO advantage estimator on our rewards; one number per rollout (constant over its tokens)."""
    import torch
    from verl.trainer.ppo.core_algos import compute_grpo_outcome_advantage

    mask = output.batch["response_mask"]
    advantages, _ = compute_grpo_outcome_advantage(
        token_level_rewards=output.batch["rm_scores"], response_mask=mask, index=batch.non_tensor_batch["uid"]
    )
    per_rollout = (advantages * mask).sum(-1) / mask.sum(-1)
    assert torch.allclose(advantages[mask.bool()], per_rollout.repeat_interleave(mask.sum(-1)))
    return per_rollout.tolist()


async def test_worker_with_memupdate_agent_sets_rm_scores_and_grpo_signs(tiny_model, dataset, store) -> None:
    data_dir, _ = dataset
    output, batch, tokenizer = await generate("memupdate_agent", tiny_model, data_dir, reward_route=False)
    result = check_rewards(output, batch, tokenizer, store)
    extra = output.non_tensor_batch
    assert {"performance_delta", "efficiency_value", "tool_calls", "edits", "forked"} <= set(
        output.meta_info["reward_extra_keys"]
    )
    assert [float(x) for x in extra["edits"]] == [float(k in ("helps", "harms")) for k in result["kinds"]]

    advantages = grpo_advantages(output, batch)
    for kind, advantage in zip(result["kinds"], advantages, strict=True):
        if kind == "helps":
            assert advantage > 0
        if kind == "harms":
            assert advantage < 0
    assert advantages[N:] == [0.0] * N  # the second row's rollouts all scored 0: no signal, no push


async def test_worker_with_stock_tool_agent_and_compute_score_route(tiny_model, dataset, store) -> None:
    data_dir, _ = dataset
    output, batch, tokenizer = await generate("tool_agent", tiny_model, data_dir, reward_route=True)
    result = check_rewards(output, batch, tokenizer, store)
    infos = output.non_tensor_batch
    assert list(infos["score"]) == pytest.approx(result["scores"]) and set(infos["forked"]) <= {0.0, 1.0}
    helped = result["kinds"].index("helps")
    assert infos["performance_delta"][helped] > 0 and infos["edits"][helped] == 1.0
