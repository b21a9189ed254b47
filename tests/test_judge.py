"""The relation judge: the rule as a judge, the endpoint judge against the scripted stand-in on
127.0.0.1 (`tests/openai_standin.py`) with its replies cached in PostgreSQL, the shipped local judge
(the packaged MiniLM plus the weights trained here), pairs meeting, and `memupdate eval relations`."""

from __future__ import annotations

import json

import numpy as np
import pytest
from openai_standin import OpenAIStandIn
from typer.testing import CliRunner

from memupdate.cli import app
from memupdate.errors import MemupdateError
from memupdate.judge import Statement, Verdict, later
from memupdate.judge.decision import AutoApply
from memupdate.judge.endpoint import EndpointJudge, read_reply
from memupdate.judge.meeting import candidate_pairs
from memupdate.judge.pairs import LabelledPair, read_pairs, score_judge, write_pairs
from memupdate.judge.rule import RuleJudge
from memupdate.scoring.llm_cache import LLMReplyCache


def test_later_compares_at_the_coarser_grain() -> None:
    assert later(Statement("a", "2024-01-02"), Statement("b", "2024-03-01T10:00")) == "second"
    assert later(Statement("a", "2024-03-01T11:00"), Statement("b", "2024-03-01")) is None  # one day
    assert later(Statement("a"), Statement("b", "2024-01-01")) is None
    # One batch of an app's writes is not ordered by its milliseconds or seconds; a minute apart is.
    assert later(Statement("a", "2024-03-01T10:00:00.120"), Statement("b", "2024-03-01T10:00:41.900")) is None
    assert later(Statement("a", "2024-03-01T10:00:00+00:00"), Statement("b", "2024-03-01T10:02:00+00:00")) == "second"


def test_the_rule_reads_the_template_and_never_supersedes_events() -> None:
    old, new = Statement("The CEO of Apple Inc. is Tim Cook.", "2020-01-01"), Statement("The CEO of Apple Inc. is Steve Jobs.", "2021-01-01")
    [update] = RuleJudge().judge([(new, old)])
    assert (update.relation, update.current) == ("update", "first")
    trips = (Statement("Sam visited Rome in 2019", event=True), Statement("Sam visited Rome in 2022", event=True))
    assert RuleJudge().judge([trips])[0].relation == "events"
    # What the rule cannot read: a plain-English change.
    assert RuleJudge().judge([(Statement("Sam lives in Paris"), Statement("Sam moved to Berlin last month"))])[0].relation != "update"


class Scripted:
    name, auto_apply = "scripted", AutoApply(update=0.5, rule_update=0.5, duplicate=0.5)

    def __init__(self, verdicts: list[Verdict]):
        self.verdicts = verdicts

    def judge(self, pairs):
        return self.verdicts[: len(pairs)]


def test_scores_count_decisions_and_harm() -> None:
    pairs = [LabelledPair("a", "b", "update"), LabelledPair("c", "d", "update"), LabelledPair("e", "f", "events"),
             LabelledPair("g", "h", "compatible"), LabelledPair("i", "j", "duplicate")]
    said = [Verdict("update", 0.9), Verdict("compatible", 0.9), Verdict("update", 0.9), Verdict("events", 0.9), Verdict("duplicate", 0.9)]
    report = score_judge(Scripted(said), pairs)
    assert (report.per_relation["update"].recall.hits, report.per_relation["update"].recall.total) == (1, 2)
    assert (report.per_relation["update"].precision.hits, report.per_relation["update"].precision.total) == (1, 2)
    assert (report.harmed.hits, report.harmed.total) == (1, 2)  # the events read as an update
    assert (report.accuracy.hits, report.accuracy.total) == (3, 5)  # events and compatible are one decision: keep
    low, high = report.accuracy.interval
    assert low < 0.6 < high


def test_a_bad_pairs_file_names_the_line_and_the_fix(tmp_path) -> None:
    path = tmp_path / "pairs.jsonl"
    path.write_text('{"first": "a", "second": "b", "label": "update"}\n{"first": "a", "second": "b", "label": "replaces"}\n')
    with pytest.raises(MemupdateError, match=r"pairs.jsonl:2: label 'replaces' is not a relation: use one of duplicate"):
        read_pairs(path)
    path.write_text("not json\n")
    with pytest.raises(MemupdateError, match="pairs.jsonl:1 is not JSON"):
        read_pairs(path)


def test_pairs_meet_their_nearest_above_the_floor() -> None:
    vectors = np.array([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0], [-1.0, 0.0]])
    assert candidate_pairs(vectors, floor=0.3, k=1) == [(0, 1)]  # 2 and 3 meet nobody above the floor
    assert len(candidate_pairs(vectors, floor=-1.0, k=3)) == 6  # every pair: each meets all three others
    assert candidate_pairs(vectors[:1]) == []


def test_an_unreadable_reply_is_the_safe_reading() -> None:
    first, second = Statement("Sam lives in Paris", "2024-01-01"), Statement("Sam moved to Berlin", "2024-02-01")
    verdict = read_reply('Sure! {"relation": "update", "current": null, "confidence": 0.9}', first, second)
    assert (verdict.relation, verdict.current, verdict.confidence) == ("update", "second", 0.9)
    assert read_reply("I think they replace each other", first, second) is None
    assert read_reply('{"relation": "replaces"}', first, second) is None


def test_the_endpoint_judge_asks_once_a_pair_and_caches(engine) -> None:
    def reply(body: dict) -> str:
        prompt = body["messages"][0]["content"]
        return json.dumps({"relation": "update" if "moved" in prompt else "compatible", "current": "second", "confidence": 0.95})

    pairs = [(Statement("Ana lives in Paris", "2024-01-01"), Statement("Ana moved to Oslo", "2024-05-01")),
             (Statement("Ana likes jazz", "2024-01-01"), Statement("Ana plays chess", "2024-05-01"))]
    with OpenAIStandIn(reply, models=("judge-model",)) as server:
        cache = LLMReplyCache(engine)
        judge = EndpointJudge(f"judge-model-{id(pairs)}", server.base_url, cache=cache)
        verdicts = judge.judge(pairs)
        assert [v.relation for v in verdicts] == ["update", "compatible"] and verdicts[0].current == "second"
        assert server.requests[0]["response_format"]["type"] == "json_schema" and server.requests[0]["temperature"] == 0.0
        asked = len(server.requests)
        again = EndpointJudge(judge.model, server.base_url, cache=cache).judge(pairs)
        assert [v.relation for v in again] == ["update", "compatible"] and len(server.requests) == asked == 2


def test_an_endpoint_that_does_not_answer_is_one_line() -> None:
    judge = EndpointJudge("m", "http://127.0.0.1:9/v1", timeout=2.0)
    with pytest.raises(MemupdateError, match=r"relation judge endpoint http://127.0.0.1:9/v1 does not answer .*--judge-base-url"):
        judge.judge([(Statement("a"), Statement("b"))])


@pytest.fixture(scope="module")
def local_judge():
    from memupdate.judge.judges import make_judge

    return make_judge("local")


def test_the_shipped_local_judge_reads_plain_english(local_judge) -> None:
    """The weights trained here (judge/weights/) on the packaged MiniLM: updates told in everyday words,
    which the rule misses, and two trips, which the rule used to supersede."""
    verdicts = local_judge.judge([
        (Statement("Dana works at Acme Corp as an engineer", "2024-01-01"), Statement("Dana quit Acme Corp and now works at Globex", "2024-06-01")),
        (Statement("Dana visited Rome in 2019", "2024-01-01"), Statement("Dana visited Rome in 2022", "2024-06-01")),
    ])
    assert (verdicts[0].relation, verdicts[0].current) == ("update", "second")
    assert local_judge.auto_apply.act(verdicts[1]) == "leave"  # two trips both stay (the rule reads an update)
    assert 0.0 < verdicts[0].confidence <= 1.0 and abs(sum(verdicts[0].scores.values()) - 1.0) < 1e-3
    assert 0.5 <= local_judge.auto_apply.update <= 1.0 and local_judge.card["calibrated_on"]["pairs"] > 1000


def test_eval_relations_prints_each_judge(tmp_path, local_judge) -> None:
    path = tmp_path / "pairs.jsonl"
    write_pairs([LabelledPair("The author of Dune is Frank Herbert.", "The author of Dune is Ann Leckie.", "update", "2020-01-01", "2021-01-01"),
                 LabelledPair("Ben likes chess", "Ben speaks French", "compatible"),
                 LabelledPair("made here", "never evaluated", "update", generated=True)], path)
    out = tmp_path / "report.json"
    result = CliRunner().invoke(app, ["eval", "relations", "--file", str(path), "--judge", "rule,local", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "rule" in result.output and "local" in result.output and "ms a pair" in result.output
    report = json.loads(out.read_text())
    assert [r["judge"] for r in report] == ["rule", "local"] and all(r["pairs"] == 2 for r in report)
    bad = CliRunner().invoke(app, ["eval", "relations", "--file", str(tmp_path / "none.jsonl")])
    assert bad.exit_code == 2 and "no pairs file" in bad.output


def _bank(store, texts_and_times):
    from memupdate.store import NewMemory

    return store.create_many([NewMemory(t, metadata={"time": when, "date": when[:10]}) for t, when in texts_and_times])


def test_a_wipe_dressed_as_updates_is_flagged_and_held(store) -> None:
    """A policy superseding every memory by the newest one: the review flags the change and the safety
    rule holds it, whatever the judge reads."""
    from memupdate.agent.safety import SafetyRule
    from memupdate.agent.tools import run_tool
    from memupdate.bank.review import build_review

    made = _bank(store, [(f"Ben fact number {i} about topic {i}", f"2024-01-{i + 1:02d}") for i in range(12)])  # 11 of 12 go
    fork = store.fork((*store.namespace, "wipe"))
    newest = made[-1].key
    for memory in made[:-1]:
        assert run_tool(fork, "delete_memory", {"memory_id": memory.key, "superseded_by": newest}).ok
    review = build_review(store, fork, judge=RuleJudge())
    wipes = [c for c in review.changes if c.kind == "supersede"]
    assert len(wipes) == 11 and all("this compaction retires 11 of 12 memories" in c.flags for c in wipes)
    assert all("one memory supersedes 11 others" in c.flags for c in wipes)
    assert all(SafetyRule().holds(c) for c in wipes)
    assert review.counts.flags >= 1
    fork.drop()


def test_a_supersession_applies_itself_only_above_the_judges_threshold(store) -> None:
    from memupdate.agent.safety import SafetyRule
    from memupdate.agent.tools import run_tool
    from memupdate.bank.review import build_review

    old, new = _bank(store, [("Cara lives in Paris", "2024-01-01"), ("Cara moved to Berlin last month", "2024-06-01")])
    fork = store.fork((*store.namespace, "sure"))
    assert run_tool(fork, "delete_memory", {"memory_id": old.key, "superseded_by": new.key}).ok
    sure = Scripted([Verdict("update", 0.97, "second")])
    unsure = Scripted([Verdict("update", 0.4, "second")])
    events = Scripted([Verdict("events", 0.99)])
    [change] = build_review(store, fork, judge=sure).changes
    assert change.facts.clear and change.facts.pairs[0].newer_current and not SafetyRule().holds(change)
    for judge in (unsure, events):
        [change] = build_review(store, fork, judge=judge).changes
        assert not change.facts.clear and any("not a clear update" in r for r in SafetyRule().holds(change))
    fork.drop()


def test_pairs_the_judge_links_share_a_neighbourhood() -> None:
    from memupdate.agent.compaction import neighbourhoods

    rng = np.random.default_rng(0)
    vectors = rng.normal(size=(60, 8))
    keys = [f"k{i}" for i in range(60)]
    apart = neighbourhoods(keys, vectors, 10)
    assert not any({"k0", "k59"} <= set(g) for g in apart)  # the test means something: apart by their vectors
    together = neighbourhoods(keys, vectors, 10, together=[("k0", "k59"), ("k59", "k31")])
    assert any({"k0", "k59", "k31"} <= set(g) for g in together)
    assert sorted(k for g in together for k in g) == sorted(keys) and all(len(g) <= 10 for g in together)


def test_a_new_memory_meets_its_nearest_at_once(store) -> None:
    """The watcher judges a new memory against its nearest live memories when it is written: a pair the
    judge reads as an update makes the bank need work, however few memories were added."""
    from memupdate.agent.background import BankPass, mark_compacted, needs_work

    _bank(store, [("Eli lives in Paris", "2024-01-01"), ("Eli plays chess", "2024-01-02")])
    mark_compacted(store, BankPass(store.path))
    assert needs_work(store, grow_by=20, judge=Scripted([])) is None
    _bank(store, [("Eli moved to Berlin last month", "2024-06-01")])
    reason = needs_work(store, grow_by=20, judge=Scripted([Verdict("update", 0.97, "second")] * 5))
    assert reason and "the judge reads update (0.97)" in reason
    assert needs_work(store, grow_by=20, judge=Scripted([Verdict("compatible", 0.9)] * 5)) is None
    # A rule's update the model reads as two events, under the rule's bar: the decision leaves it, so no work.
    trips = Verdict("update", 0.01, "second", {"duplicate": 0.0, "update": 0.01, "compatible": 0.01, "events": 0.98}, by_rule=True)
    assert needs_work(store, grow_by=20, judge=Scripted([trips] * 5)) is None


def test_training_writes_weights_that_build_into_a_judge(tmp_path) -> None:
    """Two steps on a handful of pairs (the real recipe is `memupdate judge train`): the trained weights
    alone, added to the packaged MiniLM by `build_judge`, load as a judge with its card."""
    from memupdate.judge.local import LocalJudge, build_judge
    from memupdate.judge.train import JudgeTrainConfig, train_judge
    from memupdate.rl.data.generated_relations import generated_pairs

    pairs = generated_pairs(12, seed=1)
    card = train_judge(pairs[:8], pairs[8:], JudgeTrainConfig(epochs=1.0, batch_size=4, train_layers=1), tmp_path / "run")
    assert card["train_pairs"] == 8 and card["recipe_pairs"] == 4 and card["labels"] == ["duplicate", "update", "compatible", "events"]
    assert card["auto_apply"] == AutoApply.never().to_json() and card["temperature"] > 0  # no recipe banks: nothing applies itself
    built = build_judge(tmp_path / "judge", tmp_path / "run" / "relation-judge.safetensors", tmp_path / "run" / "relation-judge.json")
    judge = LocalJudge(built)
    [verdict] = judge.judge([(Statement("Sam lives in Oslo"), Statement("Sam moved to Rome"))])
    assert verdict.relation in ("duplicate", "update", "compatible", "events") and judge.card["digest"] == card["digest"]


def test_a_judge_calibrated_again_reaches_a_built_checkpoint(tmp_path, monkeypatch) -> None:
    """`judge calibrate --ship` changes the shipped card, not the weights: a checkpoint built before reads
    the new thresholds without being built again."""
    import json

    from memupdate.judge import local

    card = json.loads(local.SHIPPED_CARD.read_text())
    built = local.build_judge(tmp_path / "judge")
    model = (built / "model.safetensors").stat().st_mtime_ns
    again = tmp_path / "relation-judge.json"
    again.write_text(json.dumps(card | {"auto_apply": card["auto_apply"] | {"ask": 0.5}}))
    monkeypatch.setattr(local, "SHIPPED_CARD", again)
    assert local.ensure_judge(built) == built and (built / "model.safetensors").stat().st_mtime_ns == model
    assert local.LocalJudge(built).auto_apply.ask == 0.5
