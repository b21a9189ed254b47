"""The records of a review: what `bank.review.build_review` returns and every reader of a review reads,
by attribute, and the JSON the change log keeps and `--json` prints.

    review = build_review(bank, fork, calls)                  # a Review
    review.counts.memories_before, review.counts.kinds["merge"], review.counts.flagged
    change = review.changes[0]                                # a Change
    change.kind, change.sources[0].key, change.coverage.missing, change.facts.clear, change.flags
    review.to_json()                                          # {"bank": ..., "counts": {...}, "changes": [...]}
    Change.from_json(details["review_change"])                # a change as the review queue stored it

A change's `facts` is how the relation judge reads the statements it relates: a supersession's pairs
are `SupersededPair`s (stale -> newer), a merge's `MergedPair`s; other kinds have none (None).
`to_json` writes exactly the keys, in the order, that the change log and `--json` have always held;
`from_json` also reads changes stored before a part existed (the part is then empty or None).
Nothing here imports more than the standard library: `memupdate history` reads these and starts fast.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

CHANGE_KINDS = ("merge", "split", "update", "supersede", "delete", "create", "rewrite")


@dataclass(frozen=True)
class ReviewedMemory:
    """A memory as a review shows it: key, text, kind, its date (or first..last dates), the app's key it
    was imported from, and when its statement was made (None: unknown, or a change stored before)."""

    key: str
    content: str | None
    kind: str | None = None
    date: str | None = None
    source_key: str | None = None
    stated_at: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"key": self.key, "content": self.content, "kind": self.kind, "date": self.date,
                "source_key": self.source_key, "stated_at": self.stated_at}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ReviewedMemory:
        return cls(data["key"], data.get("content"), data.get("kind"), data.get("date"), data.get("source_key"),
                   data.get("stated_at"))


@dataclass(frozen=True)
class ReviewedCall:
    """A tool call that made a change: its episode, the tool and its arguments."""

    episode: Any
    tool: str
    args: Mapping[str, Any]

    def to_json(self) -> dict[str, Any]:
        return {"episode": self.episode, "tool": self.tool, "args": self.args}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ReviewedCall:
        return cls(data.get("episode"), data.get("tool", ""), data.get("args") or {})


@dataclass(frozen=True)
class Coverage:
    """Which content words of a change's sources no result keeps (`missing`, by source key; `flagged` when
    any), deleted sources held whole by another memory (`covered_by`), and for a supersession which newer
    memory retires each stale one (`superseded_by`; None for other kinds)."""

    flagged: bool
    missing: Mapping[str, tuple[str, ...]]
    covered_by: Mapping[str, str]
    superseded_by: Mapping[str, str] | None = None

    def to_json(self) -> dict[str, Any]:
        out = {"flagged": self.flagged, "missing": {k: list(v) for k, v in self.missing.items()}, "covered_by": dict(self.covered_by)}
        if self.superseded_by is not None:
            out["superseded_by"] = dict(self.superseded_by)
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Coverage:
        by = data.get("superseded_by")
        return cls(bool(data.get("flagged")), {k: tuple(v) for k, v in (data.get("missing") or {}).items()},
                   dict(data.get("covered_by") or {}), None if by is None else dict(by))


@dataclass(frozen=True)
class Alike:
    """Whether a change's sources are one memory told twice: their least pairwise cosine similarity (None
    under two sources or without vectors), the content words they all share, and `unrelated`."""

    min_similarity: float | None = None
    shared_words: tuple[str, ...] = ()
    unrelated: bool = False

    def to_json(self) -> dict[str, Any]:
        return {"min_similarity": self.min_similarity, "shared_words": list(self.shared_words), "unrelated": self.unrelated}

    @classmethod
    def from_json(cls, data: Mapping[str, Any] | None) -> Alike:
        data = data or {}
        return cls(data.get("min_similarity"), tuple(data.get("shared_words") or ()), bool(data.get("unrelated")))


@dataclass(frozen=True)
class SupersededPair:
    """How the judge reads a stale memory and the newer one retiring it: the relation, its confidence,
    whether the newer was stated later and is the one read as current, and how alike the two are."""

    stale: str
    newer: str
    relation: str | None
    confidence: float | None
    stated_later: bool | None
    newer_current: bool
    similarity: float | None

    def to_json(self) -> dict[str, Any]:
        return {"stale": self.stale, "newer": self.newer, "relation": self.relation, "confidence": self.confidence,
                "stated_later": self.stated_later, "newer_current": self.newer_current, "similarity": self.similarity}


@dataclass(frozen=True)
class MergedPair:
    """How the judge reads two sources of a merge: the relation and its confidence."""

    a: str
    b: str
    relation: str
    confidence: float

    def to_json(self) -> dict[str, Any]:
        return {"a": self.a, "b": self.b, "relation": self.relation, "confidence": self.confidence}


@dataclass(frozen=True)
class JudgeReading:
    """How the relation judge (`judge`, applying itself at `threshold`) reads the statements of a
    supersession or a merge, pair by pair. `clear`: what the safety rule lets apply itself (every pair a
    confident update with the newer current; for a merge, no pair an update or two events).
    `duplicates` (a merge only, None otherwise): every pair confidently one fact told twice."""

    judge: str | None
    threshold: float
    pairs: tuple[SupersededPair | MergedPair, ...]
    clear: bool
    duplicates: bool | None = None

    def to_json(self) -> dict[str, Any]:
        out = {} if self.judge is None else {"judge": self.judge}
        out |= {"threshold": self.threshold, "pairs": [p.to_json() for p in self.pairs], "clear": self.clear}
        if self.duplicates is not None:
            out["duplicates"] = self.duplicates
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any] | None) -> JudgeReading | None:
        if not data:
            return None
        pairs = tuple(
            MergedPair(p["a"], p["b"], p["relation"], p["confidence"]) if "a" in p else
            SupersededPair(p["stale"], p["newer"], p.get("relation"), p.get("confidence"), p.get("stated_later"),
                           bool(p.get("newer_current")), p.get("similarity"))
            for p in data.get("pairs") or ()
        )
        return cls(data.get("judge"), data.get("threshold", 1.0), pairs, bool(data.get("clear")), data.get("duplicates"))


@dataclass(frozen=True)
class Change:
    """One change of a review: a connected group of edits, the bank memories it replaces (`sources`) and
    the fork's memories replacing them (`results`), the reasons and tool calls that made it, what it keeps
    (`coverage`), for a supersession the newer memories as they were (`newer`, else None), how alike its
    sources are, how the judge reads it (`facts`), the words no source holds and the review's `flags`."""

    id: str
    kind: str
    sources: tuple[ReviewedMemory, ...]
    results: tuple[ReviewedMemory, ...]
    reasons: tuple[str, ...] = ()
    tools: tuple[ReviewedCall, ...] = ()
    coverage: Coverage = field(default_factory=lambda: Coverage(False, {}, {}))
    newer: tuple[ReviewedMemory, ...] | None = None
    alike: Alike = field(default_factory=Alike)
    facts: JudgeReading | None = None
    unsupported: tuple[str, ...] = ()
    flags: tuple[str, ...] = ()

    @property
    def keys(self) -> list[str]:
        """The keys of its sources, then of its results."""
        return [m.key for m in self.sources] + [m.key for m in self.results]

    def to_json(self) -> dict[str, Any]:
        out = {"kind": self.kind, "sources": [m.to_json() for m in self.sources], "results": [m.to_json() for m in self.results],
               "reasons": list(self.reasons), "tools": [t.to_json() for t in self.tools], "coverage": self.coverage.to_json()}
        if self.newer is not None:
            out["newer"] = [m.to_json() for m in self.newer]
        return out | {"alike": self.alike.to_json(), "facts": None if self.facts is None else self.facts.to_json(),
                      "unsupported": list(self.unsupported), "flags": list(self.flags), "id": self.id}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Change:
        newer = data.get("newer")
        return cls(
            str(data.get("id", "")), data["kind"],
            tuple(ReviewedMemory.from_json(m) for m in data.get("sources") or ()),
            tuple(ReviewedMemory.from_json(m) for m in data.get("results") or ()),
            tuple(data.get("reasons") or ()), tuple(ReviewedCall.from_json(t) for t in data.get("tools") or ()),
            Coverage.from_json(data.get("coverage") or {}),
            None if newer is None else tuple(ReviewedMemory.from_json(m) for m in newer),
            Alike.from_json(data.get("alike")), JudgeReading.from_json(data.get("facts")),
            tuple(data.get("unsupported") or ()), tuple(data.get("flags") or ()),
        )


@dataclass(frozen=True)
class ReviewCounts:
    """A review's totals: memories before and after, changes of each kind (`kinds`, every CHANGE_KINDS
    entry), and changes with a coverage flag, unrelated sources, unsupported words or a review flag."""

    memories_before: int
    memories_after: int
    kinds: Mapping[str, int]
    flagged: int = 0
    unrelated: int = 0
    unsupported: int = 0
    flags: int = 0

    def to_json(self) -> dict[str, Any]:
        return ({"memories_before": self.memories_before, "memories_after": self.memories_after}
                | {kind: self.kinds.get(kind, 0) for kind in CHANGE_KINDS}
                | {"flagged": self.flagged, "unrelated": self.unrelated, "unsupported": self.unsupported, "flags": self.flags})

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ReviewCounts:
        return cls(data.get("memories_before", 0), data.get("memories_after", 0), {k: data.get(k, 0) for k in CHANGE_KINDS},
                   data.get("flagged", 0), data.get("unrelated", 0), data.get("unsupported", 0), data.get("flags", 0))


@dataclass(frozen=True)
class Review:
    """What a fork would change in a bank, change by change (see `bank.review`), with the QA proxy's
    summary (`scoring.qa_change`) where the bank has questions; a proposed compaction also names its
    change id and policy."""

    bank: str
    fork: str
    counts: ReviewCounts
    qa: Mapping[str, Any] | None
    changes: tuple[Change, ...]
    change_id: int | None = None
    policy: str | None = None

    def to_json(self) -> dict[str, Any]:
        out = {"bank": self.bank, "fork": self.fork, "counts": self.counts.to_json(), "qa": self.qa,
               "changes": [c.to_json() for c in self.changes]}
        if self.change_id is not None:
            out["change_id"] = self.change_id
        if self.policy is not None:
            out["policy"] = self.policy
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Review:
        return cls(data.get("bank", ""), data.get("fork", ""), ReviewCounts.from_json(data.get("counts") or {}), data.get("qa"),
                   tuple(Change.from_json(c) for c in data.get("changes") or ()), data.get("change_id"), data.get("policy"))


@dataclass(frozen=True)
class QueuedReview:
    """A change waiting in the review queue: the review's change, its id in the change log, its bank, its
    status and the reasons the safety rule holds it (`held`)."""

    change: Change
    change_id: int
    bank: str
    status: str
    held: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return self.change.to_json() | {"id": self.change_id, "bank": self.bank, "status": self.status, "held": list(self.held)}


@dataclass(frozen=True)
class StatedMemory:
    """A memory of a supersession: key, text (None: held nowhere any more) and when it was stated."""

    key: str
    content: str | None
    stated_at: str | None

    def to_json(self) -> dict[str, Any]:
        return {"key": self.key, "content": self.content, "stated_at": self.stated_at}


@dataclass(frozen=True)
class Supersession:
    """A stale memory kept as history and the newer statement of the same fact that retired it."""

    stale: StatedMemory
    newer: StatedMemory

    def to_json(self) -> dict[str, Any]:
        return {"stale": self.stale.to_json(), "newer": self.newer.to_json()}
