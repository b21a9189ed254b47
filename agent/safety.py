"""When a compaction's change may apply itself, and when it waits for a person: the safety rule.

    from memupdate.agent.safety import SafetyRule, QAGuard

    rule = SafetyRule()                                  # the default: see below
    rule.holds(review_change)                            # [] (safe) or the reasons it waits
    rule = SafetyRule(kinds=("update",), min_similarity=0.9)     # stricter: only dated updates apply themselves
    SafetyRule.review_everything()                       # nothing applies itself

    guard = QAGuard(score_questions, questions)          # where the bank has questions (rl.scoring.qa_proxy)
    effect = guard(bank, fork)                           # QA before/after, and the memories of worse questions

The default applies a change only when every check passes: its kind is a merge, an update or a delete;
no coverage flag (no source loses a content word, a deleted memory is held elsewhere); no word its
sources do not hold (dates their relative time resolves to excepted); sources alike (a merge's least
pairwise similarity at least `min_similarity`, and a content word they all share: a merge of unrelated
memories keeps every word and raises no coverage flag, so this is what catches it); and, where the
bank has questions, no question whose QA proxy falls retrieves one of its memories.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from memupdate.agent.review import CHANGE_KINDS, UNRELATED_BELOW
from memupdate.store import MemoryStore

SAFE_KINDS = ("merge", "update", "delete")


@dataclass(frozen=True)
class SafetyRule:
    """Which changes apply themselves (see the module docstring); everything else waits for review."""

    kinds: tuple[str, ...] = SAFE_KINDS
    allow_coverage_flags: bool = False
    allow_unsupported_words: bool = False
    min_similarity: float = UNRELATED_BELOW
    require_shared_word: bool = True
    allow_qa_drop: bool = False

    def __post_init__(self) -> None:
        unknown = [k for k in self.kinds if k not in CHANGE_KINDS]
        if unknown:
            raise ValueError(f"safety rule kinds {unknown} are not change kinds: choose from {', '.join(CHANGE_KINDS)}")
        if not 0.0 <= self.min_similarity <= 1.0:
            raise ValueError(f"min_similarity {self.min_similarity} must be between 0 and 1 (cosine similarity)")

    @classmethod
    def review_everything(cls) -> SafetyRule:
        """No change applies itself: every one waits in the review queue."""
        return cls(kinds=())

    def holds(self, change: dict[str, Any], qa_worse: frozenset[str] = frozenset()) -> list[str]:
        """The reasons `change` (one change of `build_review`) must wait for review; [] when it is safe.
        `qa_worse`: the memories retrieved for questions whose QA proxy fell (`QAGuard`)."""
        reasons = []
        if change["kind"] not in self.kinds:
            reasons.append(f"a {change['kind']} never applies itself under this rule")
        if change["coverage"]["flagged"] and not self.allow_coverage_flags:
            reasons.append("coverage flag: " + "; ".join(f"{k} loses {', '.join(w)}" for k, w in change["coverage"]["missing"].items()))
        if change.get("unsupported") and not self.allow_unsupported_words:
            reasons.append(f"words no source holds: {', '.join(change['unsupported'])}")
        alike = change.get("alike") or {}
        least = alike.get("min_similarity")
        if least is not None and least < self.min_similarity:
            reasons.append(f"sources not alike: least similarity {least} < {self.min_similarity}")
        if len(change["sources"]) > 1 and self.require_shared_word and not alike.get("shared_words"):
            reasons.append("sources share no content word")
        touched = {m["key"] for m in change["sources"]} | {m["key"] for m in change["results"]}
        if touched & qa_worse and not self.allow_qa_drop:
            reasons.append("a question it touches scores lower on the QA proxy")
        return reasons


@dataclass(frozen=True)
class QAEffect:
    """The QA proxy before -> after over the bank's questions, and the memories the worse ones read."""

    summary: dict[str, Any]
    worse_keys: frozenset[str]


class QAGuard:
    """Scores a bank and its fork on the bank's questions with `score_questions` (the QA proxy of
    `memupdate.rl.scoring.qa_proxy`, passed in: the agent does not import rl) and names the memories
    retrieved, on either side, for every question that scores lower after."""

    def __init__(
        self, score_questions: Callable[[MemoryStore, Sequence[Any]], Sequence[Any]],
        questions: Sequence[Any] | Callable[[MemoryStore], Sequence[Any]],
    ):
        self.score_questions = score_questions
        self.questions = questions  # the same for every bank, or each bank's own (a LoCoMo bank's conversation)

    def __call__(self, bank: MemoryStore, fork: MemoryStore) -> QAEffect | None:
        asked = self.questions(bank) if callable(self.questions) else self.questions
        asked = [q for q in asked if getattr(q, "answer", None)]
        if not asked:
            return None
        before = self.score_questions(bank, asked)
        after = self.score_questions(fork, asked)
        worse = [(b, a) for b, a in zip(before, after, strict=True) if a.qa_score < b.qa_score - 1e-9]
        summary = {
            "questions": len(before),
            "before": sum(s.qa_score for s in before) / len(before),
            "after": sum(s.qa_score for s in after) / len(after),
            "better": sum(a.qa_score > b.qa_score + 1e-9 for b, a in zip(before, after, strict=True)),
            "worse": len(worse),
        }
        return QAEffect(summary, frozenset(k for b, a in worse for k in (*b.retrieved, *a.retrieved)))
