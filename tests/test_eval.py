"""Ingestion, verl preprocessing, evaluation and the data/eval/demo/agent commands, on the real
embedded database and embedding model. Tests on LoCoMo's dev file skip where it is absent."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest
from locomo_fixtures import locomo_dev_file_fixture  # noqa: F401  (fixture `locomo_dev_file`)
from typer.testing import CliRunner

from memupdate.agent.policies.heuristic import HeuristicPolicy
from memupdate.cli import app
from memupdate.rl.data.ingest import ingest_conversation
from memupdate.rl.data.locomo import load_locomo, load_sample
from memupdate.rl.data.preprocess import preprocess
from memupdate.rl.evaluate import EvalConfig, evaluate, plot_report
from memupdate.store import MemoryStore

runner = CliRunner()
REPORT_KEYS = {"policy", "mode", "conversations", "questions", "before", "after", "reward_mean", "memories"}
SIDE_KEYS = {"qa_score", "evidence_recall", "context_tokens", "by_category"}


@pytest.fixture
def root(store: MemoryStore) -> MemoryStore:
    return store


@pytest.fixture
def sample(root: MemoryStore):
    """The shipped sample conversation, renamed per test so tests never share a base namespace."""
    from dataclasses import replace

    conversation = load_sample()[0]
    return replace(conversation, sample_id=f"sample-{root.namespace[-1]}")


def drop_base(root: MemoryStore, sample_id: str) -> None:
    for ns in root.list_namespaces(prefix=("locomo", sample_id)):
        root.scoped(ns).drop()


def test_ingestion_keeps_provenance_and_is_idempotent(root: MemoryStore, sample) -> None:
    try:
        base = ingest_conversation(root, sample)
        assert base.namespace == ("locomo", sample.sample_id)
        assert base.count() == len(sample.facts)
        first = base.get("f0000")
        fact = sample.facts[0]
        assert first.content == fact.text and first.kind == "episodic"
        assert first.metadata["dia_ids"] == list(fact.dia_ids) and first.metadata["session"] == fact.session
        assert first.metadata["session_date"] == fact.session_date and first.metadata["speaker"] == fact.speaker
        assert first.metadata["date"] == fact.session_day.isoformat()
        listed = next(i for i, f in enumerate(sample.facts) if len(f.dia_ids) > 1)
        assert len(base.get(f"f{listed:04d}").metadata["dia_ids"]) > 1
        ingest_conversation(root, sample)
        assert base.count() == len(sample.facts), "loading twice adds nothing"
    finally:
        drop_base(root, sample.sample_id)


def test_policy_none_reports_identical_before_and_after(root: MemoryStore, sample) -> None:
    try:
        for mode in ("targeted", "blind"):
            report = evaluate(root, [sample], None, EvalConfig(mode=mode))
            assert REPORT_KEYS <= report.keys() and SIDE_KEYS <= report["before"].keys()
            assert report["before"] == report["after"] and report["reward_mean"] == 0.0
            assert report["questions"] == sum(q.category != 5 for q in sample.qa)
            assert report["memories"] == {"before": len(sample.facts), "after": len(sample.facts)}
        assert root.list_namespaces(prefix=("locomo", sample.sample_id)) == [("locomo", sample.sample_id)], "forks dropped"
    finally:
        drop_base(root, sample.sample_id)


def test_heuristic_improves_the_sample_and_never_writes_the_base(root: MemoryStore, sample, tmp_path) -> None:
    try:
        base = ingest_conversation(root, sample)
        before = base.snapshot()
        report = evaluate(root, [sample], HeuristicPolicy(store=root), EvalConfig(mode="targeted"), policy_name="heuristic")
        assert report["after"]["qa_score"] > report["before"]["qa_score"]
        assert report["after"]["by_category"]["temporal"]["qa_score"] > report["before"]["by_category"]["temporal"]["qa_score"]
        assert report["reward_mean"] > 0 and report["tool_calls"]
        assert base.snapshot() == before and [e.op for e in base.events()] == ["create"] * len(before)
        plot_report(report, str(tmp_path / "plot.png"))
        assert (tmp_path / "plot.png").stat().st_size > 1000
    finally:
        drop_base(root, sample.sample_id)


def test_eval_continues_past_a_bad_question(root: MemoryStore, sample) -> None:
    from dataclasses import replace

    broken = replace(sample, qa=(replace(sample.qa[0], answer=None, category=1), *sample.qa[1:]))
    try:
        report = evaluate(root, [broken], None, EvalConfig())
        assert report["errors"][0]["error"] == "question has no answer"
        assert report["questions"] == sum(q.category != 5 for q in sample.qa) - 1
    finally:
        drop_base(root, sample.sample_id)


def test_preprocess_writes_verl_parquet_with_unique_trajectories(tmp_path) -> None:
    counts = preprocess(load_sample() * 1, tmp_path, n_train=1)
    assert counts == {"train": 16, "test": 0}
    table = pq.read_table(tmp_path / "train.parquet").to_pylist()
    row = table[0]
    assert {"data_source", "prompt", "ability", "reward_model", "extra_info"} <= row.keys()
    assert [m["role"] for m in row["prompt"]] == ["system", "user"]
    assert row["extra_info"]["question"] in row["prompt"][1]["content"]
    assert row["reward_model"]["ground_truth"] == row["extra_info"]["answer"]
    ids = [r["extra_info"]["trajectory_id"] for r in table]
    assert len(set(ids)) == len(ids) and ids[0].startswith("sample-1-qa")
    kwargs = row["extra_info"]["tools_kwargs"]["search_memory"]["create_kwargs"]
    assert kwargs["base_namespace"] == "locomo/sample-1" and kwargs["namespace"].endswith(ids[0])
    assert all(r["extra_info"]["category"] != 5 for r in table)


def test_cli_errors_for_bad_locomo_input(tmp_path) -> None:
    missing = runner.invoke(app, ["data", "stats", "--locomo", str(tmp_path / "nope.json")])
    assert missing.exit_code == 2 and "--locomo" in missing.output
    (tmp_path / "bad.json").write_text('{"not": "a list"}')
    bad = runner.invoke(app, ["data", "stats", "--locomo", str(tmp_path / "bad.json")])
    assert bad.exit_code == 2 and "LoCoMo" in bad.output and "Traceback" not in bad.output


@pytest.mark.locomo
def test_dev_file_stats_and_preprocess(locomo_dev_file, tmp_path) -> None:
    stats = json.loads(runner.invoke(app, ["data", "stats", "--locomo", str(locomo_dev_file), "--json"]).output)
    assert stats["qa"] == 1586 and stats["conversations"] == 8
    unknown = runner.invoke(app, ["data", "stats", "--locomo", str(locomo_dev_file), "--conversations", "conv-99"])
    assert unknown.exit_code == 2 and "conv-26" in unknown.output
    counts = preprocess(load_locomo(locomo_dev_file), tmp_path)
    assert counts["train"] == 1347 - sum(1 for c in load_locomo(locomo_dev_file)[:7] for q in c.qa if q.category == 5)
    assert counts["test"] > 0


@pytest.mark.locomo
def test_heuristic_improves_conv48_in_both_modes(root: MemoryStore, locomo_dev_file) -> None:
    """conv-48 is a test conversation (never used to write the rules); 40 questions keep it quick."""
    conversation = load_locomo(locomo_dev_file, ["conv-48"])
    policy = HeuristicPolicy(store=root)
    targeted = evaluate(root, conversation, policy, EvalConfig(mode="targeted", max_questions=40), policy_name="heuristic")
    blind = evaluate(root, conversation, policy, EvalConfig(mode="blind"), policy_name="heuristic")
    for report in (targeted, blind):
        assert report["after"]["qa_score"] > report["before"]["qa_score"]
        assert report["reward_mean"] > 0 and not report["errors"]


def test_eval_and_agent_commands(root: MemoryStore, database_url, tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)  # the demo writes its review page under out/
    out = tmp_path / "report.json"
    result = runner.invoke(app, ["eval", "--policy", "none", "--url", database_url, "--out", str(out),
                                 "--locomo", str(tmp_path / "missing.json")])
    assert result.exit_code == 2 and "missing.json" in result.output
    demo = runner.invoke(app, ["demo", "--url", database_url, "--questions", "3"])
    assert demo.exit_code == 0, demo.output
    assert "heuristic policy, targeted mode, 3 questions" in demo.output
    run = runner.invoke(app, ["agent", "run", "--namespace", "locomo/sample-1", "--url", database_url,
                              "--question", "When did Nadia start night shifts?", "--answer", "March 2024"])
    assert run.exit_code == 0, run.output
    assert "> search_memory" in run.output and "QA proxy for the question:" in run.output
    missing = runner.invoke(app, ["agent", "run", "--namespace", "locomo/nothing-here", "--url", database_url])
    assert missing.exit_code == 2 and "holds no memories" in missing.output


def test_agent_run_can_checkpoint_the_graph_in_postgres(root: MemoryStore, database_url) -> None:
    from langgraph.checkpoint.postgres import PostgresSaver
    from sqlalchemy.engine import make_url

    result = runner.invoke(app, ["agent", "run", "--namespace", "locomo/sample-1", "--url", database_url,
                                 "--question", "Where does Owen teach?", "--checkpoint"])
    assert result.exit_code == 0, result.output
    thread = result.output.split("thread_id '")[1].split("'")[0]
    conninfo = make_url(database_url).set(drivername="postgresql").render_as_string(hide_password=False)
    with PostgresSaver.from_conn_string(conninfo) as saver:
        state = saver.get_tuple({"configurable": {"thread_id": thread}})
    assert state is not None and state.checkpoint["channel_values"]["namespace"] == thread


def test_collateral_questions_count_in_the_reward(root: MemoryStore, sample) -> None:
    """Targeted episodes also score other questions: a no-op still scores 0, the per-question scores stay
    the target's, and the reward changes with the collateral sample."""
    from memupdate.scoring.reward import RewardConfig

    try:
        none = evaluate(root, [sample], None, EvalConfig(reward=RewardConfig(collateral_questions=3)))
        assert none["reward_mean"] == 0.0 and none["collateral_delta"] == 0.0
        policy = HeuristicPolicy(store=root)
        alone = evaluate(root, [sample], policy, EvalConfig(max_questions=6, reward=RewardConfig(collateral_questions=0)))
        wider = evaluate(root, [sample], policy, EvalConfig(max_questions=6, reward=RewardConfig(collateral_questions=3)))
        assert wider["after"] == alone["after"], "the per-question scores are the target question's"
        assert wider["reward_mean"] != alone["reward_mean"]
        row = wider["rows"][0]
        assert {"question", "category", "before", "after", "reward", "parts"} <= row.keys()
        assert row["parts"]["collateral_delta"] is not None and "faithfulness" in row["parts"]
        json.dumps(wider)  # the report, rows included, is plain JSON
    finally:
        drop_base(root, sample.sample_id)
