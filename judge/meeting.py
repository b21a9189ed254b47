"""Which pairs meet: each memory and its nearest others above a similarity floor, the only pairs judged.

    from memupdate.judge.meeting import candidate_pairs
    candidate_pairs(vectors)            # [(0, 3), (1, 2), ...]: index pairs i < j, unit vectors in
    worth_judging(texts, pairs, vectors, judge)   # [True, False, ...]: rare words shared, the judge's screen keeps

A changed fact's two statements are rarely near-duplicates ("Based in New York City" / "Accepted job at
startup in San Francisco": cosine 0.36), so the floor is low and the count is what bounds the work:
each memory meets its MEET_K nearest at cosine >= MEET_FLOOR. The floor was chosen on the training and
recipe parts of the development data, where 0.25 meets all 26 labelled natural updates and 0.3 misses
one (docs/relations.md: how many labelled pairs meet at all on the evaluation part).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import numpy as np

from memupdate.judge.screen import Screen
from memupdate.text.strategies import content_words

MEET_FLOOR = 0.25
MEET_K = 5
# A pair that meets is judged only if it shares a rare word (`worth_judging`): one held by at most this share of
# the bank's memories, or RARE_MIN of them (so a fact stated up to RARE_MIN times is judged), but never more
# than half of them (in a person's small bank, their name: what the bank is about, not a subject), nor fewer
# than the pair's own two.
# Chosen on the training and recipe parts of the development data (`memupdate judge pairs`, a group a bank):
# it keeps 25 of 26 labelled natural updates (the one sharing no word at all is lost to any word filter),
# 692 of 696 FactConsolidation updates and both duplicates, and spares 54% of LoCoMo's event pairs; on
# FactConsolidation's 32k context repeated to 6,000 facts it spares a quarter of the pairs that meet
# (docs/relations.md, "At scale").
RARE_SHARE = 0.02
RARE_MIN = 10
# A bank this small has every pair that meets judged: a person's everyday changes share no word but the
# person's name ("Ana lives in Paris" / "Ana moved to Berlin last month"), and judging them all costs little.
FILTER_FROM = 200
_CHUNK = 2048  # rows of the similarity matrix at a time: an 18,000-memory bank stays in memory


def candidate_pairs(vectors: np.ndarray, floor: float = MEET_FLOOR, k: int = MEET_K) -> list[tuple[int, int]]:
    """Index pairs (i < j) where j is among i's `k` nearest (or i among j's) at cosine >= `floor`."""
    n = len(vectors)
    if n < 2:
        return []
    unit = vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
    found: set[tuple[int, int]] = set()
    take = min(k, n - 1)
    for start in range(0, n, _CHUNK):
        sims = unit[start : start + _CHUNK] @ unit.T
        rows = np.arange(len(sims))
        sims[rows, start + rows] = -2.0  # not itself
        nearest = np.argpartition(-sims, take - 1, axis=1)[:, :take]
        for row, columns in enumerate(nearest):
            i = start + row
            for j in columns:
                if sims[row, j] >= floor:
                    found.add((min(i, int(j)), max(i, int(j))))
    return sorted(found)


def worth_judging(texts: Sequence[str], pairs: Sequence[tuple[int, int]], vectors: Sequence[np.ndarray | None] | None = None,
                  judge: object = None) -> list[bool]:
    """Which `pairs` (indices into `texts`, one bank's memories) can be one fact told twice or changed:
    those sharing a content word that at most max(2, min(RARE_MIN, half the bank), RARE_SHARE x the bank)
    of its memories hold (a subject's name, a thing; not the person every memory names, nor a relation
    many subjects share).
    The others are never judged (see RARE_SHARE); in a bank of fewer than FILTER_FROM memories, all are.
    With the memories' `vectors` (rows as `texts`, None where a memory has none) and the `judge` that will
    read the pairs, only those its screen keeps too (`screened`)."""
    if len(texts) < FILTER_FROM:
        worth = [True] * len(pairs)
    else:
        words = [content_words(text) for text in texts]
        counts = Counter(word for bag in words for word in bag)
        rare = max(2, min(RARE_MIN, len(texts) / 2), RARE_SHARE * len(texts))
        worth = [any(counts[word] <= rare for word in words[i] & words[j]) for i, j in pairs]
    if vectors is None or judge is None:
        return worth
    kept = iter(screened(texts, vectors, [p for p, w in zip(pairs, worth, strict=True) if w], judge))
    return [w and next(kept) for w in worth]  # the screen reads only the pairs the words left


def screened(texts: Sequence[str], vectors: Sequence[np.ndarray | None], pairs: Sequence[tuple[int, int]], judge: object) -> list[bool]:
    """Which `pairs` (indices into `texts` and `vectors`, the memories' stored embeddings) `judge`'s screen keeps
    (`judge.screen`: the pairs the judge would leave are dropped); all, where the judge has no screen
    trained on it, or for a pair with a memory without a vector."""
    screen = Screen.for_judge(judge)
    whole = [vectors[i] is not None and vectors[j] is not None for i, j in pairs]
    if screen is None or not any(whole):
        return [True] * len(pairs)
    chosen = [p for p, ok in zip(pairs, whole, strict=True) if ok]
    kept = iter(screen.keep(np.stack([vectors[i] for i, _ in chosen]), np.stack([vectors[j] for _, j in chosen]),
                            [(texts[i], texts[j]) for i, j in chosen]).tolist())
    return [not ok or next(kept) for ok in whole]


def meeting_recall(pairs, embed, floor: float = MEET_FLOOR, k: int = MEET_K) -> dict[str, tuple[int, int]]:
    """Per label, how many labelled pairs meet at all when each group's statements (a person's, a
    profile's) form one bank: (met, total). `embed`: texts -> unit vectors."""
    from collections import defaultdict

    groups = defaultdict(list)
    for pair in pairs:
        groups[pair.group].append(pair)
    counts: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for members in groups.values():
        texts = list(dict.fromkeys(t for p in members for t in (p.first, p.second)))
        index = {t: i for i, t in enumerate(texts)}
        met = set(candidate_pairs(np.asarray(embed(texts)), floor, k))
        for p in members:
            i, j = sorted((index[p.first], index[p.second]))
            counts[p.label][0] += (i, j) in met
            counts[p.label][1] += 1
    return {label: (hits, total) for label, (hits, total) in counts.items()}
