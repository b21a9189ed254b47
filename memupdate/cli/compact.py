"""`memupdate compact NAMESPACE`: run an editing policy over a whole bank into one fork, write the
review (JSON and one HTML page), and with `--apply` promote it onto the bank in one transaction."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import typer

from memupdate.cli.common import (
    ANSWERER_API_KEY_OPTION,
    ANSWERER_BASE_URL_OPTION,
    ANSWERER_OPTION,
    API_KEY_OPTION,
    BASE_URL_OPTION,
    EDITING_POLICY_OPTION,
    LOCOMO_OPTION,
    MAX_NEW_TOKENS_OPTION,
    MAX_PROSE_TOKENS_OPTION,
    MODEL_OPTION,
    SEED_OPTION,
    URL_OPTION,
    bank_questions,
    check_output,
    check_policy_endpoint,
    checked_answerer,
    console,
    err_console,
    json_to_stdout,
    open_store,
    print_json,
    progress_bar,
    require_bank,
    user_errors,
)
from memupdate.errors import MemupdateError


def default_neighbourhood() -> int:
    """`agent.compaction.DEFAULT_NEIGHBOURHOOD`, read when --size is not given (the module is slow to import)."""
    from memupdate.agent.compaction import DEFAULT_NEIGHBOURHOOD

    return DEFAULT_NEIGHBOURHOOD


SIZE_OPTION = typer.Option(  # click calls a callable default when the option is left out
    default_neighbourhood, "--size", min=2, max=200,
    help="Memories per episode (one neighbourhood; default: the compaction's, agent.compaction.DEFAULT_NEIGHBOURHOOD).",
)


@user_errors
def compact_command(
    namespace: str = typer.Argument(..., help="The bank, e.g. imported/memories/alice or locomo/conv-26."),
    policy: str = EDITING_POLICY_OPTION,
    model: str | None = MODEL_OPTION,
    base_url: str | None = BASE_URL_OPTION,
    api_key: str | None = API_KEY_OPTION,
    size: int = SIZE_OPTION,
    review: Path | None = typer.Option(None, "--review", help="The HTML review page (default: review-<bank>-<change>.html)."),
    as_json: bool = typer.Option(False, "--json", help="Print the review as JSON to stdout (the other lines go to stderr)."),
    out: Path | None = typer.Option(None, "--out", help="Also write the review as JSON to this file."),
    questions: Path | None = typer.Option(None, "--questions", help="JSON/JSONL of {question, answer} for the QA proxy."),
    locomo: Path | None = LOCOMO_OPTION,
    answerer: str | None = ANSWERER_OPTION,
    answerer_base_url: str | None = ANSWERER_BASE_URL_OPTION,
    answerer_api_key: str | None = ANSWERER_API_KEY_OPTION,
    apply: bool = typer.Option(False, "--apply", help="Apply the pending compaction (or, if none, compact and apply)."),
    change: int | None = typer.Option(None, "--change", help="With --apply: the proposed change to apply."),
    discard: bool = typer.Option(False, "--discard", help="Discard the pending compaction (drop its fork)."),
    seed: int = SEED_OPTION,
    max_new_tokens: int = MAX_NEW_TOKENS_OPTION,
    max_prose_tokens: int | None = MAX_PROSE_TOKENS_OPTION,
    url: str | None = URL_OPTION,
) -> None:
    """Compact a bank: one blind episode per neighbourhood of related memories, all into one fork, then
    a review of every change. Nothing in the bank changes until --apply; `memupdate undo` reverts an apply."""
    from memupdate.agent.policies import policy_kind
    from memupdate.bank.change_log import apply_change, discard_change, get_change, latest_proposal
    from memupdate.store import to_namespace

    policy_kind(policy, editing=True)
    root = open_store(url)
    bank = root.scoped(to_namespace(namespace))
    require_bank(bank, namespace)
    if discard:
        pending = get_change(bank, change) if change else latest_proposal(bank)
        if pending is None:
            raise MemupdateError(f"bank {bank.path!r} has no pending compaction to discard")
        discard_change(bank, pending.id)
        console.print(f"discarded change {pending.id} of {bank.path}; its fork was dropped", highlight=False)
        return
    pending = get_change(bank, change) if change else latest_proposal(bank)
    if apply and pending is not None:
        _print_applied(apply_change(bank, pending.id), bank)
        return
    if change:
        raise MemupdateError("--change names a proposed change to apply: add --apply")
    if bank.count() == 0:
        raise MemupdateError(f"namespace {namespace!r} holds no memories: import or load it first (memupdate data import)")
    for path, option, suffixes in ((review, "--review", (".html", ".htm")), (out, "--out", (".json",))):
        check_output(path, option, suffixes)
    probe = bank_questions(bank, questions, locomo)
    if answerer and not probe:
        raise MemupdateError(f"--answerer reads the bank's questions: give --questions FILE (bank {bank.path!r} has none)")
    reader = checked_answerer(answerer, answerer_base_url, answerer_api_key, engine=root.engine)  # before any work
    check_policy_endpoint(policy, model, base_url, api_key)
    if pending is not None:
        discard_change(bank, pending.id)
        err_console.print(f"the pending compaction (change {pending.id}) was discarded for this one", highlight=False)
    options = {"model": model, "base_url": base_url, "api_key": api_key, "seed": seed, "max_new_tokens": max_new_tokens,
               "max_prose_tokens": max_prose_tokens, "reviewed": not apply}  # --apply at once: nobody reviews (HeuristicPolicy.asks)
    with json_to_stdout(as_json):
        proposal, report = _compact(root, bank, policy, options, size, (probe, reader), review, out)
        if apply:
            _print_applied(apply_change(bank, proposal.id), bank)
        else:
            console.print(f"apply with `memupdate compact {bank.path} --apply`, or drop it with --discard", highlight=False)
    if as_json:
        print_json(report.to_json())


def _compact(root, bank, policy, options, size, probe, review, review_json: Path | None):
    """Compact `bank` into a proposed change and say what it holds; `probe` is (questions, reader or None)
    for the QA figures."""
    from memupdate.bank.review_records import CHANGE_KINDS

    proposal, page, done, review = propose_compaction(root, bank, policy, options, size, probe, review, review_json)
    result, qa = done.result, page.qa
    counts = page.counts
    kinds = ", ".join(f"{counts.kinds[k]} {k}s" for k in CHANGE_KINDS if counts.kinds[k])
    console.print(
        f"change {proposal.id}: {result.episodes} episodes in {done.seconds:.1f} s; memories {counts.memories_before} -> "
        f"{counts.memories_after}; {kinds or 'no changes'}; {counts.flagged} coverage flags"
        + (f"; QA proxy {qa['before']:.3f} -> {qa['after']:.3f} on {qa['questions']} questions" if qa else "")
        + (_reader_line(qa["reader"]) if qa and "reader" in qa else ""),
        highlight=False, soft_wrap=True,
    )
    if result.failed_episodes:
        err_console.print(f"{len(result.failed_episodes)} episodes failed (their neighbourhoods unchanged): {result.failed_episodes[0]}", highlight=False)
    console.print(f"review: {review.resolve()}" + (f" and {review_json}" if review_json else ""), highlight=False, soft_wrap=True)
    return proposal, page


def propose_compaction(root, bank, policy, options, size, probe, review: Path | None = None, review_json: Path | None = None):
    """Compact `bank` with `policy` into a proposed change, its review page written (to `review`, default
    review-<bank>-c<change>.html) and, with `review_json`, its JSON: (change, review, compaction, page path).
    `memupdate compact` and `memupdate demo` both compact through here."""
    from memupdate.agent.compaction import BankMoved, compact
    from memupdate.agent.policies import make_policy
    from memupdate.bank.change_log import next_change_id, propose_change
    from memupdate.bank.namespaces import compaction_namespace
    from memupdate.bank.review import replaced_by
    from memupdate.bank.review_html import render_html

    chat_model = make_policy(policy, root, **options)
    change_id = next_change_id(bank)
    questions, reader = probe
    with progress_bar("compacting") as bar:
        task = bar.add_task("compact", total=None)
        try:
            done = compact(
                chat_model, bank, compaction_namespace(bank.namespace, change_id), questions, reader=reader, size=size,
                on_plan=lambda n: bar.update(task, total=n), on_episode=lambda: bar.advance(task),
                on_answer=lambda finished, total: bar.update(task, completed=finished, total=total, description="answering"),
            )
        except BankMoved as exc:
            raise MemupdateError(str(exc)) from None
    result, page = done.result, done.review
    qa = done.qa.summary() if done.qa else None
    page = replace(page, change_id=change_id, policy=policy if policy == "heuristic" else f"{policy}:{options['model']}")
    summary = {
        "counts": page.counts.to_json(), "qa": qa, "episodes": result.episodes, "failed_episodes": result.failed_episodes,
        "stop_reasons": result.stop_reasons, "seconds": round(done.seconds, 1), "neighbourhood_size": size,
    }
    proposal = propose_change(
        bank, result.fork, change_id=change_id, policy=page.policy, summary=summary,
        details={"replaced": replaced_by(page.changes), "calls": result.calls, "review": page.to_json()},
    )
    review = review or Path(f"review-{bank.path.replace('/', '_')}-c{change_id}.html")
    review.write_text(render_html(page), encoding="utf-8")
    if review_json:
        review_json.write_text(json.dumps(page.to_json(), indent=1, ensure_ascii=False, default=str) + "\n", encoding="utf-8")
    return proposal, page, done, review


def _print_applied(change, bank) -> None:
    applied = change.summary.get("applied", {})
    console.print(
        f"applied change {change.id} to {bank.path} in one transaction: {applied.get('removed', 0)} removed, "
        f"{applied.get('changed', 0)} changed, {applied.get('added', 0)} added; memories {applied.get('memories_before')} -> "
        f"{applied.get('memories_after')}; replaced rows kept as superseded; `memupdate undo {bank.path}` reverts it",
        highlight=False, soft_wrap=True,
    )


def _reader_line(reader: dict[str, Any]) -> str:
    r = reader["proxy_f1_pearson"]
    return (
        f"; reader F1 {reader['before']:.3f} -> {reader['after']:.3f} ({reader['better']} better, {reader['worse']} worse"
        + (f"; Pearson r with the proxy {r:.2f}" if r is not None else "") + ")"
    )
