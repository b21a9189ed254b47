"""The review of a compaction: what the fork would change in the bank, change by change, before anything does.

    from memupdate.bank.review import build_review
    review = build_review(bank, fork, calls, qa={"questions": 40, "before": 0.41, "after": 0.44})
    review.counts             # ReviewCounts(memories_before=412, memories_after=371, kinds={"merge": 30, ...}, flagged=2, ...)
    review.changes[0]         # Change(id="c0001", kind="merge", sources=(...), results=(...), reasons=(...),
                              #        coverage=Coverage(flagged=False, missing={}, ...), facts=JudgeReading(...), ...)
    review.to_json()          # what `--json` prints and the change log keeps

The records are `bank.review_records`; the page is `bank.review_html`.

Each change is a connected group of edits: the bank memories it replaces (sources) and the fork's
memories that replace them (results), linked through the event log (a merge's `merged_from`, a
split's `split_from`, an update's key). Its kind is `merge` (n -> 1), `split` (1 -> n), `update`
(1 -> 1, same key), `delete` (1 -> 0), `create` (0 -> n) or `rewrite` (n -> m). Its reasons are the
ones the policy recorded for the calls that made it.

Coverage: a source is flagged when some of its content words appear in no result of its change
(relative time counts as kept where the results hold the date it resolves to). A deleted source is flagged unless
some memory of the fork holds all its content words (then it names that memory).

Coverage alone is not safety (a merge of unrelated memories keeps every word), so each change also
says whether its sources are alike (`alike`: their least pairwise cosine similarity, the content
words they all share, `unrelated` under UNRELATED_BELOW or with none shared) and which words of its
results no source holds (`unsupported`). Given a relation judge (the caller's: `compact` passes its
policy's), each supersession and merge carries how it reads its statements (`facts`: relation,
confidence, the judge's threshold, whether the newer is current), and `flags` name what a person
should look at: a supersession by a dissimilar memory, one memory superseding many, a compaction
retiring most of the bank.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import date
from typing import Any

import numpy as np

from memupdate.bank.review_records import (
    CHANGE_KINDS,
    Alike,
    Change,
    Coverage,
    JudgeReading,
    MergedPair,
    Review,
    ReviewCounts,
    ReviewedCall,
    ReviewedMemory,
    SupersededPair,
)
from memupdate.bank.supersessions import stated_time
from memupdate.judge import RelationJudge, judge_memories
from memupdate.store import KEY_PATTERN, MemoryRecord, MemoryStore
from memupdate.text.dates import TIME_EXPRESSION, anchor_relative_dates
from memupdate.text.facts import is_newer
from memupdate.text.strategies import content_words

# Sources less alike than this (cosine) are not one memory told twice: near-duplicates score 0.9 and
# more, while four remarks on one person's health, writing, work and tastes score 0.42-0.58.
UNRELATED_BELOW = 0.75
# A supersession whose two statements are less alike than this is flagged: they hardly share a subject.
DISSIMILAR_BELOW = 0.2
# A compaction retiring at least WIPE_MIN memories and more than WIPE_SHARE of the bank, or one memory
# superseding WIPE_MIN others, is flagged: a wipe dressed as updates (a person who changed a few facts
# of a small bank is not one).
WIPE_MIN, WIPE_SHARE = 10, 0.5
_HANDLE = re.compile(rf"\[({KEY_PATTERN.pattern})\]")


def build_review(
    bank: MemoryStore, fork: MemoryStore, calls: Sequence[dict[str, Any]] = (), *, qa: dict[str, Any] | None = None,
    judge: RelationJudge | None = None,
) -> Review:
    """The diff of `fork` against `bank` grouped into changes, with reasons, coverage, flags and counts;
    `judge` reads the statements each supersession or merge relates (None: none read, `facts` is None: what
    coverage alone needs, as the reward's `lost_sources`)."""
    before, after = bank.snapshot(), fork.snapshot()
    removed = [k for k in before if k not in after]
    changed = [k for k in before if k in after and before[k].as_event() != after[k].as_event()]
    added = [k for k in after if k not in before]
    parent = {}

    def find(key: str) -> str:
        parent.setdefault(key, key)
        while parent[key] != key:
            parent[key] = parent[parent[key]]
            key = parent[key]
        return key

    def union(a: str, b: str) -> None:
        parent[find(a)] = find(b)

    superseded: dict[str, str] = {}  # stale key -> the newer key its last record names
    for event in fork.events():
        if event.op == "delete" and event.before and (newer := (event.before.get("metadata") or {}).get("superseded_by")):
            superseded[event.memory_key] = newer
        if event.op == "create" and event.after:
            meta = event.after.get("metadata") or {}
            for origin in [*(meta.get("merged_from") or []), *([meta["split_from"]] if meta.get("split_from") else [])]:
                union(event.memory_key, origin)
    call_keys = []
    for call in calls:
        keys = set(_call_keys(call))
        call_keys.append(keys)
        for key in keys:
            find(key)
    groups: dict[str, list[str]] = {}
    for key in removed + changed + added:
        groups.setdefault(find(key), []).append(key)
    members: dict[str, set[str]] = {}
    for key in list(parent):
        members.setdefault(find(key), set()).add(key)
    fork_words = [(m.key, content_words(m.content)) for m in after.values()]
    drafts = []
    for root, keys in groups.items():
        sources = [before[k] for k in keys if k in before]
        results = [after[k] for k in keys if k in after and (k not in before or k in changed)]
        everything = members.get(root, set()) | set(keys)
        made = [c for c, ks in zip(calls, call_keys, strict=True) if ks & everything]
        by = {m.key: superseded[m.key] for m in sources if m.key in superseded}
        superseding = not results and sources and len(by) == len(sources)
        drafts.append(_Draft(
            "supersede" if superseding else _kind(sources, results), sources, results,
            tuple(dict.fromkeys(c["reason"] for c in made if c.get("reason"))),
            tuple(ReviewedCall(c["episode"], c["tool"], c["args"]) for c in made),
            # A superseded memory is history kept on purpose (a superseded row naming the newer one), not lost.
            Coverage(False, {}, {}, by) if superseding else _coverage(sources, results, fork_words),
        ))
    changes = _assess(bank, fork, drafts, before, after, judge)
    order = {kind: i for i, kind in enumerate(CHANGE_KINDS)}
    changes.sort(key=lambda c: (order[c.kind], (c.sources or c.results)[0].key))
    changes = [replace(change, id=f"c{number:04d}") for number, change in enumerate(changes, 1)]
    counts = ReviewCounts(
        len(before), len(after), {kind: sum(c.kind == kind for c in changes) for kind in CHANGE_KINDS},
        flagged=sum(c.coverage.flagged for c in changes), unrelated=sum(c.alike.unrelated for c in changes),
        unsupported=sum(bool(c.unsupported) for c in changes), flags=sum(bool(c.flags) for c in changes),
    )
    return Review(bank.path, fork.path, counts, qa, tuple(changes))


def replaced_by(changes: Iterable[Change]) -> dict[str, dict[str, Any]]:
    """For each bank key the changes replace: the keys replacing it and why (what an apply keeps, as the
    change log stores it)."""
    out = {}
    for change in changes:
        why = "; ".join(change.reasons) or f"{change.kind} by the policy"
        newer = change.coverage.superseded_by or {}
        for source in change.sources:
            by = [newer[source.key]] if source.key in newer else [r.key for r in change.results]
            out[source.key] = {"by": by, "reason": why, "change": change.id}
    return out


@dataclass(frozen=True)
class _Draft:
    """A change before `_assess` adds what coverage cannot see, and before it is numbered."""

    kind: str
    sources: list[MemoryRecord]
    results: list[MemoryRecord]
    reasons: tuple[str, ...]
    tools: tuple[ReviewedCall, ...]
    coverage: Coverage


def _newer(coverage: Coverage, before: dict[str, MemoryRecord], after: dict[str, MemoryRecord]) -> tuple[ReviewedMemory, ...] | None:
    """The memories a supersession names newer as they are now: `history` and `review` show what superseded
    what, even after those memories change (None: the change supersedes nothing)."""
    named = dict.fromkeys((coverage.superseded_by or {}).values())
    if not named:
        return None
    return tuple(_memory(after.get(k) or before[k]) for k in named if k in after or k in before)


def _call_keys(call: dict[str, Any]) -> list[str]:
    args = call.get("args") or {}
    keys = [k for k in [args.get("memory_id"), *(args.get("memory_ids") or [])] if isinstance(k, str)]
    return keys + _HANDLE.findall(call.get("result") or "")


def _kind(sources: Sequence[MemoryRecord], results: Sequence[MemoryRecord]) -> str:
    n, m = len(sources), len(results)
    if n == 0:
        return "create"
    if m == 0:
        return "delete"
    if n == 1 and m == 1:
        return "update" if sources[0].key == results[0].key else "rewrite"
    if m == 1:
        return "merge"
    if n == 1:
        return "split"
    return "rewrite"


def _memory(memory: MemoryRecord) -> ReviewedMemory:
    meta = memory.metadata
    origin = meta.get("imported_from") or {}
    return ReviewedMemory(
        memory.key, memory.content, memory.kind,
        meta.get("date") or ("..".join([meta["dates"][0], meta["dates"][-1]]) if meta.get("dates") else None),
        origin.get("key"), stated_time(memory),
    )


def _coverage(sources: Sequence[MemoryRecord], results: Sequence[MemoryRecord], fork_words: list[tuple[str, set[str]]]) -> Coverage:
    kept = set().union(*(content_words(r.content) for r in results)) if results else set()
    missing: dict[str, tuple[str, ...]] = {}
    covered_by: dict[str, str] = {}
    for source in sources:
        if results:
            lost = content_words(source.content) - kept
            resolved = content_words(_anchored(source)) - content_words(source.content)
            if lost and resolved and resolved <= kept:  # the results hold the date its relative time means
                lost -= content_words(" ".join(m.group(0) for m in TIME_EXPRESSION.finditer(source.content)))
            if lost:
                missing[source.key] = tuple(sorted(lost))
            continue
        words = content_words(source.content)
        holder = next((key for key, bag in fork_words if words and words <= bag), None)
        if holder is None:
            missing[source.key] = tuple(sorted(words))
        else:
            covered_by[source.key] = holder
    return Coverage(bool(missing), missing, covered_by)


def _assess(
    bank: MemoryStore, fork: MemoryStore, drafts: list[_Draft], before: dict[str, MemoryRecord],
    after: dict[str, MemoryRecord], judge: RelationJudge | None,
) -> list[Change]:
    """Each draft as a change, with what coverage cannot see: whether its sources are alike (`alike`: the
    least cosine similarity of any two sources, the content words they all share, `unrelated` when the
    similarity is under UNRELATED_BELOW or they share no word), the words its results hold that no
    source does (`unsupported`, dates its sources' relative time resolves to excepted), how the judge
    (if any) reads its statements (`facts`), and `flags`: a supersession by a dissimilar memory, or one change
    retiring a large share of the bank (a wipe dressed as updates)."""
    several = [m.key for d in drafts if len(d.sources) > 1 for m in d.sources]
    named = [k for d in drafts for k in (d.coverage.superseded_by or {}).values()]
    stale = [k for d in drafts for k in (d.coverage.superseded_by or {})]
    vectors = bank.vectors_of(sorted(set(several) | set(named) | set(stale)))
    vectors |= {k: v for k, v in fork.vectors_of(sorted(set(named) - set(vectors))).items()}
    retired = len(stale)
    by_newer: dict[str, int] = {}
    for key in named:
        by_newer[key] = by_newer.get(key, 0) + 1
    changes = []
    for d in drafts:
        facts = _facts(d, before, after, judge, vectors) if judge is not None else None
        allowed = set().union(*(content_words(_anchored(m)) | content_words(m.content) for m in d.sources)) if d.sources else set()
        changes.append(Change(
            "", d.kind, tuple(_memory(m) for m in d.sources), tuple(_memory(m) for m in d.results), d.reasons, d.tools,
            d.coverage, _newer(d.coverage, before, after), _alike(d.sources, vectors), facts,
            tuple(sorted(set().union(*(content_words(r.content) for r in d.results)) - allowed)) if d.sources else (),
            _flags(d, facts, len(before), retired, by_newer),
        ))
    return changes


def _flags(draft: _Draft, facts: JudgeReading | None, bank_size: int, retired: int, by_newer: dict[str, int]) -> tuple[str, ...]:
    """A supersession's review flags: the compaction retires a large share of the bank, one memory
    supersedes many, or the two statements are hardly alike."""
    flags = []
    if draft.kind == "supersede":
        if retired >= WIPE_MIN and retired > WIPE_SHARE * bank_size:
            flags.append(f"this compaction retires {retired} of {bank_size} memories")
        crowded = max((by_newer.get(k, 0) for k in (draft.coverage.superseded_by or {}).values()), default=0)
        if crowded >= WIPE_MIN:
            flags.append(f"one memory supersedes {crowded} others")
        pairs = facts.pairs if facts else ()
        least = min((p.similarity for p in pairs if isinstance(p, SupersededPair) and p.similarity is not None), default=None)
        if least is not None and least < DISSIMILAR_BELOW:
            flags.append(f"superseded by a dissimilar memory (similarity {least} < {DISSIMILAR_BELOW})")
    return tuple(flags)


def _facts(
    draft: _Draft, before: dict[str, MemoryRecord], after: dict[str, MemoryRecord], judge: RelationJudge,
    vectors: dict[str, Any],
) -> JudgeReading | None:
    """How the relation judge reads the statements a change joins or retires: for a merge, the pairs of
    its sources; for a supersession, each stale memory and the memory named newer (the judge's relation,
    its confidence, whether the newer is the one it reads as current, and how alike the two are).
    `clear` only when the judge's decision (`judge.decision.AutoApply.act`) applies every pair's update
    by itself, the newer stated later and current (a supersession), or no pair is an update or two events
    (a merge): what the safety rule lets apply itself. `duplicates`: a merge whose every pair the decision
    would merge by itself (one fact told twice)."""
    auto = judge.auto_apply
    name = getattr(judge, "name", "judge")
    sources = draft.sources
    if draft.kind == "supersede":
        named = draft.coverage.superseded_by or {}
        pairs = [(m, after.get(named[m.key]) or before.get(named[m.key])) for m in sources]
        known = [(m, n) for m, n in pairs if n is not None]
        verdicts = dict(zip([m.key for m, _ in known], judge_memories(judge, known), strict=True))
        read, applies = [], []
        for m, n in pairs:
            verdict = verdicts.get(m.key)
            read.append(SupersededPair(
                m.key, n.key if n else named[m.key],
                verdict.relation if verdict else None,
                round(verdict.confidence, 3) if verdict else None,
                is_newer(n, m) if n else None,
                bool(verdict and verdict.current == "second"),
                _similarity(vectors, m.key, n.key) if n else None,
            ))
            applies.append(verdict is not None and verdict.relation == "update" and auto.act(verdict) == "apply")
        clear = all(ok and r.stated_later and r.newer_current for ok, r in zip(applies, read, strict=True))
        shown = min((auto.threshold(v) for v in verdicts.values() if v.relation == "update"), default=auto.update)
        return JudgeReading(name, round(shown, 4), tuple(read), clear)
    if draft.kind == "merge":
        both = [(a, b) for i, a in enumerate(sources) for b in sources[i + 1 :]]
        verdicts = judge_memories(judge, both)
        merged = tuple(MergedPair(a.key, b.key, v.relation, round(v.confidence, 3)) for (a, b), v in zip(both, verdicts, strict=True))
        return JudgeReading(name, round(auto.duplicate, 4), merged, not any(r.relation in ("update", "events") for r in merged),
                            duplicates=bool(verdicts) and all(v.relation == "duplicate" and auto.act(v) == "apply" for v in verdicts))
    return None


def _similarity(vectors: dict[str, Any], a: str, b: str) -> float | None:
    if a not in vectors or b not in vectors:
        return None
    u, v = vectors[a], vectors[b]
    return round(float(u @ v / max(float(np.linalg.norm(u) * np.linalg.norm(v)), 1e-12)), 3)


def _alike(sources: Sequence[MemoryRecord], vectors: dict[str, Any]) -> Alike:
    if len(sources) < 2:
        return Alike(None, (), False)
    shared = tuple(sorted(set.intersection(*(content_words(m.content) for m in sources))))
    unit = [v / max(float(np.linalg.norm(v)), 1e-12) for m in sources if (v := vectors.get(m.key)) is not None]
    least = min((float(a @ b) for i, a in enumerate(unit) for b in unit[i + 1 :]), default=None)
    unrelated = (least is not None and least < UNRELATED_BELOW) or not shared
    return Alike(None if least is None else round(least, 3), shared, unrelated)


def _anchored(memory: MemoryRecord) -> str:
    value = memory.metadata.get("date")
    try:
        day = date.fromisoformat(value) if value else None
    except (TypeError, ValueError):
        day = None
    return anchor_relative_dates(memory.content, day) if day else memory.content
