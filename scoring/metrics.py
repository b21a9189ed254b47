"""LoCoMo's own QA metrics, matched to its `task_eval/evaluation.py`.

    from memupdate.scoring.metrics import bleu1, locomo_f1, substring_exact_match
    locomo_f1("She went on 7 May 2023.", "7 May 2023", category=2)   # 0.67
    locomo_f1("Sweden, Norway", "Norway, Sweden", category=1)          # 1.0: part by part
    locomo_f1("Not mentioned in the conversation", "", category=5)     # 1.0
    bleu1("7 May 2023", "7 May 2023")                                  # 1.0
    substring_exact_match("It is the Pesäpallo.", ["pesäpallo"])       # 1.0: MemoryAgentBench's rule

Scoring, as LoCoMo does it:
- normalisation: drop commas, lowercase, drop punctuation, drop `a|an|the|and` as words, squeeze
  whitespace; tokens are Porter-stemmed (nltk's `PorterStemmer`, no data download);
- categories 2, 3, 4: token F1 of prediction and answer (category 3 cuts the answer at its first `;`);
- category 1 (multi-hop): prediction and answer split on commas, each gold piece takes its best-matching
  predicted piece, and the piece scores are averaged;
- category 5 (adversarial): 1 when the prediction says "no information available" or "not mentioned".
MemoryAgentBench (FactConsolidation) scores `substring_exact_match`, matched to its
`utils/eval_other_utils.py`: lowercase, drop punctuation, drop `a|an|the` as words, squeeze whitespace
(`normalize_exact`: commas and "and" stay, unlike LoCoMo's), then 1 when any accepted answer, so
normalised, occurs in the normalised prediction.
`normalized_tokens` is also what the QA proxy (`scoring/qa_proxy.py`) counts, so its budget and its credit
are in the same tokens as this metric.
"""

from __future__ import annotations

import math
import re
import string
from collections import Counter
from collections.abc import Sequence
from functools import cache, lru_cache

from memupdate.scoring.categories import ADVERSARIAL, MULTI_HOP, OPEN_DOMAIN

REFUSALS = ("no information available", "not mentioned")
# str.translate deletes these in C: the same text as dropping them one character at a time in Python.
_NO_PUNCTUATION = str.maketrans("", "", string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the|and)\b")


def normalize_answer(text: str) -> str:
    """LoCoMo's `normalize_answer`: no commas, lowercase, no punctuation, no a/an/the/and."""
    text = text.replace(",", "").lower()
    text = text.translate(_NO_PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())


@lru_cache(maxsize=65536)
def stem(word: str) -> str:
    return _stemmer().stem(word)


@cache
def _stemmer():
    """nltk's Porter stemmer, imported on the first stem: importing nltk takes 1.4 s (scipy with it), which a
    `watch --once` command that scores no answer need not pay."""
    from nltk.stem import PorterStemmer

    return PorterStemmer()


def normalized_tokens(text: str) -> list[str]:
    """The Porter-stemmed tokens of `normalize_answer(text)`: what F1 compares."""
    return [stem(word) for word in normalize_answer(text).split()]


def token_f1(prediction: Sequence[str], answer: Sequence[str]) -> float:
    """F1 of two token lists (multiset overlap), LoCoMo's `f1_score` after tokenising."""
    same = sum((Counter(prediction) & Counter(answer)).values())
    if same == 0:
        return 0.0
    precision, recall = same / len(prediction), same / len(answer)
    return 2 * precision * recall / (precision + recall)


def f1_score(prediction: str, answer: str) -> float:
    return token_f1(normalized_tokens(prediction), normalized_tokens(answer))


def gold_answer(answer: str, category: int) -> str:
    """The gold text LoCoMo scores against: category 3 keeps what precedes the first `;`."""
    answer = str(answer)
    return answer.split(";")[0].strip() if category == OPEN_DOMAIN else answer


def answer_parts(answer: str, category: int) -> list[str]:
    """Gold pieces scored separately: category 1 answers are comma-separated lists."""
    answer = gold_answer(answer, category)
    return [part.strip() for part in answer.split(",")] if category == MULTI_HOP else [answer]


def says_not_mentioned(prediction: str) -> bool:
    lowered = prediction.lower()
    return any(phrase in lowered for phrase in REFUSALS)


def locomo_f1(prediction: str, answer: str | None, category: int) -> float:
    """LoCoMo's QA score of `prediction` for a question of `category` (see the module docstring)."""
    if category == ADVERSARIAL:
        return 1.0 if says_not_mentioned(prediction) else 0.0
    answer = gold_answer(answer or "", category)
    if category == MULTI_HOP:
        predictions = [p.strip() for p in prediction.split(",")]
        golds = [g.strip() for g in answer.split(",")]
        return sum(max(f1_score(p, g) for p in predictions) for g in golds) / len(golds)
    return f1_score(prediction, answer)


def bleu1(prediction: str, answer: str) -> float:
    """Sentence BLEU-1 (unigram precision, clipped, with the brevity penalty) on normalised tokens,
    as nltk's `sentence_bleu(weights=(1, 0, 0, 0))` that LoCoMo's metrics use."""
    hypothesis, reference = normalize_answer(prediction).split(), normalize_answer(answer).split()
    if not hypothesis or not reference:
        return 0.0
    clipped = sum((Counter(hypothesis) & Counter(reference)).values())
    precision = clipped / len(hypothesis)
    brevity = 1.0 if len(hypothesis) > len(reference) else math.exp(1 - len(reference) / len(hypothesis))
    return precision * brevity


_EXACT_ARTICLES = re.compile(r"\b(a|an|the)\b")


def normalize_exact(text: str) -> str:
    """MemoryAgentBench's `normalize_answer`: lowercase, no punctuation, no a/an/the, squeezed whitespace."""
    text = text.lower().translate(_NO_PUNCTUATION)
    return " ".join(_EXACT_ARTICLES.sub(" ", text).split())


def substring_exact_match(prediction: str, accepted: str | Sequence[str]) -> float:
    """1.0 when an accepted answer (normalised) occurs in the prediction (normalised), else 0.0: the
    benchmark's `substring_exact_match`, the maximum over its accepted answers."""
    answers = [accepted] if isinstance(accepted, str) else accepted
    said = normalize_exact(prediction)
    return float(any(normalize_exact(answer) in said for answer in answers))
