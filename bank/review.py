"""The review of a compaction: what the fork would change in the bank, change by change, before anything does.

    from memupdate.bank.review import build_review, render_html
    review = build_review(bank, fork, calls, qa={"questions": 40, "before": 0.41, "after": 0.44})
    review["counts"]          # {"memories_before": 412, "memories_after": 371, "merge": 30, ..., "flagged": 2}
    review["changes"][0]      # {"id": "c001", "kind": "merge", "sources": [...], "results": [...],
                              #  "reasons": [...], "coverage": {"flagged": False, "missing": {}}}
    Path("review.html").write_text(render_html(review))    # one static page, no script, opens offline

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
results no source holds (`unsupported`). Each supersession and merge carries how the relation judge
reads its statements (`facts`: relation, confidence, the judge's threshold, whether the newer is
current), and `flags` name what a person should look at: a supersession by a dissimilar memory, one
memory superseding many, a compaction retiring most of the bank. `render_queue_html` draws the
review queue (pending changes across banks, `memupdate review`) with the same cards.
"""

from __future__ import annotations

import html
import re
from collections.abc import Sequence
from datetime import date
from typing import Any

import numpy as np

from memupdate.bank.supersessions import stated_time
from memupdate.judge import RelationJudge, judge_memories
from memupdate.store import KEY_PATTERN, MemoryRecord, MemoryStore
from memupdate.text.dates import TIME_EXPRESSION, anchor_relative_dates
from memupdate.text.facts import is_newer
from memupdate.text.strategies import content_words

CHANGE_KINDS = ("merge", "split", "update", "supersede", "delete", "create", "rewrite")
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
) -> dict[str, Any]:
    """The diff of `fork` against `bank` grouped into changes, with reasons, coverage, flags and counts;
    `judge` reads the statements each supersession or merge relates (None: the configured judge)."""
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
    changes = []
    for root, keys in groups.items():
        sources = [before[k] for k in keys if k in before]
        results = [after[k] for k in keys if k in after and (k not in before or k in changed)]
        everything = members.get(root, set()) | set(keys)
        reasons = list(dict.fromkeys(c["reason"] for c, ks in zip(calls, call_keys, strict=True) if ks & everything and c.get("reason")))
        tools = [{"episode": c["episode"], "tool": c["tool"], "args": c["args"]} for c, ks in zip(calls, call_keys, strict=True) if ks & everything]
        by = {m.key: superseded[m.key] for m in sources if m.key in superseded}
        superseding = not results and sources and len(by) == len(sources)
        changes.append({
            "kind": "supersede" if superseding else _kind(sources, results),
            "sources": [_memory(m) for m in sources],
            "results": [_memory(m) for m in results],
            "reasons": reasons,
            "tools": tools,
            # A superseded memory is history kept on purpose (a superseded row naming the newer one), not lost.
            "coverage": {"flagged": False, "missing": {}, "covered_by": {}, "superseded_by": by} if superseding
            else _coverage(sources, results, fork_words),
        })
    _name_newer(changes, before, after)
    _assess(bank, fork, changes, before, after, judge)
    order = {kind: i for i, kind in enumerate(CHANGE_KINDS)}
    changes.sort(key=lambda c: (order[c["kind"]], (c["sources"] or c["results"])[0]["key"]))
    for number, change in enumerate(changes, 1):
        change["id"] = f"c{number:04d}"
    counts: dict[str, Any] = {"memories_before": len(before), "memories_after": len(after)}
    counts |= {kind: sum(c["kind"] == kind for c in changes) for kind in CHANGE_KINDS}
    counts["flagged"] = sum(c["coverage"]["flagged"] for c in changes)
    counts["unrelated"] = sum(c["alike"]["unrelated"] for c in changes)
    counts["unsupported"] = sum(bool(c["unsupported"]) for c in changes)
    counts["flags"] = sum(bool(c["flags"]) for c in changes)
    return {"bank": bank.path, "fork": fork.path, "counts": counts, "qa": qa, "changes": changes}


def replaced_by(review: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """For each bank key the review's changes replace: the keys replacing it and why (what an apply keeps)."""
    out = {}
    for change in review["changes"]:
        why = "; ".join(change["reasons"]) or f"{change['kind']} by the policy"
        newer = change["coverage"].get("superseded_by") or {}
        for source in change["sources"]:
            by = [newer[source["key"]]] if source["key"] in newer else [r["key"] for r in change["results"]]
            out[source["key"]] = {"by": by, "reason": why, "change": change["id"]}
    return out


def _name_newer(changes: list[dict[str, Any]], before: dict[str, MemoryRecord], after: dict[str, MemoryRecord]) -> None:
    """Keep with each supersession the memories named newer as they are now: `history` and `review` show
    what superseded what, even after those memories change."""
    for change in changes:
        named = dict.fromkeys((change["coverage"].get("superseded_by") or {}).values())
        if named:
            change["newer"] = [_memory(after.get(k) or before[k]) for k in named if k in after or k in before]


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


def _memory(memory: MemoryRecord) -> dict[str, Any]:
    meta = memory.metadata
    origin = meta.get("imported_from") or {}
    return {
        "key": memory.key,
        "content": memory.content,
        "kind": memory.kind,
        "date": meta.get("date") or ("..".join([meta["dates"][0], meta["dates"][-1]]) if meta.get("dates") else None),
        "source_key": origin.get("key"),
        "stated_at": stated_time(memory),
    }


def _coverage(sources: Sequence[MemoryRecord], results: Sequence[MemoryRecord], fork_words: list[tuple[str, set[str]]]) -> dict[str, Any]:
    kept = set().union(*(content_words(r.content) for r in results)) if results else set()
    missing: dict[str, list[str]] = {}
    covered_by: dict[str, str] = {}
    for source in sources:
        if results:
            lost = content_words(source.content) - kept
            resolved = content_words(_anchored(source)) - content_words(source.content)
            if lost and resolved and resolved <= kept:  # the results hold the date its relative time means
                lost -= content_words(" ".join(m.group(0) for m in TIME_EXPRESSION.finditer(source.content)))
            if lost:
                missing[source.key] = sorted(lost)
            continue
        words = content_words(source.content)
        holder = next((key for key, bag in fork_words if words and words <= bag), None)
        if holder is None:
            missing[source.key] = sorted(words)
        else:
            covered_by[source.key] = holder
    return {"flagged": bool(missing), "missing": missing, "covered_by": covered_by}


def _assess(
    bank: MemoryStore, fork: MemoryStore, changes: list[dict[str, Any]], before: dict[str, MemoryRecord],
    after: dict[str, MemoryRecord], judge: RelationJudge | None,
) -> None:
    """Add to each change what coverage cannot see: whether its sources are alike (`alike`: the least
    cosine similarity of any two sources, the content words they all share, `unrelated` when the
    similarity is under UNRELATED_BELOW or they share no word), the words its results hold that no
    source does (`unsupported`, dates its sources' relative time resolves to excepted), how the judge
    reads its statements (`facts`), and `flags`: a supersession by a dissimilar memory, or one change
    retiring a large share of the bank (a wipe dressed as updates)."""
    several = [k["key"] for c in changes if len(c["sources"]) > 1 for k in c["sources"]]
    named = [k for c in changes for k in (c["coverage"].get("superseded_by") or {}).values()]
    stale = [k for c in changes if c["coverage"].get("superseded_by") for k in c["coverage"]["superseded_by"]]
    vectors = bank.vectors_of(sorted(set(several) | set(named) | set(stale)))
    vectors |= {k: v for k, v in fork.vectors_of(sorted(set(named) - set(vectors))).items()}
    if judge is None and any(c["kind"] in ("supersede", "merge") for c in changes):
        from memupdate.judge.judges import make_judge

        judge = make_judge()
    retired = len(stale)
    by_newer: dict[str, int] = {}
    for key in named:
        by_newer[key] = by_newer.get(key, 0) + 1
    for change in changes:
        sources = [before[s["key"]] for s in change["sources"]]
        results = [after[r["key"]] for r in change["results"]]
        change["alike"] = _alike(sources, vectors)
        change["facts"] = _facts(sources, change, before, after, judge, vectors) if judge is not None else None
        allowed = set().union(*(content_words(_anchored(m)) | content_words(m.content) for m in sources)) if sources else set()
        change["unsupported"] = sorted(set().union(*(content_words(r.content) for r in results)) - allowed) if sources else []
        change["flags"] = _flags(change, len(before), retired, by_newer)


def _flags(change: dict[str, Any], bank_size: int, retired: int, by_newer: dict[str, int]) -> list[str]:
    """A supersession's review flags: the compaction retires a large share of the bank, one memory
    supersedes many, or the two statements are hardly alike."""
    flags = []
    if change["kind"] == "supersede":
        if retired >= WIPE_MIN and retired > WIPE_SHARE * bank_size:
            flags.append(f"this compaction retires {retired} of {bank_size} memories")
        crowded = max((by_newer.get(k, 0) for k in (change["coverage"].get("superseded_by") or {}).values()), default=0)
        if crowded >= WIPE_MIN:
            flags.append(f"one memory supersedes {crowded} others")
        facts = change.get("facts") or {}
        least = min((p["similarity"] for p in facts.get("pairs", []) if p.get("similarity") is not None), default=None)
        if least is not None and least < DISSIMILAR_BELOW:
            flags.append(f"superseded by a dissimilar memory (similarity {least} < {DISSIMILAR_BELOW})")
    return flags


def _facts(
    sources: Sequence[MemoryRecord], change: dict[str, Any], before: dict[str, MemoryRecord], after: dict[str, MemoryRecord],
    judge: RelationJudge, vectors: dict[str, Any],
) -> dict[str, Any] | None:
    """How the relation judge reads the statements a change joins or retires: for a merge, the pairs of
    its sources; for a supersession, each stale memory and the memory named newer (the judge's relation,
    its confidence, whether the newer is the one it reads as current, and how alike the two are).
    `clear` only when every pair is an update read confidently (at least the judge's `threshold`) with
    the newer current (a supersession), or none is an update or two events (a merge): what the safety
    rule lets apply itself. `duplicates`: a merge whose every pair the judge confidently reads as one fact."""
    threshold = getattr(judge, "threshold", 1.0)
    if change["kind"] == "supersede":
        named = change["coverage"]["superseded_by"]
        pairs = [(m, after.get(named[m.key]) or before.get(named[m.key])) for m in sources]
        known = [(m, n) for m, n in pairs if n is not None]
        verdicts = dict(zip([m.key for m, _ in known], judge_memories(judge, known), strict=True))
        read = []
        for m, n in pairs:
            verdict = verdicts.get(m.key)
            read.append({
                "stale": m.key, "newer": n.key if n else named[m.key],
                "relation": verdict.relation if verdict else None,
                "confidence": round(verdict.confidence, 3) if verdict else None,
                "stated_later": is_newer(n, m) if n else None,
                "newer_current": bool(verdict and verdict.current == "second"),
                "similarity": _similarity(vectors, m.key, n.key) if n else None,
            })
        clear = all(r["relation"] == "update" and r["stated_later"] and r["newer_current"] and r["confidence"] >= threshold
                    for r in read)
        return {"judge": getattr(judge, "name", "judge"), "threshold": threshold, "pairs": read, "clear": clear}
    if change["kind"] == "merge":
        both = [(a, b) for i, a in enumerate(sources) for b in sources[i + 1 :]]
        read = [{"a": a.key, "b": b.key, "relation": v.relation, "confidence": round(v.confidence, 3)}
                for (a, b), v in zip(both, judge_memories(judge, both), strict=True)]
        return {"judge": getattr(judge, "name", "judge"), "threshold": threshold, "pairs": read,
                "clear": not any(r["relation"] in ("update", "events") for r in read),
                "duplicates": bool(read) and all(r["relation"] == "duplicate" and r["confidence"] >= threshold for r in read)}
    return None


def _similarity(vectors: dict[str, Any], a: str, b: str) -> float | None:
    if a not in vectors or b not in vectors:
        return None
    u, v = vectors[a], vectors[b]
    return round(float(u @ v / max(float(np.linalg.norm(u) * np.linalg.norm(v)), 1e-12)), 3)


def _alike(sources: Sequence[MemoryRecord], vectors: dict[str, Any]) -> dict[str, Any]:
    if len(sources) < 2:
        return {"min_similarity": None, "shared_words": [], "unrelated": False}
    shared = sorted(set.intersection(*(content_words(m.content) for m in sources)))
    unit = [v / max(float(np.linalg.norm(v)), 1e-12) for m in sources if (v := vectors.get(m.key)) is not None]
    least = min((float(a @ b) for i, a in enumerate(unit) for b in unit[i + 1 :]), default=None)
    unrelated = (least is not None and least < UNRELATED_BELOW) or not shared
    return {"min_similarity": None if least is None else round(least, 3), "shared_words": shared, "unrelated": unrelated}


def _anchored(memory: MemoryRecord) -> str:
    value = memory.metadata.get("date")
    try:
        day = date.fromisoformat(value) if value else None
    except (TypeError, ValueError):
        day = None
    return anchor_relative_dates(memory.content, day) if day else memory.content


# -- the page ------------------------------------------------------------------------------------------

_STYLE = """
body{font:15px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;margin:0;background:#f6f7f9;color:#1d2330}
header{background:#1d2330;color:#fff;padding:18px 28px}header h1{margin:0 0 4px;font-size:20px}
header p{margin:0;color:#c9cfdb;font-size:13px}
.counts{display:flex;flex-wrap:wrap;gap:10px;padding:16px 28px}
.count{background:#fff;border:1px solid #dde1e8;border-radius:8px;padding:8px 14px;min-width:84px}
.count b{display:block;font-size:22px}.count span{font-size:12px;color:#5b6474;text-transform:uppercase}
.count.flag b{color:#b3261e}
main{padding:0 28px 40px}h2{margin:26px 0 10px;font-size:17px}
nav a{margin-right:12px;color:#2456c7}
.change{background:#fff;border:1px solid #dde1e8;border-radius:8px;margin:10px 0;padding:12px 14px}
.change.flagged{border-left:5px solid #b3261e}
.change h3{margin:0 0 8px;font-size:14px;color:#5b6474;font-weight:600}
.cols{display:grid;grid-template-columns:1fr 28px 1fr;gap:8px;align-items:start}
.arrow{text-align:center;color:#8a93a3;font-size:20px;padding-top:6px}
.memory{background:#f1f3f6;border-radius:6px;padding:6px 9px;margin:0 0 6px}
.results .memory{background:#eaf4ec}.memory.none{color:#8a93a3;font-style:italic;background:none}
.key{font:12px ui-monospace,monospace;color:#5b6474}.date{font-size:12px;color:#5b6474;margin-left:6px}
.reason{margin:8px 0 0;font-size:13px;color:#3a4252}.reason b{color:#1d2330}
.coverage{margin:6px 0 0;font-size:13px;color:#b3261e}.coverage.ok{color:#2e7d32}
mark{background:#ffd9d6;color:inherit;border-radius:3px;padding:0 2px}
"""


def render_html(review: dict[str, Any]) -> str:
    """One static HTML page (inline CSS, no script, no network): counts at the top, changes grouped by
    kind, each with its sources beside its results, the reasons, and the coverage flag."""
    counts = review["counts"]
    esc = html.escape
    parts = [
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>",
        f"<title>memupdate review: {esc(review['bank'])}</title><style>{_STYLE}</style></head><body>",
        f"<header><h1>Review of {esc(review['bank'])}</h1><p>fork {esc(review['fork'])}"
        f"{' · change ' + esc(str(review['change_id'])) if review.get('change_id') else ''}"
        f"{' · policy ' + esc(review['policy']) if review.get('policy') else ''} · nothing is applied until you run "
        f"<code>memupdate compact {esc(review['bank'])} --apply</code></p></header>",
        "<section class='counts' id='counts'>",
        _count("memories", f"{counts['memories_before']} → {counts['memories_after']}", "memories"),
    ]
    parts += [_count(kind + "s", str(counts[kind]), kind) for kind in CHANGE_KINDS if counts.get(kind)]
    parts.append(_count("coverage flags", str(counts["flagged"]), "flagged", flag=counts["flagged"] > 0))
    qa = review.get("qa")
    if qa:
        parts.append(_count(f"QA proxy ({qa['questions']} questions)", f"{qa['before']:.3f} → {qa['after']:.3f}", "qa"))
    parts.append("</section><main>")
    present = [kind for kind in CHANGE_KINDS if counts.get(kind)]
    if present:
        parts.append("<nav>" + "".join(f"<a href='#{k}'>{k}s ({counts[k]})</a>" for k in present) + "</nav>")
    else:
        parts.append("<p id='no-changes'>The policy changed nothing.</p>")
    for kind in present:
        parts.append(f"<section id='{kind}' class='group'><h2>{kind.capitalize()}s ({counts[kind]})</h2>")
        parts += [_change(change) for change in review["changes"] if change["kind"] == kind]
        parts.append("</section>")
    parts.append("</main></body></html>\n")
    return "".join(parts)


def render_queue_html(queued: Sequence[dict[str, Any]]) -> str:
    """The review queue as one static page: every pending change across banks (each a change of
    `build_review` with its `bank`, change `id` and the reasons it was `held`), grouped by bank, with
    the command that accepts or rejects it."""
    esc = html.escape
    banks = sorted({c["bank"] for c in queued})
    parts = [
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>",
        f"<title>memupdate review queue</title><style>{_STYLE}</style></head><body>",
        f"<header><h1>Review queue</h1><p>{len(queued)} pending changes across {len(banks)} banks · accept one with "
        "<code>memupdate review --accept ID</code>, reject it with <code>memupdate review --reject ID</code></p></header>",
        "<section class='counts' id='counts'>",
        _count("pending changes", str(len(queued)), "pending"),
        _count("banks", str(len(banks)), "banks"),
        _count("unrelated sources", str(sum(bool((c.get("alike") or {}).get("unrelated")) for c in queued)), "unrelated"),
        _count("coverage flags", str(sum(c["coverage"]["flagged"] for c in queued)), "flagged"),
        "</section><main>",
    ]
    if not queued:
        parts.append("<p id='no-changes'>Nothing waits for review.</p>")
    for bank in banks:
        parts.append(f"<section class='group' data-bank='{esc(bank)}'><h2>{esc(bank)}</h2>")
        parts += [_change(c) for c in queued if c["bank"] == bank]
        parts.append("</section>")
    parts.append("</main></body></html>\n")
    return "".join(parts)


def _count(label: str, value: str, name: str, *, flag: bool = False) -> str:
    return f"<div class='count{' flag' if flag else ''}' data-count='{name}'><b>{html.escape(value)}</b><span>{html.escape(label)}</span></div>"


def _change(change: dict[str, Any]) -> str:
    esc = html.escape
    coverage = change["coverage"]
    sources = "".join(_memory_html(m, coverage["missing"].get(m["key"], [])) for m in change["sources"]) or "<div class='memory none'>nothing (new)</div>"
    results = "".join(_memory_html(m, []) for m in change["results"]) or "<div class='memory none'>nothing (removed)</div>"
    reasons = "".join(f"<p class='reason'><b>why:</b> {esc(r)}</p>" for r in change["reasons"]) or "<p class='reason'><b>why:</b> no reason recorded</p>"
    if coverage["flagged"]:
        lost = "; ".join(f"[{esc(k)}] {esc(', '.join(words))}" for k, words in coverage["missing"].items())
        note = f"<p class='coverage'>⚠ coverage: words in no result: {lost}</p>"
    elif coverage.get("superseded_by"):
        newer = {m["key"]: m for m in change.get("newer") or []}  # its text and time, where the review kept them
        held = ", ".join(f"[{esc(k)}] by the newer [{esc(v)}]" + (
            f" {esc(newer[v]['content'])} (stated {esc(str(newer[v].get('stated_at') or 'at an unknown time'))})" if v in newer else "")
            for k, v in coverage["superseded_by"].items())
        note = f"<p class='coverage ok'>superseded (kept as history): {held}</p>"
    elif coverage.get("covered_by"):
        held = ", ".join(f"[{esc(k)}] in [{esc(v)}]" for k, v in coverage["covered_by"].items())
        note = f"<p class='coverage ok'>covered elsewhere: {held}</p>"
    else:
        note = "<p class='coverage ok'>every content word kept</p>"
    note += _likeness_html(change)
    flagged = coverage["flagged"] or change.get("alike", {}).get("unrelated") or bool(change.get("unsupported"))
    keys = " ".join(m["key"] for m in change["sources"])
    made = " ".join(m["key"] for m in change["results"])
    title = f"{change.get('bank', '')} · " if change.get("bank") else ""
    status = f" · <span class='status'>{esc(change['status'])}</span>" if change.get("status") else ""
    return (
        f"<article class='change{' flagged' if flagged else ''}' id='{esc(str(change['id']))}' data-kind='{change['kind']}' "
        f"data-sources='{esc(keys)}' data-results='{esc(made)}' data-flagged='{str(coverage['flagged']).lower()}' "
        f"data-unrelated='{str(bool(change.get('alike', {}).get('unrelated'))).lower()}'>"
        f"<h3>{esc(title)}{esc(str(change['id']))} · {change['kind']} · {len(change['sources'])} → {len(change['results'])}{status}</h3>"
        f"<div class='cols'><div class='sources'>{sources}</div><div class='arrow'>→</div><div class='results'>{results}</div></div>"
        f"{reasons}{note}</article>"
    )


def _likeness_html(change: dict[str, Any]) -> str:
    """The flags coverage cannot raise: sources that are not alike, words no source holds, how the judge
    reads the change's statements and the review's flags."""
    esc = html.escape
    notes = ""
    alike = change.get("alike") or {}
    if alike.get("unrelated"):
        least = alike.get("min_similarity")
        shared = ", ".join(alike.get("shared_words") or []) or "none"
        notes += (f"<p class='coverage unrelated'>⚠ sources not alike: least similarity {esc(str(least))} "
                  f"(under {UNRELATED_BELOW}), words they all share: {esc(shared)}</p>")
    if change.get("unsupported"):
        notes += f"<p class='coverage unsupported'>⚠ words no source holds: {esc(', '.join(change['unsupported']))}</p>"
    facts = change.get("facts") or {}
    if facts.get("pairs"):
        read = ", ".join(f"{p['relation']} ({p['confidence']})" for p in facts["pairs"])
        notes += f"<p class='reason'><b>the judge ({esc(str(facts.get('judge')))}) reads:</b> {esc(read)}; applies itself at {facts.get('threshold')}</p>"
    for flag in change.get("flags") or []:
        notes += f"<p class='coverage flag'>⚠ {esc(flag)}</p>"
    if change.get("held"):
        notes += f"<p class='reason'><b>waiting for review:</b> {esc('; '.join(change['held']))}</p>"
    return notes


def _memory_html(memory: dict[str, Any], missing: Sequence[str]) -> str:
    esc = html.escape
    text = esc(memory["content"])
    for word in missing:  # mark the lost words where they stand
        text = re.sub(rf"(?i)\b({re.escape(esc(word))})\b", r"<mark>\1</mark>", text)
    date_html = f"<span class='date'>{esc(memory['date'])}</span>" if memory.get("date") else ""
    return f"<div class='memory' data-key='{esc(memory['key'])}'><span class='key'>[{esc(memory['key'])}]</span>{date_html}<div class='text'>{text}</div></div>"
