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
  ("The author of X is A" / "... is B": `template_relation`, exact on this template) an update, the
  rest compatible. Its 6k context is the evaluation part, the 32k context's other facts train.
- LoCoMo: observations near each other are events (LoCoMo's facts rarely change), or duplicates where
  one session tells the same words twice (one's content words within the other's); conv-47 and
  conv-48 are the evaluation part, as elsewhere here.
Generated pairs (`generated_relations`) only ever join the training part.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import re
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from memupdate.judge.pairs import LabelledPair
from memupdate.text.facts import MIN_SHARED_HEAD, relation, tokens

NEAR = 0.5  # statements of one person this alike meet as a candidate pair
NEIGHBOURS = 3  # each statement's nearest others that form pairs
EVAL_LOCOMO = ("conv-47", "conv-48")
EVAL_SHARE, RECIPE_SHARE = 0.4, 0.2  # of the natural groups (people, profiles, questions)
_SENTENCE = re.compile(r"(?<=[.!?])\s+")


def split_of(group: str) -> str:
    """A group's part, fixed by a hash of its name: eval (40%), recipe (20%) or train (40%)."""
    if group.startswith(("locomo-", "fc-")):
        return "eval" if group in {f"locomo-{c}" for c in EVAL_LOCOMO} | {"fc-6k"} else "train"
    share = int(hashlib.sha1(f"memupdate-relations:{group}".encode()).hexdigest(), 16) % 1000 / 1000
    return "eval" if share < EVAL_SHARE else "recipe" if share < EVAL_SHARE + RECIPE_SHARE else "train"


def relation_pairs(data: Path, embed=None) -> dict[str, list[LabelledPair]]:
    """Every labelled pair the development data in `data` gives, by part (see the module docstring);
    a source whose file is absent is skipped."""
    if embed is None:
        from memupdate.store import get_embedder

        embed = get_embedder().embed
    pairs: list[LabelledPair] = []
    jenverse = data / "natural-updates" / "memorybench-jenverse-dev.json"
    if jenverse.is_file():
        pairs += jenverse_pairs(json.loads(jenverse.read_text()), embed)
    for name, label in (("longmemeval-ku-evidence-dev.jsonl", "update"), ("longmemeval-oracle-evidence-dev.jsonl", "compatible")):
        path = data / "natural-updates" / name
        if path.is_file():
            rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
            if label == "compatible":
                rows = [r for r in rows if r.get("question_type") == "multi-session"]
            pairs += longmemeval_pairs(rows, label, embed)
    fc = data / "memoryagentbench" / "factconsolidation-dev.jsonl"
    if fc.is_file():
        pairs += factconsolidation_pairs(fc, embed)
    locomo = data / "locomo" / "locomo10-dev.json"
    if locomo.is_file():
        pairs += locomo_pairs(locomo, embed)
    parts: dict[str, list[LabelledPair]] = {"train": [], "recipe": [], "eval": []}
    for pair in pairs:
        parts[split_of(pair.group)].append(pair)
    # The one-context sources have no people to split by: a tenth of their training pairs is kept out for the recipe.
    rng = random.Random(0)
    kept = [p for p in parts["train"] if p.group in ("fc-32k",) or p.group.startswith("locomo-")]
    held = set(map(id, rng.sample(kept, len(kept) // 10)))
    parts["recipe"] += [p for p in parts["train"] if id(p) in held]
    parts["train"] = [p for p in parts["train"] if id(p) not in held]
    return parts


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


def jenverse_pairs(data: dict, embed) -> list[LabelledPair]:
    pairs = []
    for profile in data["PROFILES"]:
        group = f"jenverse-{profile['user_id']}"
        said, updates = jenverse_statements(profile)
        for old, new, day in updates:
            pairs.append(LabelledPair(old, new, "update", said.get(old, "2024-01-01"), day, source="jenverse", group=group))
        linked = {frozenset((old, new)) for old, new, _ in updates}
        texts = list(said)
        for i, j in near_pairs(texts, embed):
            a, b = sorted((texts[i], texts[j]), key=lambda t: said[t])
            if frozenset((a, b)) not in linked:
                pairs.append(LabelledPair(a, b, "compatible", said[a], said[b], source="jenverse", group=group))
    return pairs


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


def longmemeval_pairs(rows: list[dict], label: str, embed) -> list[LabelledPair]:
    """Per question, the user's sentence nearest the question in each evidence session; consecutive
    sessions pair up (older first), labelled `label`. Questions with the same evidence count once."""
    pairs, seen = [], set()
    for row in rows:
        sessions = sorted(row.get("evidence_sessions") or [], key=lambda s: s["date"])
        picked = []
        for session in sessions:
            sentences = user_sentences(session)
            if not sentences:
                continue
            vectors = np.asarray(embed([row["question"], *sentences]))
            best = sentences[int(np.argmax(vectors[1:] @ vectors[0]))]
            picked.append((best, _day(session["date"])))
        for (a, day_a), (b, day_b) in zip(picked, picked[1:], strict=False):
            if a == b or (a, b) in seen:
                continue
            seen.add((a, b))
            pairs.append(LabelledPair(a, b, label, day_a, day_b, source=f"longmemeval-{row.get('question_type')}",
                                      group=f"longmemeval-{row['question_id'].removesuffix('_abs')[:8]}"))
    return pairs


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


def template_relation(a: str, b: str) -> str:
    """FactConsolidation's template read: one subject and relation ("Karunas is a citizen of") with
    objects that share no word ("India" / "United States of America") is an update; else compatible.
    Looser than the rule (`text.facts.relation`, which wants the shared words to be most of the
    statement and so misses long objects): exact on this template, not meant for other text."""
    x, y = tokens(a), tokens(b)
    head = len(os.path.commonprefix([x, y]))
    end = len(os.path.commonprefix([x[head:][::-1], y[head:][::-1]]))  # "... is country music" / "... is rock music"
    tail_a, tail_b = set(x[head : len(x) - end]), set(y[head : len(y) - end])
    updated = head >= MIN_SHARED_HEAD and tail_a and tail_b and not tail_a & tail_b and max(len(x), len(y)) - head <= 8
    return "update" if updated else "compatible"


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
