"""The judge downstream: banks built from labelled pairs, compacted with the defaults, and what became of
each pair.

    from memupdate.rl.relation_banks import compact_pair_banks
    report = compact_pair_banks(store, pairs, judge)   # one bank a group (person), compacted whole
    report.updates_resolved, report.compatible_harmed, report.duplicates_merged, report.lost

Each group's statements become one bank (each statement a memory with its stated time; events as
episodic memories), compacted as `memupdate compact` does it (the heuristic policy reading `judge`, the
bank's neighbourhoods, one fork). Then, in the fork: an update is *resolved* when its older statement
is superseded (kept as a superseded row naming a live memory) and its newer is live; a compatible pair
(events included) is *harmed* when either statement is no longer live as it was; a duplicate is
*merged* when the two are no longer both live; a statement is *lost* when it left the bank with no
superseded record and no merge holding it.
"""

from __future__ import annotations

import uuid
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field

from memupdate.agent.compaction import compact_bank
from memupdate.agent.policies.heuristic import HeuristicPolicy
from memupdate.judge.pairs import LabelledPair, Rate
from memupdate.judge.verdict import RelationJudge
from memupdate.store import MemoryStore, NewMemory


@dataclass
class PairBankReport:
    judge: str
    banks: int
    updates_resolved: Rate
    compatible_harmed: Rate
    duplicates_merged: Rate
    lost: int
    missed: list[tuple[str, str]] = field(default_factory=list)  # updates not resolved: (older, newer)
    harmed: list[tuple[str, str]] = field(default_factory=list)

    def to_json(self) -> dict:
        return {"judge": self.judge, "banks": self.banks, "updates_resolved": self.updates_resolved.to_json(),
                "compatible_harmed": self.compatible_harmed.to_json(), "duplicates_merged": self.duplicates_merged.to_json(),
                "lost": self.lost, "missed": self.missed, "harmed": self.harmed}


def compact_pair_banks(root: MemoryStore, pairs: Sequence[LabelledPair], judge: RelationJudge) -> PairBankReport:
    """Build, compact and read back one bank per group of `pairs` (banks and forks dropped after)."""
    groups: dict[str, list[LabelledPair]] = defaultdict(list)
    for pair in pairs:
        groups[pair.group or "all"].append(pair)
    counts = {"resolved": [0, 0], "harmed": [0, 0], "merged": [0, 0]}
    lost = 0
    missed, harmed = [], []
    run = uuid.uuid4().hex[:8]
    for group, members in groups.items():
        bank = root.scoped(("relations", run, group))
        statements: dict[str, NewMemory] = {}
        for p in members:
            for text, time in ((p.first, p.first_time), (p.second, p.second_time)):
                if text not in statements:
                    meta = {"time": time, "date": time[:10]} if time else {}
                    statements[text] = NewMemory(text, kind="episodic" if p.event else "semantic", metadata=meta)
        made = bank.create_many(list(statements.values()))
        key_of = {m.content: m.key for m in made}
        policy = HeuristicPolicy(store=bank, judge=judge)
        result = compact_bank(policy, bank, (*bank.namespace, "fork"), check_moved=False)
        try:
            live = {m.key for m in result.fork.list()}
            gone = _gone(result.fork, set(key_of.values()) - live)
            for p in members:
                a, b = key_of[p.first], key_of[p.second]
                if p.label == "update":
                    counts["resolved"][1] += 1
                    if gone.get(a) == "superseded" and b in live:
                        counts["resolved"][0] += 1
                    else:
                        missed.append((p.first, p.second))
                elif p.label == "duplicate":
                    counts["merged"][1] += 1
                    counts["merged"][0] += not (a in live and b in live)
                else:
                    counts["harmed"][1] += 1
                    if a not in live or b not in live:
                        counts["harmed"][0] += 1
                        harmed.append((p.first, p.second))
            lost += sum(1 for how in gone.values() if how == "lost")
        finally:
            result.fork.drop()
            bank.drop()
    return PairBankReport(
        getattr(judge, "name", "judge"), len(groups), Rate(*counts["resolved"]), Rate(*counts["harmed"]),
        Rate(*counts["merged"]), lost, missed, harmed,
    )


def _gone(fork: MemoryStore, keys: set[str]) -> dict[str, str]:
    """How each of `keys` left the fork: "superseded" (its last record names a newer memory), "merged"
    (a live memory was made from it) or "lost"."""
    how = {key: "lost" for key in keys}
    for event in fork.events():
        if event.memory_key in keys and event.op == "delete" and event.before:
            if (event.before.get("metadata") or {}).get("superseded_by"):
                how[event.memory_key] = "superseded"
        if event.op == "create" and event.after:
            for origin in (event.after.get("metadata") or {}).get("merged_from") or []:
                if origin in how and how[origin] == "lost":
                    how[origin] = "merged"
    return how
