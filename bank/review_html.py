"""The review as one static HTML page (inline CSS, no script, no network): a compaction's review, or the
review queue's pending changes across banks, drawn with the same cards.

    from memupdate.bank.review_html import render_html, render_queue_html
    Path("review.html").write_text(render_html(review))       # a Review (`bank.review.build_review`)
    Path("queue.html").write_text(render_queue_html(queued))  # QueuedReviews (`bank.review_queue.pending`)

Each card shows a change's sources beside its results, its reasons, what coverage finds (the lost words
marked where they stand), and what coverage cannot see: unrelated sources, words no source holds, how
the relation judge reads it and the review's flags.
"""

from __future__ import annotations

import html
import re
from collections.abc import Sequence

from memupdate.bank.review import UNRELATED_BELOW
from memupdate.bank.review_records import CHANGE_KINDS, Change, QueuedReview, Review, ReviewedMemory

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


def render_html(review: Review) -> str:
    """One static HTML page (inline CSS, no script, no network): counts at the top, changes grouped by
    kind, each with its sources beside its results, the reasons, and the coverage flag."""
    counts = review.counts
    esc = html.escape
    parts = [
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>",
        f"<title>memupdate review: {esc(review.bank)}</title><style>{_STYLE}</style></head><body>",
        f"<header><h1>Review of {esc(review.bank)}</h1><p>fork {esc(review.fork)}"
        f"{' · change ' + esc(str(review.change_id)) if review.change_id else ''}"
        f"{' · policy ' + esc(review.policy) if review.policy else ''} · nothing is applied until you run "
        f"<code>memupdate compact {esc(review.bank)} --apply</code></p></header>",
        "<section class='counts' id='counts'>",
        _count("memories", f"{counts.memories_before} → {counts.memories_after}", "memories"),
    ]
    present = [kind for kind in CHANGE_KINDS if counts.kinds.get(kind)]
    parts += [_count(kind + "s", str(counts.kinds[kind]), kind) for kind in present]
    parts.append(_count("coverage flags", str(counts.flagged), "flagged", flag=counts.flagged > 0))
    qa = review.qa
    if qa:
        parts.append(_count(f"QA proxy ({qa['questions']} questions)", f"{qa['before']:.3f} → {qa['after']:.3f}", "qa"))
    parts.append("</section><main>")
    if present:
        parts.append("<nav>" + "".join(f"<a href='#{k}'>{k}s ({counts.kinds[k]})</a>" for k in present) + "</nav>")
    else:
        parts.append("<p id='no-changes'>The policy changed nothing.</p>")
    for kind in present:
        parts.append(f"<section id='{kind}' class='group'><h2>{kind.capitalize()}s ({counts.kinds[kind]})</h2>")
        parts += [_change(change) for change in review.changes if change.kind == kind]
        parts.append("</section>")
    parts.append("</main></body></html>\n")
    return "".join(parts)


def render_queue_html(queued: Sequence[QueuedReview]) -> str:
    """The review queue as one static page: every pending change across banks (with its bank, change id
    and the reasons it is `held`), grouped by bank, with the command that accepts or rejects it."""
    esc = html.escape
    banks = sorted({q.bank for q in queued})
    parts = [
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>",
        f"<title>memupdate review queue</title><style>{_STYLE}</style></head><body>",
        f"<header><h1>Review queue</h1><p>{len(queued)} pending changes across {len(banks)} banks · accept one with "
        "<code>memupdate review --accept ID</code>, reject it with <code>memupdate review --reject ID</code></p></header>",
        "<section class='counts' id='counts'>",
        _count("pending changes", str(len(queued)), "pending"),
        _count("banks", str(len(banks)), "banks"),
        _count("unrelated sources", str(sum(q.change.alike.unrelated for q in queued)), "unrelated"),
        _count("coverage flags", str(sum(q.change.coverage.flagged for q in queued)), "flagged"),
        "</section><main>",
    ]
    if not queued:
        parts.append("<p id='no-changes'>Nothing waits for review.</p>")
    for bank in banks:
        parts.append(f"<section class='group' data-bank='{esc(bank)}'><h2>{esc(bank)}</h2>")
        parts += [_change(q.change, q) for q in queued if q.bank == bank]
        parts.append("</section>")
    parts.append("</main></body></html>\n")
    return "".join(parts)


def _count(label: str, value: str, name: str, *, flag: bool = False) -> str:
    return f"<div class='count{' flag' if flag else ''}' data-count='{name}'><b>{html.escape(value)}</b><span>{html.escape(label)}</span></div>"


def _change(change: Change, queued: QueuedReview | None = None) -> str:
    """A change's card; a queued one names its bank, its change id and its status."""
    esc = html.escape
    coverage = change.coverage
    sources = "".join(_memory_html(m, coverage.missing.get(m.key, ())) for m in change.sources) or "<div class='memory none'>nothing (new)</div>"
    results = "".join(_memory_html(m, ()) for m in change.results) or "<div class='memory none'>nothing (removed)</div>"
    reasons = "".join(f"<p class='reason'><b>why:</b> {esc(r)}</p>" for r in change.reasons) or "<p class='reason'><b>why:</b> no reason recorded</p>"
    if coverage.flagged:
        lost = "; ".join(f"[{esc(k)}] {esc(', '.join(words))}" for k, words in coverage.missing.items())
        note = f"<p class='coverage'>⚠ coverage: words in no result: {lost}</p>"
    elif coverage.superseded_by:
        newer = {m.key: m for m in change.newer or ()}  # its text and time, where the review kept them
        held = ", ".join(f"[{esc(k)}] by the newer [{esc(v)}]" + (
            f" {esc(newer[v].content or '')} (stated {esc(str(newer[v].stated_at or 'at an unknown time'))})" if v in newer else "")
            for k, v in coverage.superseded_by.items())
        note = f"<p class='coverage ok'>superseded (kept as history): {held}</p>"
    elif coverage.covered_by:
        held = ", ".join(f"[{esc(k)}] in [{esc(v)}]" for k, v in coverage.covered_by.items())
        note = f"<p class='coverage ok'>covered elsewhere: {held}</p>"
    else:
        note = "<p class='coverage ok'>every content word kept</p>"
    note += _likeness_html(change, queued.held if queued else ())
    flagged = coverage.flagged or change.alike.unrelated or bool(change.unsupported)
    keys = " ".join(m.key for m in change.sources)
    made = " ".join(m.key for m in change.results)
    shown_id = str(queued.change_id) if queued else change.id
    title = f"{queued.bank} · " if queued and queued.bank else ""
    status = f" · <span class='status'>{esc(queued.status)}</span>" if queued and queued.status else ""
    return (
        f"<article class='change{' flagged' if flagged else ''}' id='{esc(shown_id)}' data-kind='{change.kind}' "
        f"data-sources='{esc(keys)}' data-results='{esc(made)}' data-flagged='{str(coverage.flagged).lower()}' "
        f"data-unrelated='{str(change.alike.unrelated).lower()}'>"
        f"<h3>{esc(title)}{esc(shown_id)} · {change.kind} · {len(change.sources)} → {len(change.results)}{status}</h3>"
        f"<div class='cols'><div class='sources'>{sources}</div><div class='arrow'>→</div><div class='results'>{results}</div></div>"
        f"{reasons}{note}</article>"
    )


def _likeness_html(change: Change, held: Sequence[str]) -> str:
    """The flags coverage cannot raise: sources that are not alike, words no source holds, how the judge
    reads the change's statements and the review's flags; for a queued change, why it waits."""
    esc = html.escape
    notes = ""
    alike = change.alike
    if alike.unrelated:
        shared = ", ".join(alike.shared_words) or "none"
        notes += (f"<p class='coverage unrelated'>⚠ sources not alike: least similarity {esc(str(alike.min_similarity))} "
                  f"(under {UNRELATED_BELOW}), words they all share: {esc(shared)}</p>")
    if change.unsupported:
        notes += f"<p class='coverage unsupported'>⚠ words no source holds: {esc(', '.join(change.unsupported))}</p>"
    facts = change.facts
    if facts and facts.pairs:
        read = ", ".join(f"{p.relation} ({p.confidence})" for p in facts.pairs)
        notes += f"<p class='reason'><b>the judge ({esc(str(facts.judge))}) reads:</b> {esc(read)}; applies itself at {facts.threshold}</p>"
    for flag in change.flags:
        notes += f"<p class='coverage flag'>⚠ {esc(flag)}</p>"
    if held:
        notes += f"<p class='reason'><b>waiting for review:</b> {esc('; '.join(held))}</p>"
    return notes


def _memory_html(memory: ReviewedMemory, missing: Sequence[str]) -> str:
    esc = html.escape
    text = esc(memory.content or "")
    for word in missing:  # mark the lost words where they stand
        text = re.sub(rf"(?i)\b({re.escape(esc(word))})\b", r"<mark>\1</mark>", text)
    date_html = f"<span class='date'>{esc(memory.date)}</span>" if memory.date else ""
    return f"<div class='memory' data-key='{esc(memory.key)}'><span class='key'>[{esc(memory.key)}]</span>{date_html}<div class='text'>{text}</div></div>"
