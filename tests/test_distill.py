"""Offline distillation end to end on the real database and embedding model: the heuristic teacher's
seeded exploration, resuming from the JSONL, bad input, and a tiny student distilled, saved, and run
by `memupdate eval --policy hf`.

No pretrained LLM weights can be downloaded here: the student is a tiny Qwen2 built from a config with
a tokenizer trained locally on the rendered trajectories. Its replies are not expected to be good,
only to load and run through the graph.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import replace

import pytest
from typer.testing import CliRunner

from memupdate.agent.policies import make_policy
from memupdate.agent.policies.heuristic import HeuristicPolicy
from memupdate.cli import app
from memupdate.rl.data.ingest import ingest_conversation
from memupdate.rl.distill.run import (
    TRAJECTORIES,
    DistillConfig,
    Teacher,
    TrajectoryLog,
    collect,
    distill,
    make_teacher,
    training_prompts,
)
from memupdate.store import MemoryStore, MemupdateError

runner = CliRunner()
# Small everything: two questions, group of two, two turns per episode, a one-layer student.
SMALL = DistillConfig(
    group_size=2, max_questions=2, eval_questions=1, epochs=1, batch_size=2, max_turns=2, max_new_tokens=24,
    tiny_vocab_size=600, tiny_hidden_size=32, tiny_layers=1, explore=0.5,
)


def test_heuristic_exploration_is_seeded_and_off_by_default(store: MemoryStore, sample) -> None:
    base = ingest_conversation(store, sample)
    question = sample.qa[0].question
    default = HeuristicPolicy(store=store).plan(base, question)
    assert HeuristicPolicy(store=store, explore=0.0, seed=7).plan(base, question) == default
    plans = [HeuristicPolicy(store=store, explore=0.5, seed=seed).plan(base, question) for seed in range(6)]
    assert HeuristicPolicy(store=store, explore=0.5, seed=3).plan(base, question) == plans[3]
    assert len({json.dumps(p) for p in plans}) > 1, "a group of explored rollouts must differ"
    for plan in plans:  # a variant of the plan, never new calls; the first look stays first
        assert plan[0] == default[0] and all(call in default for call in plan)


def test_a_killed_run_resumes_from_its_jsonl(store: MemoryStore, sample, tmp_path) -> None:
    prompts = training_prompts([sample], SMALL)
    heuristic = make_teacher("heuristic", store, SMALL)
    runs: list[int] = []

    def dies_on_third(seed: int):
        if len(runs) == 2:
            raise ConnectionError("teacher went away")
        runs.append(seed)
        return heuristic.make(seed)

    log = TrajectoryLog(tmp_path / TRAJECTORIES)
    with pytest.raises(MemupdateError, match=r"failed on .*teacher went away.*2 trajectories so far are kept in .*rerun"):
        collect(store, Teacher("heuristic", dies_on_third), prompts, 2, "it1", log, SMALL)
    kept = (tmp_path / TRAJECTORIES).read_text().splitlines()
    assert len(kept) == 2
    # A kill mid-write leaves half a line; it is dropped on resume.
    with (tmp_path / TRAJECTORIES).open("a") as f:
        f.write('{"key": "it1/half')

    resumed: list[int] = []
    counting = Teacher("heuristic", lambda seed: resumed.append(seed) or heuristic.make(seed))
    records = collect(store, counting, prompts, 2, "it1", TrajectoryLog(tmp_path / TRAJECTORIES), SMALL)
    assert len(resumed) == 2 and set(resumed).isdisjoint(runs)  # only the two missing rollouts ran
    assert [r["key"] for r in records] == [f"it1/{p.group}/g{m}" for p in prompts for m in range(2)]
    lines = [json.loads(line) for line in (tmp_path / TRAJECTORIES).read_text().splitlines()]
    assert sorted(r["key"] for r in lines) == sorted(r["key"] for r in records)
    first = lines[0]
    assert first["messages"][0]["role"] == "system" and first["calls"][0]["name"] == "search_memory"
    assert {"reward", "reward_parts", "valid_calls", "invalid_calls", "ok_calls", "stop_reason"} <= set(first)


@pytest.fixture
def fixed_sample(store: MemoryStore, sample):
    """The sample under a fixed id: rollout seeds hash the trajectory key, which holds the id, so the
    teacher's exploration (and whether its groups differ in reward) is the same on every run."""
    fixed = replace(sample, sample_id="sample-distill-e2e")

    def drop() -> None:
        for ns in store.list_namespaces(prefix=("locomo", fixed.sample_id)):
            store.scoped(ns).drop()

    drop()
    yield fixed
    drop()


def test_tiny_student_end_to_end(store: MemoryStore, fixed_sample, database_url, tmp_path) -> None:
    sample = fixed_sample
    out = tmp_path / "student"
    metrics = distill(store, [sample], [sample], SMALL, out)
    (row,) = metrics["iterations"]
    assert row["groups"] == 2 and row["trajectories"] == 4 and row["positive"] >= 1
    assert row["training"]["steps"] >= 1 and row["training"]["loss_last"] > 0
    assert set(row["student"]) >= {"reward_mean", "valid_call_share", "tool_calls"}
    assert metrics["teacher"]["questions"] == metrics["no_edits"]["questions"] == 1
    assert metrics["no_edits"]["reward_mean"] == 0.0
    for name in ("config.json", "model.safetensors", "tokenizer.json", "memupdate.json", "metrics.json", "distill.png", TRAJECTORIES):
        assert (out / name).is_file(), name
    info = json.loads((out / "memupdate.json").read_text())
    assert info["kind"] == "distill" and info["teacher"] == "heuristic" and info["config"]["group_size"] == 2

    # The graph loads the checkpoint as the `hf` policy, and `memupdate eval` runs it.
    assert make_policy("hf", store, model=str(out)).tokenizer.chat_template
    budgeted = make_policy("hf", store, model=str(out), max_new_tokens=64, max_prose_tokens=16)
    assert (budgeted.max_new_tokens, budgeted.max_prose_tokens) == (64, 16)
    report = tmp_path / "eval.json"
    sample_file = tmp_path / "sample.json"
    raw = json.loads(load_sample_path().read_text())
    raw[0]["sample_id"] = sample.sample_id
    sample_file.write_text(json.dumps(raw))
    result = runner.invoke(app, ["eval", "--policy", "hf", "--model", str(out), "--locomo", str(sample_file),
                                 "--max-questions", "1", "--max-operations", "4", "--max-new-tokens", "48", "--max-prose-tokens", "24",
                                 "--url", database_url, "--json", str(report)])
    assert result.exit_code == 0, result.output
    assert json.loads(report.read_text())["questions"] == 1

    # Rerunning the same command resumes: nothing is rolled out or trained again.
    again = distill(store, [sample], [sample], SMALL, out)
    assert again["iterations"][0]["training"] == row["training"]


def load_sample_path():
    from memupdate.rl.data.locomo import sample_conversation_path

    return sample_conversation_path()


def test_bad_input_gives_clear_errors(store: MemoryStore, sample, tmp_path, tiny_model_without_chat_template) -> None:
    with pytest.raises(MemupdateError, match="--teacher 'gpt'"):
        distill(store, [sample], [], replace(SMALL, teacher="gpt"), tmp_path / "a")
    with pytest.raises(MemupdateError, match="no config.json"):
        distill(store, [sample], [], replace(SMALL, student=str(tmp_path)), tmp_path / "b")
    # A student whose tokenizer has no chat template is refused before any rollout.
    with pytest.raises(MemupdateError, match="no chat template.*chat_template.jinja"):
        distill(store, [sample], [], replace(SMALL, student=str(tiny_model_without_chat_template)), tmp_path / "c")
    assert not (tmp_path / "c" / TRAJECTORIES).exists()
    # A teacher that makes no edits: every group has equal rewards; the trajectories stay on disk.
    with pytest.raises(MemupdateError, match="all 2 groups have equal rewards.*--explore.*kept in"):
        distill(store, [sample], [], replace(SMALL, teacher="none", student="tiny"), tmp_path / "d")
    assert len((tmp_path / "d" / TRAJECTORIES).read_text().splitlines()) == 4


def test_unreachable_teacher_keeps_the_jsonl(store: MemoryStore, sample, tmp_path) -> None:
    config = replace(SMALL, teacher="openai:some-model", base_url="http://127.0.0.1:9/v1", max_questions=1)
    with pytest.raises(MemupdateError, match=r"teacher openai:some-model failed on .*Connection.*rerun the same command"):
        distill(store, [sample], [], config, tmp_path / "out")
    assert (tmp_path / "out" / TRAJECTORIES).exists()
    shutil.rmtree(tmp_path / "out")
