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
from langchain_core.messages import AIMessage, ToolMessage
from typer.testing import CliRunner

from memupdate.agent.policies import make_policy
from memupdate.agent.policies.heuristic import HeuristicPolicy
from memupdate.cli import app
from memupdate.errors import MemupdateError
from memupdate.rl.data.ingest import ingest_conversation
from memupdate.rl.distill.learn import TRAJECTORIES, LearnConfig, RunInputs, learn
from memupdate.rl.distill.rollouts import PolicyGroup, TrajectoryLog, call_summary, collect, policy_group
from memupdate.rl.distill.run_folder import STAGES
from memupdate.rl.distill.targeted import TargetedTask
from memupdate.scoring.reward import RewardConfig
from memupdate.store import MemoryStore

runner = CliRunner()
# Small everything: two questions, group of two, two turns per episode, a one-layer tiny student, no RL
# iteration (distillation alone: `rl learn --iterations 0`).
SMALL = LearnConfig(  # the targeted task: its held-out questions are the ones `memupdate eval` runs below
    task="targeted", student="tiny", group_size=2, train_questions=2, eval_questions=1, iterations=0, sft_epochs=1, batch_size=2, max_turns=2,
    max_new_tokens=24, max_prose_tokens=12, tiny_vocab_size=600, tiny_hidden_size=32, tiny_layers=1, top_layers=0,
    learning_rate=1e-3, sweep=(), explore=0.5, max_length=4096,  # a 600-token vocabulary spells the prompt and tools out long
)
TASK = TargetedTask(RewardConfig(), max_turns=2)


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
    prompts = TASK.training_units([sample], 2)
    heuristic = policy_group("heuristic", store, explore=0.5)
    runs: list[int] = []

    def dies_on_third(seed: int):
        if len(runs) == 2:
            raise ConnectionError("teacher went away")
        runs.append(seed)
        return heuristic.member(seed)

    log = TrajectoryLog(tmp_path / TRAJECTORIES)
    with pytest.raises(MemupdateError, match=r"failed on .*teacher went away.*2 trajectories so far are kept in .*rerun"):
        collect(store, TASK, PolicyGroup("heuristic", dies_on_third), prompts, 2, "it1", log)
    kept = (tmp_path / TRAJECTORIES).read_text().splitlines()
    assert len(kept) == 2
    # A kill mid-write leaves half a line; it is dropped on resume.
    with (tmp_path / TRAJECTORIES).open("a") as f:
        f.write('{"key": "it1/half')

    resumed: list[int] = []
    counting = PolicyGroup("heuristic", lambda seed: resumed.append(seed) or heuristic.member(seed))
    records = collect(store, TASK, counting, prompts, 2, "it1", TrajectoryLog(tmp_path / TRAJECTORIES))
    assert len(resumed) == 2 and set(resumed).isdisjoint(runs)  # only the two missing rollouts ran
    assert [r.key for r in records] == [f"it1/{p.group}/g{m}" for p in prompts for m in range(2)]
    lines = [json.loads(line) for line in (tmp_path / TRAJECTORIES).read_text().splitlines()]
    assert sorted(r["key"] for r in lines) == sorted(r.key for r in records)
    first = lines[0]
    assert first["messages"][0]["role"] == "system" and first["calls"][0]["name"] == "search_memory"
    assert {"reward", "reward_parts", "valid_calls", "invalid_calls", "ok_calls", "stop_reason"} <= set(first)


def test_a_group_member_is_the_policy_with_its_own_seed(store: MemoryStore) -> None:
    """A rollout group's members are fresh instances of one registry policy: same settings, own seed."""
    group = policy_group("heuristic", store, explore=0.5, stepwise=8, look_first=True, max_operations=4)
    one, two = group.member(1), group.member(2)
    assert (one.seed, two.seed) == (1, 2) and one is not two
    assert (one.explore, one.stepwise, one.look_first, one.max_operations) == (0.5, 8, True, 4)
    assert policy_group("none", store).member(3) is None


def _drop(store: MemoryStore, sample_id: str) -> None:
    for ns in store.list_namespaces(prefix=("locomo", sample_id)):
        store.scoped(ns).drop()


@pytest.fixture
def fixed_sample(store: MemoryStore, sample):
    """The sample under a fixed id, and a held-out copy: rollout seeds hash the trajectory key, which holds
    the id, so the teacher's exploration (and whether its groups differ in reward) is the same on every run."""
    fixed = replace(sample, sample_id="sample-distill-e2e")
    held_out = replace(sample, sample_id="sample-distill-heldout")
    for s in (fixed, held_out):
        _drop(store, s.sample_id)
    yield fixed, held_out
    for s in (fixed, held_out):
        _drop(store, s.sample_id)


def test_tiny_student_end_to_end(store: MemoryStore, fixed_sample, database_url, tmp_path) -> None:
    sample, held_out = fixed_sample
    out = tmp_path / "student"
    metrics = learn(store, SMALL, out, RunInputs([sample], [held_out]))
    stages = json.loads((out / STAGES).read_text())
    assert list(stages) == ["teacher-groups", "eval-teacher", "eval-no-edits", "eval-zero-shot", "sft", "eval-sft"]
    sft = stages["sft"]["result"]
    assert sft["groups"] == 2 and sft["trajectories"] == 4 and sft["positive"] >= 1
    assert sft["training"]["steps"] >= 1 and sft["training"]["loss_last"] > 0
    table = metrics["evaluations"]
    assert set(table) == {"teacher", "no-edits", "zero-shot", "sft"}
    assert table["teacher"]["reward"]["n"] == table["no-edits"]["reward"]["n"] == 1
    assert table["no-edits"]["reward"]["mean"] == 0.0
    final = out / "sft"
    assert metrics["final_checkpoint"] == str(final) and metrics["config"]["group_size"] == 2
    for name in ("sft/config.json", "sft/model.safetensors", "sft/tokenizer.json", "tiny-init/config.json", "metrics.json",
                 "learning_curve.png", TRAJECTORIES):
        assert (out / name).is_file(), name

    # The graph loads the checkpoint as the `hf` policy, and `memupdate eval` runs it.
    assert make_policy("hf", store, model=str(final)).tokenizer.chat_template
    budgeted = make_policy("hf", store, model=str(final), max_new_tokens=64, max_prose_tokens=16)
    assert (budgeted.max_new_tokens, budgeted.max_prose_tokens) == (64, 16)
    report = tmp_path / "eval.json"
    sample_file = tmp_path / "sample.json"
    raw = json.loads(load_sample_path().read_text())
    raw[0]["sample_id"] = sample.sample_id
    sample_file.write_text(json.dumps(raw))
    result = runner.invoke(app, ["eval", "--policy", "hf", "--model", str(final), "--locomo", str(sample_file),
                                 "--max-questions", "1", "--max-operations", "4", "--max-new-tokens", "48", "--max-prose-tokens", "24",
                                 "--url", database_url, "--out", str(report)])
    assert result.exit_code == 0, result.output
    assert json.loads(report.read_text())["questions"] == 1

    # Rerunning the same command resumes: nothing is rolled out or trained again.
    lines = (out / TRAJECTORIES).read_text()
    again = learn(store, SMALL, out, RunInputs([sample], [held_out]))
    assert again["evaluations"] == metrics["evaluations"] and (out / TRAJECTORIES).read_text() == lines


def load_sample_path():
    from memupdate.rl.data.locomo import sample_conversation_path

    return sample_conversation_path()


def test_bad_input_gives_clear_errors(store: MemoryStore, fixed_sample, tmp_path, tiny_model_without_chat_template) -> None:
    sample, held_out = fixed_sample
    with pytest.raises(MemupdateError, match="--teacher 'gpt' is not a policy: choose one of heuristic, openai, hf, none"):
        learn(store, replace(SMALL, teacher="gpt"), tmp_path / "a", RunInputs([sample], [held_out]))
    with pytest.raises(MemupdateError, match="the openai policy needs --model"):
        learn(store, replace(SMALL, teacher="openai"), tmp_path / "a2", RunInputs([sample], [held_out]))
    with pytest.raises(MemupdateError, match="no config.json"):
        learn(store, replace(SMALL, student=str(tmp_path)), tmp_path / "b", RunInputs([sample], [held_out]))
    # A student whose tokenizer has no chat template is refused before any rollout.
    with pytest.raises(MemupdateError, match="no chat template.*chat_template.jinja"):
        learn(store, replace(SMALL, student=str(tiny_model_without_chat_template)), tmp_path / "c", RunInputs([sample], [held_out]))
    assert not (tmp_path / "c" / TRAJECTORIES).exists()
    with pytest.raises(MemupdateError, match="--top-layers 2: the tiny student has 1 layers"):
        learn(store, replace(SMALL, top_layers=2), tmp_path / "t", RunInputs([sample], [held_out]))
    with pytest.raises(MemupdateError, match="--group-size 1"):
        learn(store, replace(SMALL, group_size=1), tmp_path / "g", RunInputs([sample], [held_out]))
    with pytest.raises(MemupdateError, match="--no-grpo trains RL iterations on DAgger's corrections alone: keep --dagger"):
        learn(store, replace(SMALL, grpo=False, dagger=False), tmp_path / "n", RunInputs([sample], [held_out]))
    # A teacher that makes no edits: every group has equal rewards; the trajectories stay on disk, and no
    # evaluation is spent before the error.
    with pytest.raises(MemupdateError, match="nothing to imitate.*--explore.*kept in"):
        learn(store, replace(SMALL, teacher="none"), tmp_path / "d", RunInputs([sample], [held_out]))
    assert len((tmp_path / "d" / TRAJECTORIES).read_text().splitlines()) == 4
    assert list(json.loads((tmp_path / "d" / STAGES).read_text())) == ["teacher-groups"]


def test_unreachable_teacher_keeps_the_jsonl(store: MemoryStore, fixed_sample, tmp_path) -> None:
    sample, held_out = fixed_sample
    config = replace(SMALL, teacher="openai", teacher_model="some-model", base_url="http://127.0.0.1:9/v1", train_questions=1)
    with pytest.raises(MemupdateError, match=r"policy openai:some-model failed on .*Connection.*rerun the same command"):
        learn(store, config, tmp_path / "out", RunInputs([sample], [held_out]))
    assert (tmp_path / "out" / TRAJECTORIES).exists()
    shutil.rmtree(tmp_path / "out")


def test_a_bad_learning_rate_list_stops_with_one_line(tmp_path) -> None:
    result = runner.invoke(app, ["rl", "learn", "--train-conversations", "conv-26", "--eval-conversations", "conv-47,conv-48",
                                 "--out", str(tmp_path / "run"), "--rl-sweep", "1e-4,fast"])
    assert result.exit_code == 2 and "--rl-sweep '1e-4,fast': give learning rates separated by commas" in result.output
    assert "Traceback" not in result.output and not (tmp_path / "run").exists()


def test_a_repeated_call_and_its_first_result_are_counted_apart() -> None:
    """A student repeats a call it made (same text, so the same id): the first ran, the repeat was refused.
    Each result answers the latest call with its id, as in a whole bank's episodes one after another."""
    def turn(text: str, status: str) -> list:
        call = {"name": "manage_memory", "args": {"action": "update", "memory_id": "f0001"}, "id": "call_0_ab12"}
        return [AIMessage("", tool_calls=[call]), ToolMessage(text, tool_call_id="call_0_ab12", status=status)]

    messages = turn("updated [f0001] ...", "success") + turn("error: [f0001] has no relative time to date", "error")
    summary = call_summary(messages * 2)  # and again in a second episode
    assert [c["ok"] for c in summary["calls"]] == [True, False, True, False]
    assert (summary["ok_calls"], summary["failed_calls"]) == (2, 2)



def test_a_logged_record_reads_back_as_it_was_written() -> None:
    """A trajectory log line (flat JSON, as runs before typed records wrote it too) reads back as a typed
    Rollout and writes out the same object: a resumed run reads an earlier run's logs."""
    from memupdate.rl.distill.task import Rollout

    line = {"key": "teacher/conv-26/n000/g0", "policy": "heuristic", "member": 0, "seed": 7, "sample_id": "conv-26",
            "group": "conv-26/n000", "messages": [{"role": "assistant", "content": "hi"}], "calls": [], "valid_calls": 0,
            "invalid_calls": 0, "ok_calls": 0, "failed_calls": 0, "turns": 1, "reward": 0.25,
            "reward_parts": {"performance_delta": 0.25}, "neighbourhood": ["f0000"], "stop_reason": "done", "seconds": 1.5}
    record = Rollout.from_json(line)
    assert (record.key, record.group, record.reward, record.stop_reason, record.turns) == (line["key"], "conv-26/n000", 0.25, "done", 1)
    assert record.facts == {"sample_id": "conv-26", "neighbourhood": ["f0000"]}
    assert record.as_json() == line and Rollout.from_json(record.as_json()) == record
