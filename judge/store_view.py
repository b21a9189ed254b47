"""The judge where people's memories live: every pair that meets in a person's bank, judged and acted on.

    from memupdate.judge.store_view import StoreBank, store_view
    bank = StoreBank("persona-1", "persona", (Statement("I am a librarian.", "2024-01-01"), ...),
                     met=((0, 1), (0, 2)), labels={})          # unlabelled pairs: two true facts
    report = store_view(judge, [bank])["persona"]
    report.precision, report.retired, report.resolved_by_itself, report.resolved_or_asked

Labelled pairs (a source's updates, duplicates, events) keep their labels; every other pair that meets
is two statements that are both true, which is what a person's store mostly holds. For each pair the
judge's reading becomes an act (`judge.decision.AutoApply`: apply by itself, ask, leave), and a source's
report counts, for what applies itself: its precision (right: the label asks for that change, with the
newer statement current), the share of true statements it would retire (a statement superseded or merged
away by a change its pair's label does not ask for), and the updates resolved by themselves or waiting
for review. A labelled update whose statements never meet counts as missed.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from memupdate.judge.decision import AutoApply, change_chance, operation
from memupdate.judge.pairs import Rate
from memupdate.judge.verdict import DECISIONS, RelationJudge, Statement, Verdict, later

UNLABELLED = "compatible"  # a pair that meets with no label: two true facts
NATURAL = ("jenverse", "longmemeval-knowledge-update", "beam", "letta")  # the sources of people's own updates (issue 68)


@dataclass(frozen=True)
class StoreBank:
    """One person's statements as a store holds them. `met`: the index pairs (i < j) that meet
    (`judge.meeting.candidate_pairs` over their embeddings); `labels`: the labelled pairs (i < j, met or
    not) and their relation."""

    group: str
    source: str
    statements: tuple[Statement, ...]
    met: tuple[tuple[int, int], ...]
    labels: dict[tuple[int, int], str] = field(default_factory=dict)

    def label(self, pair: tuple[int, int]) -> str:
        return self.labels.get(pair, UNLABELLED)

    @property
    def newer(self) -> set[int]:
        """The statements a labelled update makes current (the later stated of each)."""
        return {max(p, key=lambda i: self.statements[i].time or "") for p, label in self.labels.items() if label == "update"}

    @property
    def stale(self) -> set[int]:
        """The statements a labelled update retires (the earlier stated of each): not true now."""
        return {min(p, key=lambda i: self.statements[i].time or "") for p, label in self.labels.items() if label == "update"}


@dataclass
class StoreViewReport:
    """What a judge's auto-apply decision does to one source's banks (see the module docstring)."""

    source: str
    banks: int = 0
    statements: int = 0
    pairs: int = 0  # pairs that meet
    applied: int = 0  # changes that would apply themselves
    applied_right: int = 0
    asked: int = 0
    asked_right: int = 0  # asks about a labelled update or duplicate
    retired: set = field(default_factory=set)  # (group, index) of true statements retired by themselves
    true_statements: int = 0
    updates: int = 0  # labelled updates
    updates_applied: int = 0  # resolved by themselves (the newer current)
    updates_asked: int = 0  # waiting for review
    updates_met: int = 0
    duplicates: int = 0
    duplicates_applied: int = 0
    # Pairs of an update's newer statement with the bank's other (true) facts, which must stay: Letta's target.
    beside_newer: int = 0
    beside_newer_applied: int = 0
    beside_newer_asked: int = 0
    wrong: list[tuple[str, str, str, float]] = field(default_factory=list)  # (first, second, relation, confidence)
    # (the judge's chance of a change, whether the pair is an update) over the updates and the both-true pairs
    scored: list[tuple[float, bool]] = field(default_factory=list, repr=False)

    @property
    def precision(self) -> Rate:
        return Rate(self.applied_right, self.applied)

    @property
    def base_rate(self) -> float | None:
        """The share of updates among the pairs the curve ranks: what a judge that cannot tell scores."""
        return round(sum(ok for _, ok in self.scored) / len(self.scored), 4) if self.scored else None

    @property
    def update_ap(self) -> float | None:
        """The area under the precision-recall curve of "update" against "both true", ranked by the chance
        the judge gives a change (`judge.decision.change_chance`): one threshold's figures say less."""
        return average_precision(self.scored)

    @property
    def ask_precision(self) -> Rate:
        return Rate(self.asked_right, self.asked)

    @property
    def retired_share(self) -> Rate:
        return Rate(len(self.retired), self.true_statements)

    @property
    def resolved_by_itself(self) -> Rate:
        return Rate(self.updates_applied, self.updates)

    @property
    def resolved_or_asked(self) -> Rate:
        return Rate(self.updates_applied + self.updates_asked, self.updates)

    def to_json(self) -> dict:
        return {
            "source": self.source, "banks": self.banks, "statements": self.statements, "pairs": self.pairs,
            "applied": self.applied, "asked": self.asked, "asks_right": self.ask_precision.to_json(), "precision": self.precision.to_json(),
            "true_retired": self.retired_share.to_json(), "updates": self.updates, "updates_met": self.updates_met,
            "updates_by_itself": self.resolved_by_itself.to_json(), "updates_resolved_or_asked": self.resolved_or_asked.to_json(),
            "duplicates": self.duplicates, "duplicates_merged_by_itself": self.duplicates_applied,
            "update_ap": None if self.update_ap is None else round(self.update_ap, 4), "base_rate": self.base_rate,
            "beside_newer": {"pairs": self.beside_newer, "applied": self.beside_newer_applied, "asked": self.beside_newer_asked},
            "wrong": self.wrong[:20],
        }


def average_precision(scored: Sequence[tuple[float, bool]]) -> float | None:
    """The area under the precision-recall curve of (score, positive) pairs (None without a positive):
    the mean of the precision at each positive, ties ranked together."""
    positives = sum(ok for _, ok in scored)
    if not positives:
        return None
    ranked = sorted(scored, key=lambda s: -s[0])
    area, hits, index = 0.0, 0, 0
    while index < len(ranked):
        tie = [ok for score, ok in ranked[index:] if score == ranked[index][0]]
        hits += sum(tie)
        index += len(tie)
        area += sum(tie) * hits / index
    return area / positives


def met_pairs(banks: Iterable[StoreBank]) -> list[tuple[StoreBank, tuple[int, int]]]:
    """Every pair that meets in `banks`, with its bank."""
    return [(bank, pair) for bank in banks for pair in bank.met]


def applying_is_right(label: str, verdict: Verdict, pair: tuple[Statement, Statement]) -> bool:
    """Whether acting on `verdict` by itself is what the pair's `label` asks: a merge of a duplicate, a
    supersession of an update with the later-stated statement current."""
    if DECISIONS[verdict.relation] != DECISIONS[label]:
        return False
    return label != "update" or (verdict.current is not None and verdict.current == later(*pair))


def judge_banks(judge: RelationJudge, banks: Sequence[StoreBank], *, batch: int = 2048) -> list[Verdict]:
    """The judge's reading of every pair that meets in `banks`, in `met_pairs` order (older first as given)."""
    pairs = [(bank.statements[i], bank.statements[j]) for bank, (i, j) in met_pairs(banks)]
    verdicts: list[Verdict] = []
    for start in range(0, len(pairs), batch):
        verdicts += judge.judge(pairs[start : start + batch])
    return verdicts


def store_view(judge: RelationJudge, banks: Sequence[StoreBank], *, auto_apply: AutoApply | None = None,
               verdicts: Sequence[Verdict] | None = None) -> dict[str, StoreViewReport]:
    """Per source, what `judge`'s decision (`auto_apply`, default the judge's own) does by itself to every
    pair that meets in `banks` (its `verdicts` already read, or read here)."""
    auto = auto_apply or judge.auto_apply
    verdicts = list(verdicts) if verdicts is not None else judge_banks(judge, banks)
    reports: dict[str, StoreViewReport] = {}
    stale: dict[str, set[int]] = {}  # per bank, the statements a labelled update retires (not true now)
    newer = {bank.group: bank.newer for bank in banks}
    for bank in banks:
        report = reports.setdefault(bank.source, StoreViewReport(bank.source))
        report.banks += 1
        report.statements += len(bank.statements)
        stale[bank.group] = bank.stale
        report.true_statements += len(bank.statements) - len(stale[bank.group])
        met = set(bank.met)
        report.updates += sum(label == "update" for label in bank.labels.values())
        report.updates_met += sum(label == "update" and p in met for p, label in bank.labels.items())
        report.duplicates += sum(label == "duplicate" for label in bank.labels.values())
    for (bank, pair), verdict in zip(met_pairs(banks), verdicts, strict=True):
        report = reports[bank.source]
        report.pairs += 1
        label = bank.label(pair)
        statements = (bank.statements[pair[0]], bank.statements[pair[1]])
        act = auto.act(verdict)
        if label != "duplicate":
            report.scored.append((change_chance(verdict), label == "update"))
        if label == UNLABELLED and pair not in bank.labels and set(pair) & newer[bank.group]:
            report.beside_newer += 1
            report.beside_newer_applied += act == "apply"
            report.beside_newer_asked += act == "ask"
        if label == "update" and verdict.relation != "duplicate" and act == "ask":
            report.updates_asked += 1
        if act == "ask":
            report.asked += 1
            report.asked_right += label in ("update", "duplicate")
        if act != "apply":
            continue
        report.applied += 1
        if applying_is_right(label, verdict, statements):
            report.applied_right += 1
            report.updates_applied += label == "update"
            report.duplicates_applied += label == "duplicate"
            continue
        # A wrong change retires the statement it supersedes (the older), or the shorter of a merge.
        lost, _ = operation(verdict.relation, verdict.current, (statements[0].text, statements[1].text)).of(pair)
        if lost not in stale[bank.group]:
            report.retired.add((bank.group, lost))
        report.wrong.append((statements[0].text, statements[1].text, verdict.relation, round(verdict.confidence, 3)))
    return reports


def rights(banks: Sequence[StoreBank], verdicts: Sequence[Verdict]) -> list[bool]:
    """For each pair that meets (in `met_pairs` order), whether applying its verdict by itself is right."""
    return [applying_is_right(bank.label(pair), v, (bank.statements[pair[0]], bank.statements[pair[1]]))
            for (bank, pair), v in zip(met_pairs(banks), verdicts, strict=True)]


def by_source(banks: Iterable[StoreBank]) -> dict[str, list[StoreBank]]:
    out: dict[str, list[StoreBank]] = defaultdict(list)
    for bank in banks:
        out[bank.source].append(bank)
    return dict(out)
