"""`memupdate demo`'s first part, what a user comes for: a bank compacted (dates fixed, duplicates merged,
changed facts superseded), reviewed on one HTML page, applied and undone, with the QA proxy before -> after.
The second part (in `evaluate.demo`) is the training task: one edit per question, the answer in hand.

Lines fit 80 columns: texts wrap at word boundaries, under their label.
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from memupdate.cli.common import check_output, console, plural

if TYPE_CHECKING:
    from memupdate.bank.review_records import Change

WIDTH = 78
# The kinds a reader of the demo looks for first, in this order, with what each is; one example of each.
SHOWN_KINDS = {
    "update": "update (a relative date fixed)", "merge": "merge (one fact told twice)",
    "supersede": "supersede (a fact that changed: the older kept as history)", "delete": "delete", "split": "split",
    "rewrite": "rewrite", "create": "create",
}
# What an app adds to a bank later, written into the demo's copy (the shipped sample stays as it is): a
# fact told again the same day, and one that changed. (Text of the sample's statement -> the new statement,
# said the same day or that many days later.)
LATER_STATEMENTS = (
    ("Owen gave a toast at Mara's wedding", "Owen gave a toast at Mara's wedding; Mara is honeymooning in Portugal for two weeks.", 0),
    ("Owen teaches chemistry at Harbor High", "Owen no longer teaches chemistry at Harbor High.", 9),
)


def say(text: str, indent: str = "", later: str | None = None) -> None:
    """One paragraph, wrapped at word boundaries to 80 columns (rich would break a long key mid-word)."""
    lines = textwrap.wrap(text, WIDTH, initial_indent=indent, subsequent_indent=later if later is not None else indent,
                          break_long_words=False, break_on_hyphens=False)
    console.print("\n".join(lines), highlight=False, markup=False, soft_wrap=True)


def show_compaction(store, conversation) -> None:
    """Compact a copy of the conversation's bank (`demo/<sample id>`), show what changed, apply it and undo it."""
    from memupdate.bank.change_log import apply_change, undo_change
    from memupdate.bank.review_records import CHANGE_KINDS
    from memupdate.cli.compact import default_neighbourhood, propose_compaction
    from memupdate.rl.data.ingest import ingest_conversation

    base = ingest_conversation(store, conversation)
    bank = store.scoped(("demo", conversation.sample_id))
    bank.drop()  # the last demo's copy: this one starts from the sample as shipped
    base.fork(bank.namespace)
    console.rule("1. the main job: compact a memory bank", style="bold")
    say(f"bank {bank.path}: the sample conversation's memories (a copy of {base.path}), and "
        f"{plural(add_later_statements(bank), 'statement')} an app wrote later, so {bank.count()} memories; "
        "the heuristic policy compacts it, blind to the questions")
    page_path = Path("out") / "demo-review.html"  # `make demo` runs in the checkout, where out/ is ignored by git
    check_output(page_path, "the review page", (".html",))
    change, page, done, review = propose_compaction(store, bank, "heuristic", {"seed": 0}, default_neighbourhood(),
                                                    (list(conversation.qa), None), page_path)
    counts = page.counts
    kinds = ", ".join(plural(counts.kinds[k], k) for k in CHANGE_KINDS if counts.kinds.get(k)) or "no changes"
    say(f"change {change.id}: {counts.memories_before} -> {counts.memories_after} memories in "
        f"{done.seconds:.1f} s: {kinds}")
    for example in _examples(page.changes):
        say(example["title"], "  ")
        for line in example["lines"]:
            say(line, "    ", "      ")
    qa = page.qa
    if qa:
        say(f"QA proxy on {qa['questions']} questions: {qa['before']:.3f} -> {qa['after']:.3f} "
            f"({qa.get('better', 0)} better, {qa.get('worse', 0)} worse)")
    say(f"review page (one static HTML file): {review}")
    applied = apply_change(bank, change.id)
    after = applied.summary.get("applied", {})
    say(f"applied change {change.id} in one transaction: {after.get('memories_before')} -> "
        f"{after.get('memories_after')} memories; the rows it replaced are kept")
    undo_change(bank, change.id)
    say(f"undone (`memupdate undo {bank.path}`): the bank holds its {plural(bank.count(), 'memory', 'memories')} "
        "again, exactly as before")


def add_later_statements(bank) -> int:
    """Write LATER_STATEMENTS into the demo's bank, each dated from the statement it restates or changes."""
    from datetime import date, timedelta

    from memupdate.store import NewMemory

    held = bank.list()
    new = []
    for opening, text, days in LATER_STATEMENTS:
        told = [m for m in held if m.content.startswith(opening) and m.metadata.get("date")]
        if not told:
            continue  # another conversation than the shipped sample: nothing to restate
        said = max(told, key=lambda m: m.metadata["date"])  # the latest telling: a change must come after it
        day = (date.fromisoformat(said.metadata["date"]) + timedelta(days=days)).isoformat()
        metadata = {**said.metadata, "date": day} if days == 0 else {"date": day, "speaker": said.metadata.get("speaker")}
        new.append(NewMemory(text, kind=said.kind, metadata=metadata))
    return len(bank.create_many(new)) if new else 0


def _examples(changes: Sequence[Change]) -> list[dict[str, Any]]:
    """One change of each kind the reader looks for first: its sources, then what replaces them."""
    shown = []
    for kind, title in SHOWN_KINDS.items():
        change = next((c for c in changes if c.kind == kind), None)
        if change is None:
            continue
        lines = [f"- {m.content}" for m in change.sources]
        newer = {m.key: m for m in change.newer or ()}
        named = change.coverage.superseded_by or {}
        if kind == "supersede":
            lines += [f"superseded by: {newer[k].content}" for k in dict.fromkeys(named.values()) if k in newer]
        else:
            lines += [f"-> {m.content}" for m in change.results] or ["-> (removed)"]
        shown.append({"title": f"{title}:", "lines": lines})
    return shown
