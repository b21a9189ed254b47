"""`memupdate compact NAMESPACE`: run an editing policy over a whole bank into one fork, write the
review (JSON and one HTML page), and with `--apply` promote it onto the bank in one transaction."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
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
    check_output,
    check_policy_endpoint,
    checked_answerer,
    console,
    err_console,
    open_store,
    progress_bar,
    require_bank,
    user_errors,
)
from memupdate.store.errors import MemupdateError


@dataclass(frozen=True)
class UserQuestion:
    """A question from a user's file, in the shape the QA proxy reads (single-hop unless a category is given)."""

    question: str
    answer: str | None
    evidence: tuple[str, ...] = ()
    category: int = 4


@user_errors
def compact_command(
    namespace: str = typer.Argument(..., help="The bank, e.g. imported/memories/alice or locomo/conv-26."),
    policy: str = EDITING_POLICY_OPTION,
    model: str | None = MODEL_OPTION,
    base_url: str | None = BASE_URL_OPTION,
    api_key: str | None = API_KEY_OPTION,
    size: int = typer.Option(20, "--size", min=2, max=200, help="Memories per episode (one neighbourhood)."),
    review: Path | None = typer.Option(None, "--review", help="The HTML review page (default: review-<bank>-<change>.html)."),
    review_json: Path | None = typer.Option(None, "--json", help="Also write the review as JSON here."),
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
    for path, option, suffixes in ((review, "--review", (".html", ".htm")), (review_json, "--json", (".json",))):
        check_output(path, option, suffixes)
    probe = _questions(bank, questions, locomo)
    if answerer and not probe:
        raise MemupdateError(f"--answerer reads the bank's questions: give --questions FILE (bank {bank.path!r} has none)")
    reader = checked_answerer(answerer, answerer_base_url, answerer_api_key, engine=root.engine)  # before any work
    check_policy_endpoint(policy, model, base_url, api_key)
    if pending is not None:
        discard_change(bank, pending.id)
        err_console.print(f"the pending compaction (change {pending.id}) was discarded for this one", highlight=False)
    options = {"model": model, "base_url": base_url, "api_key": api_key, "seed": seed, "max_new_tokens": max_new_tokens,
               "max_prose_tokens": max_prose_tokens}
    proposal, report = _compact(root, bank, policy, options, size, (probe, reader), review, review_json)
    if apply:
        _print_applied(apply_change(bank, proposal.id), bank)
    else:
        console.print(f"apply with `memupdate compact {bank.path} --apply`, or drop it with --discard", highlight=False)


def _compact(root, bank, policy, options, size, probe, review, review_json):
    """Compact `bank` into a proposed change; `probe` is (questions, reader or None) for the QA figures."""
    from memupdate.agent.compaction import BankMoved, compact_bank
    from memupdate.agent.policies import make_policy
    from memupdate.agent.review import build_review, render_html, replaced_by
    from memupdate.bank.change_log import next_change_id, propose_change_with_id
    from memupdate.bank.namespaces import compaction_namespace

    chat_model = make_policy(policy, root, **options)
    change_id = next_change_id(bank)
    started = time.perf_counter()
    with progress_bar("compacting") as bar:
        task = bar.add_task("compact", total=None)
        try:
            result = compact_bank(
                chat_model, bank, compaction_namespace(bank.namespace, change_id), size=size,
                on_plan=lambda n: bar.update(task, total=n), on_episode=lambda: bar.advance(task),
            )
        except BankMoved as exc:
            raise MemupdateError(str(exc)) from None
    seconds = time.perf_counter() - started
    qa = _qa(bank, result.fork, *probe)
    page = build_review(bank, result.fork, result.calls, qa=qa)
    page |= {"change_id": change_id, "policy": policy if policy == "heuristic" else f"{policy}:{options['model']}"}
    summary = {
        "counts": page["counts"], "qa": qa, "episodes": result.episodes, "failed_episodes": result.failed_episodes,
        "stop_reasons": result.stop_reasons, "seconds": round(seconds, 1), "neighbourhood_size": size,
    }
    proposal = propose_change_with_id(
        bank, change_id, result.fork, policy=page["policy"], summary=summary,
        details={"replaced": replaced_by(page), "calls": result.calls, "review": page},
    )
    review = review or Path(f"review-{bank.path.replace('/', '_')}-c{change_id}.html")
    review.write_text(render_html(page), encoding="utf-8")
    if review_json:
        review_json.write_text(json.dumps(page, indent=1, ensure_ascii=False, default=str) + "\n", encoding="utf-8")
    counts = page["counts"]
    kinds = ", ".join(f"{counts[k]} {k}s" for k in ("merge", "split", "update", "delete", "create", "rewrite") if counts[k])
    console.print(
        f"change {change_id}: {result.episodes} episodes in {seconds:.1f} s; memories {counts['memories_before']} -> "
        f"{counts['memories_after']}; {kinds or 'no changes'}; {counts['flagged']} coverage flags"
        + (f"; QA proxy {qa['before']:.3f} -> {qa['after']:.3f} on {qa['questions']} questions" if qa else "")
        + (_reader_line(qa["reader"]) if qa and "reader" in qa else ""),
        highlight=False, soft_wrap=True,
    )
    if result.failed_episodes:
        err_console.print(f"{len(result.failed_episodes)} episodes failed (their neighbourhoods unchanged): {result.failed_episodes[0]}", highlight=False)
    console.print(f"review: {review.resolve()}" + (f" and {review_json}" if review_json else ""), highlight=False, soft_wrap=True)
    return proposal, page


def _print_applied(change, bank) -> None:
    applied = change.summary.get("applied", {})
    console.print(
        f"applied change {change.id} to {bank.path} in one transaction: {applied.get('removed', 0)} removed, "
        f"{applied.get('changed', 0)} changed, {applied.get('added', 0)} added; memories {applied.get('memories_before')} -> "
        f"{applied.get('memories_after')}; replaced rows kept as superseded; `memupdate undo {bank.path}` reverts it",
        highlight=False, soft_wrap=True,
    )


def _questions(bank, path: Path | None, locomo: Path | None) -> list[Any]:
    """Questions for the QA proxy: the user's file, else the LoCoMo conversation a `locomo/<id>` bank is."""
    if path is not None:
        return read_questions(path)
    from memupdate.rl.data.namespaces import conversation_of

    sample_id = conversation_of(bank.namespace)
    if sample_id is not None:
        from memupdate.rl.data.locomo import default_locomo_path, load_locomo

        source = locomo or default_locomo_path()
        if source is None:
            return []
        try:
            (conversation,) = load_locomo(source, [sample_id])
        except ValueError:
            return []
        return list(conversation.qa)
    return []


def read_questions(path: Path) -> list[UserQuestion]:
    """A JSON list or JSONL of `{question, answer, category?, evidence?}`; a clear error names the bad item."""
    try:
        raw = path.read_text(encoding="utf-8").strip()
        rows = json.loads(raw) if raw.startswith("[") else [json.loads(line) for line in raw.splitlines() if line.strip()]
    except OSError as exc:
        raise MemupdateError(f"--questions {str(path)!r}: {exc.strerror}") from None
    except json.JSONDecodeError as exc:
        raise MemupdateError(f"--questions {str(path)!r} is not JSON or JSONL (line {exc.lineno}: {exc.msg})") from None
    questions = []
    for number, row in enumerate(rows, 1):
        if not isinstance(row, dict) or not isinstance(row.get("question"), str) or row.get("answer") is None:
            raise MemupdateError(f"--questions {str(path)!r} item {number}: give {{\"question\": ..., \"answer\": ...}}")
        questions.append(UserQuestion(row["question"], str(row["answer"]), tuple(row.get("evidence") or ()), int(row.get("category", 4))))
    return questions


def _qa(bank, fork, questions: list[Any], reader=None) -> dict[str, Any] | None:
    """The QA proxy before -> after over the answerable (non-adversarial) questions; with a reader, also
    its LoCoMo F1 on the contexts the proxy read, and how the two agree."""
    from memupdate.rl.data.categories import ADVERSARIAL
    from memupdate.rl.scoring.qa_proxy import score_questions
    from memupdate.rl.scoring.summaries import interval

    answerable = [q for q in questions if q.category != ADVERSARIAL and q.answer]
    if not answerable:
        return None
    scored = {"before": score_questions(bank, answerable), "after": score_questions(fork, answerable)}
    before, after = ([s.qa_score for s in scored[side]] for side in ("before", "after"))
    qa = {
        "questions": len(answerable),
        "before": sum(before) / len(before),
        "after": sum(after) / len(after),
        "better": sum(a > b + 1e-9 for a, b in zip(after, before, strict=True)),
        "worse": sum(a < b - 1e-9 for a, b in zip(after, before, strict=True)),
        "change": interval([a - b for a, b in zip(after, before, strict=True)]),
    }
    if reader is not None:
        qa["reader"] = _reader_f1(reader, answerable, scored)
    return qa


def _reader_f1(reader, questions: list[Any], scored: dict[str, list]) -> dict[str, Any]:
    """The reader's F1 per side, its paired change per question, and its Pearson r with the proxy."""
    from memupdate.rl.scoring.answer_report import answerer_report, pearson
    from memupdate.rl.scoring.summaries import interval

    contexts = {side: [s.context for s in rows] for side, rows in scored.items()}
    proxy = {side: [s.qa_score for s in rows] for side, rows in scored.items()}
    with progress_bar("answering") as bar:
        task = bar.add_task("answer", total=None)
        section, rows = answerer_report(reader, questions, contexts, proxy, lambda done, total: bar.update(task, completed=done, total=total))
    changes = [row["after"]["f1"] - row["before"]["f1"] for row in rows]
    return {
        "model": section["model"], "before": section["before"]["f1"], "after": section["after"]["f1"],
        "change": interval(changes), "better": sum(c > 1e-9 for c in changes), "worse": sum(c < -1e-9 for c in changes),
        "proxy_f1_pearson": section["proxy_f1_pearson"]["all"],
        "proxy_change_f1_change_pearson": pearson([a - b for a, b in zip(proxy["after"], proxy["before"], strict=True)], changes),
    }


def _reader_line(reader: dict[str, Any]) -> str:
    r = reader["proxy_f1_pearson"]
    return (
        f"; reader F1 {reader['before']:.3f} -> {reader['after']:.3f} ({reader['better']} better, {reader['worse']} worse"
        + (f"; Pearson r with the proxy {r:.2f}" if r is not None else "") + ")"
    )
