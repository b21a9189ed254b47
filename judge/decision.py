"""What a bank may do by itself with a judge's reading of a pair: the one decision, in one place.

    from memupdate.judge.decision import AutoApply, operation
    from memupdate.judge.verdict import Verdict
    auto = AutoApply(update=0.97, rule_update=0.99, duplicate=0.95, ask=0.5)
    auto.act(Verdict("update", 0.98, "second"))          # "apply": supersede the older by itself
    auto.act(Verdict("update", 0.80, "second"))          # "ask": wait in `memupdate review`
    auto.act(Verdict("update", 0.40, "second"))          # "leave": too little chance to be worth a person's minute
    auto.act(Verdict("compatible", 0.6, scores={"update": 0.35, "compatible": 0.6}))   # "leave": read as both true
    AutoApply.never().act(Verdict("update", 1.0, "second"))   # "ask": nothing applies itself
    operation("update", "second", ("Sam lives in Paris", "Sam moved to Berlin"))   # Operation("supersede", retired=0, kept=1)

An update applies itself only when the judge is at least `update` sure of it (`rule_update` where the
rule read the update, its confidence then the model's that the two tell one fact: the two confidences
mean different things, so each has its own threshold) and one statement was stated later
(`Verdict.current`); a duplicate merges itself at `duplicate`. A rule's update under its threshold that
the model reads as two events leaves ("visited Rome in 2019" / "... in 2022"). An ask is a question to a
person: an update or a duplicate that does not apply itself asks only where the judge gives the change a
real chance (`change_chance` at least `ask`, calibrated so that at least half of what asks in the recipe
part's people is a change), and the review ranks asks by that chance; a pair the judge reads as both
true never asks. A cascade's second reading (`Verdict.by_confirmer`) never applies itself: it asks or
leaves. What a decision asks of the bank (`operation`: supersede which, merge which) is read here
too, one way for the heuristic, the learning code and the benchmarks: an update's direction is the
verdict's `current`, a duplicate keeps the fuller wording. The thresholds are the judge's own (its card, calibrated by `calibrate_auto_apply` on
every pair that meets in the recipe part's banks, where two true facts are the common case), so the
confidence compared is the one they were fitted on. The heuristic, the review, the watcher and the
learning code read `act`; none restates it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Literal, TypeVar

from memupdate.judge.verdict import Verdict

Act = Literal["apply", "ask", "leave"]
T = TypeVar("T")
TARGET_PRECISION = 0.99  # of the changes that apply themselves, in a person's store (issue 60's bar)
ASK_PRECISION = 0.5  # of the asks, in a person's store: at least half of what a person is asked is a change
NEVER = 1.01  # a threshold no confidence reaches


@dataclass(frozen=True)
class AutoApply:
    """The confidences at or above which a reading applies itself, and at or above which an unapplied
    change asks (see the module docstring)."""

    update: float = NEVER
    rule_update: float = NEVER
    duplicate: float = NEVER
    ask: float = 0.0

    @classmethod
    def never(cls) -> AutoApply:
        return cls()

    @classmethod
    def of(cls, card: dict) -> AutoApply:
        """A judge card's thresholds (`auto_apply`); a card from before them applies nothing by itself."""
        return cls(**{k: float(v) for k, v in (card.get("auto_apply") or {}).items() if k in cls.__dataclass_fields__})

    def threshold(self, verdict: Verdict) -> float:
        """The confidence `verdict` must reach to apply itself."""
        if verdict.relation == "update":
            return self.rule_update if verdict.by_rule else self.update
        return self.duplicate if verdict.relation == "duplicate" else NEVER

    def act(self, verdict: Verdict) -> Act:
        if verdict.relation not in ("update", "duplicate"):
            return "leave"  # read as two true facts: never a question to a person
        if verdict.by_confirmer:
            return "ask" if change_chance(verdict) >= self.ask else "leave"  # a cascade's second reading orders the queue only
        if verdict.by_rule and verdict.confidence < self.rule_update and likeliest(verdict) == "events":
            return "leave"  # the rule's words of change, the model's two events: "visited Rome in 2019" / "... in 2022"
        if verdict.confidence >= self.threshold(verdict) and (verdict.relation == "duplicate" or verdict.current is not None):
            return "apply"
        return "ask" if change_chance(verdict) >= self.ask else "leave"

    def to_json(self) -> dict:
        return {k: round(v, 4) for k, v in asdict(self).items()}


@dataclass(frozen=True)
class Operation:
    """What a decision asks of a bank about one pair (indices 0 and 1: the pair's first and second):
    `supersede` the `retired` statement by the `kept` one (an update), or `merge` the two into the `kept`
    one's words (a duplicate: `merge_memory`'s keep_fullest)."""

    kind: Literal["supersede", "merge"]
    retired: int
    kept: int

    def of(self, pair: tuple[T, T]) -> tuple[T, T]:
        """The pair's (retired, kept) members."""
        return pair[self.retired], pair[self.kept]


def operation(relation: str, current: Literal["first", "second"] | None, texts: tuple[str, str]) -> Operation | None:
    """The bank operation a pair read as `relation` asks for (`texts`: the pair's two statements, in the
    order `current` names them): an update supersedes the statement that does not hold now (None where
    neither was stated later: nothing says which holds); a duplicate keeps the longer wording (the first on
    a tie); two true facts ask for nothing (None)."""
    if relation == "update":
        return None if current is None else Operation("supersede", *((0, 1) if current == "second" else (1, 0)))
    if relation == "duplicate":
        return Operation("merge", *((1, 0) if len(texts[0]) >= len(texts[1]) else (0, 1)))
    return None


def likeliest(verdict: Verdict) -> str | None:
    """The relation the judge's model gives the most probability (None where it gives none: the rule)."""
    return max(verdict.scores, key=verdict.scores.get) if verdict.scores else None


def change_chance(verdict: Verdict) -> float:
    """The judge's probability that the two tell one fact (changed or told twice): what an ask is ranked
    by. The verdict's confidence where the judge gives no probabilities (the rule, an endpoint)."""
    if verdict.scores and "update" in verdict.scores:
        return float(verdict.scores["update"] + verdict.scores.get("duplicate", 0.0))
    return verdict.confidence if verdict.relation in ("update", "duplicate") else 0.0


def calibrate_auto_apply(verdicts: Sequence[Verdict], right: Sequence[bool], target: float = TARGET_PRECISION,
                         sources: Sequence[str] | None = None, changes: Sequence[bool] | None = None,
                         ask_precision: float = ASK_PRECISION) -> AutoApply:
    """The thresholds at which the readings that would apply themselves are right at least `target` of
    the time in every source, each kind (model updates, rule updates, duplicates) on its own.
    `verdicts`: the judge's readings of every pair that meets in the recipe banks; `right[i]`: whether
    applying verdict i is the right decision (the pair's label asks for it, the newer statement current);
    `sources[i]`: its bank's source, so that one large source (FactConsolidation's template) cannot buy
    errors in another (a person's everyday facts). `changes[i]`: whether pair i is a change (labelled an
    update or a duplicate): with it, `ask` is the least chance at which at least `ask_precision` of the
    asks are changes (over all sources: a person's queue mixes them); without, every unapplied change asks."""
    kinds = {
        "update": lambda v: v.relation == "update" and not v.by_rule and not v.by_confirmer and v.current is not None,
        "rule_update": lambda v: v.relation == "update" and v.by_rule and not v.by_confirmer and v.current is not None,
        "duplicate": lambda v: v.relation == "duplicate" and not v.by_confirmer,
    }
    sources = sources if sources is not None else [""] * len(verdicts)
    found = {}
    for kind, chosen in kinds.items():
        said = sorted(((v.confidence, ok, source) for v, ok, source in zip(verdicts, right, sources, strict=True) if chosen(v)),
                      key=lambda s: -s[0])
        found[kind] = least_precise_cut(said, target)
    applies = AutoApply(**found)
    if changes is None:
        return applies
    # Asks: what would not apply itself, its chance; right where the pair is a change (an update or a duplicate).
    asked = sorted(((change_chance(v), is_change) for v, is_change in zip(verdicts, changes, strict=True)
                    if v.relation in ("update", "duplicate") and applies.act(v) != "apply"), key=lambda s: -s[0])
    return AutoApply(**found, ask=least_precise_cut(asked, ask_precision))


def least_precise_cut(said: Sequence[tuple], target: float) -> float:
    """The least confidence such that the readings at or above it are right >= `target` of the time in
    each source and at least one is right (`said`: (confidence, right[, source]), surest first); NEVER
    when no cut is."""
    best, hits = NEVER, 0
    per: dict[str, list[int]] = {}
    for count, (confidence, ok, *source) in enumerate(said, 1):
        hits += ok
        tally = per.setdefault(source[0] if source else "", [0, 0])
        tally[0] += ok
        tally[1] += 1
        last = count == len(said) or said[count][0] < confidence  # a cut falls between distinct confidences
        if last and hits and all(right / total >= target for right, total in per.values()):
            best = confidence
    return best
