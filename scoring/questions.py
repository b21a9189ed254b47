"""A conversation's questions: the `QAItem` record, the form a verl row's `extra_info` holds it in, which
questions are scored, and which other questions are scored beside a target (its collateral).

    from memupdate.scoring.questions import collateral_sample, qa_from_row, qa_row, scorable_questions
    questions, skipped = scorable_questions(conversation)          # category 5 left out by default
    collateral_sample(questions, target.index, COLLATERAL_QUESTIONS)   # the same 8 for every rollout
    qa_from_row(qa_row(item)) == item
"""

from __future__ import annotations

import json
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TypeVar

from memupdate.errors import MemupdateError
from memupdate.scoring.categories import ADVERSARIAL, SINGLE_HOP, category_name

# Other questions of the conversation a reward also scores, to charge an edit's collateral damage.
COLLATERAL_QUESTIONS = 8

@dataclass(frozen=True, slots=True)
class QAItem:
    """One evaluation question.

    ``index`` is the position in the sample's ``qa`` list (stable id within a conversation). ``answer`` is
    always a string or None: int answers such as 2022 become "2022"; adversarial items (category 5) usually
    have no answer, only ``adversarial_answer`` (the tempting wrong one; the right response is "not mentioned").
    """

    index: int
    question: str
    answer: str | None
    adversarial_answer: str | None
    evidence: tuple[str, ...]
    category: int

    @property
    def category_name(self) -> str:
        return category_name(self.category)

    @property
    def is_adversarial(self) -> bool:
        return self.category == ADVERSARIAL


def qa_row(question: Any) -> dict[str, Any]:
    """A question as a verl row's ``extra_info`` holds it (plain JSON types); :func:`qa_from_row` reads it back.

        qa_row(item)   # {"qa_index": 3, "question": "When did ...?", "answer": "7 May 2023", "category": 2, ...}
        qa_from_row(qa_row(item)) == item

    ``question`` is a :class:`QAItem` or anything with its fields (``adversarial_answer`` may be absent).
    """
    return {
        "qa_index": question.index,
        "question": question.question,
        "answer": question.answer,
        "adversarial_answer": getattr(question, "adversarial_answer", None),
        "category": question.category,
        "evidence": list(question.evidence),
    }


def qa_from_row(row: Mapping[str, Any]) -> QAItem:
    """The :class:`QAItem` a row written by :func:`qa_row` holds; a missing ``category`` reads as 0 and a
    missing ``qa_index`` falls back to verl's ``index``."""
    return QAItem(
        index=int(row.get("qa_index", row.get("index", -1))),
        question=str(row["question"]),
        answer=None if row.get("answer") is None else str(row["answer"]),
        adversarial_answer=row.get("adversarial_answer"),
        evidence=tuple(row.get("evidence") or ()),
        category=int(row.get("category", 0)),
    )


class HasQuestions(Protocol):
    """A bank's questions and its id (a LoCoMo `Conversation`, a FactConsolidation context)."""

    sample_id: str
    qa: Sequence[QAItem]


def scorable_questions(
    conversation: HasQuestions, include_adversarial: bool = False, max_questions: int | None = None
) -> tuple[list[QAItem], list[dict]]:
    """The questions to score (category 5 only with `include_adversarial`; the first `max_questions`),
    and the ones skipped with the reason."""
    kept, skipped = [], []
    for qa in conversation.qa:
        if qa.category == ADVERSARIAL and not include_adversarial:
            continue
        if not qa.answer and qa.category != ADVERSARIAL:  # adversarial items have no answer by design
            skipped.append({"sample_id": conversation.sample_id, "qa_index": qa.index, "error": "question has no answer"})
            continue
        kept.append(qa)
    return kept[:max_questions], skipped


_Question = TypeVar("_Question")


def collateral_sample(questions: Sequence[_Question], target_index: int, k: int) -> list[_Question]:
    """`k` questions other than the target (the one whose `.index` is `target_index`), the same sample
    for every rollout of that target: seeded by its index, so base and forks are scored alike."""
    others = [q for q in questions if getattr(q, "index", None) != target_index]
    return random.Random(target_index).sample(others, min(k, len(others)))


def read_questions(path: Path) -> list[QAItem]:
    """A JSON list or JSONL of `{question, answer, category?, evidence?}`; a clear error names the bad item."""
    try:
        raw = path.read_text(encoding="utf-8").strip()
        rows = json.loads(raw) if raw.startswith("[") else [json.loads(line) for line in raw.splitlines() if line.strip()]
    except OSError as exc:
        raise MemupdateError(f"--questions {str(path)!r}: {exc.strerror}") from None
    except json.JSONDecodeError as exc:
        raise MemupdateError(f"--questions {str(path)!r} is not JSON or JSONL (line {exc.lineno}: {exc.msg})") from None
    questions = []
    for number, row in enumerate(rows, 1):
        if not isinstance(row, dict) or not isinstance(row.get("question"), str) or row.get("answer") is None:
            raise MemupdateError(f"--questions {str(path)!r} item {number}: give {{\"question\": ..., \"answer\": ...}}")
        questions.append(QAItem(number - 1, row["question"], str(row["answer"]), None, tuple(row.get("evidence") or ()), int(row.get("category", SINGLE_HOP))))
    return questions
