"""The relation task on verl, on a CPU up to the trainer: `memupdate data preprocess --task relation` rows
(one per candidate pair of a `memupdate judge learn` run's reward table, the endpoint judge's prompt, the
unit's per-decision rewards in the row), the verdict's score (`rl.verl.relation_score`, through
`compute_score`, no database), verl's single-turn agent loop and reward worker turning the parquet into
`rm_scores`, verl's GRPO advantages on them, the config, and `memupdate rl train --dry-run`.

The rollout server is scripted (token ids of JSON verdicts, encoded with the tiny locally trained
tokenizer of the `tiny_model` fixture: no LLM weights exist here); verl's dataset, loop, reward manager
and GRPO estimator are real, and so is the embedding model that rebuilds the pairs in the CLI test. The
Jenverse file there is a small one written here in the benchmark's shape, never the benchmark's data.
The reward worker's database is a stand-in that fails on any use: relation rows never read one.
"""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
import uuid
from dataclasses import asdict
from pathlib import Path

import pytest

from memupdate.judge.endpoint import prompt_for
from memupdate.judge.pairs import LabelledPair
from memupdate.rl.data.relation_rewards import RewardRow, read_rewards
from memupdate.rl.data.relation_rows import (
    RELATION,
    is_relation_row,
    preprocess_relation,
    relation_row,
    relation_splits,
)
from memupdate.rl.data.relation_units import RelationBank, RelationUnit
from memupdate.rl.distill.config import LearnConfig, RelationConfig
from memupdate.rl.distill.relation import banks_of, run_config
from memupdate.rl.verl.relation_score import score_verdict
from memupdate.scoring.reward import RewardConfig

COST = RewardConfig().failed_call_cost
OLD = LabelledPair("Sam lives in Paris.", "Sam moved to Berlin last month.", "update", "2024-03-01", "2024-09-12",
                   source="jenverse", group="jenverse-ben_02")
SAME = LabelledPair("Sam is a nurse.", "Sam works as a nurse at the city hospital.", "", "2024-03-01", "2024-03-04",
                    source="locomo", group="jenverse-ben_02")
FLAT = LabelledPair("Sam likes tea.", "Sam plays chess.", "", None, None, source="jenverse", group="jenverse-ben_02")
HELD = LabelledPair("Ivo drives a Fiat.", "Ivo drives a Tesla now.", "", "2024-01-01", "2024-01-05",
                    source="longmemeval-knowledge-update", group="jenverse-ivo_09")
HELD_SAME = LabelledPair("Ivo plays tennis.", "Ivo plays tennis on Sundays.", "", "2024-01-01", "2024-01-05",
                         source="jenverse", group="jenverse-ivo_09")


def verdict(relation: str, current: str | None = None) -> str:
    return json.dumps({"relation": relation, "current": current, "confidence": 0.9})


def table_row(pair: LabelledPair, part: str, keep: float, update: float, duplicate: float) -> RewardRow:
    unit = RelationUnit(pair.group, part, pair)
    return RewardRow(unit.key, pair.group, part, pair.label, pair.source, keep, 1, update, duplicate)


TABLE = [
    table_row(OLD, "train", 0.0, 0.2, -0.1),
    table_row(SAME, "train", 0.0, -0.004, 0.031),  # the update's change is below the 0.01 resolution
    table_row(FLAT, "train", 0.0, 0.0, 0.0),  # every decision earns the same: no signal
    table_row(HELD, "recipe", 0.0, 0.1, 0.0),
    table_row(HELD_SAME, "recipe", 0.0, 0.0, 0.0),  # no signal: left out of validation too
]
BANKS = [
    RelationBank("jenverse-ben_02", "train", [], [OLD, SAME, FLAT]),
    RelationBank("jenverse-ivo_09", "recipe", [], [HELD, HELD_SAME]),
]


def extra_info(row: RewardRow) -> dict:
    return relation_row(row, OLD, "train")["extra_info"]


# -- the score of a verdict ---------------------------------------------------------------------------


@pytest.mark.parametrize(("reply", "reward", "decision"), [
    (verdict("update", "second"), 0.2, "update"),
    (verdict("update", "first"), 0.2, "update"),  # `current` is read, not rewarded: the table supersedes the earlier
    (verdict("duplicate"), -0.1, "duplicate"),
    (verdict("compatible"), 0.0, "keep"),
    (verdict("events"), 0.0, "keep"),
    ('Both say where Sam lives. {"relation": "update", "current": "second", "confidence": 0.8} Done.', 0.2, "update"),
])
def test_a_verdict_earns_its_decisions_reward(reply: str, reward: float, decision: str) -> None:
    score = score_verdict(reply, extra_info(TABLE[0]))
    assert score["score"] == pytest.approx(reward, abs=1e-12) and score["readable"] == 1.0
    assert [name for name in ("duplicate", "update", "keep") if score[name]] == [decision]
    assert score["best"] == float(decision == "update")


@pytest.mark.parametrize("reply", ["update", "", "{relation: update}", '{"relation": "contradiction"}', '{"verdict": "update"}'])
def test_an_unreadable_reply_keeps_both_and_pays_the_failed_call_cost(reply: str) -> None:
    """What EndpointJudge makes of it (compatible: keep, reward 0 here) less the editing tasks' format term."""
    score = score_verdict(reply, extra_info(TABLE[0]))
    assert score["score"] == pytest.approx(-COST) and score["readable"] == 0.0
    assert score["keep"] == score["update"] == score["duplicate"] == score["best"] == 0.0
    bigger = score_verdict(reply, extra_info(TABLE[0]), RewardConfig(failed_call_cost=0.05))
    assert bigger["score"] == pytest.approx(-0.05)


def test_rewards_are_read_at_the_offline_learners_resolution_and_keys_never_change() -> None:
    info = relation_row(TABLE[1], SAME, "train")["extra_info"]
    assert score_verdict(verdict("update"), info)["score"] == 0.0  # -0.004: the proxy's noise
    assert score_verdict(verdict("duplicate"), info)["score"] == pytest.approx(0.03)
    keys = {tuple(sorted(score_verdict(r, info))) for r in (verdict("update"), verdict("events"), "nonsense")}
    assert len(keys) == 1  # verl's reward_extra_info needs the same keys for every rollout


async def test_compute_score_routes_a_relation_row_without_a_database(no_database) -> None:
    from memupdate.rl.verl.compute_score import compute_score

    row = relation_row(TABLE[0], OLD, "train")
    score = await compute_score(row["data_source"], verdict("update", "second"), "update", row["extra_info"])
    assert score == score_verdict(verdict("update", "second"), row["extra_info"])
    bad = await compute_score(row["data_source"], "I think they are the same.", "update", row["extra_info"],
                              failed_call_cost=0.02)
    assert bad["score"] == pytest.approx(-0.02)


# -- the rows -----------------------------------------------------------------------------------------


def test_a_row_is_the_endpoint_judges_prompt_with_the_units_rewards() -> None:
    row = relation_row(TABLE[0], OLD, "train")
    assert row["data_source"] == "relation/jenverse" and row["reward_model"] == {"style": "rule", "ground_truth": "update"}
    (message,) = row["prompt"]
    assert message == {"role": "user", "content": prompt_for(*OLD.statements)}
    for text in (OLD.first, OLD.second, "(2024-03-01)", "(2024-09-12)", '"relation"'):
        assert text in message["content"]
    info = row["extra_info"]
    assert is_relation_row(info) and info["task"] == RELATION and json.loads(info["key"]) == [OLD.group, OLD.first, OLD.second]
    assert info["rewards"] == {"duplicate": -0.1, "update": 0.2, "keep": 0.0}
    assert "tools_kwargs" not in info and "base_namespace" not in info  # no tools, no bank to fork
    no_time = relation_row(TABLE[2], FLAT, "train")["prompt"][0]["content"]
    assert "(time unknown)" in no_time


def test_rows_are_the_informative_units_training_and_recipe(tmp_path) -> None:
    import pyarrow.parquet as pq

    splits, unmatched, uninformative = relation_splits(TABLE, BANKS)
    assert [r["extra_info"]["key"] for r in splits["train"]] == [TABLE[0].key, TABLE[1].key]
    assert [r["extra_info"]["key"] for r in splits["test"]] == [TABLE[3].key]
    assert (unmatched, uninformative) == (0, 2)

    stranger = table_row(LabelledPair("Zed is tall.", "Zed is short.", "", group="jenverse-zed"), "train", 0, 0.1, 0)
    path = tmp_path / "rewards.jsonl"
    path.write_text("".join(json.dumps(r.to_json()) + "\n" for r in [*TABLE, stranger]))
    export = preprocess_relation(path, BANKS, tmp_path / "out")
    assert export.counts == {"train": 2, "test": 1} and export.unmatched == 1 and export.uninformative == 2
    train = pq.read_table(tmp_path / "out" / "train.parquet").to_pylist()
    assert [r["extra_info"]["index"] for r in train] == [0, 1]
    assert train[0]["extra_info"]["rewards"] == {"duplicate": -0.1, "update": 0.2, "keep": 0.0}
    assert score_verdict(verdict("update"), train[0]["extra_info"])["score"] == pytest.approx(0.2)  # round trip


def test_a_table_that_matches_no_pair_or_is_broken_names_the_fix(tmp_path) -> None:
    from memupdate.errors import MemupdateError

    path = tmp_path / "rewards.jsonl"
    path.write_text(json.dumps(TABLE[0].to_json()) + "\n")
    with pytest.raises(MemupdateError, match="metrics.json holds the run's seed"):
        preprocess_relation(path, BANKS[1:], tmp_path / "out")
    path.write_text(json.dumps(TABLE[0].to_json()) + "\n{\"key\": \n")
    with pytest.raises(MemupdateError, match=r"rewards.jsonl:2 is not JSON"):
        read_rewards(path)
    path.write_text(json.dumps({"key": "k", "group": "g", "part": "train", "keep": 0.0}) + "\n")
    with pytest.raises(MemupdateError, match=r"rewards.jsonl:1 lacks \['label', 'source', 'touched', 'update', 'duplicate'\]"):
        read_rewards(path)
    with pytest.raises(MemupdateError, match="run `memupdate judge learn"):
        read_rewards(tmp_path / "none.jsonl")


def test_the_runs_config_decides_the_banks(tmp_path) -> None:
    assert run_config(tmp_path) == LearnConfig(task="relation")
    run = LearnConfig(task="relation", seed=7, relation=RelationConfig(locomo_units=12, steps=5))
    (tmp_path / "metrics.json").write_text(json.dumps({"config": asdict(run)}))
    assert run_config(tmp_path) == run
    # A run written before the one learning pipeline kept its settings flat, GRPO's rate as `learning_rate`.
    (tmp_path / "metrics.json").write_text(json.dumps({"config": {"seed": 7, "locomo_units": 12, "learning_rate": 1e-4, "gone": 1}}))
    assert run_config(tmp_path) == LearnConfig(task="relation", seed=7, relation=RelationConfig(locomo_units=12, grpo_learning_rate=1e-4))


# -- verl: the config, the single-turn loop, the reward worker, GRPO -----------------------------------

N = 4
REPLIES = {  # by the row's later statement: the n rollouts' replies
    OLD.second: [verdict("update", "second"), verdict("duplicate"), verdict("compatible"), "No idea."],
    SAME.second: [verdict("duplicate")] * N,
}


@pytest.fixture
def no_database():
    """A rollout worker's store that fails on any use: scoring a relation row must never open one."""
    from memupdate.rl.verl import worker_db

    class Forbidden:
        def __getattr__(self, name):
            raise AssertionError(f"a relation row touched the database ({name})")

    worker_db.use_worker_store(Forbidden())
    try:
        yield
    finally:
        worker_db.use_worker_store(None)


class InProcessReward:
    """Stands in for a Ray handle of verl's RewardLoopWorker, pickling the batch as Ray would."""

    def __init__(self, worker):
        self.compute_score = self
        self.worker = worker

    async def remote(self, data):
        return await self.worker.compute_score(pickle.loads(pickle.dumps(data)))


def relation_config(tiny_model, data_dir=None):
    from verl_support import compose, cpu_overrides

    return compose("relation_grpo", cpu_overrides(tiny_model, data_dir, agent="single_turn_agent", n=N))


def test_relation_config_composes_over_verl_and_validates() -> None:
    pytest.importorskip("verl")
    from omegaconf import OmegaConf
    from verl_support import compose, validate

    config = compose("relation_grpo")
    validate(config)
    grpo = compose("locomo_memory_grpo")
    rollout = config.actor_rollout_ref.rollout
    assert config.data.train_files == "data/relation/train.parquet" and config.data.val_files == "data/relation/test.parquet"
    assert config.trainer.experiment_name == "relation_grpo"
    assert not rollout.multi_turn.enable and rollout.agent.default_agent_loop == "single_turn_agent"
    assert (config.data.max_prompt_length, config.data.max_response_length) == (1024, 128)
    assert (rollout.prompt_length, rollout.response_length) == (1024, 128)  # verl reads them from data
    assert config.reward.custom_reward_function.path == "pkg://memupdate.rl.verl.compute_score"
    # The algorithm, the reward hook, the model and the actor are the editing GRPO config's.
    for key in ("algorithm", "reward", "actor_rollout_ref.model", "actor_rollout_ref.actor"):
        assert OmegaConf.to_container(OmegaConf.select(config, key)) == OmegaConf.to_container(OmegaConf.select(grpo, key)), key


async def test_agent_loop_worker_turns_relation_parquet_into_rm_scores_and_grpo_advantages(tiny_model, tmp_path, no_database) -> None:
    """verl's RLHFDataset reads the parquet `preprocess_relation` writes; its AgentLoopWorker (no Ray) runs n
    single-turn rollouts per row; verl's RewardLoopWorker scores each through `compute_score`; verl's GRPO
    estimator ranks them within each row."""
    pytest.importorskip("verl")
    import numpy as np
    import torch
    from verl.experimental.agent_loop.agent_loop import AgentLoopWorker
    from verl.experimental.reward_loop.reward_loop import RewardLoopWorker
    from verl.protocol import DataProto
    from verl.trainer.ppo.core_algos import compute_grpo_outcome_advantage
    from verl.utils.dataset.rl_dataset import RLHFDataset, collate_fn
    from verl_support import ScriptedServer

    path = tmp_path / "rewards.jsonl"
    path.write_text("".join(json.dumps(r.to_json()) + "\n" for r in TABLE))
    preprocess_relation(path, BANKS, tmp_path)
    config = relation_config(tiny_model, tmp_path)
    server = ScriptedServer(None, by_question={text: [[reply] for reply in replies] for text, replies in REPLIES.items()})
    worker = AgentLoopWorker(config, llm_client=server, reward_loop_worker_handles=[InProcessReward(RewardLoopWorker(config))])
    server.tokenizer = worker.tokenizer
    dataset = RLHFDataset(data_files=[config.data.train_files], tokenizer=worker.tokenizer, config=config.data, processor=None)
    batch = DataProto.from_single_dict(collate_fn([dataset[i] for i in range(len(dataset))]))
    batch.non_tensor_batch["uid"] = np.array([str(uuid.uuid4()) for _ in range(len(batch))], dtype=object)
    batch = batch.repeat(repeat_times=N, interleave=True)
    output = await worker.generate_sequences(batch)

    # One turn: the prompt is the endpoint judge's, and every response token is the model's.
    first_prompt = worker.tokenizer.decode(next(iter(server.prompts.values()))[0])
    assert "Reply with JSON only" in first_prompt and all(len(p) == 1 for p in server.prompts.values())
    assert bool(output.batch["response_mask"].sum(-1).gt(0).all())
    scores = output.batch["rm_scores"].sum(dim=-1).tolist()
    # Rollouts run concurrently: each is known by the reply it wrote (the scripted server hands them out).
    written = [worker.tokenizer.decode(ids[mask.bool()], skip_special_tokens=True).strip()
               for ids, mask in zip(output.batch["responses"], output.batch["response_mask"], strict=True)]
    kinds = [next(k for k, reply in enumerate(REPLIES[OLD.second]) if reply == text) for text in written[:N]]
    assert sorted(kinds) == [0, 1, 2, 3] and written[N:] == REPLIES[SAME.second]
    expected = [0.2, -0.1, 0.0, -COST]  # update, duplicate, compatible, unreadable
    assert scores[:N] == pytest.approx([expected[k] for k in kinds])
    assert scores[N:] == pytest.approx([0.03] * N)
    extra = output.non_tensor_batch
    assert [extra["readable"][i] for i in range(N)] == [float(k != 3) for k in kinds]
    assert [extra["best"][i] for i in range(N)] == [float(k == 0) for k in kinds]

    mask = output.batch["response_mask"]
    advantages, _ = compute_grpo_outcome_advantage(
        token_level_rewards=output.batch["rm_scores"], response_mask=mask, index=batch.non_tensor_batch["uid"]
    )
    per_rollout = ((advantages * mask).sum(-1) / mask.sum(-1)).tolist()
    by_kind = [per_rollout[kinds.index(k)] for k in range(4)]
    assert by_kind[0] > by_kind[2] > by_kind[3] > by_kind[1]  # update > keep > unreadable > merge
    assert by_kind[0] > 0 > by_kind[1]
    assert per_rollout[N:] == [0.0] * N  # the same verdict four times: no signal
    assert torch.isfinite(advantages).all()


# -- the commands -------------------------------------------------------------------------------------


def jenverse_file(data: Path) -> None:
    """Two profiles in the benchmark's shape: ben_02 falls in the training part, ivo_09 in the recipe part."""
    def profile(user: str, name: str, sessions: list[list[dict]], tests: list[dict]) -> dict:
        return {"user_id": user, "name": name, "memory_tests": tests,
                "sessions": [{"session_id": i + 1, "turns": [], "expected_memories_after": facts} for i, facts in enumerate(sessions)]}

    profiles = [
        profile("ben_02", "Ben", [
            [{"fact": "Lives in Boston"}, {"fact": "Works as a data scientist"}, {"fact": "Has a dog named Rex"}],
            [{"fact": "Moved to Denver", "contradicts": "Lives in Boston"}, {"fact": "Works as a data scientist at a biotech company"}],
        ], [{"query": "Where does Ben live?", "correct_answer": "Denver", "wrong_answer": "Boston", "category": "contradiction_update"}]),
        profile("ivo_09", "Ivo", [
            [{"fact": "Drives a Fiat"}, {"fact": "Plays tennis on Sundays"}],
            [{"fact": "Drives a Tesla now", "contradicts": "Drives a Fiat"}],
        ], [{"query": "What car does Ivo drive?", "correct_answer": "Tesla", "wrong_answer": "Fiat", "category": "contradiction_update"}]),
    ]
    (data / "natural-updates").mkdir(parents=True)
    (data / "natural-updates" / "memorybench-jenverse-dev.json").write_text(json.dumps({"PROFILES": profiles}))


@pytest.fixture
def written_relation_dataset(tmp_path, embedder):
    """`memupdate data preprocess --task relation` on a reward table of the small Jenverse file's units (the
    rewards made up here: the table is `memupdate judge learn`'s), then `rl train --config relation_grpo --dry-run`."""
    from typer.testing import CliRunner

    from memupdate.cli import app

    data = tmp_path / "data"
    jenverse_file(data)
    banks = banks_of(data, LearnConfig(task="relation"), embedder.embed)
    assert {b.part for b in banks} == {"train", "recipe"}
    rows = []
    for bank in banks:
        for i, pair in enumerate(bank.pairs):
            rows.append(table_row(pair, bank.part, 0.0, 0.1 if i % 2 == 0 else 0.0, -0.05 if i % 2 == 0 else 0.0))
    run = tmp_path / "run"
    run.mkdir()
    (run / "rewards.jsonl").write_text("".join(json.dumps(r.to_json()) + "\n" for r in rows))
    out = tmp_path / "relation"
    runner = CliRunner()
    result = runner.invoke(app, ["data", "preprocess", "--task", "relation", "--rewards", str(run / "rewards.jsonl"),
                                 "--data", str(data), "--out", str(out)])
    assert result.exit_code == 0, result.output
    env = {k: v for k, v in os.environ.items() if k != "MEMUPDATE_DATABASE_URL"}
    dry = runner.invoke(app, ["rl", "train", "--config", "relation_grpo", "--dry-run", f"trainer.default_local_dir={tmp_path / 'ckpt'}",
                              f"data.train_files={out / 'train.parquet'}", f"data.val_files={out / 'test.parquet'}"], env=env)
    return banks, rows, out, result.output, dry


def test_preprocess_relation_command_then_dry_run_needs_no_database(written_relation_dataset, tmp_path) -> None:
    pytest.importorskip("verl")
    import pyarrow.parquet as pq

    banks, rows, out, printed, dry = written_relation_dataset
    train = pq.read_table(out / "train.parquet").to_pylist()
    test = pq.read_table(out / "test.parquet").to_pylist()
    informative_train = [r for r in rows if r.part == "train" and r.update]  # the odd ones: update 0.1, merge -0.05
    assert [r["extra_info"]["key"] for r in train] == [r.key for r in informative_train]
    assert [r["extra_info"]["key"] for r in test] == [r.key for r in rows if r.part == "recipe" and r.update]
    assert {r["data_source"] for r in train + test} == {"relation/jenverse"}
    said = " ".join(printed.split())
    assert f"wrote {out}/train.parquet ({len(train)} rows) and {out}/test.parquet ({len(test)} rows)" in said
    pairs = {RelationUnit(b.group, b.part, p).key: p for b in banks for p in b.pairs}
    for row in train + test:  # the times come from the rebuilt pairs
        assert row["prompt"][0]["content"] == prompt_for(*pairs[row["extra_info"]["key"]].statements)
        assert "(2024-01-0" in row["prompt"][0]["content"]

    assert dry.exit_code == 0, dry.output
    assert "database: not needed (the rows carry their rewards)" in dry.output
    config_text, command = dry.output.split("# resolved config\n", 1)[1].split("# command\n")
    assert "experiment_name: relation_grpo" in config_text and "single_turn_agent" in config_text
    assert "--config-name relation_grpo" in command and f"data.train_files={out / 'train.parquet'}" in command
    assert "MEMUPDATE_DATABASE_URL" not in command
    assert not (tmp_path / "ckpt").exists()  # a dry run writes nothing


def test_preprocess_relation_names_what_it_needs(tmp_path) -> None:
    from typer.testing import CliRunner

    from memupdate.cli import app

    result = CliRunner().invoke(app, ["data", "preprocess", "--task", "relation", "--out", str(tmp_path)])
    assert result.exit_code != 0 and "--task relation needs --rewards" in " ".join(result.output.split())
    result = CliRunner().invoke(app, ["data", "preprocess", "--rewards", str(tmp_path / "r.jsonl"), "--out", str(tmp_path)])
    assert result.exit_code != 0 and "belong to --task relation" in " ".join(result.output.split())


@pytest.mark.slow
def test_the_printed_relation_command_runs_unchanged_in_verls_entry_point(written_relation_dataset) -> None:
    """What a GPU user pastes into bash; `--cfg job` makes verl print the config it would train with and exit."""
    _, _, out, _, dry = written_relation_dataset
    command = dry.output.split("# command\n")[1]
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    ran = subprocess.run(["bash", "-c", command.strip() + " --cfg job"], env=env, capture_output=True, text=True, timeout=300)
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert "experiment_name: relation_grpo" in ran.stdout and str(out / "train.parquet") in ran.stdout
