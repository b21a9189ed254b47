"""The relation task's units: the candidate pairs of memories (two statements that meet, as a compaction
meets them: `rl.data.relations.near_pairs`) of the banks the development data gives, each bank with its
statements and the questions its decisions are scored on.

    from memupdate.rl.data.relation_units import RelationUnit, relation_banks
    banks = relation_banks(Path("../shared/data"), locomo_units=300, fc_units=400, seed=0)
    units = [RelationUnit(b.group, b.part, p) for b in banks for p in b.pairs]   # unit.key: its reward table row

A bank is a Jenverse profile (its tests read the correct answer, and the wrong one against), a LongMemEval
question (its answer), a BEAM conversation (its knowledge-update questions), a Letta row (its question: the
answer after the change, and the stale one against), a LoCoMo training conversation
or FactConsolidation's training facts (their own questions, a sample of their pairs). Training and recipe
people only: the evaluation part never reaches the relation task (`rl.data.relations.split_of`).
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memupdate.judge.pairs import LabelledPair
from memupdate.scoring.categories import MULTI_HOP, SINGLE_HOP
from memupdate.store import MemoryStore, NewMemory

# Jenverse tests whose wrong answer states a value (a stale one, another's); others' wrong answers are
# refusals or generic sentences ("I don't recall ...", "I'll explain things clearly"), no value to count.
VALUE_TESTS = ("contradiction_update", "consolidation", "temporal_relevance", "cross_session")
FULL_NAME = re.compile(r"\b[A-Z][a-z]+(?: [A-Z][a-z]+)+")


@dataclass(frozen=True)
class Probe:
    """A question as the QA proxy reads it; `sign` -1: a wrong answer, whose credit counts against."""

    question: str
    answer: str
    evidence: tuple[str, ...] = ()
    category: int = SINGLE_HOP
    sign: float = 1.0


@dataclass
class RelationBank:
    """One bank's statements (keys `s0000`.. or the bank's own), its questions, and its candidate pairs."""

    group: str
    part: str  # train or recipe
    probes: list[Probe]
    pairs: list[LabelledPair]  # label "" where none is known: RL reads none
    memories: list[NewMemory] = field(default_factory=list)  # empty: `load` writes the bank
    load: Callable[[MemoryStore], MemoryStore] | None = None


@dataclass(frozen=True)
class RelationUnit:
    """A candidate pair of one bank: what the relation task rolls its verdicts out on; `key` names its
    row of the reward table (the two texts, not their times)."""

    group: str
    part: str
    pair: LabelledPair

    @property
    def key(self) -> str:
        return json.dumps([self.group, self.pair.first, self.pair.second])


def relation_banks(data: Path, *, locomo_units: int, fc_units: int, seed: int, embed=None) -> list[RelationBank]:
    """The training and recipe banks the development data in `data` gives (evaluation people and
    contexts left out: `rl.data.relations.split_of`), with up to `locomo_units` of LoCoMo's pairs and
    `fc_units` of FactConsolidation's, drawn with `seed` (a run's settings: they decide its units)."""
    from memupdate.rl.data.relations import _jsonl, split_of

    if embed is None:
        from memupdate.store import get_embedder

        embed = get_embedder().embed
    banks: list[RelationBank] = []
    natural = data / "natural-updates"
    jenverse = natural / "memorybench-jenverse-dev.json"
    if jenverse.is_file():
        banks += jenverse_banks(json.loads(jenverse.read_text()), embed)
    oracle = natural / "longmemeval-oracle-evidence-dev.jsonl"
    ku = natural / "longmemeval-ku-evidence-dev.jsonl"
    rows = {}
    for path in (oracle, ku):
        if path.is_file():
            for line in path.read_text().splitlines():
                if line.strip():
                    row = json.loads(line)
                    rows[row["question_id"]] = row
    banks += longmemeval_banks(list(rows.values()), embed)
    if (natural / "beam-ku-dev.jsonl").is_file():
        banks += beam_relation_banks(natural, embed)
    banks += letta_relation_banks(_jsonl(natural / "letta-core-memory-dev.jsonl"), embed)
    rng = random.Random(seed)
    banks += locomo_banks(data / "locomo" / "locomo10-dev.json", locomo_units, rng, embed)
    banks += factconsolidation_banks(data / "memoryagentbench" / "factconsolidation-dev.jsonl", fc_units, rng, embed)
    kept = []
    for bank in banks:
        bank.part = bank.part or split_of(bank.group)
        if bank.part in ("train", "recipe") and bank.pairs and bank.probes:
            kept.append(bank)
    return kept


def statement_memories(said: dict[str, str | None], event: bool = False) -> tuple[list[NewMemory], dict[str, str]]:
    """Memories for statements (text -> ISO day or time), keyed `s0000`.., each its own provenance."""
    memories, keys = [], {}
    for i, (text, when) in enumerate(said.items()):
        key = f"s{i:04d}"
        meta: dict[str, Any] = {"dia_ids": [key]}
        if when:
            meta |= {"time": when, "date": when[:10]}
        memories.append(NewMemory(text, kind="episodic" if event else "semantic", metadata=meta, key=key))
        keys[text] = key
    return memories, keys


def _meeting(said: dict[str, str | None], embed, group: str, source: str, labels: dict[frozenset, str] | None = None) -> list[LabelledPair]:
    from memupdate.judge.meeting import MEET_FLOOR, MEET_K
    from memupdate.rl.data.relations import near_pairs

    texts = list(said)
    pairs = []
    for i, j in near_pairs(texts, embed, floor=MEET_FLOOR, k=MEET_K):
        a, b = sorted((texts[i], texts[j]), key=lambda t: said[t] or "")
        label = (labels or {}).get(frozenset((a, b)), "")
        pairs.append(LabelledPair(a, b, label, said[a], said[b], source=source, group=group))
    return pairs


def jenverse_banks(data: dict, embed) -> list[RelationBank]:
    """A bank a profile: its expected memories; its tests read the correct answer (+) and the wrong (-),
    every statement of the profile their evidence (a profile is short: all of it fits the context)."""
    from memupdate.rl.data.relations import jenverse_statements

    banks = []
    for profile in data["PROFILES"]:
        group = f"jenverse-{profile['user_id']}"
        said, changes = jenverse_statements(profile)
        updates = {frozenset((old, new)): "update" for old, new, _ in changes}
        memories, keys = statement_memories(said)
        evidence = tuple(keys.values())
        probes = []
        for test in profile.get("memory_tests", []):
            probes.append(Probe(test["query"], test["correct_answer"], evidence))
            if test.get("wrong_answer") and test.get("category") in VALUE_TESTS:
                probes.append(Probe(test["query"], test["wrong_answer"], evidence, sign=-1.0))
        banks.append(RelationBank(group, "", probes, _meeting(said, embed, group, "jenverse", updates), memories))
    return banks


def longmemeval_banks(rows: Sequence[dict], embed) -> list[RelationBank]:
    """A bank a question: the user's sentences of its evidence sessions, stated at the session's time;
    the question reads its answer, every sentence its evidence."""
    from memupdate.rl.data.relations import _day, user_sentences

    banks: dict[str, RelationBank] = {}
    for row in rows:
        group = f"longmemeval-{row['question_id'].removesuffix('_abs')[:8]}"
        if row["question_id"].endswith("_abs") or not row.get("answer") or group in banks:
            continue
        said: dict[str, str | None] = {}
        for session in sorted(row.get("evidence_sessions") or [], key=lambda s: s["date"]):
            for sentence in user_sentences(session):
                said.setdefault(sentence, _day(session["date"]))
        if len(said) < 2:
            continue
        memories, keys = statement_memories(said)
        probe = Probe(row["question"], str(row["answer"]), tuple(keys.values()), category=MULTI_HOP if "," in str(row["answer"]) else SINGLE_HOP)
        banks[group] = RelationBank(group, "", [probe], _meeting(said, embed, group, f"longmemeval-{row.get('question_type')}"), memories)
    return list(banks.values())


def beam_relation_banks(natural: Path, embed) -> list[RelationBank]:
    """A bank a BEAM conversation: its store (`rl.data.relations.beam_banks`: knowledge updates and
    contradictions, each statement at its time); its knowledge-update questions read their answers (the
    newer value), every statement their evidence."""
    from memupdate.rl.data.relations import _jsonl, beam_banks, split_of

    updates = _jsonl(natural / "beam-ku-dev.jsonl")
    stores = beam_banks(updates, _jsonl(natural / "beam-contradiction-dev.jsonl"), embed)
    banks = []
    for store in stores:
        said = {st.text: st.time for st in store.statements}
        memories, keys = statement_memories(said)
        probes = [Probe(row["question"], str(row["answer"]), tuple(keys.values()))
                  for row in updates if f"beam-{row['conversation_id']}" == store.group and row.get("answer")]
        labels = {frozenset((store.statements[i].text, store.statements[j].text)): label for (i, j), label in store.labels.items()}
        # A namespace label holds no "/" ("beam-100K/4"): the bank is named without it, its part kept by the source's name.
        group = store.group.replace("/", "_")
        banks.append(RelationBank(group, split_of(store.group), probes, _meeting(said, embed, group, "beam", labels), memories))
    return banks


def letta_relation_banks(rows: Sequence[dict], embed) -> list[RelationBank]:
    """A bank a Letta row (`rl.data.relations.letta_banks`: its ten facts, a day later the contradicting
    fact). Its question reads the answer after the change (+) and the stale one (-), every statement their
    evidence. The development file gives the answer after in both `answer` and `contradicting_answer`, so
    the stale answer is the one name the replaced fact holds that neither the question nor the answer
    does (no stale probe where that is not one name)."""
    from memupdate.rl.data.relations import letta_banks, split_of

    def names(text: str) -> set[str]:  # the full names a Letta text holds: "Eliza Woodley's" -> "Eliza Woodley"
        return set(FULL_NAME.findall(text))

    banks = []
    for row, store in zip(rows, letta_banks(rows, embed), strict=True):
        said = {st.text: st.time for st in store.statements}
        memories, keys = statement_memories(said)
        evidence = tuple(keys.values())
        answer = str(row["contradicting_answer"])
        probes = [Probe(row["question"], answer, evidence)]
        replaced = [row["facts"][i] for i in row.get("supporting_fact_indices") or [] if 0 <= i < len(row["facts"])]
        stale = set().union(*map(names, replaced)) - names(row["question"]) - names(answer)
        if len(stale) == 1:
            probes.append(Probe(row["question"], stale.pop(), evidence, sign=-1.0))
        labels = {frozenset((store.statements[i].text, store.statements[j].text)): label for (i, j), label in store.labels.items()}
        group = store.group.replace("#", "-")
        banks.append(RelationBank(group, split_of(store.group), probes, _meeting(said, embed, group, "letta", labels), memories))
    return banks


def locomo_banks(path: Path, units: int, rng: random.Random, embed) -> list[RelationBank]:
    """LoCoMo's training conversations (not conv-47/48): the ingested bank, its own questions, and up to
    `units` of the pairs that meet, over all of them."""
    from memupdate.rl.data.locomo import load_locomo
    from memupdate.rl.data.relations import EVAL_LOCOMO, locomo_pairs

    if not path.is_file():
        return []
    from memupdate.rl.data.ingest import ingest_conversation

    conversations = [c for c in load_locomo(path) if c.sample_id not in EVAL_LOCOMO]
    pairs = [p for p in locomo_pairs(path, embed) if p.group.removeprefix("locomo-") not in EVAL_LOCOMO]
    pairs = rng.sample(pairs, min(units, len(pairs)))  # labels kept for reports only: RL reads none
    banks = []
    for conversation in conversations:
        mine = [p for p in pairs if p.group == f"locomo-{conversation.sample_id}"]
        probes = [Probe(q.question, q.answer, tuple(q.evidence), q.category) for q in conversation.qa if q.answer]
        banks.append(RelationBank(f"locomo-{conversation.sample_id}", "train", probes, mine,
                                  load=lambda store, c=conversation: ingest_conversation(store, c)))
    return banks


def factconsolidation_banks(path: Path, units: int, rng: random.Random, embed) -> list[RelationBank]:
    """FactConsolidation's training bank (the larger context's facts no evaluation context holds), its
    own questions, and up to `units` of the pairs that meet there."""
    from memupdate.rl.data.factconsolidation import fact_banks, load_factconsolidation
    from memupdate.rl.data.relations import factconsolidation_pairs

    if not path.is_file():
        return []
    training, _ = fact_banks(load_factconsolidation(path))
    pairs = [p for p in factconsolidation_pairs(path, embed) if p.group == "fc-32k"]
    pairs = rng.sample(pairs, min(units, len(pairs)))  # labels kept for reports only: RL reads none
    return [RelationBank(f"fc-{bank.sample_id}", "train", [Probe(q.question, q.answer, tuple(q.evidence), q.category) for q in bank.qa],
                         pairs, load=bank.load) for bank in training]
