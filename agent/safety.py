"""When a compaction's change may apply itself, and when it waits for a person: the safety rule.

    from memupdate.agent.safety import SafetyRule

    rule = SafetyRule()                                  # the default: see below
    rule.holds(review_change)                            # [] (safe) or the reasons it waits
    rule = SafetyRule(kinds=("update",), min_similarity=0.9)     # stricter: only dated updates apply themselves
    SafetyRule.review_everything()                       # nothing applies itself
    rule.holds(review_change, qa.worse_keys)             # where the bank has questions (`scoring.qa_change`)

The default applies a change only when every check passes: its kind is a merge, an update, a
supersession or a delete; a supersession the relation judge's decision applies by itself (an update,
the newer current and stated later, at a confidence at least the judge's calibrated threshold:
`judge.decision`, read in `bank.review`), and a merge none of whose sources updates another or tells another event;
no review flag (a supersession by a dissimilar memory, a wipe dressed as updates); no coverage flag
(no source loses a content word, a deleted memory is held elsewhere; a merge of statements the judge
confidently reads as one fact told twice keeps the fullest wording and may drop a synonym); no word its
sources do not hold (dates their relative time resolves to excepted); sources alike (a merge's least
pairwise similarity at least `min_similarity`, and a content word they all share: a merge of unrelated
memories keeps every word and raises no coverage flag, so this is what catches it); and, where the
bank has questions, no question whose QA proxy falls retrieves one of its memories.
"""

from __future__ import annotations

from dataclasses import dataclass

from memupdate.bank.review import UNRELATED_BELOW
from memupdate.bank.review_records import CHANGE_KINDS, Change
from memupdate.text.strategies import article

SAFE_KINDS = ("merge", "update", "supersede", "delete")


@dataclass(frozen=True)
class SafetyRule:
    """Which changes apply themselves (see the module docstring); everything else waits for review."""

    kinds: tuple[str, ...] = SAFE_KINDS
    allow_coverage_flags: bool = False
    allow_unsupported_words: bool = False
    min_similarity: float = UNRELATED_BELOW
    require_shared_word: bool = True
    allow_qa_drop: bool = False
    # A supersession applies itself only when the judge confidently reads it as an update with the newer
    # current, and a merge only when none of its sources updates another (merging an update would keep the
    # older statement beside or over the newer) or tells another event.
    allow_unclear_facts: bool = False

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

    def holds(self, change: Change, qa_worse: frozenset[str] = frozenset()) -> list[str]:
        """The reasons `change` (one change of `build_review`) must wait for review; [] when it is safe.
        `qa_worse`: the memories retrieved for questions whose QA proxy fell (`QAChange.worse_keys`)."""
        reasons = []
        if change.kind not in self.kinds:
            reasons.append(f"{article(change.kind)} never applies itself under this rule")
        facts = change.facts
        if change.coverage.flagged and not self.allow_coverage_flags and not (facts and facts.duplicates):
            reasons.append("coverage flag: " + "; ".join(f"{k} loses {', '.join(w)}" for k, w in change.coverage.missing.items()))
        if change.unsupported and not self.allow_unsupported_words:
            reasons.append(f"words no source holds: {', '.join(change.unsupported)}")
        least = change.alike.min_similarity
        if least is not None and least < self.min_similarity:
            reasons.append(f"sources not alike: least similarity {least} < {self.min_similarity}")
        if len(change.sources) > 1 and self.require_shared_word and not change.alike.shared_words:
            reasons.append("sources share no content word")
        if facts and not facts.clear and not self.allow_unclear_facts:
            judged = f"the judge ({facts.judge}) is not sure above {facts.threshold}, " if facts.judge is not None else ""
            reasons.append(
                f"not a clear update: {judged}the two read as different facts, or the newer is not stated later"
                if change.kind == "supersede" else "its sources state an update or two events, not a duplicate"
            )
        reasons += [f"flag: {flag}" for flag in change.flags]
        if set(change.keys) & qa_worse and not self.allow_qa_drop:
            reasons.append("a question it touches scores lower on the QA proxy")
        return reasons
