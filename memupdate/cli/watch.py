"""`memupdate watch SOURCE` (a background compactor beside a live app) and `memupdate review` (the queue
of changes it left for a person, across banks)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import typer
from rich.table import Table

from memupdate.agent.safety import SAFE_KINDS
from memupdate.bank.review import UNRELATED_BELOW
from memupdate.cli.common import (
    API_KEY_OPTION,
    BASE_URL_OPTION,
    EDITING_POLICY_OPTION,
    LOCOMO_OPTION,
    MODEL_OPTION,
    URL_OPTION,
    changed_words,
    check_output,
    check_policy_endpoint,
    console,
    err_console,
    export_live,
    open_store,
    plural,
    stated_line,
    user_errors,
)
from memupdate.errors import MemupdateError


def default_interval() -> float:
    """`agent.background.DEFAULT_INTERVAL`, read when --interval is not given (the module is slow to import)."""
    from memupdate.agent.background import DEFAULT_INTERVAL

    return DEFAULT_INTERVAL


def default_grow_by() -> int:
    """`agent.background.DEFAULT_GROW_BY`, read when --grow-by is not given."""
    from memupdate.agent.background import DEFAULT_GROW_BY

    return DEFAULT_GROW_BY


@user_errors
def watch_command(
    source: str = typer.Argument(
        ..., help="A LangGraph PostgresStore URL (postgresql://user@host/db) the app writes to, or a bank path of "
        "memupdate's database (one bank, or every bank under it)."
    ),
    prefix: str = typer.Option("", "--prefix", help="LangGraph: the namespace prefix to keep compact, e.g. memories."),
    into: str | None = typer.Option(None, "--into", help="LangGraph: bank root replacing the prefix (default imported/<prefix>)."),
    once: bool = typer.Option(False, "--once", help="One pass, then exit."),
    interval: float = typer.Option(default_interval, "--interval", min=1.0, help="Seconds between passes (default: agent.background.DEFAULT_INTERVAL)."),
    grow_by: int = typer.Option(
        default_grow_by, "--grow-by", min=1, help="Compact a bank again once it has grown by this many memories (default: agent.background.DEFAULT_GROW_BY)."),
    size: int | None = typer.Option(
        None, "--size", min=2, max=200,
        help="Memories per episode (one neighbourhood; default: the compaction's, agent.compaction.DEFAULT_NEIGHBOURHOOD)."),
    policy: str = EDITING_POLICY_OPTION,
    model: str | None = MODEL_OPTION,
    base_url: str | None = BASE_URL_OPTION,
    api_key: str | None = API_KEY_OPTION,
    auto_kinds: str = typer.Option(
        ",".join(SAFE_KINDS), "--auto-kinds", help="Kinds of change that may apply themselves ('' : none, review everything)."
    ),
    min_similarity: float = typer.Option(
        UNRELATED_BELOW, "--min-similarity", min=0.0, max=1.0, help="A merge applies itself only if its sources are at least this alike (cosine)."
    ),
    review_everything: bool = typer.Option(False, "--review-everything", help="Apply nothing: queue every change for review."),
    apply_unclear_facts: bool = typer.Option(
        False, "--apply-unclear-facts", help="Also apply a supersession the rule does not read as a clear update, and a merge of an update."),
    questions: Path | None = typer.Option(None, "--questions", help="JSON/JSONL of {question, answer}: a change lowering their QA proxy waits."),
    locomo: Path | None = LOCOMO_OPTION,
    as_json: bool = typer.Option(False, "--json", help="Print each pass as JSON."),
    threads: int | None = typer.Option(
        None, "--threads", min=1, envvar="MEMUPDATE_THREADS",
        help="CPU threads this worker's models read on (default: every core). Several workers on one machine: cores / workers each."),
    url: str | None = URL_OPTION,
) -> None:
    """Keep a live app's memory compact: each pass finds the banks that need work (never compacted, grown by
    --grow-by, or holding a new near-duplicate), compacts them, applies the changes the safety rule calls safe
    and queues the rest for `memupdate review`. Nothing the app writes meanwhile is overwritten or lost."""
    from memupdate.agent.background import BackgroundCompactor, CompactorSettings
    from memupdate.agent.policies import policy_kind
    from memupdate.agent.safety import SafetyRule
    from memupdate.bank.namespaces import COMPACTION_LABEL
    from memupdate.bank.source_kinds import live_kind
    from memupdate.rl.data.namespaces import TRAJ_LABEL
    from memupdate.store import to_namespace

    policy_kind(policy, editing=True)
    if threads is not None:  # several workers on one machine: each reads on its share of the cores, not all of them
        import torch

        torch.set_num_threads(threads)
    kinds = tuple(k.strip() for k in auto_kinds.split(",") if k.strip())
    try:
        rule = SafetyRule.review_everything() if review_everything else SafetyRule(kinds=kinds, min_similarity=min_similarity,
                                                                                     allow_unclear_facts=apply_unclear_facts)
    except ValueError as exc:
        raise MemupdateError(f"--auto-kinds {auto_kinds!r}: {exc}") from None
    root = open_store(url, embed_on_demand=True)  # first: the source may live on the embedded server this starts
    if live_kind(source) is None:
        _require_banks(root, source)
    check_policy_endpoint(policy, model, base_url, api_key)
    settings = CompactorSettings(
        prefix=tuple(p for p in prefix.split("/") if p), into=to_namespace(into) if into else None, policy=policy,
        model=model, base_url=base_url, api_key=api_key, rule=rule, grow_by=grow_by, size=size, interval=interval,
        questions=_bank_questions(questions, locomo), skip_labels=(COMPACTION_LABEL, TRAJ_LABEL),
    )
    compactor = BackgroundCompactor(root, source, settings)
    _print_pass(_pass_with_progress(compactor), as_json)  # the first pass: a bad source or policy stops here, in one line
    while not once:
        time.sleep(interval)
        try:
            _print_pass(_pass_with_progress(compactor), as_json)
        except MemupdateError as exc:  # the store down for a while: say so, and try again next time
            err_console.print(f"[bold red]pass failed:[/] {exc}; trying again in {interval:g} s", highlight=False)


def _pass_with_progress(compactor):
    """One pass, a progress bar over its banks on a terminal; stopped (Ctrl-C), it says how far it got:
    the next pass resumes from the banks' state (those compacted are not compacted again)."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(TextColumn("pass"), BarColumn(), MofNCompleteColumn(), TextColumn("banks"), TimeElapsedColumn(),
                  console=err_console, transient=True, disable=not err_console.is_terminal) as bar:
        task = bar.add_task("pass", total=None)
        reached = [0, 0]

        def advance(done: int, total: int) -> None:
            reached[:] = [done, total]
            bar.update(task, completed=done, total=total)

        compactor.on_progress = advance
        try:
            return compactor.run_once()
        except KeyboardInterrupt:
            done, total = reached
            err_console.print(f"stopped after {done} of {total or 'the'} banks: run `memupdate watch` again to go on "
                              "(banks compacted already are not compacted again)", highlight=False)
            raise typer.Exit(130) from None


def _require_banks(root, source: str) -> None:
    from memupdate.bank.namespaces import COMPACTION_LABEL
    from memupdate.bank.source_kinds import live_kinds
    from memupdate.rl.data.namespaces import TRAJ_LABEL
    from memupdate.store import nearest_namespaces, to_namespace

    if root.list_namespaces(prefix=to_namespace(source)):
        return
    near = nearest_namespaces(root.engine, source, fork_labels=(COMPACTION_LABEL, TRAJ_LABEL))
    hint = f"did you mean {' or '.join(near)}?" if near else "the database holds no banks yet (memupdate data import)"
    stores = " nor ".join(kind.accepts for kind in live_kinds())
    raise MemupdateError(f"source {source!r} is neither {stores} nor a path holding banks: check it; {hint}")


def _require_banks_under(root, under: str) -> None:
    """`review --under` a path holding no bank is a typo, not an empty queue: say so, naming the nearest."""
    from memupdate.bank.namespaces import COMPACTION_LABEL, banks_under
    from memupdate.rl.data.namespaces import TRAJ_LABEL
    from memupdate.store import nearest_namespaces

    if banks_under(root.engine, under):
        return
    near = nearest_namespaces(root.engine, under, fork_labels=(COMPACTION_LABEL, TRAJ_LABEL))
    hint = f"did you mean {' or '.join(near)}?" if near else "the database holds no banks yet (memupdate data import)"
    raise MemupdateError(f"--under {under!r}: no bank is at or under that path: check it; {hint}")


def _bank_questions(questions: Path | None, locomo: Path | None):
    """The questions of the safety rule's QA check: the --questions file for every bank, else a LoCoMo
    bank's own."""
    from memupdate.cli.common import bank_questions

    if questions is not None:
        bank_questions(None, questions, None)  # a bad file fails now, in one line, not at the first compaction
    return lambda bank: bank_questions(bank, questions, locomo)


def _print_pass(passes, as_json: bool) -> None:
    if as_json:
        rows = [{**{k: v for k, v in p.__dict__.items() if k != "export"},
                 "export": p.export.__dict__ if p.export is not None else None} for p in passes]
        console.print_json(json.dumps(rows, default=str))
        return
    worked = [p for p in passes if p.reason is not None or p.from_app or (p.export and (p.export.written or p.export.conflicts))]
    for done in worked:
        console.print(done.summary(), highlight=False, markup=False, soft_wrap=True)
    stamp = time.strftime("%H:%M:%S")
    compacted = sum(p.reason is not None for p in passes)
    # Held or done by another `memupdate watch` on the same database: that worker reports them.
    elsewhere = sum(p.elsewhere is not None for p in passes)
    console.print(f"{stamp} pass over {plural(len(passes), 'bank')}: {compacted} compacted"
                  + (f", {elsewhere} by other workers" if elsewhere else "") + "; "
                  f"{plural(sum(len(p.applied) for p in passes), 'change')} applied by itself, "
                  f"{plural(sum(len(p.queued) for p in passes), 'change')} waiting (`memupdate review`)", highlight=False)


@user_errors
def review_command(
    under: str | None = typer.Option(None, "--under", help="Only banks at or under this path."),
    accept: int | None = typer.Option(None, "--accept", help="Apply this pending change (an id the list shows)."),
    reject: int | None = typer.Option(None, "--reject", help="Discard this pending change; it is not proposed again."),
    reason: str | None = typer.Option(None, "--reason", help="With --reject: why (kept with the change)."),
    html: Path | None = typer.Option(None, "--html", help="Write the queue as one static HTML page."),
    as_json: bool = typer.Option(False, "--json", help="Print the queue as JSON to stdout instead of a table."),
    source_url: str | None = typer.Option(None, "--source-url", help="The LangGraph store's URL, if the recorded one lacks its password."),
    url: str | None = URL_OPTION,
) -> None:
    """The changes `memupdate watch` left for a person, across banks: list them (and write the page), or
    accept or reject one. An accepted change of a live store is written there at once (or at the next pass)."""
    from memupdate.bank import review_queue
    from memupdate.bank.review_html import render_queue_html
    from memupdate.bank.supersessions import supersessions

    if accept is not None and reject is not None:
        raise MemupdateError("give --accept or --reject, not both")
    root = open_store(url, embed_on_demand=True)
    if accept is not None or reject is not None:
        _decide(root, accept, reject, reason, source_url)
        return
    check_output(html, "--html", (".html", ".htm"))
    if under:
        _require_banks_under(root, under.strip("/"))
    pending = review_queue.pending(root.engine, under.strip("/") if under else None)
    queued = [q.review for q in pending]
    # What supersedes what (both texts, when each was stated), for each pending change.
    pairs = [supersessions(root.scoped(q.change.namespace), q.review.change, fork=q.change.fork) for q in pending]
    if html:
        html.write_text(render_queue_html(queued), encoding="utf-8")
    if as_json:
        shown = [q.to_json() | {"superseded_by": [p.to_json() for p in ps]} for q, ps in zip(queued, pairs, strict=True)]
        console.print_json(json.dumps({"pending": shown}, ensure_ascii=False, default=str))
        return
    # Whole texts, wrapped: a dating differs in its last words, which a cut at 60 characters hid.
    table = Table("change", "kind", "sources -> results", "waits because", show_lines=True)
    for column in table.columns:
        column.overflow = "fold"  # a long key or bank path breaks across lines rather than ending in "…"
    for q, ps in zip(queued, pairs, strict=True):
        table.add_row(f"{q.change_id}\n{q.bank}", q.change.kind, _change_texts(q.change, ps), "; ".join(q.held))
    if queued:
        console.print(table, markup=False)
    console.print(f"{plural(len(queued), 'change')} {'waits' if len(queued) == 1 else 'wait'} for review"
                  + (": `memupdate review --accept ID` or `--reject ID`" if queued else ""), highlight=False)


def _change_texts(change, pairs) -> str:
    """A change's sources, then its results, each whole; for one text rewritten, the words that changed;
    for a supersession, the stale text and the newer one that retires it, each with when it was stated."""
    if pairs:
        return "\n".join(f"{stated_line(p.stale)}\n-> superseded by\n{stated_line(p.newer)}" for p in pairs)
    lines = [f"[{m.key}] {m.content}" for m in change.sources] + ["->"]
    lines += [f"[{m.key}] {m.content}" for m in change.results] or ["(removed)"]
    if len(change.sources) == len(change.results) == 1:
        lines.append("changed: " + (changed_words(change.sources[0].content, change.results[0].content) or "nothing"))
    return "\n".join(lines)


def _decide(root, accept: int | None, reject: int | None, reason: str | None, source_url: str | None) -> None:
    from memupdate.bank import review_queue

    if reject is not None:
        bank, change = review_queue.reject(root, reject, reason=reason)
        if change.status == "undone":
            console.print(f"change {change.id} of {bank.path} is undone and stays undone: it is not proposed again "
                          "while its sources are unchanged (reason recorded)", highlight=False)
        else:
            console.print(f"rejected change {change.id} of {bank.path}; it is not proposed again while its sources "
                          "are unchanged", highlight=False)
        return
    bank, change = review_queue.accept(root, accept)
    applied = change.summary.get("applied", {})
    console.print(f"applied change {change.id} to {bank.path}: {applied.get('removed', 0)} removed, {applied.get('changed', 0)} "
                  f"changed, {applied.get('added', 0)} added; `memupdate undo {bank.path} --change {change.id}` reverts it",
                  highlight=False, soft_wrap=True)
    export_live(bank, source_url)
