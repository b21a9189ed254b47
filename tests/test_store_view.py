"""A judge you can leave alone: the one auto-apply decision (`judge.decision`), its calibration on every
pair that meets in a person's store, and the store view (`judge.store_view`) on a small bank written
here: people whose facts are all true at once, beside a few changed facts. The last test reads the
shipped judge (the packaged MiniLM plus the weights in judge/weights/)."""

from __future__ import annotations

from datetime import date, timedelta

import numpy as np
import pytest

from memupdate.judge.decision import NEVER, AutoApply, calibrate_auto_apply, least_precise_cut
from memupdate.judge.meeting import candidate_pairs
from memupdate.judge.store_view import StoreBank, average_precision, judge_banks, rights, store_view
from memupdate.judge.verdict import Statement, Verdict

# Everyday first-person facts, written here, each person's all true at once (none changes another).
PEOPLE = [
    ["I am a librarian.", "I think I will retire in a few years.", "I grow tomatoes on my balcony.", "I have two cats.", "I am a woman."],
    ["I am a clean eater.", "I survived cancer ten years ago.", "I run every morning.", "I live near the sea.", "I have a brother."],
    ["I have a dog.", "I am a woman.", "I teach maths at a high school.", "I love old movies.", "I drive a red car."],
    ["I am a skateboarder.", "I broke my arm last summer.", "I play the bass in a band.", "I work in a shipyard.", "I am married."],
    ["I was born in Somalia.", "I live in the United States.", "I speak three languages.", "I study Spanish.", "I like jazz."],
    ["I hate my job.", "I work as a car salesman.", "I collect old postcards.", "I have a library card.", "I am a vegetarian."],
]
# People with a changed fact: (older, newer), said a month apart, beside facts that stay true.
CHANGED = [
    ("I live in Paris.", "I moved to Berlin last month, so I no longer live in Paris.", ["I play chess on Sundays.", "I have a sister."]),
    ("I work as a nurse.", "I quit nursing and now I work as a software developer.", ["I like hiking.", "I own a bicycle."]),
]


def _banks(embed) -> list[StoreBank]:
    banks = []
    start = date(2024, 1, 1)
    for n, facts in enumerate(PEOPLE):
        statements = tuple(Statement(f, (start + timedelta(weeks=i)).isoformat()) for i, f in enumerate(facts))
        banks.append(StoreBank(f"person-{n}", "everyday", statements, tuple(candidate_pairs(np.asarray(embed(facts))))))
    for n, (old, new, others) in enumerate(CHANGED):
        texts = [old, *others, new]
        statements = tuple(Statement(t, (start + timedelta(weeks=i * 4)).isoformat()) for i, t in enumerate(texts))
        met = tuple(candidate_pairs(np.asarray(embed(texts))))
        banks.append(StoreBank(f"changed-{n}", "everyday", statements, met, {(0, len(texts) - 1): "update"}))
    return banks


class Scripted:
    name = "scripted"
    auto_apply = AutoApply(update=0.9, rule_update=0.99, duplicate=0.95)

    def __init__(self, verdict_of):
        self.verdict_of = verdict_of

    def judge(self, pairs):
        return [self.verdict_of(a, b) for a, b in pairs]


def test_the_decision_applies_only_what_it_is_sure_of() -> None:
    auto = AutoApply(update=0.9, rule_update=0.99, duplicate=0.95)
    assert auto.act(Verdict("update", 0.93, "second")) == "apply"
    assert auto.act(Verdict("update", 0.85, "second")) == "ask"
    assert auto.act(Verdict("update", 0.99, None)) == "ask"  # neither stated later: a person says which holds
    assert auto.act(Verdict("update", 0.95, "second", by_rule=True)) == "ask"  # the rule's reading has its own bar
    # The rule's update the model reads as two events applies at the rule's bar, and under it leaves.
    events = {"duplicate": 0.03, "update": 0.05, "compatible": 0.02, "events": 0.9}
    assert auto.act(Verdict("update", 0.08, "second", events, by_rule=True)) == "leave"
    assert AutoApply(rule_update=0.05).act(Verdict("update", 0.08, "second", events, by_rule=True)) == "apply"
    assert auto.act(Verdict("duplicate", 0.96)) == "apply" and auto.act(Verdict("duplicate", 0.9)) == "ask"
    assert auto.act(Verdict("compatible", 0.99)) == "leave" and auto.act(Verdict("events", 0.99)) == "leave"
    # A pair read as two true facts never asks, whatever chance of an update it gives; an unapplied change
    # asks only from the chance the ask threshold names.
    assert auto.act(Verdict("compatible", 0.55, scores={"update": 0.45, "compatible": 0.55})) == "leave"
    picky = AutoApply(update=0.9, ask=0.6)
    assert picky.act(Verdict("update", 0.7, "second", {"update": 0.7, "duplicate": 0.05})) == "ask"
    assert picky.act(Verdict("update", 0.5, "second", {"update": 0.5, "compatible": 0.45})) == "leave"
    assert auto.act(Verdict("events", 0.6, scores={"update": 0.4, "events": 0.6})) == "leave"
    assert AutoApply.never().act(Verdict("update", 1.0, "second")) == "ask"
    assert AutoApply.of({"threshold": 0.85}) == AutoApply.never()  # a card from before the decision applies nothing
    # A cascade's second reading orders the queue: sure as it may be, it never applies itself.
    second = Verdict("update", 0.999, "second", {"update": 0.999, "compatible": 0.001}, by_confirmer=True)
    assert AutoApply(update=0.5).act(second) == "ask" and AutoApply(update=0.5, ask=0.9995).act(second) == "leave"


def test_the_cut_is_the_least_confidence_that_keeps_precision() -> None:
    said = [(0.99, True), (0.97, True), (0.95, False), (0.9, True), (0.8, False)]
    assert least_precise_cut(said, 0.99) == 0.97
    assert least_precise_cut(said, 0.6) == 0.8  # 3 of 5 right at the lowest cut
    assert least_precise_cut([(0.9, False)], 0.5) == NEVER
    verdicts = [Verdict("update", c, "second") for c, _ in said] + [Verdict("update", 0.99, "second", by_rule=True)]
    auto = calibrate_auto_apply(verdicts, [ok for _, ok in said] + [False])
    assert (auto.update, auto.rule_update, auto.duplicate) == (0.97, NEVER, NEVER)
    # A confirmer's readings never apply, so they do not bound what the judge's own readings apply at.
    wrong = [Verdict("update", 0.995, "second", by_confirmer=True), Verdict("duplicate", 0.99, by_confirmer=True)]
    assert calibrate_auto_apply(verdicts + wrong, [ok for _, ok in said] + [False, False, False]) == auto


def test_the_store_view_counts_what_applies_itself(embedder) -> None:
    """A judge that reads every pair of short first-person facts as an update (what the judge shipped
    before this decision did to persona facts) retires true facts; one that reads only the changes does not."""
    banks = _banks(embedder.embed)
    changes = {(old, new) for old, new, _ in CHANGED}
    eager = Scripted(lambda a, b: Verdict("update", 0.95, "second"))
    careful = Scripted(lambda a, b: Verdict("update", 0.97, "second") if (a.text, b.text) in changes else Verdict("compatible", 0.9))
    [eager_view] = store_view(eager, banks).values()
    assert eager_view.retired_share.hits >= 5 and eager_view.precision.value < 0.5
    [careful_view] = store_view(careful, banks).values()
    assert careful_view.retired_share.hits == 0 and careful_view.precision.value == 1.0
    assert careful_view.resolved_by_itself.hits == careful_view.updates_met == 2
    timid = store_view(careful, banks, auto_apply=AutoApply(update=0.99))["everyday"]
    assert timid.applied == 0 and timid.resolved_or_asked.hits == 2  # not sure enough: both wait for review
    verdicts = judge_banks(eager, banks)
    assert sum(rights(banks, verdicts)) == 2  # only the two changes are right to apply


def test_the_shipped_judge_retires_no_true_fact_by_itself(embedder, local_judge) -> None:
    """The store view of the small bank above with the shipped judge and its calibrated decision: nothing
    true is retired by itself (the judge shipped before, at its threshold 0.85, retired several of these)."""
    banks = _banks(embedder.embed)
    [view] = store_view(local_judge, banks).values()
    assert view.retired_share.hits == 0, view.wrong
    assert view.applied == view.applied_right
    assert view.resolved_or_asked.hits >= 1  # a change is not lost from sight: applied or waiting


def test_the_judge_reads_in_batches_of_a_token_budget() -> None:
    """Short pairs go many to a batch, long ones few, one longer than the budget alone; none lost, in order."""
    from types import SimpleNamespace

    from memupdate.judge.local import LocalJudge

    ids = [[0] * n for n in (4, 4, 5, 8, 8, 20, 40)]
    batches = list(LocalJudge._batches(SimpleNamespace(batch_tokens=16), ids, range(len(ids))))
    assert batches == [[0, 1, 2], [3, 4], [5], [6]]
    assert all(len(b) * max(len(ids[i]) for i in b) <= 16 or len(b) == 1 for b in batches)


def test_the_screen_reads_again_from_the_lowest_bound_the_card_decides_at() -> None:
    """A bfloat16 reading stands under the card's lowest bound, SCREEN_MARGIN less in logits: the ask bound
    for the shipped card, a cascade's confirmer's `reads_from` where that is lower, never above a bound."""
    import math
    from types import SimpleNamespace

    from memupdate.judge import local
    from memupdate.judge.decision import AutoApply

    def below(card: dict, **bounds: float) -> float:
        auto = AutoApply(**({"update": 0.9959, "rule_update": 0.0052, "duplicate": 1.01, "ask": 0.9889} | bounds))
        return local.LocalJudge.screen_below.fget(SimpleNamespace(auto_apply=auto, card=card))

    logit = lambda p: math.log(p / (1 - p))  # noqa: E731
    assert logit(0.9889) - logit(below({})) == pytest.approx(local.SCREEN_MARGIN)
    assert 0.95 < below({}) < 0.9889
    assert logit(0.02) - logit(below({"confirmer": {"reads_from": 0.02}})) == pytest.approx(local.SCREEN_MARGIN)
    assert below({}, update=0.5) < below({}) and below({}, ask=0.0) == 0.0


def test_the_screen_changes_no_decision(embedder, monkeypatch) -> None:
    """Screened (a bfloat16 reading first, the pairs that could act read again in full precision) and
    unscreened, the shipped judge decides the same on every pair of the bank above, and the readings that
    can act are the full-precision ones; the screen spares most of these pairs their second reading."""
    from memupdate.judge import local
    from memupdate.judge.store_view import met_pairs

    if not local.bf16_native():
        pytest.skip("this CPU has no native bfloat16 (AVX512-BF16 or AMX): the judge never screens here")
    pairs = [(bank.statements[i], bank.statements[j]) for bank, (i, j) in met_pairs(_banks(embedder.embed))]
    full = local.LocalJudge(screen=False).judge(pairs)
    read = []  # (in full precision, how many pairs) of each reading
    inner = local.LocalJudge._read

    def counted(self, encoded, order, model, out) -> None:
        read.append((model is self.model, len(order)))
        inner(self, encoded, order, model, out)

    monkeypatch.setattr(local.LocalJudge, "_read", counted)
    judge = local.LocalJudge(screen=True)  # its own: whether the screen pays is remembered across calls
    screened = judge.judge(pairs)
    auto = judge.auto_apply
    assert [auto.act(v) for v in screened] == [auto.act(v) for v in full]
    acting = [(v, w) for v, w in zip(screened, full, strict=True) if auto.act(w) != "leave"]
    assert acting and all((v.relation, v.current, v.by_rule) == (w.relation, w.current, w.by_rule) for v, w in acting)
    # full precision both: only the batches differ (their padding moves the sixth decimal)
    assert max(abs(v.confidence - w.confidence) for v, w in acting) < 1e-4
    again = sum(n for exact, n in read if exact)
    assert 0 < again < len(pairs) / 2, read
    # Where most pairs would be read twice, the screen stops after one window and is tried again later.
    monkeypatch.setattr(local.LocalJudge, "screen_below", property(lambda self: 0.0))
    monkeypatch.setattr(local, "SCREEN_WINDOW", 4)
    read.clear()
    assert [auto.act(v) for v in judge.judge(pairs)] == [auto.act(v) for v in full]
    assert [exact for exact, _ in read] == [False, True] + [True] * (len(pairs) // 4 - 1) + [True] * (len(pairs) % 4 > 0)


@pytest.fixture(scope="module")
def local_judge():
    from memupdate.judge.judges import make_judge

    return make_judge("local")


def test_a_watch_pass_over_peoples_stores_loses_no_true_fact(store, embedder) -> None:
    """The small bank above written into a LangGraph store, a person a namespace, each fact at its time;
    one watcher pass with the defaults (the shipped judge) retires no true fact, and its database is gone after."""
    from sqlalchemy import text

    from memupdate.rl.watch_eval import watch_banks

    banks = _banks(embedder.embed)
    report = watch_banks(store, banks)
    assert report.people == len(banks) and report.true_statements == sum(len(b.statements) for b in banks) - len(CHANGED)
    assert report.true_lost.hits == 0, report.lost
    assert report.updates_by_itself.total == len(CHANGED)
    assert 0 <= report.asks_right <= report.waiting  # what waits is counted, and how much of it a label asks for
    with store.engine.connect() as conn:
        assert not conn.execute(text("SELECT 1 FROM pg_database WHERE datname LIKE 'mu_watch_%'")).first()


def _data_folder(root):
    """A development-data folder in the shared layout, written here: three Persona-Chat-like people and
    one BEAM-like conversation whose deadline moved."""
    import json

    natural = root / "natural-updates"
    natural.mkdir(parents=True)
    rows = [{"persona_id": f"p{n}", "facts": facts, "n_cells": 1} for n, facts in enumerate(PEOPLE[:3])]
    (natural / "persona-chat-valid.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    update = {"conversation_id": "100K/1", "question": "When is the first sprint deadline?", "answer": "April 5, 2024",
              "old_statement": "Project Planning:Timeline: The first sprint deadline is April 1, 2024.",
              "new_statement": "Information Update: The first sprint deadline has shifted to April 5, 2024."}
    (natural / "beam-ku-dev.jsonl").write_text(json.dumps(update) + "\n")
    return root


def test_store_banks_read_each_source_as_peoples_stores(tmp_path, embedder) -> None:
    from memupdate.rl.data.relations import beam_text, store_banks

    assert beam_text("Information Update: Learning & Development:Knowledge Sharing: The deadline moved ->-> 1,27") == "The deadline moved"
    parts = store_banks(_data_folder(tmp_path), embedder.embed)
    banks = [b for part in parts.values() for b in part]
    assert sorted(b.source for b in banks) == ["beam", "persona", "persona", "persona"]
    [beam] = [b for b in banks if b.source == "beam"]
    assert [s.text for s in beam.statements] == ["The first sprint deadline is April 1, 2024.", "The first sprint deadline has shifted to April 5, 2024."]
    assert beam.labels == {(0, 1): "update"} and beam.statements[0].time < beam.statements[1].time
    persona = [b for b in banks if b.source == "persona"]
    assert all(not b.labels and b.met and len(b.statements) == 5 for b in persona)


def test_eval_relations_store_view_reports_each_source(tmp_path) -> None:
    import json

    from typer.testing import CliRunner

    from memupdate.cli import app

    data, out = _data_folder(tmp_path / "data"), tmp_path / "view.json"
    runner = CliRunner()
    parts = ["train", "recipe", "eval"]
    for part in parts:  # the hashed split puts these few people somewhere: every part is readable
        result = runner.invoke(app, ["eval", "relations", "--store-view", str(data), "--part", part, "--judge", "rule", "--out", str(out),
                                     "--plot", str(tmp_path / "curves.png")])
        if result.exit_code == 0:
            report = json.loads(out.read_text())
            assert (tmp_path / "curves.png").is_file() and report[0]["bound_curve"][0]["bound"] == 1.0
            assert report[0]["judge"] == "rule" and report[0]["part"] == part and "AutoApply" in result.output
            assert set(report[0]["sources"]) <= {"persona", "beam"} and all("true_retired" in v for v in report[0]["sources"].values())
            break
        assert "no bank of the" in result.output
    else:
        raise AssertionError("no part holds a bank")
    bad = runner.invoke(app, ["eval", "relations", "--store-view", str(tmp_path / "none")])
    assert bad.exit_code != 0 and "no data folder" in bad.output


def test_the_update_curve_area_ranks_changes_above_true_pairs() -> None:
    assert average_precision([(0.9, True), (0.8, False), (0.7, True)]) == pytest.approx((1 + 2 / 3) / 2)
    assert average_precision([(0.5, True), (0.5, False)]) == 0.5  # a tie ranks together: no better than chance
    assert average_precision([(0.1, False)]) is None


def test_asks_are_calibrated_to_be_mostly_changes() -> None:
    """The ask threshold is the least chance at which at least half of what would ask is a change."""
    read = [Verdict("update", c, "second", {"update": c, "compatible": 1 - c}) for c in (0.9, 0.8, 0.7, 0.6, 0.5, 0.4)]
    change = [True, False, True, False, False, False]
    auto = calibrate_auto_apply(read, [False] * 6, changes=change)
    assert auto.update == NEVER and auto.ask == 0.6  # 2 of the 4 at or above 0.6 are changes; at 0.5, 2 of 5
    assert [auto.act(v) for v in read] == ["ask"] * 4 + ["leave"] * 2


def test_an_ask_is_right_where_a_label_asks_for_its_change() -> None:
    from types import SimpleNamespace

    from memupdate.rl.watch_eval import _ask_is_right

    old, new, other = (Statement(t, d) for t, d in (("I live in Paris.", "2024-01-01"), ("I moved to Berlin.", "2024-02-01"),
                                                    ("I have a sister.", "2024-01-01")))
    bank = StoreBank("p", "persona", (old, new, other), ((0, 1), (0, 2)), {(0, 1): "update"})
    asking = lambda *texts: SimpleNamespace(sources=[SimpleNamespace(content=t) for t in texts])  # noqa: E731
    assert _ask_is_right([bank], asking("I live in Paris."))  # retires what the update retires
    assert not _ask_is_right([bank], asking("I have a sister."))  # retires a true fact


@pytest.mark.parametrize(("older", "newer", "label"), [
    ("Terrance Dicks is a citizen of United Kingdom.", "Terrance Dicks is a citizen of United States of America.", "update"),
    ("Justus Lipsius is affiliated with the religion of Catholic Church.", "Justus Lipsius is affiliated with the religion of Church of Scotland.", "update"),
    ("The origianl broadcaster of Nightline is American Broadcasting Company.", "The origianl broadcaster of Nightline is British Broadcasting Corporation.", "update"),
    ("Ken Burns's child is Sarah Burns.", "Ken Burns's child is Lilly Burns.", "update"),
    ("The univeristy where Bill Frisell was educated is Berklee College of Music.", "The univeristy where Bill Frisell was educated is The University of the Arts.", "update"),
    # Two subjects, or two relations of one subject: both true (the last release read the first three as updates).
    ("The type of music that Cleo Laine plays is jazz.", "The type of music that Archie Shepp plays is jazz.", "compatible"),
    ("The author of Bleak House is Charles Dickens.", "The author of David Copperfield is Charles Dickens.", "compatible"),
    ("Gran Turismo 4 was developed by Polyphony Digital.", "Gran Turismo 5 was developed by Polyphony Digital.", "compatible"),
    ("The type of music that Cleo Laine plays is jazz.", "The type of music that Jay-Z plays is hip hop music.", "compatible"),
    ("Geoffrey Chaucer is a citizen of Kingdom of England.", "Geoffrey Chaucer is famous for The Canterbury Tales.", "compatible"),
    ("Martin O'Neill is associated with the sport of association football.", "Michael O'Neill is associated with the sport of cricket.", "compatible"),
])
def test_factconsolidations_labels_read_one_subject_and_relation(older: str, newer: str, label: str) -> None:
    from memupdate.rl.data.relations import template_relation

    assert template_relation(older, newer) == label
    assert template_relation(newer, older) == label


def test_the_bound_curve_counts_what_each_bound_would_apply(tmp_path) -> None:
    """The curve behind a missed target: what a lower model-update bound would apply, right and wrong."""
    from memupdate.judge.calibration import bound_curve, plot_bound, precision_recall

    said = (Statement("Ana lives in Rome.", "2024-01-01"), Statement("Ana moved to Oslo.", "2024-02-01"),
            Statement("Ana has a cat.", "2024-03-01"))
    bank = StoreBank("p1", "letta", said, met=((0, 1), (0, 2), (1, 2)), labels={(0, 1): "update"})
    verdicts = [Verdict("update", 0.99, "second", {"update": 0.99, "compatible": 0.01}),
                Verdict("compatible", 0.9, None, {"update": 0.1, "compatible": 0.9}),
                Verdict("update", 0.97, "second", {"update": 0.97, "compatible": 0.03})]  # "Ana moved to Oslo." is true
    auto = AutoApply(update=0.995, ask=0.5)
    rows = bound_curve([bank], verdicts, auto, bounds=[0.995, 0.98, 0.96])
    assert [(r["natural"], r["natural_updates"], r["retired"]) for r in rows] == [(0, 1, 0), (1, 1, 0), (1, 1, 1)]
    assert rows[2]["wrong"] == {"letta": 1} and rows[1]["wrong"] == {}
    assert precision_recall([(0.9, True), (0.8, False), (0.7, True)]) == ([0.5, 0.5, 1.0], [1.0, 0.5, pytest.approx(2 / 3)])
    reports = store_view(None, [bank], auto_apply=auto, verdicts=verdicts)
    assert plot_bound(rows, reports, tmp_path / "bound.png", bound=auto.update).stat().st_size > 0
