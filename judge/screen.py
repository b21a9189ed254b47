"""The screen: which pairs that meet the judge would leave, told from the two memories' stored vectors and words.

    from memupdate.judge.screen import Screen
    screen = Screen.for_judge(judge)          # the shipped screen, or None where it was not trained on `judge`
    keep = screen.keep(first, second, texts)  # unit vectors (the store's embeddings), (text, text) a row -> bool a row

Before the cross-encoder reads a pair (milliseconds), a small network over the pair's two embeddings
and how their words meet (tens of microseconds: numpy, no torch) drops the pairs the judge would leave;
the judge reads the rest as before, so a kept pair's decision never changes. It is trained on the
judge's own decisions over every pair that meets in the development data's stores
(`rl.screen_training`, `memupdate judge screen`), its threshold chosen so that at least RECALL of the
pairs the judge applies or asks about are kept in every source of the recipe part. It belongs to one
judge: the shipped screen holds the digest of the judge it was trained on, and `for_judge` gives it only
to that judge (any other judge reads every pair: a stale screen never drops a pair silently). Distinct
from `LocalJudge`'s bfloat16 first reading, which reads every pair.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

WEIGHTS = Path(__file__).resolve().parent / "weights"
SHIPPED_SCREEN = WEIGHTS / "relation-screen.npz"
RECALL = 0.995  # of the pairs the judge applies or asks about, kept in every source (issue 70)
FEATURES = "vectors+words"  # what a screen reads: a screen saved for other features serves no judge
WORD_FEATURES = 9


def features(first: np.ndarray, second: np.ndarray, texts: Sequence[tuple[str, str]]) -> np.ndarray:
    """A pair's features, symmetric in its two memories: their vectors' elementwise product, absolute
    difference and cosine (rows of unit vectors in), then `word_features` of their texts; a row per pair."""
    first, second = np.asarray(first, dtype=np.float32), np.asarray(second, dtype=np.float32)
    cosine = np.sum(first * second, axis=1, keepdims=True)
    return np.concatenate([first * second, np.abs(first - second), cosine, word_features(texts)], axis=1)


def word_features(texts: Sequence[tuple[str, str]]) -> np.ndarray:
    """How each pair's two statements' words (`text.facts.tokens`) meet, WORD_FEATURES a pair, symmetric:
    the words shared (of all, of the shorter), the words they begin alike and end alike (a subject and
    attribute kept, another value at the end: "The CEO of X is A" / "... is B"), both together, their
    difference in length, the words in one only (a share, and a log count), and whether a word that says
    a state changed ("no longer", "moved") stands in one only. What the vectors blur: which words differ."""
    from memupdate.text.facts import CHANGE_WORDS, tokens

    rows = np.zeros((len(texts), WORD_FEATURES), dtype=np.float32)
    known: dict[str, list[str]] = {}  # a memory meets several others: its words read once
    for row, (a, b) in enumerate(texts):
        for text in (a, b):
            if text not in known:
                known[text] = tokens(text)
        x, y = known[a], known[b]
        words_x, words_y = set(x), set(y)
        shared, either, only = len(words_x & words_y), max(1, len(words_x | words_y)), len(words_x ^ words_y)
        shorter = max(1, min(len(x), len(y)))
        head = next((k for k, (u, v) in enumerate(zip(x, y, strict=False)) if u != v), shorter)
        tail = next((k for k, (u, v) in enumerate(zip(reversed(x), reversed(y), strict=False)) if u != v), shorter)
        rows[row] = (shared / either, shared / max(1, min(len(words_x), len(words_y))), head / shorter, tail / shorter,
                     min(1.0, (head + tail) / shorter), abs(len(x) - len(y)) / max(1, len(x), len(y)), only / either,
                     np.log1p(only), float(bool((words_x ^ words_y) & CHANGE_WORDS)))
    return rows


@dataclass
class Screen:
    """A one-hidden-layer network over `features`, and the score at or above which a pair is kept.
    `card`: what it was trained on (the judge's digest, the features, the recall calibrated to, pair counts)."""

    hidden: np.ndarray  # (features, units)
    hidden_bias: np.ndarray
    out: np.ndarray  # (units,)
    out_bias: float
    threshold: float
    card: dict[str, Any] = field(default_factory=dict)

    @property
    def digest(self) -> str | None:
        return self.card.get("digest")

    def scores(self, first: np.ndarray, second: np.ndarray, texts: Sequence[tuple[str, str]]) -> np.ndarray:
        """Each pair's score (a logit: higher, likelier the judge applies or asks)."""
        if len(first) == 0:
            return np.zeros(0, dtype=np.float32)
        inner = np.maximum(features(first, second, texts) @ self.hidden + self.hidden_bias, 0.0)
        return inner @ self.out + self.out_bias

    def keep(self, first: np.ndarray, second: np.ndarray, texts: Sequence[tuple[str, str]]) -> np.ndarray:
        """Which pairs (row k of `first` with row k of `second`, `texts[k]` their statements) the judge
        should read."""
        return self.scores(first, second, texts) >= self.threshold

    def save(self, path: str | Path = SHIPPED_SCREEN) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        np.savez_compressed(path, hidden=self.hidden.astype(np.float32), hidden_bias=self.hidden_bias.astype(np.float32),
                            out=self.out.astype(np.float32), out_bias=np.float32(self.out_bias),
                            threshold=np.float32(self.threshold), card=json.dumps(self.card))
        return path

    @classmethod
    def load(cls, path: str | Path = SHIPPED_SCREEN) -> Screen:
        with np.load(path) as stored:
            return cls(stored["hidden"], stored["hidden_bias"], stored["out"], float(stored["out_bias"]),
                       float(stored["threshold"]), json.loads(str(stored["card"])))

    @classmethod
    def for_judge(cls, judge: Any, path: str | Path | None = None) -> Screen | None:
        """The screen at `path` (default the shipped one) if it was trained on `judge` (the same weights'
        digest) and reads today's FEATURES, else None: a judge without a digest (the rule, an endpoint) or
        another checkpoint reads every pair."""
        digest = (getattr(judge, "card", None) or {}).get("digest")
        if digest is None:
            return None
        path = Path(path or SHIPPED_SCREEN)
        screen = _loaded(str(path), path.stat().st_mtime_ns) if path.is_file() else None
        return screen if screen is not None and screen.digest == digest and screen.card.get("features") == FEATURES else None


@lru_cache(maxsize=4)
def _loaded(path: str, modified: int) -> Screen:
    """The screen at `path`, read once per version of the file (`modified`)."""
    return Screen.load(path)


def judge_digest(judge: Any = None) -> str:
    """The digest of `judge`'s weights (default: the shipped judge's, read from its card: no torch)."""
    if judge is not None:
        return judge.card["digest"]
    from memupdate.judge.local import SHIPPED_CARD

    return json.loads(SHIPPED_CARD.read_text())["digest"]
