"""The rule as a judge: `text.facts.relation`, kept as the baseline every other judge is measured against.

    from memupdate.judge.rule import RuleJudge
    RuleJudge().judge([(Statement("The CEO of X is A", "2020"), Statement("The CEO of X is B", "2021"))])
    # [Verdict(relation="update", confidence=1.0, current="second")]

It reads FactConsolidation's template ("The author of X is A" -> "... is B") and words that say a state
changed ("no longer", "stopped"); plain-English updates ("lives in Paris" -> "moved to Berlin") it
reads as compatible. Its confidence is always 1.0.
"""

from __future__ import annotations

from collections.abc import Sequence

from memupdate.judge.decision import AutoApply
from memupdate.judge.verdict import Pair, Verdict, later
from memupdate.text.facts import relation


class RuleJudge:
    name = "rule"
    auto_apply = AutoApply(update=1.0, rule_update=1.0, duplicate=1.0)  # the rule is exact where it reads a change

    def judge(self, pairs: Sequence[Pair]) -> list[Verdict]:
        verdicts = []
        for first, second in pairs:
            events = first.event and second.event
            read = relation(first.text, second.text, events=events)
            if read == "update":
                verdicts.append(Verdict("update", 1.0, later(first, second)))
            elif read == "compatible" and events:
                verdicts.append(Verdict("events", 1.0))
            else:
                verdicts.append(Verdict(read, 1.0))
        return verdicts
