"""LoCoMo's QA metrics, checked against hand-worked cases of its `task_eval/evaluation.py` rules and
against nltk's own sentence BLEU-1."""

from __future__ import annotations

import warnings

import pytest

from memupdate.scoring.metrics import bleu1, locomo_f1, normalize_answer, normalized_tokens


def test_normalisation_matches_locomo() -> None:
    assert normalize_answer("The cat, and a dog!") == "cat dog"
    assert normalize_answer("7 May, 2023.") == "7 may 2023"
    assert normalized_tokens("running races") == ["run", "race"], "Porter-stemmed"


@pytest.mark.parametrize(
    ("prediction", "answer", "category", "expected"),
    [
        ("7 May 2023", "7 May 2023", 2, 1.0),
        ("She went on 7 May 2023.", "7 May 2023", 2, 2 / 3),  # P 3/6, R 3/3
        ("in May", "7 May 2023", 2, 0.4),  # "in may" vs "7 may 2023": P 1/2, R 1/3
        ("Sweden, Norway", "Norway, Sweden", 1, 1.0),  # part by part, order-free
        ("running, hiking", "running, pottery, hiking", 1, 2 / 3),
        ("Likely yes", "Likely yes; she loves dogs", 3, 1.0),  # category 3 stops at the first ";"
        ("Not mentioned in the conversation", "", 5, 1.0),
        ("No information available.", None, 5, 1.0),
        ("She went to Paris", "", 5, 0.0),
        ("painted", "paints", 4, 1.0),  # stems agree
        ("", "7 May 2023", 2, 0.0),
    ],
)
def test_locomo_f1(prediction: str, answer: str | None, category: int, expected: float) -> None:
    assert locomo_f1(prediction, answer, category) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("prediction", "answer"),
    [("she went on 7 May 2023", "7 May 2023"), ("May", "7 May 2023"), ("the cat sat on the mat", "a cat is on the mat")],
)
def test_bleu1_equals_nltk_sentence_bleu(prediction: str, answer: str) -> None:
    from nltk.translate.bleu_score import sentence_bleu

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # nltk warns about the zero higher-order counts it ignores here
        expected = sentence_bleu([normalize_answer(answer).split()], normalize_answer(prediction).split(), weights=(1, 0, 0, 0))
    assert bleu1(prediction, answer) == pytest.approx(expected)
    assert bleu1("", answer) == 0.0
