"""`rl learn` end to end on the real database and embedding model, with a tiny student: every stage runs,
`metrics.json` and the learning curve are written, a rerun resumes without redoing a stage, and bad
splits are refused.

No pretrained LLM weights can be downloaded here: the student is a tiny Qwen2 built from a config with a
tokenizer trained locally, given the student chat template. Its replies are not expected to be good, only
to run through every stage. The real SmolLM2 run is documented in docs/student.md.
"""

from __future__ import annotations

import json
from dataclasses import replace
from types import SimpleNamespace

import pytest
from langchain_core.messages import AIMessage, ToolMessage
from transformers import AutoTokenizer

from memupdate.agent.compaction import neighbourhood_episode
from memupdate.errors import MemupdateError
from memupdate.llm.models import STUDENT_CHAT_TEMPLATE
from memupdate.rl.data.factconsolidation import FactBank
from memupdate.rl.distill.compaction import CompactionTask, Neighbourhood
from memupdate.rl.distill.dagger import relabelled, until_first_slip
from memupdate.rl.distill.learn import (
    IterationRecipe,
    LearnConfig,
    RunInputs,
    held_out_trajectories,
    improves,
    kept_out,
    learn,
    lowers_held_out_loss,
    replay,
    teacher,
)
from memupdate.rl.distill.run_folder import STAGES
from memupdate.rl.distill.task import Rollout
from memupdate.rl.distill.tiny_student import build_tiny_checkpoint
from memupdate.scoring.reward import RewardConfig
from memupdate.store import MemoryStore, NewMemory

SMALL = LearnConfig(
    train_questions=8, eval_questions=2, group_size=2, student_group_size=2, rl_questions=2, iterations=1,
    max_new_tokens=16, max_prose_tokens=8, max_turns=2, sft_epochs=1, rl_epochs=1, top_layers=1, batch_size=4,
    sweep=(1e-4, 1e-3), rl_sweep=(1e-5, 1e-4), explore=0.5,
)


@pytest.fixture
def tiny_student(tmp_path):
    path = build_tiny_checkpoint(tmp_path / "tiny", layers=2)
    tokenizer = AutoTokenizer.from_pretrained(path)
    tokenizer.chat_template = STUDENT_CHAT_TEMPLATE
    tokenizer.save_pretrained(path)
    return path


TARGETED_STAGES = ["teacher-groups", "eval-teacher", "eval-no-edits", "eval-zero-shot", "sft", "eval-sft", "rl-1", "eval-rl-1"]
COMPACTION_STAGES = [TARGETED_STAGES[0], "teacher-labels", TARGETED_STAGES[1], "eval-heuristic", *TARGETED_STAGES[2:]]


@pytest.mark.parametrize("task", ["targeted", "compaction"])
def test_every_stage_runs_writes_metrics_and_resumes(store: MemoryStore, sample, tiny_student, tmp_path, task) -> None:
    held_out = replace(sample, sample_id=sample.sample_id + "-heldout")
    # Targeted RL sweeps its rate by the held-out loss (`rl_gate="loss"`); compaction's candidates are
    # measured by what the rule says of the states they reach on the kept-out units (the default gate), and
    # compaction imitates the rule on label units too (the sample's bank has four neighbourhoods: two train,
    # the rest label).
    config = replace(SMALL, student=str(tiny_student), task=task, rl_gate="agreement" if task == "compaction" else "loss")
    if task == "compaction":
        # The rule unexplored teaches: its units are the neighbourhoods where its own edits move a question,
        # so its groups earn a reward on every run (explored, all four rollouts could miss).
        # DAgger's examples end at each rollout's first slip here (targeted: every slip corrected).
        # DAgger aggregates: one of the rule's label trajectories replayed per correction.
        config = replace(config, train_questions=2, label_units=4, rl_label_units=1, explore=0.0, dagger_states="first", dagger_replay=1.0)
    out = tmp_path / "run"
    try:
        metrics = learn(store, config, out, RunInputs([sample], [held_out]))
    finally:
        for ns in store.list_namespaces(prefix=("locomo", held_out.sample_id)):
            store.scoped(ns).drop()
    stages = json.loads((out / STAGES).read_text())
    assert list(stages) == (COMPACTION_STAGES if task == "compaction" else TARGETED_STAGES)
    if task == "targeted":  # held-out questions with headroom, the rest counted with the reason
        skipped = metrics["held_out_skipped"][held_out.sample_id]
        assert skipped["kept"] >= 2 and sum(v for k, v in skipped.items() if k != "questions") == skipped["questions"]
    if task == "compaction":  # one held-out bank compacted whole, paired per question
        table = metrics["evaluations"]
        assert metrics["score"] == "qa_delta" and table["teacher"]["reward"]["n"] == 1
        assert table["no-edits"]["qa_delta"]["n"] == metrics["held_out_questions"] > 1
        assert table["no-edits"]["qa_delta"]["mean"] == 0.0 and table["no-edits"]["memories"][0] == table["no-edits"]["memories"][1]
        assert table["heuristic"]["qa_delta"]["mean"] > 0, "the heuristic compaction lifts the sample's QA proxy"
    table = metrics["evaluations"]
    assert table["no-edits"]["reward"]["mean"] == 0.0 and table["teacher"]["reward"]["n"] == (1 if task == "compaction" else 2)
    assert {"zero-shot", "sft", "rl-1", "rl_minus_sft"} <= set(table)
    sft = stages["sft"]["result"]["training"]
    assert set(sft["sweep_held_out_loss"]) == {"0.0001", "0.001"} and sft["learning_rate"] in (1e-4, 1e-3)
    rl_training = stages["rl-1"]["result"]["training"]
    rl = stages["rl-1"]["result"]
    records = [json.loads(line) for line in (out / "trajectories.jsonl").read_text().splitlines()]
    if task == "compaction":  # each rate trained in full, the start and each candidate rolled out on the kept-out units
        gate = rl["agreement"]
        assert set(gate["candidates"]) == {"1e-05", "0.0001"} and rl_training["sweep_held_out_loss"] == {}
        for measure in [gate["start"], *gate["candidates"].values()]:
            assert sum(measure["turns"].values()) > 0 and 0.0 <= measure["agreement"] <= 1.0
        best = max(m["agreement"] for m in gate["candidates"].values())
        assert (gate["chosen"] is not None) == (best > gate["start"]["agreement"])
        measured = [r["key"] for r in records if r["key"].startswith("rl-1/held-out/")]
        at_start = [key for key in measured if key.startswith("rl-1/held-out/start/")]
        assert at_start and len(measured) == 3 * len(at_start)  # one rollout per kept-out unit: the start, each rate
        assert not any((out / f"rl-1-lr{rate}").exists() for rate in ("1e-05", "0.0001")), "the candidates are moved or removed"
    else:  # the candidate whose one pass from SFT's weights gave the lowest held-out loss
        swept = rl_training["sweep_held_out_loss"]
        assert set(swept) == {"1e-05", "0.0001"} and swept[f"{rl_training['learning_rate']:g}"] == min(swept.values())
        assert rl_training["held_out_loss"][rl_training["kept_epoch"]] == min(rl_training["held_out_loss"])  # keep_best
    # DAgger: the rule labelled every turn the student took in its groups and on label units
    assert rl["dagger_labels"] == sum(r["turns"] for r in records if r["key"].startswith("rl-1/") and "/held-out/" not in r["key"])
    assert 0 < rl["dagger_corrections"] <= rl["dagger_labels"], "an untrained student slips somewhere"
    if task == "compaction":  # the rule's trajectories on label units trained SFT; RL rolled out on one
        assert stages["sft"]["result"]["label_trajectories"] == len(stages["teacher-labels"]["result"]) >= 1
        assert rl["dagger_label_unit_rollouts"] == 1
        assert rl["dagger_replayed"] == min(rl["dagger_corrections"], stages["sft"]["result"]["label_trajectories"]) > 0
    kept = improves(rl)  # rl-1 is the final student only if it beat its start
    for name in ("metrics.json", "learning_curve.png", "sft/config.json", *(["rl-1/model.safetensors"] if kept else [])):
        assert (out / name).is_file(), name
    assert metrics["final_checkpoint"] == str(out / ("rl-1" if kept else "sft"))

    # The same call again: every stage is read back, nothing reruns.
    lines = (out / "trajectories.jsonl").read_text()
    again = learn(store, config, out, RunInputs([sample], [held_out]))
    assert again["evaluations"] == metrics["evaluations"] and (out / "trajectories.jsonl").read_text() == lines

    # An iteration that kept its start's weights (no epoch lowered the held-out loss) is not evaluated
    # again: its evaluation is its start's, and no student rollout runs for it.
    stages["rl-1"]["result"]["training"]["kept_epoch"] = 0
    del stages["eval-rl-1"]
    (out / STAGES).write_text(json.dumps(stages))
    evaluations = (out / "eval.jsonl").read_text()
    learn(store, config, out, RunInputs([sample], [held_out]))
    resumed = json.loads((out / STAGES).read_text())
    assert resumed["eval-rl-1"]["result"] == stages["eval-sft"]["result"] | {"same_weights_as": "sft"}
    assert (out / "eval.jsonl").read_text() == evaluations


def test_the_compaction_teacher_dates_one_memory_a_turn(store: MemoryStore) -> None:
    """Each of its edits follows the tool result that names what is left to date, the pattern a student
    imitates: look, date the first handle of the last `to date` line, again, stop."""
    day = {"date": "2024-03-17"}
    store.create_many([
        NewMemory("Ann moved to Lisbon last week.", metadata=day, key="f0000"),
        NewMemory("Ann likes green tea.", metadata=day, key="f0001"),
        NewMemory("Ann adopted a cat yesterday.", metadata=day, key="f0002"),
    ])
    run = SimpleNamespace(config=LearnConfig(), task=CompactionTask(store, RewardConfig()), store=store)
    episode = neighbourhood_episode(teacher(run, 0.0, 0.0).member(0), store, ["f0000", "f0001", "f0002"], "e")
    assert [len(m.tool_calls) for m in episode.messages if isinstance(m, AIMessage)] == [1, 1, 1, 0]
    look, first, second = [m.content for m in episode.messages if isinstance(m, ToolMessage)]
    line = look.splitlines()[0]
    assert line.startswith("to date (relative time): ") and sorted(line.split()[4:]) == ["[f0000]", "[f0002]"]
    assert first.splitlines()[-1] == f"to date (relative time): {line.split()[-1]}" and "to date" not in second


def test_a_conversation_both_trained_on_and_held_out_is_refused(store: MemoryStore, sample, tmp_path) -> None:
    with pytest.raises(MemupdateError, match="both trained on and held out"):
        learn(store, SMALL, tmp_path / "run", RunInputs([sample], [sample]))


def test_an_evaluation_is_reproducible(store: MemoryStore, sample, tiny_student) -> None:
    """One checkpoint, one seed: the same calls twice on a held-out bank, though each compaction forks under
    a new random name (the student reads its task without the bank line)."""
    from memupdate.agent.policies import make_policy
    from memupdate.rl.data.ingest import ingest_conversation
    from memupdate.rl.distill.compaction import CompactionTask, WholeBank
    from memupdate.scoring.reward import RewardConfig

    task = CompactionTask(store, RewardConfig(), max_turns=2, max_operations=3)
    base = ingest_conversation(store, sample)
    policy = make_policy("hf", store, model=str(tiny_student), max_new_tokens=24, max_prose_tokens=12, seed=0)
    first, second = (task.rollout(policy, base, WholeBank(sample)) for _ in range(2))
    replies = [[m["content"] for m in record.messages if m["role"] in ("assistant", "tool")] for record in (first, second)]
    assert replies[0] and replies[0] == replies[1]
    assert first.facts["question_deltas"] == second.facts["question_deltas"]


def test_held_out_banks_are_compacted_with_the_budgets_users_run(store: MemoryStore, sample) -> None:
    """`--eval-budgets users`: a held-out episode is cut by `memupdate compact`'s budgets, not training's
    (the heuristic edits a neighbourhood in more calls than the training budget lets it make)."""
    from memupdate.agent.policies import make_policy
    from memupdate.rl.data.ingest import ingest_conversation
    from memupdate.rl.distill.compaction import WholeBank
    from memupdate.rl.distill.learn import held_out_task

    task = CompactionTask(store, RewardConfig(), max_turns=2, max_operations=2)
    training, users = (SimpleNamespace(config=replace(SMALL, eval_budgets=b), task=task) for b in ("training", "users"))
    assert held_out_task(training) is task
    unbudgeted = held_out_task(users)
    assert (unbudgeted.max_turns, unbudgeted.max_operations, unbudgeted.size) == (None, None, task.size)
    base = ingest_conversation(store, sample)
    policy = make_policy("heuristic", store)
    cut, whole = (held_out_task(run).rollout(policy, base, WholeBank(sample)) for run in (training, users))
    assert cut.facts["stop_reasons"].get("operation_budget") and "operation_budget" not in whole.facts["stop_reasons"]
    assert whole.ok_calls > cut.ok_calls


def test_the_teachers_plan_is_as_long_as_teacher_operations(store: MemoryStore, sample) -> None:
    """`--teacher-operations N`: the rule's episode is its look and at most N - 1 edits, then its own stop
    (the stop labels a student learns), not the training budget's cut."""
    from memupdate.rl.data.ingest import ingest_conversation
    from memupdate.rl.distill.compaction import WholeBank

    task = CompactionTask(store, RewardConfig(), max_turns=None, max_operations=None)
    base = ingest_conversation(store, sample)
    runs = [SimpleNamespace(config=replace(SMALL, teacher_operations=n), store=store, task=task) for n in (2, 30)]
    short, long = (task.rollout(teacher(run, 0.0, 0.0).member(0), base, WholeBank(sample)) for run in runs)
    episodes = short.facts["stop_reasons"].get("model_stopped", 0)
    assert episodes and set(short.facts["stop_reasons"]) == {"model_stopped"}
    assert short.ok_calls <= 2 * episodes < long.ok_calls


def test_an_unknown_evaluation_budget_is_refused(store: MemoryStore, sample, tmp_path) -> None:
    held_out = replace(sample, sample_id=sample.sample_id + "-heldout")
    with pytest.raises(MemupdateError, match="--eval-budgets 'weekly': give training or users"):
        learn(store, replace(SMALL, eval_budgets="weekly"), tmp_path / "run", RunInputs([sample], [held_out]))


@pytest.mark.parametrize(
    ("losses", "epoch", "kept"),
    [([0.087, 0.115, 0.121], None, False), ([0.087, 0.09, 0.08], None, True), ([0.08, 0.08], None, False), ([None, 0.1], None, True),
     ([], None, True), ([0.087, 0.086, 0.091], 1, True), ([0.087, 0.115, 0.121], 0, False)],
)
def test_an_rl_iteration_is_kept_only_if_its_saved_weights_lower_the_held_out_loss(losses, epoch, kept):
    training = {"held_out_loss": losses} | ({} if epoch is None else {"kept_epoch": epoch})
    assert lowers_held_out_loss(training) is kept


def test_an_rl_iteration_chosen_by_agreement_is_kept_only_if_a_candidate_beats_its_start():
    assert improves({"agreement": {"chosen": 3e-4}, "training": {"held_out_loss": [0.1, 0.2]}})
    assert not improves({"agreement": {"chosen": None}, "training": {"held_out_loss": [0.2, 0.1]}})
    assert improves({"training": {"held_out_loss": [0.2, 0.1]}})  # the loss gate


def test_dagger_replays_the_rules_label_trajectories_per_correction() -> None:
    """An RL iteration's corrections come with `dagger_replay` of the rule's label trajectories each, spread
    over those SFT trained on (never a kept-out unit's)."""
    records = [Rollout(f"u{i}", [{"role": "assistant", "content": f"u{i}"}], 0.0, {}) for i in range(8)]

    def replayed(share: float, corrections: int) -> list[str]:
        run = SimpleNamespace(label_records=records, config=SimpleNamespace(dagger_replay=share), trains_on=lambda group: group != "u2")
        return [messages[0]["content"] for messages in replay(run, corrections)]

    assert replayed(0.0, 5) == []
    assert replayed(1.0, 3) == ["u0", "u3", "u5"]
    assert replayed(0.5, 5) == ["u0", "u4"]  # round(2.5): banker's rounding, two
    assert replayed(2.0, 5) == ["u0", "u1", "u3", "u4", "u5", "u6", "u7"]  # no more than there are


def test_the_held_out_loss_keeps_out_label_units_and_reads_each_bank_kind(sample) -> None:
    """Every eighth training unit and every eighth label unit are kept out; their trajectories (the
    teacher's that earned a reward, the rule's on label units) are the held-out parts, one per bank kind."""
    facts = FactBank("c1-train", context=None, qa=())
    units = [Neighbourhood(sample, i, (f"k{i}",)) for i in range(8)]
    labels = [Neighbourhood(sample, 8 + i, (f"k{8 + i}",)) for i in range(4)] + [Neighbourhood(facts, i, (f"f{i}",)) for i in range(12)]
    kept = kept_out(units) | kept_out(labels, at_least=0)
    assert kept == {units[7].group, labels[7].group, labels[15].group} and kept_out(labels[:7], at_least=0) == set()

    def record(unit, reward):
        return Rollout(unit.group, [{"role": "assistant", "content": unit.group}], reward, {})

    teacher_records = [record(units[7], 0.1), record(units[7], 0.0), record(units[0], 0.2)]
    label_records = [record(u, 0.0) for u in labels]
    run = SimpleNamespace(units=units, label_units=labels, kept_out=kept, teacher_records=teacher_records,
                          label_records=label_records, settings={})
    parts = held_out_trajectories(run)
    assert {kind: [m[0]["content"] for m in ms] for kind, ms in parts.items()} == {
        "locomo": [units[7].group], "factconsolidation": [labels[7].group, labels[15].group],
    }


# The options that are the run's inputs, not settings of LearnConfig.
RUN_INPUTS = {"locomo", "factconsolidation", "train_conversations", "eval_conversations", "data", "out", "url", "ship"}


def learn_options() -> dict:
    import typer

    from memupdate.cli import app

    command = typer.main.get_command(app).commands["rl"].commands["learn"]
    return {param.name: param for param in command.params}


def test_every_rl_learn_option_defaults_to_learn_configs_default() -> None:
    """`rl learn`'s options are generated from LearnConfig and its relation section (as HfArgumentParser does
    from a dataclass): each one that is a field defaults to the field's default, as the command line parses it."""
    from dataclasses import fields

    from memupdate.rl.distill.config import RelationConfig, options

    params, defaults = learn_options(), LearnConfig()
    settings = set(params) - RUN_INPUTS
    section = {f.name for f in options(RelationConfig)}
    assert settings == {f.name for f in options()} | section and len(settings) >= 50
    assert settings - section < {f.name for f in fields(LearnConfig)} and section == {f.name for f in fields(RelationConfig)}
    for name in settings:
        default = params[name].default
        if name in ("sweep", "rl_sweep"):  # given as text on the command line
            default = tuple(float(v) for v in default.split(","))
        assert default == getattr(defaults.relation if name in section else defaults, name), name
        assert params[name].help, name
    assert params["dagger"].opts == ["--dagger"] and params["dagger"].secondary_opts == ["--no-dagger"]
    assert "reward" not in params and "stepwise" not in params  # fields made without `option` are no option


def test_rl_learn_builds_its_config_from_the_options_given(monkeypatch, tmp_path) -> None:
    from typer.testing import CliRunner

    import memupdate.cli.learn as command
    import memupdate.rl.distill.learn as pipeline
    from memupdate.cli import app

    given = {}
    monkeypatch.setattr(command, "load_conversations", lambda locomo, ids: [])
    monkeypatch.setattr(command, "open_store", lambda url: None)
    monkeypatch.setattr(command, "_print_summary", lambda metrics, out: None)
    monkeypatch.setattr(pipeline, "learn", lambda store, config, out, inputs, progress: given.update(config=config, inputs=inputs))
    result = CliRunner().invoke(app, [
        "rl", "learn", "--train-conversations", "conv-26", "--eval-conversations", "conv-47", "--out", str(tmp_path),
        "--no-dagger", "--rl-sweep", "1e-4,3e-4", "--max-turns", "7", "--teacher-model", "m", "--rl-learning-rate", "2e-5",
    ])
    assert result.exit_code == 0, result.output
    assert given["config"] == replace(
        LearnConfig(), dagger=False, rl_sweep=(1e-4, 3e-4), max_turns=7, teacher_model="m", rl_learning_rate=2e-5,
    )


@pytest.mark.parametrize(("settings", "expected"), [
    ({}, (True, True, relabelled, "agreement")),
    ({"dagger_states": "first", "grpo": False}, (False, True, until_first_slip, "agreement")),
    ({"teacher": "openai"}, (True, False, relabelled, "loss")),  # only the rule labels a student's states
    ({"rl_gate": "loss", "dagger": False}, (True, False, relabelled, "loss")),
])
def test_an_rl_iterations_recipe_is_chosen_once_from_the_config(settings, expected) -> None:
    recipe = IterationRecipe.from_config(replace(LearnConfig(), **settings), kept_out={"conv-26/u7"})
    assert (recipe.grpo, recipe.dagger, recipe.corrections, recipe.gate) == expected


def test_an_rl_iterations_recipe_needs_something_to_train_on() -> None:
    assert IterationRecipe.from_config(LearnConfig(), kept_out=set()).gate == "loss"  # no unit to measure agreement on
    with pytest.raises(MemupdateError, match="--no-grpo trains RL iterations on DAgger's corrections alone"):
        IterationRecipe.from_config(replace(LearnConfig(), grpo=False, teacher="openai"), kept_out={"conv-26/u7"})
