"""Labelled pairs for the relation judge from the development data, split by person into train, recipe
(kept out of training: the recipe and the calibration are chosen on it) and eval.

    from memupdate.rl.data.relations import relation_pairs
    parts = relation_pairs(Path("../shared/data"))          # {"train": [...], "recipe": [...], "eval": [...]}

Sources, each pair with its `source` and `group` (the person, profile, question or context):
- Jenverse MemoryBench: a statement marked `contradicts` updates the older one it names; the other
  statements of the profile that lie near each other (cosine >= NEAR) are compatible.
- LongMemEval: the knowledge-update questions' evidence, one statement a session (the sentence of the
  user's turn nearest the question), consecutive sessions an update; the multi-session questions'
  evidence the same way, compatible (several events or facts that together answer a question).
- FactConsolidation: each fact and its nearest facts; the same subject and relation with another object
  ("The author of X is A" / "... is B": `template_relation`, exact on this template; the last release's
  read 107 of the 32k recipe facts' 524 updates across two subjects) an update, the rest compatible. Its
  6k context is the evaluation part, the 32k context's other facts train.
- LoCoMo: observations near each other are events (LoCoMo's facts rarely change), or duplicates where
  one session tells the same words twice (one's content words within the other's); conv-47 and
  conv-48 are the evaluation part, as elsewhere here.
- Synthetic-Persona-Chat: a persona's facts, all true at once (no label: every pair is compatible).
- BEAM: a conversation's knowledge updates (the old statement and the new, the update's prefixes cut)
  and its contradictions ("I've never ..." against an earlier "I did ...": both kept, a person asks).
- RHELM: a person's dated conversations, the user's first-person sentences (no label).
- Letta's core-memory updates: a bank of ten third-person facts, then a newer fact that replaces the
  ones its row names (an update); the bank's other facts stay true beside it. A bank a row, split by
  the bank's facts (rows that share them share a part).
- DECODE: two turns of one speaker, the later contradicting the earlier or not (an update or two true
  statements); noisy, so only ProSeCCo's balanced set, turns of a few words that would meet in a store,
  a bank a pair.
Generated pairs (`generated_relations`) only ever join the training part.

Natural sources are also read as a person's store (`store_banks`): one bank a person, profile or question,
each statement stated at its time, every pair that meets (`judge.meeting`) judged; a pair no label names
is two true facts. The natural sources' labelled pairs are those banks' pairs: each pair that meets, its
label or compatible, and each labelled pair that does not meet.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date, timedelta
from pathlib import Path

import numpy as np

from memupdate.judge.meeting import candidate_pairs
from memupdate.judge.pairs import LabelledPair
from memupdate.judge.store_view import StoreBank
from memupdate.judge.verdict import Statement
from memupdate.text.facts import MIN_SHARED_HEAD, relation, tokens

NEAR = 0.5  # statements of one person this alike meet as a candidate pair
NEIGHBOURS = 3  # each statement's nearest others that form pairs
EVAL_LOCOMO = ("conv-47", "conv-48")
LARGE_SOURCES = ("locomo", "factconsolidation")  # one context each: their pairs train as near pairs, their banks only measure
RECIPE_LOCOMO = "conv-26"  # its pairs calibrate the judge and never train it
RECIPE_FC_FACTS = 1500  # the 32k context's last facts outside the 6k one: a recipe bank, never trained on
_PREFIX = re.compile(r"^(?:Information Update:\s*)?(?:[A-Z][\w &/-]{2,40}:\s*){0,2}")  # BEAM's plan labels
_MARKER = re.compile(r"\s*->->\s*[\d, ]+$")  # BEAM's "->-> 1,27" step markers
EVAL_SHARE, RECIPE_SHARE = 0.4, 0.2  # of the natural groups (people, profiles, questions)
CALIBRATION_FORMS = ("given", "third", "first")  # the recipe banks' forms the auto-apply thresholds hold in
_SENTENCE = re.compile(r"(?<=[.!?])\s+")


def split_of(group: str) -> str:
    """A group's part, fixed by a hash of its name (before a "#": several banks of one group share a part):
    eval (40%), recipe (20%) or train (40%)."""
    group = group.partition("#")[0]
    if group.startswith(("locomo-", "fc-")):
        return "eval" if group in {f"locomo-{c}" for c in EVAL_LOCOMO} | {"fc-6k"} else "train"
    share = int(hashlib.sha1(f"memupdate-relations:{group}".encode()).hexdigest(), 16) % 1000 / 1000
    return "eval" if share < EVAL_SHARE else "recipe" if share < EVAL_SHARE + RECIPE_SHARE else "train"


def relation_pairs(data: Path, embed=None, banks: dict[str, list[StoreBank]] | None = None) -> dict[str, list[LabelledPair]]:
    """Every labelled pair the development data in `data` gives, by part (see the module docstring);
    a source whose file is absent is skipped. `banks`: `store_banks(data)` when already read."""
    embed = embed or _embedder()
    banks = banks or store_banks(data, embed)
    parts: dict[str, list[LabelledPair]] = {"train": [], "recipe": [], "eval": []}
    for part, members in banks.items():
        parts[part] += [p for bank in members if bank.source not in LARGE_SOURCES for p in bank_pairs(bank)]
    recipe_texts = {s.text for bank in banks["recipe"] if bank.source in LARGE_SOURCES for s in bank.statements}
    fc = data / "memoryagentbench" / "factconsolidation-dev.jsonl"
    large = (factconsolidation_pairs(fc, embed) if fc.is_file() else []) + (
        locomo_pairs(data / "locomo" / "locomo10-dev.json", embed) if (data / "locomo" / "locomo10-dev.json").is_file() else [])
    for pair in large:
        part = split_of(pair.group)
        if part == "train" and (pair.first in recipe_texts or pair.second in recipe_texts):
            part = "recipe" if pair.group == f"locomo-{RECIPE_LOCOMO}" else "held"  # a recipe bank's pairs never train
        if part in parts:
            parts[part].append(pair)
    return parts


LETTA_TRUE_PAIRS = 3000  # of Letta's ~11,000 same-bank true pairs in the training part: one encyclopedic style, not a majority


def thinned(pairs: Sequence[LabelledPair], source: str, label: str, keep: int, seed: int = 0) -> list[LabelledPair]:
    """`pairs` with at most `keep` of `source`'s pairs labelled `label` (a fixed random choice)."""
    chosen = [i for i, p in enumerate(pairs) if p.source == source and p.label == label]
    dropped = set(np.random.default_rng(seed).permutation(chosen)[keep:].tolist()) if len(chosen) > keep else set()
    return [p for i, p in enumerate(pairs) if i not in dropped]


@dataclass
class JudgeData:
    """What training the local judge reads: the training pairs (labelled, generated and unrelated bulk),
    the recipe pairs (the temperature) and the recipe banks (the auto-apply thresholds)."""

    train: list[LabelledPair]
    recipe: list[LabelledPair]
    recipe_banks: list[StoreBank]


def judge_data(data: Path, *, generated: int, unrelated: int, seed: int = 0, embed=None) -> JudgeData:
    """The local judge's training data from the development data in `data` (one recipe for `judge train`
    and the relation task's SFT)."""
    from memupdate.rl.data.generated_relations import generated_pairs
    from memupdate.rl.data.relation_forms import in_other_forms

    embed = embed or _embedder()
    banks = store_banks(data, embed)
    parts = relation_pairs(data, embed, banks)
    bulk = unrelated_pairs(banks["train"], embed, unrelated, seed) if unrelated else []
    labelled = thinned(parts["train"], "letta", "compatible", LETTA_TRUE_PAIRS, seed) + generated_pairs(generated, seed=seed)
    # Every pair once more in another form (person, names, tense), so that no wording predicts a label; the
    # thresholds are calibrated on the recipe banks in every form, so that they hold in each.
    return JudgeData(labelled + in_other_forms(labelled, seed) + bulk, parts["recipe"], recipe_banks(data, embed, banks))


def recipe_banks(data: Path, embed=None, banks: dict[str, list[StoreBank]] | None = None) -> list[StoreBank]:
    """The recipe part's banks in every calibration form (LoCoMo's and FactConsolidation's as given): what
    the auto-apply and ask thresholds are calibrated on, so that they hold in each form."""
    from memupdate.rl.data.relation_forms import bank_in_form

    banks = banks or store_banks(data, embed or _embedder())
    return [bank_in_form(bank, form) for form in CALIBRATION_FORMS for bank in banks["recipe"]
            if form == "given" or bank.source not in LARGE_SOURCES]


def bank_pairs(bank: StoreBank) -> list[LabelledPair]:
    """A natural bank's pairs as labelled pairs: each pair that meets (its label, or compatible) and each
    labelled pair that does not meet."""
    out = []
    for i, j in sorted(set(bank.met) | set(bank.labels)):
        a, b = bank.statements[i], bank.statements[j]
        out.append(LabelledPair(a.text, b.text, bank.label((i, j)), a.time, b.time, a.event and b.event,
                                source=bank.source, group=bank.group))
    return out


def store_banks(data: Path, embed=None, *, large: bool = True) -> dict[str, list[StoreBank]]:
    """The development data read as people's stores, by part: a bank a person (profile, question,
    conversation), natural sources always, LoCoMo's and FactConsolidation's banks when `large`."""
    embed = embed or _embedder()
    root = data / "natural-updates"
    banks: list[StoreBank] = []
    if (path := root / "persona-chat-valid.jsonl").is_file():
        banks += persona_banks(_jsonl(path), embed)
    if (path := root / "memorybench-jenverse-dev.json").is_file():
        banks += [jenverse_bank(profile, embed) for profile in json.loads(path.read_text())["PROFILES"]]
    for name, labelled in (("longmemeval-ku-evidence-dev.jsonl", True), ("longmemeval-oracle-evidence-dev.jsonl", False)):
        if (path := root / name).is_file():
            rows = _jsonl(path) if labelled else [r for r in _jsonl(path) if r.get("question_type") == "multi-session"]
            banks += longmemeval_banks(rows, labelled, embed)
    if (root / "beam-ku-dev.jsonl").is_file() or (root / "beam-contradiction-dev.jsonl").is_file():
        banks += beam_banks(_jsonl(root / "beam-ku-dev.jsonl"), _jsonl(root / "beam-contradiction-dev.jsonl"), embed)
    if (path := root / "rhelm-dev" / "conversations").is_dir():
        banks += rhelm_banks(path, embed)
    if (path := root / "letta-core-memory-dev.jsonl").is_file():
        banks += letta_banks(_jsonl(path), embed)
    if (path := root / "decode-contradictions-dev.jsonl").is_file():
        banks += decode_banks(_jsonl(path), embed)
    parts: dict[str, list[StoreBank]] = {"train": [], "recipe": [], "eval": []}
    for bank in banks:
        parts[split_of(bank.group)].append(bank)
    if large:
        for part, members in store_banks_large(data, embed).items():
            parts[part] += members
    return parts


def store_banks_large(data: Path, embed, parts: Sequence[str] = ("recipe", "eval")) -> dict[str, list[StoreBank]]:
    """LoCoMo's and FactConsolidation's banks as stores: conv-47/48 and the 6k context evaluate, conv-26
    and the 32k context's last RECIPE_FC_FACTS facts (outside the 6k one) are recipe banks; with "train" in
    `parts`, the other conversations and the 32k context's other facts are training banks (the screen's)."""
    out: dict[str, list[StoreBank]] = {part: [] for part in parts}
    locomo = data / "locomo" / "locomo10-dev.json"
    if locomo.is_file():
        from memupdate.rl.data.locomo import load_locomo

        for conversation in load_locomo(locomo):
            part = "eval" if conversation.sample_id in EVAL_LOCOMO else "recipe" if conversation.sample_id == RECIPE_LOCOMO else "train"
            if part not in out:
                continue
            facts = list({f.text: f for f in conversation.facts}.values())
            statements = tuple(Statement(f.text, str(f.session_day) if f.session_day else None, True) for f in facts)
            met = candidate_pairs(np.asarray(embed([s.text for s in statements])))
            labels = {(i, j): "duplicate" if facts[i].session == facts[j].session
                      and relation(facts[i].text, facts[j].text, events=True) == "duplicate" else "events" for i, j in met}
            out[part].append(StoreBank(f"locomo-{conversation.sample_id}", "locomo", statements, tuple(met), labels))
    fc = data / "memoryagentbench" / "factconsolidation-dev.jsonl"
    if fc.is_file():
        from memupdate.rl.data.factconsolidation import fact_time, load_factconsolidation

        contexts = {len(item.context.facts): item.context.facts for item in load_factconsolidation(fc)}
        if contexts:
            small, big = min(contexts), max(contexts)
            chosen = {"eval": list(contexts[small])}
            if big != small:
                in_small = set(contexts[small])
                outside = [f for f in contexts[big] if f not in in_small]
                chosen["recipe"], chosen["train"] = outside[-RECIPE_FC_FACTS:], outside[:-RECIPE_FC_FACTS]
            for part, facts in chosen.items():
                if part not in out:
                    continue
                serial = {f: i for i, f in enumerate(contexts[small if part == "eval" else big])}
                facts = sorted(facts, key=serial.__getitem__)
                statements = tuple(Statement(f, fact_time(serial[f])) for f in facts)
                met = candidate_pairs(np.asarray(embed(facts)))
                labels = {(i, j): template_relation(facts[i], facts[j]) for i, j in met}
                name = {"eval": "6k", "recipe": "32k-recipe", "train": "32k-train"}[part]
                out[part].append(StoreBank(f"fc-{name}", "factconsolidation", statements, tuple(met), labels))
    return out


def _bank(group: str, source: str, statements: Sequence[Statement], labels: dict[tuple[str, str], str], embed) -> StoreBank:
    """A bank of `statements` (deduplicated by text, oldest first), its pairs that meet, and `labels`
    given by (older text, newer text)."""
    unique = sorted({s.text: s for s in statements}.values(), key=lambda s: (s.time or "", s.text))
    index = {s.text: i for i, s in enumerate(unique)}
    met = tuple(candidate_pairs(np.asarray(embed([s.text for s in unique])))) if len(unique) > 1 else ()
    named = {}
    for (a, b), label in labels.items():
        if a in index and b in index and a != b:
            named[(min(index[a], index[b]), max(index[a], index[b]))] = label
    return StoreBank(group, source, tuple(unique), met, named)


UNRELATED_BAND = (0.25, 0.55)  # alike enough to meet, too unlike to be one fact told twice


def unrelated_pairs(banks: Sequence[StoreBank], embed, count: int, seed: int = 0) -> list[LabelledPair]:
    """Natural true pairs in bulk: statements of two different people (training banks) that would meet in
    one store (cosine in UNRELATED_BAND), labelled compatible: the common case a store holds, which the
    labelled sources give only by the hundred ("I am a woman." / "I have a dogs.")."""
    statements = [(bank.group, s) for bank in banks for s in bank.statements if not s.event]
    if len(statements) < 2:
        return []
    vectors = np.asarray(embed([s.text for _, s in statements]))
    sims = vectors @ vectors.T
    low, high = UNRELATED_BAND
    found = [(i, j) for i, j in zip(*np.nonzero((sims >= low) & (sims < high)), strict=True)
             if i < j and statements[i][0] != statements[j][0]]
    rng = np.random.default_rng(seed)
    picked = rng.choice(len(found), size=min(count, len(found)), replace=False) if found else []
    out = []
    for n in picked:
        i, j = found[int(n)]
        (_, a), (_, b) = statements[i], statements[j]
        out.append(LabelledPair(a.text, b.text, "compatible", "2024-01-01", "2024-01-08", source="unrelated",
                                group=f"unrelated-{n % 50}", generated=True))
    return out


def persona_banks(rows: Sequence[dict], embed) -> list[StoreBank]:
    """A persona's facts, a week apart in the order given: every pair true at once."""
    start = date(2024, 1, 1)
    return [_bank(f"persona-{row['persona_id']}", "persona",
                  [Statement(fact, (start + timedelta(weeks=i)).isoformat()) for i, fact in enumerate(row["facts"])], {}, embed)
            for row in rows]


def jenverse_bank(profile: dict, embed) -> StoreBank:
    said, updates = jenverse_statements(profile)
    statements = [Statement(text, day) for text, day in said.items()]
    statements += [Statement(old, "2024-01-01") for old, _, _ in updates if old not in said]
    return _bank(f"jenverse-{profile['user_id']}", "jenverse", statements, {(old, new): "update" for old, new, _ in updates}, embed)


def longmemeval_banks(rows: Sequence[dict], labelled: bool, embed) -> list[StoreBank]:
    """A question's evidence sessions as one bank of the user's sentences (each at its session's time);
    for a knowledge-update question, the sentence nearest the question in each session updates the one
    of the session before."""
    banks, seen = [], set()
    for row in rows:
        group = f"longmemeval-{row['question_id'].removesuffix('_abs')[:8]}"
        if group in seen:
            continue
        seen.add(group)
        statements, picked = [], []
        for session in sorted(row.get("evidence_sessions") or [], key=lambda s: s["date"]):
            sentences = user_sentences(session)
            if not sentences:
                continue
            when = _day(session["date"])
            statements += [Statement(s, when) for s in sentences]
            vectors = np.asarray(embed([row["question"], *sentences]))
            picked.append(sentences[int(np.argmax(vectors[1:] @ vectors[0]))])
        labels = {(a, b): "update" for a, b in zip(picked, picked[1:], strict=False) if a != b} if labelled else {}
        source = "longmemeval-knowledge-update" if labelled else "longmemeval-multi-session"
        banks.append(_bank(group, source, statements, labels, embed))
    return banks


def beam_banks(updates: Sequence[dict], contradictions: Sequence[dict], embed) -> list[StoreBank]:
    """A BEAM conversation's knowledge updates (old statement, then the new ten days later) and its
    contradictions (the earlier turn's sentence nearest the "never" sentence of the other turn, both kept:
    the right act is to ask), one bank a conversation."""
    by_conversation: dict[str, tuple[list[Statement], dict]] = {}
    for n, row in enumerate(updates):
        old, new = beam_text(row.get("old_statement") or ""), beam_text(row.get("new_statement") or "")
        if not old or not new or old == new:
            continue
        statements, labels = by_conversation.setdefault(row["conversation_id"], ([], {}))
        day = date(2024, 3, 1) + timedelta(days=n % 20)
        statements += [Statement(old, day.isoformat()), Statement(new, (day + timedelta(days=10)).isoformat())]
        labels[(old, new)] = "update"
    for n, row in enumerate(contradictions):
        turns = sorted((row.get("first_turns") or []) + (row.get("second_turns") or []), key=lambda t: t["id"])
        if len(turns) < 2:
            continue
        sentences = [[s.strip() for s in _SENTENCE.split(_MARKER.sub("", t["content"])) if 4 <= len(s.split()) <= 45] for t in turns]
        never = next((s for group in sentences for s in group if "never" in s.lower()), None)
        earlier = [s for s in sentences[0] if s != never]
        if never is None or not earlier:
            continue
        vectors = np.asarray(embed([never, *earlier]))
        claim = earlier[int(np.argmax(vectors[1:] @ vectors[0]))]
        statements, labels = by_conversation.setdefault(row["conversation_id"], ([], {}))
        day = date(2024, 4, 1) + timedelta(days=n % 20)
        statements += [Statement(claim, day.isoformat()), Statement(never, (day + timedelta(days=10)).isoformat())]
        labels[(claim, never)] = "compatible"
    return [_bank(f"beam-{conversation}", "beam", statements, labels, embed)
            for conversation, (statements, labels) in by_conversation.items()]


RHELM_SENTENCES = 400  # a person's first-person sentences read as a store (the earliest): bounds the pairs judged
_FIRST_PERSON = re.compile(r"^(?:I|I'm|I’m|I've|I’ve|My|We|We're|Our)\b")


def rhelm_banks(folder: Path, embed) -> list[StoreBank]:
    """A RHELM person's dated conversations as a store: the first-person sentences (6 to 30 words) of the
    user's turns, each at its turn's time, the earliest RHELM_SENTENCES. No pair is labelled: most are two
    true facts, and a state that changed reads as one here (its precision is a lower bound)."""
    banks = []
    for person in sorted(p for p in folder.iterdir() if p.is_dir()):
        statements = []
        for path in sorted(person.glob("conversation_*.json")):
            for turn in json.loads(path.read_text()).get("conversation", []):
                when = str(turn.get("timestamp") or "")[:19] or None
                statements += [Statement(s.strip(), when) for s in _SENTENCE.split(str(turn.get("user") or ""))
                               if 6 <= len(s.split()) <= 30 and _FIRST_PERSON.match(s.strip())]
        banks.append(_bank(f"rhelm-{person.name}", "rhelm", statements[:RHELM_SENTENCES], {}, embed))
    return banks


def letta_banks(rows: Sequence[dict], embed) -> list[StoreBank]:
    """A Letta row as a bank: its ten facts, then a day later the contradicting fact, which updates the
    facts its row names (`supporting_fact_indices`); every other pair that meets is two true facts."""
    banks = []
    for n, row in enumerate(rows):
        facts, newer = [f.strip() for f in row["facts"]], row["contradicting_fact"].strip()
        older = [facts[i] for i in row.get("supporting_fact_indices") or [] if 0 <= i < len(facts)]
        statements = [Statement(f, "2024-05-01") for f in facts] + [Statement(newer, "2024-05-02")]
        bank_id = hashlib.sha1("\n".join(facts).encode()).hexdigest()[:10]
        banks.append(_bank(f"letta-{bank_id}#{n}", "letta", statements, {(old, newer): "update" for old in older}, embed))
    return banks


DECODE_WORDS = (4, 30)  # a turn read as a memory: a statement, not a paragraph
DECODE_MEET = 0.45  # the two turns are about one thing (cosine), as two memories that meet in a store
# Only ProSeCCo's balanced set (316 contradictions, 320 not): the large set holds contradictions alone, so
# its people's words would teach that a chatty first-person turn is an update (and many of its rows pair
# turns about different things).
DECODE_SET = "decode_prosecco_size_df"


def decode_banks(rows: Sequence[dict], embed) -> list[StoreBank]:
    """DECODE's pairs of one speaker's turns, each a bank of two statements a day apart: the later an
    update of the earlier where it contradicts it, else both true. Only DECODE_SET's turns of DECODE_WORDS
    words whose cosine reaches DECODE_MEET (the crowd's contradictions include turns about different things)."""
    kept = [r for r in rows if all(DECODE_WORDS[0] <= len(str(r[k]).split()) <= DECODE_WORDS[1] for k in ("earlier", "later"))
            and r.get("set") == DECODE_SET and r["earlier"].strip() != r["later"].strip()]
    if not kept:
        return []
    vectors = np.asarray(embed([t for r in kept for t in (r["earlier"], r["later"])]))
    banks = []
    for n, row in enumerate(kept):
        if float(vectors[2 * n] @ vectors[2 * n + 1]) < DECODE_MEET:
            continue
        earlier, later = row["earlier"].strip(), row["later"].strip()
        label = "update" if row["label"] == "contradiction" else "compatible"
        statements = (Statement(earlier, "2024-06-01"), Statement(later, "2024-06-02"))
        group = "decode-" + hashlib.sha1(later.encode()).hexdigest()[:10]
        banks.append(StoreBank(f"{group}#{n}", "decode", statements, ((0, 1),), {(0, 1): label}))
    return banks



def beam_text(statement: str) -> str:
    """A BEAM statement without its cues: the "Information Update:" and plan-label prefixes, step markers."""
    return _MARKER.sub("", _PREFIX.sub("", statement.strip())).strip()


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.is_file() else []


def _embedder():
    from memupdate.store import get_embedder

    return get_embedder().embed


def near_pairs(texts: Sequence[str], embed, floor: float = NEAR, k: int = NEIGHBOURS) -> list[tuple[int, int]]:
    """Index pairs (i < j) of each text's `k` nearest others at cosine >= floor."""
    if len(texts) < 2:
        return []
    vectors = np.asarray(embed(list(texts)))
    sims = vectors @ vectors.T
    np.fill_diagonal(sims, -1)
    found = set()
    for i in range(len(texts)):
        for j in np.argsort(-sims[i])[:k]:
            if sims[i, j] >= floor and texts[i] != texts[j]:
                found.add((min(i, int(j)), max(i, int(j))))
    return sorted(found)


def jenverse_statements(profile: dict) -> tuple[dict[str, str], list[tuple[str, str, str]]]:
    """A Jenverse profile's statements (each -> the day of the session that first told it, sessions
    numbered as days of January 2024) and its updates (the older statement a `contradicts` names, the
    newer, the newer's day)."""
    said: dict[str, str] = {}
    updates = []
    for session in profile["sessions"]:
        day = f"2024-01-{int(session['session_id']):02d}"
        for memory in session["expected_memories_after"]:
            said.setdefault(memory["fact"], day)
            if memory.get("contradicts"):
                updates.append((memory["contradicts"], memory["fact"], day))
    return said, updates


def user_sentences(session: dict) -> list[str]:
    """The user's sentences of a LongMemEval session, of 4 to 45 words."""
    return [s.strip() for t in session["turns"] if t["role"] == "user" for s in _SENTENCE.split(t["content"]) if 4 <= len(s.split()) <= 45]


def factconsolidation_pairs(path: Path, embed) -> list[LabelledPair]:
    from memupdate.rl.data.factconsolidation import fact_time, load_factconsolidation

    contexts = {}
    for item in load_factconsolidation(path):
        contexts[len(item.context.facts)] = item.context.facts
    if not contexts:
        return []
    small = min(contexts)
    in_small = set(contexts[small])
    pairs = []
    for size, facts in sorted(contexts.items()):
        texts = list(facts) if size == small else [f for f in facts if f not in in_small]
        serial = {f: i for i, f in enumerate(facts)}
        group = "fc-6k" if size == small else "fc-32k"
        for i, j in near_pairs(texts, embed, floor=0.6):
            a, b = sorted((texts[i], texts[j]), key=serial.__getitem__)
            pairs.append(LabelledPair(a, b, template_relation(a, b), fact_time(serial[a]), fact_time(serial[b]),
                                      source="factconsolidation", group=group))
    return pairs


# FactConsolidation's template: "<subject and relation> <object>", the relation closed by one of these
# words ("... is a citizen of", "... was founded by", "The capital of X is"); a copula after the shared
# words means the subject differs ("The author of Bleak House is ..." / "The author of Little Women is ...").
COPULAS = frozenset({"is", "was", "are", "were"})
RELATION_ENDS = COPULAS | {"of", "by", "to", "in", "with", "at", "for", "as", "from", "on"}


def template_relation(a: str, b: str) -> str:
    """FactConsolidation's template read: one subject and relation with another object is an update
    ("Terrance Dicks is a citizen of United Kingdom" / "... of United States of America", "... of Catholic
    Church" / "... of Church of Scotland"); two subjects or two relations are compatible ("The type of
    music that Cleo Laine plays is jazz" / "... that Archie Shepp plays is jazz", "Gran Turismo 4 was
    developed by X" / "Gran Turismo 5 ...", "X is a citizen of A" / "X is married to B"). The shared words
    must end where a relation does (RELATION_ENDS), and what follows them is an object: no copula in it.
    Exact on this template, not meant for other text (the rule, `text.facts.relation`, reads any text)."""
    x, y = tokens(a), tokens(b)
    for cut in range(len(os.path.commonprefix([x, y])), MIN_SHARED_HEAD - 1, -1):
        rest_x, rest_y = x[cut:], y[cut:]
        if not (rest_x and rest_y) or x[cut - 1] not in RELATION_ENDS:
            continue
        if x[cut - 1] in COPULAS and {rest_x[0], rest_y[0]} & {"a", "an", "the"} and not RELATION_ENDS & set(x[: cut - 1]):
            continue  # "X is a citizen of ..." / "X is married to ...": the relation is not shared
        return "compatible" if COPULAS & set(rest_x + rest_y) else "update"
    return "compatible"


def locomo_pairs(path: Path, embed) -> list[LabelledPair]:
    from memupdate.rl.data.locomo import load_locomo

    pairs = []
    for conversation in load_locomo(path):
        facts = list({f.text: f for f in conversation.facts}.values())
        texts = [f.text for f in facts]
        for i, j in near_pairs(texts, embed, floor=0.6, k=2):
            a, b = sorted((facts[i], facts[j]), key=lambda f: f.session)
            day_a, day_b = (str(f.session_day) if f.session_day else None for f in (a, b))
            # One session's words told twice (one's content words within the other's) is a duplicate.
            label = "duplicate" if a.session == b.session and relation(a.text, b.text, events=True) == "duplicate" else "events"
            pairs.append(LabelledPair(a.text, b.text, label, day_a, day_b, event=True, source="locomo",
                                      group=f"locomo-{conversation.sample_id}"))
    return pairs


def _day(value: str) -> str:
    """LongMemEval's "2023/05/11 (Thu) 03:19" as ISO "2023-05-11T03:19"."""
    day, _, rest = value.partition(" (")
    clock = rest.partition(") ")[2]
    return day.replace("/", "-") + (f"T{clock}" if clock else "")
