"""The heuristic policy: memory edits by rules a careful person would apply, no LLM.

    from memupdate.agent.policies.heuristic import HeuristicPolicy
    policy = HeuristicPolicy(store=store, seed=0)
    run_episode(policy, fork, question="When did Caroline go to the support group?")

It is a LangChain chat model, so it runs through the same graph, tools, events and budgets as an
LLM: on its first turn it reads the bank named in the task message and plans, then emits the plan
as tool calls, a few per turn. It is the baseline, the teacher for distillation, and the main job's
default. The rules:
1. with a target question: search for it; gather the memories vector search and word overlap find
   for it, and consolidate the best of them (relative dates anchored) into one short memory that
   retrieval will rank first for questions like it;
2. resolve updates, newest wins: of two memories the relation judge (`judge`, the local model by
   default) reads as an update (the same subject and attribute with another value or state), the one
   stated earlier is superseded by the newer (`delete_memory(superseded_by=...)`: kept as history, out
   of what retrieval reads); a pair whose order is unknown is left alone, and so are two events;
3. anchor relative time ("yesterday", "two weekends ago") to absolute dates from the memory's date;
4. merge duplicates: pairs the judge reads as one fact told twice, or whose words are one within the
   other's on one day (the rule's true duplicates: one session telling one event twice) unless the
   judge reads them as an update; the fuller wording is kept, with every date;
5. split memories that pack several unrelated facts (`split_packed`, off by default: see the field).
With a target question, only memories retrieval could bring to it are edited (each edit costs
memory efficiency); without one, the budget goes first to memories with relative time. Rules 2 and 4
act on a judge's reading only where its decision applies the change by itself (`judge.decision`),
unless a person reviews what the plan proposes (`asks`: the watcher's queue, `compact`'s page).
"""

from __future__ import annotations

import json
import math
import random
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from pydantic import Field, PrivateAttr

from memupdate.agent.policies.handles import UPDATE_LABEL
from memupdate.agent.policies.planning import PlanningPolicy, ToolCall
from memupdate.judge import Verdict, judge_memories
from memupdate.judge.decision import change_chance, operation
from memupdate.judge.judges import make_judge
from memupdate.judge.meeting import candidate_pairs, worth_judging
from memupdate.judge.verdict import RememberingJudge, turned
from memupdate.settings import DEFAULT_MAX_OPERATIONS
from memupdate.store import MemoryRecord, MemoryStore
from memupdate.text.dates import anchor_relative_dates, anchored, datable, has_relative_time, memory_day
from memupdate.text.facts import shared_head, stated_at
from memupdate.text.forms import names_in_text
from memupdate.text.strategies import content_words, jaccard, split_thematic

# A consolidated memory stays well inside the QA context budget (DEFAULT_CONTEXT_TOKENS) and the density limit (60).
DIGEST_WORDS = 55
DUPLICATE_JACCARD = 0.6
# A watcher's policy forgets its verdicts at the next compaction once it holds more than this many.
MAX_REMEMBERED = 200_000
QUESTION_WORDS = frozenset("what when where who whom whose which why how did does do is was were are has have had".split())

REASONS = {
    "digest": "rule 1: the memories retrieval finds for the question, consolidated into one short memory",
    "supersede": "rule 2: the judge reads an update of the same fact (same subject and attribute, another value); the newer statement wins",
    "anchor": "rule 3: relative time anchored to an absolute date from the memory's own date",
    "duplicate": "rule 4: one fact told twice (the judge's duplicate, or one's words within the other's on one day); the fuller wording kept",
    "split": "rule 5: the memory packs several unrelated facts; one memory per fact",
}


class HeuristicPolicy(PlanningPolicy):
    """Rule-based memory editor; `store` is any MemoryStore on the same database (the task names the bank)."""

    seed: int = 0
    max_operations: int = DEFAULT_MAX_OPERATIONS
    # Off by default: splitting packed facts lowers the QA proxy on the training conversations, because
    # under top-k retrieval the parts crowd other memories out of the context.
    split_packed: bool = False
    # Distillation rollouts: > 0 makes a seeded variant of the plan (see `_explored`) so that a group of
    # episodes on one question differs; 0 keeps the plan exactly as the rules give it.
    explore: float = Field(0.0, ge=0.0, le=1.0)
    # A teacher a language model can imitate: it searches first (blind: samples), alone in its first turn,
    # and then edits only the `stepwise` memories that look showed, so every handle it writes was in the
    # transcript before it (the default plan reads the whole bank and edits memories no tool result showed).
    stepwise: int = Field(0, ge=0, le=20)
    # How two memories relate (`memupdate.judge`); None: the default judge (`judge.judges.make_judge`: the
    # configured one, the local model unless set), made when the plan first reads a pair. A compaction's
    # pairs are judged once, in one batch before its episodes (`judge_ahead`), its review reuses the
    # verdicts (`remembering_judge`), and a pair sharing no rare word (`judge.meeting.worth_judging`) is
    # never judged.
    judge: Any = Field(None, exclude=True)
    # Whether the plan also acts on readings the judge's decision (`judge.decision.AutoApply.act`) would ask
    # a person about. False (nobody reviews: `compact --apply`, the evaluations, the learning's rollouts):
    # it supersedes and merges only where the decision applies the change by itself. True (a person
    # reviews: watch's queue, `compact`'s review page): it proposes those too, for the safety rule to hold.
    asks: bool = False

    # Why each planned call is made (the rule behind it), for a compaction's review: `reason_for`.
    _reasons: dict[str, str] = PrivateAttr(default_factory=dict)
    # The judge's verdict of each pair already read (`_judged`), with the key of the memory it read first (its
    # `current` names the pair as read); None: not worth judging.
    _read: dict[frozenset, tuple[str, Verdict] | None] = PrivateAttr(default_factory=dict)
    _memo: RememberingJudge | None = PrivateAttr(None)

    def reason_for(self, name: str, args: dict) -> str | None:
        """The rule that planned the call `name(args)`, if this policy planned it."""
        return self._reasons.get(_call_id(name, args))

    def _noted(self, calls: list[ToolCall], reason: str) -> list[ToolCall]:
        for name, args in calls:
            self._reasons[_call_id(name, args)] = reason
        return calls

    # -- planning ------------------------------------------------------------------------------

    def plan(self, bank: MemoryStore, question: str | None) -> list[ToolCall]:
        """Tool calls that improve `bank`, most valuable first, within the operation budget."""
        memories = bank.list()
        if not memories:
            return []
        budget = self.max_operations
        calls: list[ToolCall] = []
        touched: set[str] = set()
        if question and self.stepwise:
            calls.append(("search_memory", {"query": question, "top_k": self.stepwise}))
            shown = {hit.memory.key for hit in bank.search(question, self.stepwise)}
            memories = [m for m in memories if m.key in shown]
        if question:
            if not self.stepwise:
                calls.append(("search_memory", {"query": question, "top_k": 5}))
            keys = {m.key for m in memories}
            nearest = [hit.memory.key for hit in bank.search(question, 10) if hit.memory.key in keys]
            keys = self._digest(memories, question, nearest[:3])
            if keys:
                # No content: the tool's own text (`concatenate_memories`) is the digest, each fact with its date.
                calls += self._noted([("merge_memory", {"memory_ids": keys})], REASONS["digest"])
                touched.update(keys)
            # Only memories retrieval could bring to this question: every further edit costs efficiency.
            relevant = set(nearest) | set(_lexical_top(memories, question, 10))
            order = [m for m in memories if m.key in relevant]
        else:
            if self.stepwise:  # only what the look showed, in the order it lists them (its `to date` line)
                calls.append(("sample_memory", {"strategy": "recent", "k": self.stepwise}))
                order = bank.sample("recent", self.stepwise)
            else:
                calls.append(("sample_memory", {"strategy": "diverse", "k": 10}))
                order = list(memories)
                random.Random(self.seed).shuffle(order)  # seedable: which memories a small budget reaches
            order.sort(key=lambda m: not has_relative_time(m.content))
        verdicts = self._verdicts(bank, order)
        calls += self._noted(self._supersessions(order, touched, verdicts), REASONS["supersede"])
        calls += self._noted(self._anchors(order, touched), REASONS["anchor"])
        calls += self._noted(self._merges(order, touched, verdicts), REASONS["duplicate"])
        if self.split_packed:
            calls += self._noted(self._splits(order, touched), REASONS["split"])
        return (self._explored(calls, question) if self.explore else calls)[:budget]

    def _explored(self, calls: list[ToolCall], question: str | None) -> list[ToolCall]:
        """The first call (the look at the bank) stays; each later edit is kept with probability
        1 - explore, and with probability explore the kept ones are shuffled. Seeded by seed and question."""
        rng = random.Random(f"{self.seed}:{question}")
        rest = [call for call in calls[1:] if rng.random() >= self.explore]
        if rng.random() < self.explore:
            rng.shuffle(rest)
        return calls[:1] + rest

    def _digest(self, memories: list[MemoryRecord], question: str, vector: list[str]) -> list[str] | None:
        """The keys to consolidate into one memory: what vector search (`vector`: the top keys) and word
        overlap find for the question, within DIGEST_WORDS."""
        by_key = {m.key: m for m in memories}
        lexical = [k for k in _lexical_top(memories, question, 6) if k not in vector]
        picked: list[MemoryRecord] = []
        words = 0
        for key in dict.fromkeys(vector[:2] + lexical + vector[2:]):
            text = anchored(by_key[key])
            if words + len(text.split()) > DIGEST_WORDS:
                continue
            picked.append(by_key[key])
            words += len(text.split())
        return [m.key for m in picked] if len(picked) >= 2 else None

    def pairs_to_meet(self, bank: MemoryStore, keys: Sequence[str], vectors: np.ndarray) -> list[tuple[str, str]]:
        """The pairs of the whole bank that must share an episode: those that meet (each memory's nearest
        others above a floor, `judge.meeting`) whose reading the plan acts on (`_acts_on`: an unsure reading
        of another subject's fact as an update links no chain where nobody reviews, so a chain of true updates
        is not cut apart by readings the plan would never act on).
        Their verdicts are kept for this compaction's episodes (`_verdicts`), an earlier one's dropped."""
        self.forget()
        pairs = [(keys[i], keys[j]) for i, j in candidate_pairs(vectors)]
        records = {m.key: m for m in bank.list()}
        known = [(records[a], records[b]) for a, b in pairs if a in records and b in records]
        verdicts = self._judged(known, among=list(records.values()), vectors=dict(zip(keys, vectors, strict=True)))
        return [(a.key, b.key) for (a, b), v in zip(known, verdicts, strict=True) if v is not None and self._acts_on(v)]

    def judge_ahead(self, bank: MemoryStore, keys: Sequence[str], vectors: np.ndarray, groups: Sequence[Sequence[str]]) -> int:
        """Judge, in one batch, every pair the episodes on `groups` (neighbourhoods of `bank`, whose
        memories `keys` have `vectors`) will meet, so each episode reads its verdicts and judges none;
        how many pairs were judged."""
        index = {key: i for i, key in enumerate(keys)}
        wanted: set[tuple[str, str]] = set()
        for group in groups:
            members = [key for key in group if key in index]
            for i, j in candidate_pairs(vectors[[index[key] for key in members]]) if len(members) > 1 else ():
                wanted.add((members[i], members[j]))
        records = {m.key: m for m in bank.list()}
        pairs = [(records[a], records[b]) for a, b in sorted(wanted) if a in records and b in records]
        before = len(self._read)
        self._judged(pairs, among=list(records.values()), vectors=dict(zip(keys, vectors, strict=True)))
        return len(self._read) - before

    def judge_banks(self, banks: Sequence[tuple[Sequence[MemoryRecord], np.ndarray]]) -> None:
        """Judge, in one batch, the pairs that meet in each of many small banks (its memories and their
        vectors), each bank's filter its own: a watcher's pass over many people reads them all at once,
        and then `has_work` and the compactions judge none."""
        fresh: list[tuple[MemoryRecord, MemoryRecord]] = []
        judge = self._the_judge()
        for memories, vectors in banks:
            met = candidate_pairs(vectors) if len(memories) > 1 else []
            pairs = [(memories[i], memories[j]) for i, j in met]
            worth = worth_judging([m.content for m in memories], met, list(vectors), judge)
            for pair, ok in zip(pairs, worth, strict=True):
                name = _pair_name(*pair)
                if name in self._read:
                    continue
                if ok:
                    fresh.append(pair)
                else:
                    self._read[name] = None
        for pair, verdict in zip(fresh, judge_memories(judge, fresh), strict=True):
            self._read[_pair_name(*pair)] = (pair[0].key, verdict)

    def has_work(self, bank: MemoryStore, size: int) -> bool:
        """Whether compacting `bank` in neighbourhoods of `size` could edit it: for a bank that is one
        neighbourhood, whether the plan of its one blind episode (this very plan, on a copy of the bank)
        holds an edit; True for a larger bank, or a plan that explores or goes step by step."""
        if self.explore or self.stepwise or bank.count() > size:
            return True
        return any(name != "sample_memory" for name, _ in self.plan(bank, None))

    def forget(self) -> None:
        """Drop the verdicts read so far: a watcher's policy lives across passes and banks, and keeps one
        compaction's verdicts (a pass's: `judge_banks` reads many banks' pairs at once) up to MAX_REMEMBERED."""
        if len(self._read) > MAX_REMEMBERED:
            self._read.clear()
            self._memo = None

    def remembering_judge(self) -> RememberingJudge:
        """This policy's judge, remembering every pair it has read: a compaction's review and the watcher's
        trigger read it, so they judge no pair again."""
        return self._the_judge()

    def _verdicts(self, bank: MemoryStore, memories: Sequence[MemoryRecord]) -> dict[tuple[str, str], Verdict]:
        """The judge's reading of each pair of `memories` that meets (`judge.meeting`: each memory's
        nearest others above a floor), by the pair's keys in either order (`current` names them in it)."""
        vectors = bank.vectors_of([m.key for m in memories])
        shown = [m for m in memories if m.key in vectors]
        if len(shown) < 2:
            return {}
        pairs = [(shown[i], shown[j]) for i, j in candidate_pairs(np.stack([vectors[m.key] for m in shown]))]
        found = {}
        for (a, b), verdict in zip(pairs, self._judged(pairs, among=shown, vectors=vectors), strict=True):
            if verdict is not None:
                found[a.key, b.key], found[b.key, a.key] = verdict, turned(verdict)
        return found

    def _the_judge(self) -> RememberingJudge:
        if self.judge is None:
            self.judge = make_judge()
        if isinstance(self.judge, RememberingJudge):  # given one (the watcher's trigger read with it): its memory is ours
            return self.judge
        if self._memo is None or self._memo.inner is not self.judge:
            self._memo = RememberingJudge(self.judge)
        return self._memo

    def _judged(self, pairs: Sequence[tuple[MemoryRecord, MemoryRecord]], among: Sequence[MemoryRecord] = (),
                vectors: Mapping[str, np.ndarray] | None = None) -> list[Verdict | None]:
        """The judge's verdicts, each pair read once per policy (a pair's keys and texts name it) and given
        as the pair is (`current` names its members in this order); a pair sharing no rare word of `among`
        (its bank), or one the judge's screen drops from the memories' stored `vectors` (by key), is not
        judged (None: `judge.meeting.worth_judging`)."""
        name = [_pair_name(a, b) for a, b in pairs]
        fresh = list({n: i for i, n in reversed(list(enumerate(name))) if n not in self._read}.values())
        judge = self._the_judge()
        if fresh:
            bank = {m.key: m for m in among}
            for i in fresh:
                bank.setdefault(pairs[i][0].key, pairs[i][0])
                bank.setdefault(pairs[i][1].key, pairs[i][1])
            index = {key: i for i, key in enumerate(bank)}
            texts = [m.content for m in bank.values()]
            worth = worth_judging(texts, [(index[pairs[i][0].key], index[pairs[i][1].key]) for i in fresh],
                                  None if vectors is None else [vectors.get(key) for key in bank], judge)
            for i in [i for i, w in zip(fresh, worth, strict=True) if not w]:
                self._read[name[i]] = None
            fresh = [i for i, w in zip(fresh, worth, strict=True) if w]
        for i, verdict in zip(fresh, judge_memories(judge, [pairs[i] for i in fresh]), strict=True):
            self._read[name[i]] = (pairs[i][0].key, verdict)
        return [_as_given(self._read[n], a.key) for n, (a, _) in zip(name, pairs, strict=True)]

    def _supersessions(self, memories: Sequence[MemoryRecord], touched: set[str], verdicts: dict[tuple[str, str], Verdict]) -> list[ToolCall]:
        """Each older memory is superseded by the newer one the judge reads as an update of its fact with
        the most chance of a change (`judge.decision.change_chance`, surest pairs first; only readings the plan
        acts on, `_acts_on`: with `asks`, the unsure ones the decision asks about too), and then by the live end
        of that one's own chain (A -> B -> C: A and B by C), so a fact stated three times or more keeps only
        its newest statement current."""
        dated = [m for m in memories if stated_at(m) and m.key not in touched]
        updates = []
        for i, a in enumerate(dated):
            for b in dated[i + 1 :]:
                verdict = verdicts.get((a.key, b.key))
                if verdict is None or verdict.relation != "update" or not self._acts_on(verdict):
                    continue
                if (op := operation(verdict.relation, verdict.current, (a.content, b.content))) is None:
                    continue  # neither stated later: nothing says which holds
                older, newer = op.of((a, b))
                updates.append((-change_chance(verdict), stated_at(newer), older, newer))
        successor: dict[str, tuple[MemoryRecord, MemoryRecord]] = {}
        for _, _, older, newer in sorted(updates, key=lambda u: (u[0], u[1], u[2].key)):
            if older.key in successor:
                continue
            successor[older.key] = (older, newer)
        calls = []
        for older, newer in successor.values():
            seen = {older.key}
            while newer.key in successor and newer.key not in seen:  # to the chain's live end
                seen.add(newer.key)
                newer = successor[newer.key][1]
            reason = f"{UPDATE_LABEL} {shared_head(older.content, newer.content) or newer.content}"  # the fact that changed first
            calls.append(("delete_memory", {"reason": reason, "memory_id": older.key, "superseded_by": newer.key}))
        touched |= set(successor)
        return calls

    def _acts_on(self, verdict: Verdict) -> bool:
        """Whether the plan acts on `verdict`: where the judge's decision applies it, or (with `asks`) asks
        about it (an update or a duplicate it is unsure of, with a real chance: never two true facts)."""
        act = self._the_judge().auto_apply.act(verdict)
        return act == "apply" or (act == "ask" and self.asks)

    def _anchors(self, memories: Sequence[MemoryRecord], touched: set[str]) -> list[ToolCall]:
        calls = []
        for memory in memories:
            if memory.key in touched:
                continue
            if datable(memory):
                # No content: the tool dates the memory itself (`manage_memory`), as a student would ask it to.
                calls.append(("manage_memory", {"action": "update", "memory_id": memory.key}))
                touched.add(memory.key)
        return calls

    def _merges(self, memories: Sequence[MemoryRecord], touched: set[str], verdicts: dict[tuple[str, str], Verdict]) -> list[ToolCall]:
        calls = []
        words = {m.key: content_words(m.content) for m in memories}
        for i, a in enumerate(memories):
            if a.key in touched:
                continue
            for b in memories[i + 1 :]:
                if b.key in touched:
                    continue
                verdict = verdicts.get((a.key, b.key))
                drop, keep = operation("duplicate", None, (a.content, b.content)).of((a, b))
                told_twice = (jaccard(words[a.key], words[b.key]) >= DUPLICATE_JACCARD and words[drop.key] <= words[keep.key]
                              and memory_day(drop) == memory_day(keep))
                if verdict is not None and verdict.relation == "update":
                    continue  # one fact's two values: merging would keep the older beside (or over) the newer
                # Two events told on two days are two events, however alike their words.
                # A merge keeps one wording: one that drops a name the other holds ("Gina's favourite dance
                # style ..." / "Jon's ...") is two people's facts, not one fact told twice.
                judged = (verdict is not None and verdict.relation == "duplicate" and self._acts_on(verdict)
                          and names_in_text(drop.content) <= names_in_text(keep.content)
                          and not (a.kind == b.kind == "episodic" and memory_day(a) != memory_day(b)))
                if told_twice or judged:
                    # keep_fullest: the tool keeps `keep`'s words, dated (the longer one; `a` on a tie).
                    calls.append(("merge_memory", {"memory_ids": [a.key, b.key], "strategy": "keep_fullest"}))
                    touched.update((a.key, b.key))
                    break
        return calls

    def _splits(self, memories: Sequence[MemoryRecord], touched: set[str]) -> list[ToolCall]:
        calls = []
        for memory in memories:
            if memory.key in touched:
                continue
            parts = split_thematic(memory.content)
            if len(parts) >= 2:
                day = memory_day(memory)
                parts = [anchor_relative_dates(p, day) if day else p for p in parts]
                calls.append(("split_memory", {"memory_id": memory.key, "parts": parts}))
                touched.add(memory.key)
        return calls


def _lexical_top(memories: Sequence[MemoryRecord], question: str, k: int) -> list[str]:
    """Keys of the `k` memories sharing the most question words, weighted by rarity (idf)."""
    wanted = content_words(question) - QUESTION_WORDS
    if not wanted:
        return []
    bags = {m.key: content_words(m.content) for m in memories}
    df = Counter(word for bag in bags.values() for word in bag & wanted)
    idf = {word: math.log(1 + len(memories) / (1 + df[word])) for word in wanted}
    scored = [(sum(idf[w] for w in bag & wanted), key) for key, bag in bags.items()]
    return [key for score, key in sorted(scored, key=lambda s: (-s[0], s[1]))[:k] if score > 0]


def _as_given(read: tuple[str, Verdict] | None, first: str) -> Verdict | None:
    """A remembered reading (the key of the memory read first, the verdict) as the pair whose first
    memory is `first` gives it."""
    if read is None:
        return None
    return read[1] if read[0] == first else turned(read[1])


def _pair_name(a: MemoryRecord, b: MemoryRecord) -> frozenset:
    return frozenset(((a.key, a.content), (b.key, b.content)))


def _call_id(name: str, args: dict) -> str:
    return json.dumps([name, args], sort_keys=True, default=str)
