"""How two memories relate: the judge's interface, its verdict, and the statements it reads.

    from memupdate.judge.judges import make_judge
    from memupdate.judge.verdict import Statement
    judge = make_judge()                             # the local model trained here (an endpoint if configured)
    old = Statement("Sam lives in Paris", time="2024-03-01")
    new = Statement("Sam moved to Berlin last month", time="2024-09-12")
    [verdict] = judge.judge([(old, new)])
    verdict.relation, verdict.current, verdict.confidence        # "update", "second", 0.97
    judge.auto_apply.act(verdict)                                 # "apply", "ask" or "leave": `judge.decision`
    RememberingJudge(judge).judge(pairs)                          # each pair read once, then answered from memory

A pair is a *duplicate* (one fact told twice), an *update* (the same subject and attribute with a new
value or state; `current` says which statement holds now: the one stated later), *compatible* (both
true), or two *events* of one kind (both true: "visited Rome in 2019" / "... in 2022"; never an update).
Every reader of "how do these two relate" asks a `RelationJudge`: the heuristic policy, the review's
labels, the watcher's safety rule, the student's labels. A judge never writes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Literal, Protocol

from memupdate.text.facts import stated_later

if TYPE_CHECKING:
    from memupdate.store import MemoryRecord

Relation = Literal["duplicate", "update", "compatible", "events"]
RELATIONS: tuple[Relation, ...] = ("duplicate", "update", "compatible", "events")
# The decision a relation asks of a bank, as reports and rewards name it: merge the two (duplicate), retire the
# older (update), or keep both (compatible, events: both true).
DECISIONS = {"duplicate": "duplicate", "update": "update", "compatible": "keep", "events": "keep"}
DECISION_NAMES = ("duplicate", "update", "keep")


@dataclass(frozen=True)
class Statement:
    """One memory as a judge reads it: its text, when it was stated (ISO, sortable; None when unknown) and
    whether it tells an event (an episodic memory)."""

    text: str
    time: str | None = None
    event: bool = False

    @classmethod
    def of(cls, memory: MemoryRecord) -> Statement:
        from memupdate.text.facts import stated_at

        return cls(memory.content, stated_at(memory), memory.kind == "episodic")


@dataclass(frozen=True)
class Verdict:
    """A judge's reading of one pair. `current`: for an update, which statement holds now ("first" or
    "second" as the pair was given; None when neither was stated later). `confidence`: the judge's
    probability of `relation` (1.0 for the rule). `scores`: every relation's probability, where known.
    `by_rule`: an update the rule read (its confidence is then the model's probability that the two tell
    one fact, thresholded on its own, and `scores` the model's reading: `judge.decision.AutoApply`).
    `by_confirmer`: a cascade's second reading of a pair its judge did not apply (`judge.local.Confirmer`):
    it may ask, ranked by its chance, and never applies itself."""

    relation: Relation
    confidence: float
    current: Literal["first", "second"] | None = None
    scores: dict[str, float] = field(default_factory=dict)
    by_rule: bool = False
    by_confirmer: bool = False


Pair = tuple[Statement, Statement]


class Decision(Protocol):
    """Turns a judge's reading into "apply", "ask" or "leave" (`judge.decision.AutoApply`, whose module reads
    verdicts: named here by what it does, so this module need not import it back)."""

    update: float  # the confidence at which a model's update applies itself
    duplicate: float  # ... a duplicate merges itself

    def act(self, verdict: Verdict) -> str: ...

    def threshold(self, verdict: Verdict) -> float: ...

    def to_json(self) -> dict[str, Any]: ...


class RelationJudge(Protocol):
    """Reads pairs of statements; one verdict per pair, in order. `name` appears in reports; `auto_apply`:
    which of its readings a bank may act on by itself (`judge.decision`: calibrated on every pair that
    meets in the recipe part's banks for the local judge)."""

    name: str
    auto_apply: Decision

    def judge(self, pairs: Sequence[Pair]) -> list[Verdict]: ...


def later(first: Statement, second: Statement) -> Literal["first", "second"] | None:
    """Which of two statements was made later; None when a time is missing or they are not ordered (one
    day against a time on that day, or one batch of writes: `text.facts.stated_later`)."""
    first_later = stated_later(first.time, second.time)
    return None if first_later is None else ("first" if first_later else "second")


def turned(verdict: Verdict) -> Verdict:
    """The same reading of the pair given the other way round: `current` names the other statement."""
    return replace(verdict, current={"first": "second", "second": "first"}.get(verdict.current or ""))


def judge_memories(judge: RelationJudge, pairs: Sequence[tuple[MemoryRecord, MemoryRecord]]) -> list[Verdict]:
    """`judge` over pairs of memories (their texts, stated times and kinds)."""
    return judge.judge([(Statement.of(a), Statement.of(b)) for a, b in pairs])


class RememberingJudge:
    """A judge that reads each pair of statements once and answers again from memory (one compaction's
    episodes and its review ask about the same pairs); a pair asked in the other order where the two were
    stated at distinct times is the same reading with `current` turned (the judges read such a pair
    older first). Everything else is the wrapped judge's (`inner`): name, threshold, calibration."""

    def __init__(self, inner: Any):
        self.inner = inner
        self._read: dict[Pair, Verdict] = {}

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def judge(self, pairs: Sequence[Pair]) -> list[Verdict]:
        fresh = list(dict.fromkeys(pair for pair in pairs if self._known(pair) is None))
        for pair, verdict in zip(fresh, self.inner.judge(fresh) if fresh else [], strict=True):
            self._read[pair] = verdict
        return [self._known(pair) for pair in pairs]

    def _known(self, pair: Pair) -> Verdict | None:
        if (verdict := self._read.get(pair)) is not None:
            return verdict
        other = self._read.get((pair[1], pair[0]))
        return None if other is None or later(*pair) is None else turned(other)
