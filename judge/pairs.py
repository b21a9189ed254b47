"""Labelled pairs of statements, in a JSON-lines file, and how a judge scores on them.

    from memupdate.judge.pairs import read_pairs, score_judge
    pairs = read_pairs("relations-eval.jsonl")     # {"first": ..., "second": ..., "label": "update", ...} a line
    report = score_judge(RuleJudge(), pairs)
    report.per_relation["update"].recall, report.harmed, report.accuracy

A line: `first`, `second` (texts; the first said earlier when no times are given), `label` (one of
RELATIONS), optional `first_time`, `second_time` (ISO), `event` (both tell events), `source`, `group`
(the person or profile: splits are by group) and `generated` (made here, never part of an evaluation).
Scoring reads three decisions, as a bank acts on them: merge (duplicate), supersede (update), keep
(compatible, events). `harmed`: of the pairs that are both true, the share a judge would merge or
supersede.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from memupdate.errors import MemupdateError
from memupdate.judge.verdict import DECISIONS, RELATIONS, Statement, Verdict


@dataclass(frozen=True)
class LabelledPair:
    first: str
    second: str
    label: str
    first_time: str | None = None
    second_time: str | None = None
    event: bool = False
    source: str = ""
    group: str = ""
    generated: bool = False

    @property
    def statements(self) -> tuple[Statement, Statement]:
        return Statement(self.first, self.first_time, self.event), Statement(self.second, self.second_time, self.event)


def right(pair: LabelledPair, verdict: Verdict) -> bool:
    """Whether `verdict` asks the bank for the decision `pair`'s label does."""
    return DECISIONS[verdict.relation] == DECISIONS[pair.label]


def read_pairs(path: str | Path) -> list[LabelledPair]:
    """Every pair of a JSON-lines file; a bad line stops with one message naming it and the fix."""
    path = Path(path)
    if not path.is_file():
        raise MemupdateError(f"no pairs file at {path}: give a JSON-lines file of {{\"first\", \"second\", \"label\"}} objects")
    pairs = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        where = f"{path}:{number}"
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise MemupdateError(f"{where} is not JSON ({exc.msg}): one object a line") from None
        if not isinstance(row, dict) or not all(isinstance(row.get(k), str) and row[k].strip() for k in ("first", "second", "label")):
            raise MemupdateError(f"{where} needs non-empty strings \"first\", \"second\" and \"label\"")
        if row["label"] not in RELATIONS:
            raise MemupdateError(f"{where}: label {row['label']!r} is not a relation: use one of {', '.join(RELATIONS)}")
        known = {k: row[k] for k in LabelledPair.__dataclass_fields__ if k in row}
        pairs.append(LabelledPair(**known))
    return pairs


def write_pairs(pairs: Iterable[LabelledPair], path: str | Path) -> int:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    rows = [json.dumps({k: v for k, v in asdict(p).items() if v not in (None, "", False)}) for p in pairs]
    path.write_text("".join(r + "\n" for r in rows))
    return len(rows)


def wilson(hits: int, total: int, z: float = 1.96) -> tuple[float, float]:
    """The 95% Wilson interval of a proportion (well-behaved at 0 and 1 and for small counts)."""
    if total == 0:
        return (0.0, 1.0)
    p = hits / total
    centre = (p + z * z / (2 * total)) / (1 + z * z / total)
    half = z * math.sqrt(p * (1 - p) / total + z * z / (4 * total * total)) / (1 + z * z / total)
    return (max(0.0, centre - half), min(1.0, centre + half))


@dataclass
class Rate:
    hits: int
    total: int

    @property
    def value(self) -> float | None:
        return self.hits / self.total if self.total else None

    @property
    def interval(self) -> tuple[float, float]:
        return wilson(self.hits, self.total)

    def to_json(self) -> dict:
        return {"value": self.value, "interval": list(self.interval), "hits": self.hits, "total": self.total}

    def __str__(self) -> str:
        if not self.total:
            return "n/a (0 pairs)"
        low, high = self.interval
        return f"{self.value:.2f} [{low:.2f}, {high:.2f}] ({self.hits}/{self.total})"


@dataclass
class RelationScore:
    precision: Rate
    recall: Rate


@dataclass
class JudgeReport:
    judge: str
    pairs: int
    per_relation: dict[str, RelationScore]
    accuracy: Rate  # the action (merge / supersede / keep) agrees with the label's
    harmed: Rate  # both-true pairs merged or superseded
    wrong_direction: int  # updates read as updates with the older statement current
    verdicts: list[Verdict] = field(default_factory=list, repr=False)
    downstream: dict | None = None  # what compacting banks of these pairs did (`rl.relation_banks`)
    rule_wrong: tuple[int, int] | None = None  # (right, pairs) over the pairs the rule reads wrong
    minus_first: dict | None = None  # this judge minus the first of a comparison: accuracy and update F1, each (mean, low, high)

    def to_json(self) -> dict:
        return {
            "judge": self.judge, "pairs": self.pairs, "accuracy": self.accuracy.to_json(), "harmed": self.harmed.to_json(),
            "wrong_direction": self.wrong_direction,
            "per_relation": {k: {"precision": v.precision.to_json(), "recall": v.recall.to_json()} for k, v in self.per_relation.items()},
        }


def score_judge(judge, pairs: Sequence[LabelledPair], verdicts: Sequence[Verdict] | None = None) -> JudgeReport:
    """`judge` on `pairs` (or its `verdicts` already read): per decision precision and recall, accuracy
    over all pairs, and the share of both-true pairs it would harm."""
    verdicts = list(verdicts) if verdicts is not None else judge.judge([p.statements for p in pairs])
    gold = [DECISIONS[p.label] for p in pairs]
    said = [DECISIONS[v.relation] for v in verdicts]
    per = {}
    for name in ("duplicate", "update", "keep"):
        tp = sum(g == s == name for g, s in zip(gold, said, strict=True))
        per[name] = RelationScore(Rate(tp, said.count(name)), Rate(tp, gold.count(name)))
    both_true = [s for g, s in zip(gold, said, strict=True) if g == "keep"]
    wrong = sum(
        1 for p, v in zip(pairs, verdicts, strict=True)
        if p.label == v.relation == "update" and v.current == "first" and p.first_time is None and p.second_time is None
    )
    return JudgeReport(
        judge=getattr(judge, "name", str(judge)), pairs=len(pairs), per_relation=per,
        accuracy=Rate(sum(g == s for g, s in zip(gold, said, strict=True)), len(pairs)),
        harmed=Rate(sum(s != "keep" for s in both_true), len(both_true)), wrong_direction=wrong, verdicts=verdicts,
    )


def paired_difference(pairs: Sequence[LabelledPair], first: Sequence[Verdict], second: Sequence[Verdict]) -> tuple[float, float, float]:
    """The second judge's accuracy minus the first's on the same pairs, with its paired 95% interval
    (normal approximation over the per-pair differences)."""
    diffs = [right(p, b) - right(p, a) for p, a, b in zip(pairs, first, second, strict=True)]
    if not diffs:
        return (0.0, 0.0, 0.0)
    mean = sum(diffs) / len(diffs)
    spread = math.sqrt(sum((d - mean) ** 2 for d in diffs) / max(1, len(diffs) - 1) / len(diffs))
    return (mean, mean - 1.96 * spread, mean + 1.96 * spread)


def update_f1(pairs: Sequence[LabelledPair], verdicts: Sequence[Verdict]) -> float:
    """F1 of the update decision (supersede) against the labels."""
    tp = sum(p.label == "update" and v.relation == "update" for p, v in zip(pairs, verdicts, strict=True))
    said = sum(v.relation == "update" for v in verdicts)
    gold = sum(p.label == "update" for p in pairs)
    return 2 * tp / (said + gold) if said + gold else 0.0


def paired_f1_difference(
    pairs: Sequence[LabelledPair], first: Sequence[Verdict], second: Sequence[Verdict], *, resamples: int = 2000, seed: int = 0,
) -> tuple[float, float, float]:
    """The second judge's update F1 minus the first's, with a paired 95% bootstrap interval (the same
    pairs resampled for both judges)."""
    import random

    rng = random.Random(seed)
    n = len(pairs)
    if not n:
        return (0.0, 0.0, 0.0)
    diffs = []
    for _ in range(resamples):
        picks = [rng.randrange(n) for _ in range(n)]
        chosen = [pairs[i] for i in picks]
        diffs.append(update_f1(chosen, [second[i] for i in picks]) - update_f1(chosen, [first[i] for i in picks]))
    diffs.sort()
    return (update_f1(pairs, second) - update_f1(pairs, first), diffs[int(0.025 * resamples)], diffs[int(0.975 * resamples) - 1])
