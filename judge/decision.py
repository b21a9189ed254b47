"""What a bank may do by itself with a judge's reading of a pair: the one decision, in one place.

    from memupdate.judge.decision import AutoApply
    from memupdate.judge.verdict import Verdict
    auto = AutoApply(update=0.97, rule_update=0.99, duplicate=0.95)
    auto.act(Verdict("update", 0.98, "second"))          # "apply": supersede the older by itself
    auto.act(Verdict("update", 0.80, "second"))          # "ask": wait in `memupdate review`
    auto.act(Verdict("compatible", 0.99))                # "leave": both stay
    auto.act(Verdict("compatible", 0.7, scores={"update": 0.25, "compatible": 0.7}))   # "ask": maybe an update
    AutoApply.never().act(Verdict("update", 1.0, "second"))   # "ask": nothing applies itself

An update applies itself only when the judge is at least `update` sure of it (`rule_update` where the
rule read the update, its confidence then the model's that the two tell one fact: the two confidences
mean different things, so each has its own threshold) and one statement was stated later
(`Verdict.current`); a duplicate merges itself at `duplicate`. A rule's update under its threshold that
the model reads as two events leaves ("visited Rome in 2019" / "... in 2022"); every other reading of
an update or a duplicate asks, and so does a both-true reading that gives the update at least
`ask_from` (an everyday change the judge half sees: "I live in Paris." -> "I moved to Berlin"); the
rest leave. The thresholds are the judge's own (its card, calibrated by `calibrate_auto_apply` on every
pair that meets in the recipe part's banks, where two true facts are the common case), so the confidence
compared is the one they were fitted on. The heuristic, the review, the watcher and the learning code read `act`; none
restates it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Literal

from memupdate.judge.verdict import Verdict

Act = Literal["apply", "ask", "leave"]
ACTS: tuple[Act, ...] = ("apply", "ask", "leave")
TARGET_PRECISION = 0.99  # of the changes that apply themselves, in a person's store (issue 60's bar)
NEVER = 1.01  # a threshold no confidence reaches
# A both-true reading asks when it gives the update at least this. Chosen on the recipe part's people (every
# pair that meets in Persona-Chat, Jenverse, LongMemEval, BEAM and RHELM banks): it lifts the labelled
# updates applied or asked from 11 to 14 of 17 for 15 more asks in 1,837 pairs (0.1: 14, 24 more; 0.3: 12).
ASK_FROM = 0.2


@dataclass(frozen=True)
class AutoApply:
    """The confidences at or above which a reading applies itself, and `ask_from` (see the module docstring)."""

    update: float = NEVER
    rule_update: float = NEVER
    duplicate: float = NEVER
    ask_from: float = ASK_FROM

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
            return "ask" if maybe_update(verdict) >= self.ask_from and verdict.relation != "events" else "leave"
        if verdict.by_rule and verdict.confidence < self.rule_update and likeliest(verdict) == "events":
            return "leave"  # the rule's words of change, the model's two events: "visited Rome in 2019" / "... in 2022"
        if verdict.relation == "update" and verdict.current is None:
            return "ask"  # neither was stated later: which holds now is a person's call
        return "apply" if verdict.confidence >= self.threshold(verdict) else "ask"

    def to_json(self) -> dict:
        return {k: round(v, 4) for k, v in asdict(self).items()}


def likeliest(verdict: Verdict) -> str | None:
    """The relation the judge's model gives the most probability (None where it gives none: the rule)."""
    return max(verdict.scores, key=verdict.scores.get) if verdict.scores else None


def maybe_update(verdict: Verdict) -> float:
    """The judge's probability that the pair is an update (0 where it gives none: the rule)."""
    return float((verdict.scores or {}).get("update", 0.0))


def calibrate_auto_apply(verdicts: Sequence[Verdict], right: Sequence[bool], target: float = TARGET_PRECISION,
                         sources: Sequence[str] | None = None) -> AutoApply:
    """The thresholds at which the readings that would apply themselves are right at least `target` of
    the time in every source, each kind (model updates, rule updates, duplicates) on its own.
    `verdicts`: the judge's readings of every pair that meets in the recipe banks; `right[i]`: whether
    applying verdict i is the right decision (the pair's label asks for it, the newer statement current);
    `sources[i]`: its bank's source, so that one large source (FactConsolidation's template) cannot buy
    errors in another (a person's everyday facts)."""
    kinds = {
        "update": lambda v: v.relation == "update" and not v.by_rule and v.current is not None,
        "rule_update": lambda v: v.relation == "update" and v.by_rule and v.current is not None,
        "duplicate": lambda v: v.relation == "duplicate",
    }
    sources = sources if sources is not None else [""] * len(verdicts)
    found = {}
    for kind, chosen in kinds.items():
        said = sorted(((v.confidence, ok, source) for v, ok, source in zip(verdicts, right, sources, strict=True) if chosen(v)),
                      key=lambda s: -s[0])
        found[kind] = least_precise_cut(said, target)
    return AutoApply(**found)


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
