"""The answerer's report: LoCoMo F1, BLEU-1 and judge accuracy before and after editing, per category,
and how well the QA proxy agrees with the reader.

    from memupdate.scoring.answer_report import answerer_report
    section, rows = answerer_report(answerer, questions, {"before": ctx_before, "after": ctx_after},
                                    {"before": proxy_before, "after": proxy_after})
    section["after"]["f1"], section["proxy_f1_pearson"]["all"]   # mean F1 after; Pearson r over both sides
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from memupdate.scoring.answer_prompts import NOT_MENTIONED, AskedQuestion
from memupdate.scoring.answerer import LLMAnswerer, Progress
from memupdate.scoring.categories import ADVERSARIAL
from memupdate.scoring.metrics import bleu1, locomo_f1
from memupdate.scoring.summaries import by_category, interval, mean


def pearson(xs: Sequence[float], ys: Sequence[float]) -> float | None:
    """Pearson's r; None with fewer than 2 points or when either side is constant."""
    n = len(xs)
    if n < 2:
        return None
    mean_x, mean_y = sum(xs) / n, sum(ys) / n
    sxy = sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys, strict=True))
    sxx = sum((x - mean_x) ** 2 for x in xs)
    syy = sum((y - mean_y) ** 2 for y in ys)
    if sxx == 0 or syy == 0:
        return None
    return sxy / math.sqrt(sxx * syy)


AnswerScore = Callable[[str, AskedQuestion], float]


def locomo_score(answer: str, question: AskedQuestion) -> float:
    """LoCoMo's F1 of `answer` for `question` (the default rule of the reports below)."""
    return locomo_f1(answer, question.answer, question.category)


def answerer_report(
    answerer: LLMAnswerer,
    questions: Sequence[AskedQuestion],
    contexts: dict[str, Sequence[str]],
    proxy_scores: dict[str, Sequence[float]],
    progress: Progress | None = None,
    score: AnswerScore | None = None,
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Answer (and judge) every question on each side ("before", "after") from its context.

    Returns the report section — per side: F1, BLEU-1, judge accuracy, overall and per category; and
    `proxy_f1_pearson` per side and over both — and one dict per question with its answers and scores.
    `score(answer, question)` replaces LoCoMo's F1 under the "f1" keys when a benchmark has its own rule
    (FactConsolidation: substring exact match); the section's "metric" names the rule used.
    """
    sides = list(contexts)
    per_question: list[dict[str, Any]] = [{} for _ in questions]
    section: dict[str, Any] = {"model": answerer.model, "judge": answerer.judge_model,
                               "metric": getattr(score or locomo_score, "__name__", "score")}
    judged = sum(q.category != ADVERSARIAL for q in questions) if answerer.judge_endpoint else 0
    total = len(sides) * (len(questions) + judged)
    base = 0

    def step(done: int, _total: int) -> None:
        if progress:
            progress(base + done, total)

    pairs_all: list[tuple[float, float]] = []
    correlation: dict[str, float | None] = {}
    for side in sides:
        answers = answerer.answer(questions, contexts[side], step)
        base += len(questions)
        verdicts: list[bool | None] = [None] * len(questions)
        if answerer.judge_endpoint is not None:
            verdicts = answerer.judge(questions, answers, step)
            base += judged
        f1s = [(score or locomo_score)(a, q) for a, q in zip(answers, questions, strict=True)]
        bleus = [bleu1(a, q.answer or NOT_MENTIONED) for a, q in zip(answers, questions, strict=True)]
        for row, answer, f1, bleu, verdict in zip(per_question, answers, f1s, bleus, verdicts, strict=True):
            row[side] = {"answer": answer, "f1": f1, "bleu1": bleu, "judge": verdict}
        section[side] = _summary(questions, f1s, bleus, verdicts)
        pairs = list(zip(proxy_scores[side], f1s, strict=True))
        pairs_all += pairs
        correlation[side] = pearson([p for p, _ in pairs], [f for _, f in pairs])
    correlation["all"] = pearson([p for p, _ in pairs_all], [f for _, f in pairs_all])
    section["proxy_f1_pearson"] = correlation
    section["requests"] = answerer.requests
    return section, per_question


def _summary(
    questions: Sequence[AskedQuestion], f1s: list[float], bleus: list[float], verdicts: list[bool | None]
) -> dict[str, Any]:
    def block(indices: list[int]) -> dict[str, Any]:
        judged = [verdicts[i] for i in indices if verdicts[i] is not None]
        return {
            "questions": len(indices),
            "f1": mean([f1s[i] for i in indices]),
            "bleu1": mean([bleus[i] for i in indices]),
            "judge_accuracy": mean([float(v) for v in judged]) if judged else None,
            "judged": len(judged),
        }

    overall = block(list(range(len(questions))))
    overall["by_category"] = by_category(range(len(questions)), lambda i: questions[i].category, block)
    return overall


__all__ = ["AnswerScore", "answerer_report", "locomo_score", "pearson", "reader_change"]


def reader_change(
    reader: LLMAnswerer, questions: Sequence[AskedQuestion], before: Sequence[Any], after: Sequence[Any],
    progress: Progress | None = None,
    score: AnswerScore | None = None,
) -> dict[str, Any]:
    """The reader's F1 (or `score`, see `answerer_report`) on the contexts the QA proxy read before and
    after (`QAScore`s), its paired change per question, and its Pearson r with the proxy."""
    contexts = {"before": [s.context for s in before], "after": [s.context for s in after]}
    proxy = {"before": [s.qa_score for s in before], "after": [s.qa_score for s in after]}
    section, rows = answerer_report(reader, questions, contexts, proxy, progress, score)
    changes = [row["after"]["f1"] - row["before"]["f1"] for row in rows]
    return {
        "model": section["model"], "metric": section["metric"],
        "before": section["before"]["f1"], "after": section["after"]["f1"],
        "change": interval(changes), "better": sum(c > 1e-9 for c in changes), "worse": sum(c < -1e-9 for c in changes),
        "proxy_f1_pearson": section["proxy_f1_pearson"]["all"],
        "proxy_change_f1_change_pearson": pearson([a - b for a, b in zip(proxy["after"], proxy["before"], strict=True)], changes),
    }
