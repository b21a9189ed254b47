"""The QA proxy before -> after an edit of a bank, paired per question: what `memupdate compact`
reports, what the watcher's safety rule reads, and (with a reader) the reader's F1 beside it.

    from memupdate.scoring.qa_change import qa_change
    change = qa_change(bank, fork, questions)            # None where no question has an answer
    change.summary()     # {"questions", "before", "after", "better", "worse", "change": mean and 95% interval}
    change.worse_keys    # the memories either side retrieved for every question that scores lower after
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from memupdate.scoring.categories import ADVERSARIAL
from memupdate.scoring.qa_proxy import QAScore, score_questions
from memupdate.scoring.summaries import interval
from memupdate.store import MemoryStore

EPSILON = 1e-9


@dataclass(frozen=True)
class QAChange:
    """Each answerable question's QA proxy on the bank (`before`) and on the edited fork (`after`)."""

    questions: Sequence[Any]
    before: Sequence[QAScore]
    after: Sequence[QAScore]
    reader: dict[str, Any] | None = None  # the reader's F1 before -> after (`reader_change`), if asked

    @property
    def deltas(self) -> list[float]:
        return [a.qa_score - b.qa_score for b, a in zip(self.before, self.after, strict=True)]

    @property
    def worse_keys(self) -> frozenset[str]:
        return frozenset(k for b, a in zip(self.before, self.after, strict=True)
                         if a.qa_score < b.qa_score - EPSILON for k in (*b.retrieved, *a.retrieved))

    def summary(self) -> dict[str, Any]:
        deltas = self.deltas
        out = {
            "questions": len(deltas),
            "before": sum(s.qa_score for s in self.before) / len(deltas),
            "after": sum(s.qa_score for s in self.after) / len(deltas),
            "better": sum(d > EPSILON for d in deltas),
            "worse": sum(d < -EPSILON for d in deltas),
            "change": interval(deltas),
        }
        return out | ({"reader": self.reader} if self.reader is not None else {})


def answerable(questions: Sequence[Any]) -> list[Any]:
    """The questions the proxy scores: an answer, and not adversarial (category 5)."""
    return [q for q in questions if getattr(q, "category", None) != ADVERSARIAL and getattr(q, "answer", None)]


def qa_change(
    bank: MemoryStore, fork: MemoryStore, questions: Sequence[Any], reader: Any = None,
    progress: Callable[[int, int], None] | None = None,
) -> QAChange | None:
    """The QA proxy of `bank` and of `fork` on the answerable `questions` (None if there are none); with a
    `reader` (an answerer), also its F1 on the very contexts the proxy read."""
    asked = answerable(questions)
    if not asked:
        return None
    change = QAChange(asked, score_questions(bank, asked), score_questions(fork, asked))
    if reader is None:
        return change
    from memupdate.scoring.answer_report import reader_change

    return QAChange(asked, change.before, change.after, reader_change(reader, asked, change.before, change.after, progress))
