"""What the verl tests share: our configs composed by Hydra over verl's trainer config, a scripted
stand-in for verl's rollout server, and a loaded base with preprocessed rows.

No LLM weights exist here: the "server" returns the token ids of scripted Hermes tool calls, encoded
with the tiny tokenizer trained locally by the `tiny_model` fixture (conftest.py); everything else (verl's agent
loop, tool registry, dataset, reward managers, PostgreSQL, the embedding model) is real.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections import deque
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
CONFIGS = REPO / "configs"
TOOL_CONFIG = CONFIGS / "tool_config" / "memory_tools.yaml"
AGENT_LOOP_CONFIG = CONFIGS / "agent_loop.yaml"

FACTS = [
    "Ann adopted a dog named Rex in March 2021.",
    "Ann works as a nurse at the city hospital.",
    "Ben started learning the violin last spring.",
    "Ben and Ann went hiking in the Alps together.",
    "Ann likes green tea in the morning and coffee after lunch; Ben plays chess on Sundays.",
    "Ben moved into a flat near the river in 2019.",
]
QUESTION, ANSWER = "Where did Ann move in 2020?", "Lisbon"
HELPFUL_FACT = "Ann moved to Lisbon in 2020."
SAMPLING = {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "repetition_penalty": 1.0, "logprobs": True}


def compose(name: str, overrides: Sequence[str] = ()) -> Any:
    """`configs/<name>.yaml` composed by Hydra over verl's ppo_trainer, as `python -m verl.trainer.main_ppo`
    composes it (search path `pkg://verl.trainer.config` from the file itself)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONFIGS), version_base=None):
        return hydra_compose(config_name=name, overrides=list(overrides))


def validate(config) -> None:
    """What `python -m verl.trainer.main_ppo` checks before it starts Ray."""
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import omega_conf_to_dataclass, validate_config
    from verl.workers.config import RolloutConfig

    validate_config(config, use_reference_policy=need_reference_policy(config), use_critic=need_critic(config))
    rollout = omega_conf_to_dataclass(config.actor_rollout_ref.rollout)
    assert isinstance(rollout, RolloutConfig)
    assert rollout.multi_turn.max_tool_response_length == 2048 and rollout.multi_turn.format == "hermes"


def cpu_overrides(
    model: Path, data_dir: Path | None = None, *, agent: str = "memupdate_agent", n: int = 4
) -> list[str]:
    """Our GRPO config, shrunk to the tiny local model and absolute paths (what `rl train` does)."""
    overrides = [
        f"actor_rollout_ref.model.path={model}",
        f"actor_rollout_ref.rollout.multi_turn.tool_config_path={TOOL_CONFIG}",
        f"actor_rollout_ref.rollout.agent.agent_loop_config_path={AGENT_LOOP_CONFIG}",
        f"actor_rollout_ref.rollout.agent.default_agent_loop={agent}",
        f"actor_rollout_ref.rollout.n={n}",
        "actor_rollout_ref.rollout.prompt_length=4096",
        "actor_rollout_ref.rollout.response_length=1024",
        "data.max_prompt_length=4096",
        "data.max_response_length=1024",
        "data.filter_overlong_prompts=false",
        "data.dataloader_num_workers=0",
    ]
    if data_dir is not None:
        overrides += [
            f"data.train_files={data_dir / 'train.parquet'}",
            f"data.val_files={data_dir / 'test.parquet'}",
        ]
    return overrides


def tool_call(name: str, arguments: dict[str, Any] | str) -> str:
    body = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return f'<tool_call>\n{{"name": "{name}", "arguments": {body}}}\n</tool_call>'


class ScriptedServer:
    """Stands in for verl's `server_manager`: the agent loop only calls `generate`. Each new rollout
    (request id) takes the next script, a list of assistant replies; each call returns the next reply's
    token ids (ending with <|im_end|>, as a chat model's would). `fail_at=(script, turn)` raises there.
    With `by_question`, a rollout takes the next script of the question its prompt holds."""

    def __init__(
        self,
        tokenizer: Any,
        scripts: Iterable[Sequence[str]] = (),
        fail_at: tuple[int, int] | None = None,
        by_question: dict[str, list[Sequence[str]]] | None = None,
    ):
        self.tokenizer = tokenizer
        self.scripts = deque(enumerate(scripts))
        self.by_question = {q: deque(scripts) for q, scripts in (by_question or {}).items()}
        self.fail_at = fail_at
        self.turns: dict[str, tuple[int | str, deque]] = {}
        self.prompts: dict[str, list[list[int]]] = {}

    async def generate(
        self, *, request_id: str, prompt_ids: list[int], sampling_params: dict[str, Any], **_: Any
    ):
        from verl.workers.rollout.replica import TokenOutput

        await asyncio.sleep(0)  # a real server yields to the other rollouts here
        if request_id not in self.turns and self.by_question:
            prompt = self.tokenizer.decode(prompt_ids)
            (question,) = [q for q in self.by_question if q in prompt]
            self.turns[request_id] = (question, deque(self.by_question[question].popleft()))
        elif request_id not in self.turns:
            index, script = self.scripts.popleft()
            self.turns[request_id] = (index, deque(script))
        index, replies = self.turns[request_id]
        self.prompts.setdefault(request_id, []).append(list(prompt_ids))
        turn = len(self.prompts[request_id]) - 1
        if self.fail_at == (index, turn):
            raise ConnectionError("rollout server went away (scripted)")
        reply = replies.popleft() if replies else "Done."
        ids = self.tokenizer.encode(reply + "<|im_end|>", add_special_tokens=False)
        return TokenOutput(token_ids=ids, log_probs=[-0.5] * len(ids), stop_reason="completed")


def load_base(store: Any) -> None:
    """FACTS as a LoCoMo-like base: fact i told in turn D1:i+1 (its provenance), so the QA proxy credits a
    question's answer from the memory of its evidence (`row_for`'s questions cite D1:1 and D1:2)."""
    from memupdate.store import NewMemory

    store.create_many([
        NewMemory(text, kind="episodic", key=f"f{i:04d}", metadata={"dia_ids": [f"D1:{i + 1}"]})
        for i, text in enumerate(FACTS)
    ])


def row_for(
    base: Any, *, question: str = QUESTION, answer: str = ANSWER, qa_index: int = 0
) -> dict[str, Any]:
    """One preprocessed row on `base`, in the shape `memupdate data preprocess` writes."""
    from memupdate.agent.prompts import system_prompt, task_prompt
    from memupdate.agent.tools import MEMORY_TOOLS
    from memupdate.rl.data.namespaces import trajectory_namespace
    from memupdate.store.records import namespace_path

    trajectory = f"t-qa{qa_index}-{uuid.uuid4().hex[:8]}"
    bank = namespace_path(trajectory_namespace(base.namespace, trajectory))
    create_kwargs = {"base_namespace": base.path, "namespace": bank, "trajectory_id": trajectory}
    return {
        "data_source": "locomo",
        "prompt": [{"role": "system", "content": system_prompt()},
                   {"role": "user", "content": task_prompt(bank, question, len(FACTS))}],
        "ability": "memory_editing",
        "reward_model": {"style": "rule", "ground_truth": answer},
        "extra_info": {
            "split": "train", "sample_id": base.namespace[-1], "qa_index": qa_index, "category": 4,
            "question": question, "answer": answer, "evidence": ["D1:1"],
            "collateral": [{"qa_index": 99, "question": "What is Ann's job?", "answer": "nurse", "category": 1,
                            "evidence": ["D1:2"]}],
            "trajectory_id": trajectory, "base_namespace": base.path, "namespace": bank,
            "need_tools_kwargs": True, "index": qa_index,
            "tools_kwargs": {name: {"create_kwargs": create_kwargs} for name in MEMORY_TOOLS},
        },
    }


def write_parquet(rows: list[dict[str, Any]], path: Path) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


def make_loop(agent: str, config, server, tokenizer, tools):
    """One agent loop, as verl's AgentLoopWorker instantiates it for each rollout (inside the running loop)."""
    from hydra.utils import instantiate
    from verl.experimental.agent_loop.agent_loop import DictConfigWrap, ToolListWrap, _agent_loop_registry
    from verl.utils.dataset.rl_dataset import RLHFDataset

    registry = {
        "memupdate_agent": {"_target_": "memupdate.rl.verl.agent_loop.MemoryAgentLoop"},
        **_agent_loop_registry,
    }
    return instantiate(
        registry[agent], trainer_config=DictConfigWrap(config), server_manager=server, tokenizer=tokenizer,
        processor=None, hf_model_type="qwen2", dataset_cls=RLHFDataset, data_config=DictConfigWrap(config.data),
        tools=ToolListWrap(tools),
    )


def rollout_kwargs(row: dict) -> dict:
    """The dataset fields verl passes to `run` (RLHFDataset's row after `repeat(n)`)."""
    return {
        "raw_prompt": row["prompt"], "tools_kwargs": row["extra_info"]["tools_kwargs"], "extra_info": row["extra_info"],
        "index": row["extra_info"]["index"], "uid": str(uuid.uuid4()), "data_source": row["data_source"],
        "reward_model": row["reward_model"],
    }


def masked_text(tokenizer, output, value: int) -> str:
    return tokenizer.decode(
        [t for t, m in zip(output.response_ids, output.response_mask, strict=True) if m == value]
    )
