"""The compaction task on verl, on a CPU up to the trainer: `memupdate data preprocess --task compaction`
rows (one per neighbourhood of a LoCoMo or FactConsolidation bank), verl's own tool registry and agent
loops running them blind on a fork holding only the neighbourhood, the reward set in the loop by
`compute_compaction_reward` (equal to the offline learner's for the same edits), verl's AgentLoopWorker
and GRPO advantages on those rewards, the config, and `memupdate rl train --dry-run`.

The rollout server is scripted (token ids of Hermes tool calls, encoded with the tiny locally trained
tokenizer of the `tiny_model` fixture: no LLM weights exist here); verl's loops, tool registry, dataset,
PostgreSQL and the embedding model are real. The FactConsolidation file is a small one written here in
the benchmark's row shape (a "6k" context nested in a "32k" one), never the benchmark's data.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import uuid
from dataclasses import replace
from pathlib import Path

import pytest

pytest.importorskip("verl")

import pyarrow.parquet as pq
from typer.testing import CliRunner
from verl_support import (
    SAMPLING,
    TOOL_CONFIG,
    ScriptedServer,
    compose,
    cpu_overrides,
    make_loop,
    masked_text,
    rollout_kwargs,
    tool_call,
    validate,
)

from memupdate.agent.tools import MEMORY_TOOLS
from memupdate.rl.data.factconsolidation import fact_banks, load_factconsolidation
from memupdate.rl.data.namespaces import TRAJ_LABEL
from memupdate.rl.data.preprocess import COMPACTION, compaction_rows, compaction_unit
from memupdate.rl.distill.compaction import compaction_banks, preprocess_compaction
from memupdate.scoring.reward import RewardConfig, compute_compaction_reward

STALE, CURRENT = "The city Ann lives in is Paris.", "The city Ann lives in is Lisbon."


def facts_file(path: Path) -> Path:
    """A FactConsolidation file in the benchmark's shape: the small context's facts are all in the large
    one (as the 6k context's are in the 32k one), and the two ask one question alike."""
    tag = uuid.uuid4().hex[:8]  # a context of its own per test: its bank's name is its digest
    large = [
        f"The code word of run {tag} is blue.", STALE, "Ben works as a pilot.", "The sport Carl plays is tennis.",
        "Dora's favourite colour is green.", "The company Eve works for is Acme.", "Frank was born in the city of Oslo.",
        "The language Gina speaks is Spanish.", "Hugo's pet is a parrot.", CURRENT,
    ]
    small = [large[0], large[2], large[3]]

    def row(source: str, facts: list[str], qa: list[tuple[str, str]]) -> dict:
        context = "Here is a list of facts:\n" + "\n".join(f"{i}. {f}" for i, f in enumerate(facts))
        return {"source": source, "n_facts": len(facts), "context": context,
                "questions": [q for q, _ in qa], "answers": [[a] for _, a in qa]}

    rows = [
        row("factconsolidation_sh_6k", small, [("What sport does Carl play?", "tennis"), ("What is Ben's job?", "pilot")]),
        row("factconsolidation_sh_32k", large, [
            ("Which city does Ann live in?", "Lisbon"), ("What sport does Carl play?", "tennis"),
            ("Where was Frank born?", "Oslo"), ("What is Hugo's pet?", "parrot"),
        ]),
    ]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return path


@pytest.fixture
def fc_sets(tmp_path, engine, embedder):
    """The small file's sets; the banks preprocessing loads from them are dropped afterwards."""
    from memupdate.store import MemoryStore

    sets = load_factconsolidation(facts_file(tmp_path / "fc.jsonl"))
    yield sets
    root = MemoryStore(engine, embedder, ("memupdate",))
    for context in {s.context.context_id for s in sets}:
        for prefix in (("factconsolidation", context), ("factconsolidation", f"{context}-train")):
            for ns in root.list_namespaces(prefix=prefix):
                root.scoped(ns).drop()


@pytest.fixture
def fc_bank(fc_sets, worker_root):
    (bank,) = compaction_banks(worker_root, fact_banks(fc_sets)[0], size=4)
    return bank


@pytest.fixture(scope="module")
def config(tiny_model):
    return compose("locomo_memory_compaction_grpo", cpu_overrides(tiny_model))


@pytest.fixture(scope="module")
def tokenizer(tiny_model):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model)


@pytest.fixture(scope="module")
def tools():
    from verl.tools.tool_registry import initialize_tools_from_config

    return initialize_tools_from_config(str(TOOL_CONFIG))


def forks_left(base) -> list:
    return base.list_namespaces(prefix=(*base.namespace, TRAJ_LABEL))


# -- the rows ---------------------------------------------------------------------------------------


def test_preprocess_writes_one_row_per_neighbourhood(store, sample, fc_sets, tmp_path) -> None:
    """LoCoMo banks (the first n_train conversations train, the rest validate) and FactConsolidation's
    training bank (the large context minus the nested one's facts; the nested context writes no row), cut
    into the offline learner's units."""
    from memupdate.rl.distill.compaction import CompactionTask
    from memupdate.scoring.reward import RewardConfig

    held_out = replace(sample, sample_id=f"{sample.sample_id}-b")
    try:
        counts = preprocess_compaction(store, [sample, held_out], tmp_path / "out", factconsolidation=fc_sets, n_train=1, size=4)
        train = pq.read_table(tmp_path / "out" / "train.parquet").to_pylist()
        test = pq.read_table(tmp_path / "out" / "test.parquet").to_pylist()
    finally:
        for ns in store.list_namespaces(prefix=("locomo", held_out.sample_id)):
            store.scoped(ns).drop()
    assert counts == {"train": len(train), "test": len(test)} and test
    assert [r["extra_info"]["index"] for r in train] == list(range(len(train)))
    assert {r["extra_info"]["sample_id"] for r in test} == {held_out.sample_id}

    locomo = [r for r in train if r["data_source"] == "locomo"]
    facts = [r for r in train if r["data_source"] == "factconsolidation"]
    # The rows are the offline learner's units: neighbourhoods of at most `size`, each memory in one at most.
    task = CompactionTask(store, RewardConfig(), size=4)
    (training_facts,) = fact_banks(fc_sets)[0]
    for rows, bank in ((locomo, sample), (facts, training_facts)):
        units = task.training_units([bank], 0)
        assert [(r["extra_info"]["unit"], r["extra_info"]["neighbourhood"]) for r in rows] == [(u.index, list(u.keys)) for u in units]
    keys = [k for r in locomo for k in r["extra_info"]["neighbourhood"]]
    assert len(set(keys)) == len(keys) and set(keys) <= set(store.scoped(("locomo", sample.sample_id)).snapshot())
    assert all(1 <= len(r["extra_info"]["neighbourhood"]) <= 4 for r in train)
    fact_keys = {k for r in facts for k in r["extra_info"]["neighbourhood"]}
    assert {"s000001", "s000009"} <= fact_keys and not fact_keys & {"s000000", "s000002", "s000003"}  # the nested context's
    (bank,) = {r["extra_info"]["base_namespace"] for r in facts}
    assert bank.startswith("factconsolidation/c10-") and bank.endswith("-train")
    assert [q["question"] for q in facts[0]["extra_info"]["questions"]] == [
        "Which city does Ann live in?", "Where was Frank born?", "What is Hugo's pet?",  # not Carl's: the 6k asks it
    ]
    from memupdate.scoring.questions import scorable_questions

    scorable = [q.question for q in scorable_questions(sample)[0]]  # every question of the bank but adversarial ones
    assert [q["question"] for q in locomo[0]["extra_info"]["questions"]] == scorable and len(scorable) == 16

    for row in train + test:
        info = row["extra_info"]
        assert info["task"] == COMPACTION and info["namespace"].startswith(f"{info['base_namespace']}/{TRAJ_LABEL}/")
        assert "Target question" not in row["prompt"][1]["content"]  # blind: no question to prepare for
        assert f"The bank holds {len(info['neighbourhood'])} memories." in row["prompt"][1]["content"]
        assert set(info["tools_kwargs"]) == set(MEMORY_TOOLS)
        kwargs = info["tools_kwargs"]["search_memory"]["create_kwargs"]
        assert kwargs["neighbourhood"] == info["neighbourhood"] and kwargs["base_namespace"] == info["base_namespace"]


# -- rollouts through verl's loop -------------------------------------------------------------------


async def run_group(agent, scripts, config, tokenizer, tools, row):
    server = ScriptedServer(tokenizer, scripts)
    loops = [make_loop(agent, config, server, tokenizer, tools) for _ in scripts]
    outputs = await asyncio.gather(*(loop.run(dict(SAMPLING), **rollout_kwargs(row)) for loop in loops))
    found = {}
    for output in outputs:  # each output under the index of the script it followed (their last replies differ)
        written = masked_text(tokenizer, output, 1)
        (index,) = [i for i, script in enumerate(scripts) if script[-1] in written]
        found[index] = output
    return [found[i] for i in range(len(scripts))], server


def unit_row(bank, key: str) -> dict:
    """The compaction row whose neighbourhood holds `key`."""
    (row,) = [r for r in compaction_rows(bank, "train") if key in r["extra_info"]["neighbourhood"]]
    row["extra_info"]["index"] = 0  # as `write_splits` numbers it
    return row


def offline_reward(bank, row, calls: list[dict]) -> float:
    """The offline learner's reward for the same edits: `neighbourhood_episode` (the graph, on a scratch
    namespace holding the neighbourhood) in a fork of the bank, then `compute_compaction_reward`."""
    from langchain_core.messages import AIMessage
    from scripted_chat import ScriptedModel

    from memupdate.agent.compaction import neighbourhood_episode

    keys, questions = compaction_unit(row["extra_info"])
    model = ScriptedModel(responses=[
        AIMessage("", tool_calls=[{"name": c["name"], "args": c["arguments"], "id": f"c{i}"}]) for i, c in enumerate(calls)
    ] + [AIMessage("Done.")])
    with bank.base.forked((*bank.base.namespace, TRAJ_LABEL, f"offline-{uuid.uuid4().hex[:8]}")) as fork:
        episode = neighbourhood_episode(model, fork, keys, "e")
        return compute_compaction_reward(bank.base, fork, questions, keys, RewardConfig(), episode.failed_calls).reward


async def test_compaction_rollouts_run_blind_on_their_neighbourhood_and_score_like_the_offline_learner(
    config, tokenizer, tools, fc_bank
) -> None:
    row = unit_row(fc_bank, "s000009")
    keys = row["extra_info"]["neighbourhood"]
    assert "s000001" in keys  # the stale and the current value of one fact meet in one neighbourhood
    supersede = {"name": "delete_memory", "arguments": {"memory_id": "s000001", "superseded_by": "s000009"}}
    lose = {"name": "delete_memory", "arguments": {"memory_id": "s000009"}}
    scripts = [
        [tool_call("sample_memory", {"k": 20}), tool_call(**supersede), "Superseded the stale value."],
        [tool_call(**lose), "Removed the current value."],
        [tool_call("search_memory", {"query": "Ann city"}), "Looked only."],
        ["Nothing to change."],
        [tool_call("delete_memory", {"memory_id": "no-such-memory"}), "Tried a wrong id."],
    ]
    (supersedes, loses, looks, silent, refused), server = await run_group("memupdate_agent", scripts, config, tokenizer, tools, row)

    # Blind, and its searches and samples see only the neighbourhood.
    first_prompt = tokenizer.decode(next(iter(server.prompts.values()))[0])
    assert "Target question" not in first_prompt and f"The bank holds {len(keys)} memories." in first_prompt
    sampled = masked_text(tokenizer, supersedes, 0)
    bank_texts = {m.key: m.content for m in fc_bank.base.list()}
    assert all(bank_texts[k] in sampled for k in keys)
    assert not any(text in sampled for k, text in bank_texts.items() if k not in keys)

    # The reward is set in the loop, by the compaction reward, on the whole bank.
    # Superseding the stale value helps the question it rivals (QA proxy v3); deleting the current one hurts.
    assert supersedes.reward_score > 0 > loses.reward_score
    assert looks.reward_score == 0.0 and silent.reward_score == 0.0
    assert refused.reward_score == pytest.approx(-RewardConfig().failed_call_cost)
    parts = supersedes.extra_fields["reward_extra_info"]
    assert parts["edits"] == 1.0 and parts["forked"] == 1.0 and parts["reach"] >= 1
    assert silent.extra_fields["reward_extra_info"]["forked"] == 0.0
    assert len({tuple(sorted(o.extra_fields["reward_extra_info"])) for o in (supersedes, loses, looks, silent, refused)}) == 1
    assert forks_left(fc_bank.base) == [] and fc_bank.base.count() == 7

    # The same edits, run by the offline learner's episode, earn the same reward.
    assert supersedes.reward_score == pytest.approx(offline_reward(fc_bank, row, [supersede]), abs=1e-9)
    assert loses.reward_score == pytest.approx(offline_reward(fc_bank, row, [lose]), abs=1e-9)
    assert forks_left(fc_bank.base) == []


async def test_calls_verl_never_ran_cost_as_the_graphs_failed_calls(config, tokenizer, tools, fc_bank) -> None:
    """verl's parser drops a call it cannot read and ends the episode; the offline learner's graph counts
    such a call as failed, and so does the compaction reward here (with or without a fork)."""
    row = unit_row(fc_bank, "s000009")
    broken = '<tool_call>\n{"name": "delete_memory", "arguments": {"memory_id": }\n</tool_call>'
    scripts = [[broken + " Broke it."], [tool_call("search_memory", {"query": "Ann"}), broken + " Broke after a look."]]
    (only_broken, looked_then_broke), _ = await run_group("memupdate_agent", scripts, config, tokenizer, tools, row)
    cost = RewardConfig().failed_call_cost
    assert only_broken.reward_score == pytest.approx(-cost) and looked_then_broke.reward_score == pytest.approx(-cost)
    assert only_broken.extra_fields["reward_extra_info"]["forked"] == 0.0
    assert looked_then_broke.extra_fields["reward_extra_info"]["failed_calls"] == 1.0
    assert looked_then_broke.extra_fields["reward_extra_info"]["tool_calls"] == 1.0
    assert forks_left(fc_bank.base) == []


async def test_stock_tool_agent_loop_scores_a_compaction_row_with_compute_score(config, tokenizer, tools, fc_bank) -> None:
    from memupdate.rl.verl import forks
    from memupdate.rl.verl.compute_score import compute_score

    row = unit_row(fc_bank, "s000009")
    scripts = [[tool_call("delete_memory", {"memory_id": "s000009"}), "Removed it."], ["No edits needed."]]
    (edited, silent), _ = await run_group("tool_agent", scripts, config, tokenizer, tools, row)
    assert edited.reward_score is None and edited.extra_fields[forks.FORK_KEY]
    in_loop, _ = await run_group("memupdate_agent", scripts[:1], config, tokenizer, tools, row)
    scores = [
        await compute_score(row["data_source"], tokenizer.decode(output.response_ids), "",  # as verl's reward manager
                            {**row["extra_info"], **output.extra_fields})
        for output in (edited, silent)
    ]
    assert scores[0]["score"] == pytest.approx(in_loop[0].reward_score, abs=1e-9) and scores[0]["score"] < 0
    assert scores[1]["score"] == 0.0 and sorted(scores[0]) == sorted(scores[1])
    assert forks_left(fc_bank.base) == []


async def test_a_row_whose_bank_changed_is_a_clear_tool_error(config, tokenizer, tools, fc_bank) -> None:
    row = unit_row(fc_bank, "s000009")
    fc_bank.base.delete("s000009")  # the bank lost a memory after the dataset was written
    (output,), _ = await run_group("memupdate_agent", [[tool_call("sample_memory", {"k": 5}), "Gave up."]],
                                   config, tokenizer, tools, row)
    assert "the bank changed since the dataset was written" in masked_text(tokenizer, output, 0)
    assert output.extra_fields["reward_extra_info"]["forked"] == 0.0 and output.reward_score == 0.0
    assert forks_left(fc_bank.base) == []


# -- verl's worker, the config, the launcher --------------------------------------------------------


N = 4
KIND = {"Superseded.": "supersedes", "Removed.": "loses", "Looked.": "reads", "Fine.": "silent"}


async def test_agent_loop_worker_turns_compaction_parquet_into_rm_scores_and_grpo_advantages(
    tiny_model, fc_bank, tmp_path
) -> None:
    """verl's RLHFDataset reads the parquet `preprocess_compaction` writes; its AgentLoopWorker (no Ray)
    runs n rollouts per row through `memupdate_agent`; verl's GRPO estimator ranks them within each row."""
    import numpy as np
    import torch
    from verl.experimental.agent_loop.agent_loop import AgentLoopWorker
    from verl.protocol import DataProto
    from verl.trainer.ppo.core_algos import compute_grpo_outcome_advantage
    from verl.utils.dataset.rl_dataset import RLHFDataset, collate_fn

    from memupdate.rl.data.preprocess import write_splits

    rows = compaction_rows(fc_bank, "train")
    target = next(r for r in rows if "s000009" in r["extra_info"]["neighbourhood"])
    other = next(r for r in rows if r is not target)
    write_splits({"train": [target, other], "test": [other]}, tmp_path)
    scripts = {
        target["extra_info"]["trajectory_id"]: [
            [tool_call("delete_memory", {"memory_id": "s000001", "superseded_by": "s000009"}), "Superseded."],
            [tool_call("delete_memory", {"memory_id": "s000009"}), "Removed."],
            [tool_call("search_memory", {"query": "Ann"}), "Looked."],
            ["Fine."],
        ],
        other["extra_info"]["trajectory_id"]: [["Fine."]] * N,
    }
    config = compose("locomo_memory_compaction_grpo", cpu_overrides(tiny_model, tmp_path, n=N))
    server = ScriptedServer(None, by_question=scripts)  # the row's trajectory id is in its prompt
    worker = AgentLoopWorker(config, llm_client=server, reward_loop_worker_handles=None)
    server.tokenizer = worker.tokenizer
    dataset = RLHFDataset(data_files=[config.data.train_files], tokenizer=worker.tokenizer, config=config.data, processor=None)
    batch = DataProto.from_single_dict(collate_fn([dataset[i] for i in range(len(dataset))]))
    batch.non_tensor_batch["uid"] = np.array([str(uuid.uuid4()) for _ in range(len(batch))], dtype=object)
    batch = batch.repeat(repeat_times=N, interleave=True)
    output = await worker.generate_sequences(batch)

    scores = output.batch["rm_scores"].sum(dim=-1).tolist()
    kinds = []
    for ids, mask in zip(output.batch["responses"], output.batch["response_mask"], strict=True):
        written = worker.tokenizer.decode(ids[mask.bool()])
        kinds.append(next(k for reply, k in KIND.items() if reply in written))
    by_kind = {k: [s for s, kk in zip(scores, kinds, strict=True) if kk == k] for k in KIND.values()}
    assert by_kind["supersedes"][0] > 0 > by_kind["loses"][0]
    assert all(s == 0.0 for s in by_kind["reads"] + by_kind["silent"])
    assert "reach" in output.meta_info["reward_extra_keys"]
    assert forks_left(fc_bank.base) == []

    mask = output.batch["response_mask"]
    advantages, _ = compute_grpo_outcome_advantage(
        token_level_rewards=output.batch["rm_scores"], response_mask=mask, index=batch.non_tensor_batch["uid"]
    )
    per_rollout = ((advantages * mask).sum(-1) / mask.sum(-1)).tolist()
    loses = kinds.index("loses")
    assert per_rollout[kinds.index("supersedes")] > 0 > per_rollout[loses]
    assert per_rollout[N:] == [0.0] * N  # the other row's rollouts all scored 0: no signal
    assert torch.isfinite(advantages).all()


def test_compaction_config_composes_over_verl_and_validates() -> None:
    config = compose("locomo_memory_compaction_grpo")
    validate(config)
    grpo = compose("locomo_memory_grpo")
    assert config.data.train_files == "data/compaction/train.parquet" and config.data.val_files == "data/compaction/test.parquet"
    assert config.trainer.experiment_name == "locomo_memory_compaction_grpo"
    # Everything but the data and the run's name is the targeted GRPO config's.
    from omegaconf import OmegaConf

    for key in ("actor_rollout_ref", "algorithm", "reward"):
        assert OmegaConf.to_container(config[key]) == OmegaConf.to_container(grpo[key]), key
    assert config.actor_rollout_ref.rollout.agent.default_agent_loop == "memupdate_agent"


@pytest.fixture
def written_dataset(engine, embedder, database_url, tmp_path):
    """`memupdate data preprocess --task compaction` on a LoCoMo file (one conversation, validation) and the
    small FactConsolidation file (its training bank): the data folder and the printed dry run."""
    from memupdate.cli import app
    from memupdate.store import MemoryStore

    runner = CliRunner()
    fc_file = facts_file(tmp_path / "fc.jsonl")
    sets = load_factconsolidation(fc_file)
    sample_id = f"sample-{uuid.uuid4().hex[:8]}"  # a bank of its own: other tests load the shipped sample
    shipped = Path(__file__).resolve().parents[1] / "rl" / "data" / "sample_conversation.json"
    (conversation,) = json.loads(shipped.read_text())
    locomo = tmp_path / "locomo.json"
    locomo.write_text(json.dumps([{**conversation, "sample_id": sample_id}]))
    data = tmp_path / "data"
    try:
        result = runner.invoke(app, ["data", "preprocess", "--task", "compaction", "--locomo", str(locomo),
                                     "--n-train", "0", "--factconsolidation", str(fc_file), "--size", "4",
                                     "--out", str(data), "--url", database_url])
        assert result.exit_code == 0, result.output
        rows = {split: pq.read_table(data / f"{split}.parquet").to_pylist() for split in ("train", "test")}
        assert {r["data_source"] for r in rows["train"]} == {"factconsolidation"}
        assert {r["extra_info"]["sample_id"] for r in rows["test"]} == {sample_id}
        assert f"wrote {data}/train.parquet ({len(rows['train'])} rows)" in " ".join(result.output.split())

        result = runner.invoke(app, ["rl", "train", "--config", "locomo_memory_compaction_grpo", "--dry-run", "--url",
                                     database_url, f"trainer.default_local_dir={tmp_path / 'ckpt'}",
                                     f"data.train_files={data / 'train.parquet'}", f"data.val_files={data / 'test.parquet'}"])
        assert result.exit_code == 0, result.output
        yield data, result.output
    finally:
        root = MemoryStore(engine, embedder, ("memupdate",))
        for prefix in [("locomo", sample_id)] + [("factconsolidation", f"{s.context.context_id}-train") for s in sets]:
            for ns in root.list_namespaces(prefix=prefix):
                root.scoped(ns).drop()


def test_preprocess_command_then_dry_run_prints_the_command(written_dataset, tmp_path) -> None:
    data, output = written_dataset
    assert "2 base namespaces loaded" in output  # the conversation's and FactConsolidation's training bank
    config_text, command = output.split("# resolved config\n", 1)[1].split("# command\n")
    assert "experiment_name: locomo_memory_compaction_grpo" in config_text and "memupdate_agent" in config_text
    assert "python -m verl.trainer.main_ppo --config-path" in command
    assert "--config-name locomo_memory_compaction_grpo" in command and f"data.train_files={data / 'train.parquet'}" in command
    assert not (tmp_path / "ckpt").exists()  # a dry run writes nothing


@pytest.mark.slow
def test_the_printed_command_runs_unchanged_in_verls_entry_point(written_dataset, database_url) -> None:
    """What a GPU user pastes into bash; `--cfg job` makes verl print the config it would train with and exit."""
    data, output = written_dataset
    command = output.split("# command\n")[1]
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
           "MEMUPDATE_DATABASE_URL": database_url}
    ran = subprocess.run(["bash", "-c", command.strip() + " --cfg job"], env=env, capture_output=True, text=True, timeout=300)
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert "experiment_name: locomo_memory_compaction_grpo" in ran.stdout and str(data / "train.parquet") in ran.stdout
