"""`memupdate eval` and `memupdate demo`: score a policy's edits, before -> after, per category;
`memupdate eval factconsolidation`: MemoryAgentBench's FactConsolidation, the proxy and a reader's exact match."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer
from rich.table import Table

from memupdate.cli.common import (
    ANSWERER_API_KEY_OPTION,
    ANSWERER_BASE_URL_OPTION,
    ANSWERER_OPTION,
    API_KEY_OPTION,
    BASE_URL_OPTION,
    CONVERSATIONS_OPTION,
    EXIT_FAILED_RUN,
    LOCOMO_OPTION,
    MAX_NEW_TOKENS_OPTION,
    MAX_PROSE_TOKENS_OPTION,
    MODEL_OPTION,
    POLICY_OPTION,
    SEED_OPTION,
    URL_OPTION,
    check_output,
    check_policy_endpoint,
    checked_answerer,
    console,
    err_console,
    json_to_stdout,
    load_conversations,
    open_store,
    print_json,
    progress_bar,
    raise_if_interrupted,
    user_errors,
)
from memupdate.cli.compact import SIZE_OPTION
from memupdate.errors import MemupdateError
from memupdate.scoring.questions import COLLATERAL_QUESTIONS

JUDGE_OPTION = typer.Option(
    None, "--judge", help="Also judge each answer CORRECT/WRONG with this model (Mem0's LoCoMo judge), same endpoint; "
    "or hf:DIR.",
)

COLLATERAL_OPTION = typer.Option(
    COLLATERAL_QUESTIONS, "--collateral", min=0,
    help="Targeted: also score N other questions of the conversation (collateral damage).",
)
MAX_FAILURE_SHARE_OPTION = typer.Option(
    0.1, "--max-failure-share", min=0.0, max=1.0,
    help="Exit 1 when more than this share of episodes failed (the report is still written).",
)
REWARD_QA_OPTION = typer.Option(
    "proxy", "--reward-qa", help="proxy (no LLM) | answerer: the reward's QA term is the --answerer's LoCoMo F1."
)


@user_errors
def eval_command(
    ctx: typer.Context,
    locomo: Path | None = LOCOMO_OPTION,
    conversations: str | None = CONVERSATIONS_OPTION,
    policy: str = POLICY_OPTION,
    mode: str = typer.Option("targeted", "--mode", help="targeted (question visible) | blind (once per conversation)"),
    model: str | None = MODEL_OPTION,
    base_url: str | None = BASE_URL_OPTION,
    api_key: str | None = API_KEY_OPTION,
    max_questions: int | None = typer.Option(None, "--max-questions", min=1, help="Per conversation, for quick runs."),
    max_operations: int | None = typer.Option(
        None, "--max-operations", min=1, help="Tool calls per episode (default 30)."
    ),
    max_new_tokens: int = MAX_NEW_TOKENS_OPTION,
    max_prose_tokens: int | None = MAX_PROSE_TOKENS_OPTION,
    include_adversarial: bool = typer.Option(False, "--include-adversarial", help="Score category 5 too."),
    collateral: int = COLLATERAL_OPTION,
    max_failure_share: float = MAX_FAILURE_SHARE_OPTION,
    seed: int = SEED_OPTION,
    as_json: bool = typer.Option(False, "--json", help="Print the report as JSON to stdout (the tables go to stderr)."),
    json_out: Path | None = typer.Option(None, "--out", help="Write the report as JSON to this file (folders are created)."),
    plot: Path | None = typer.Option(None, "--plot", help="Write before/after bars per category (.png, .pdf or .svg)."),
    url: str | None = URL_OPTION,
    answerer: str | None = ANSWERER_OPTION,
    answerer_base_url: str | None = ANSWERER_BASE_URL_OPTION,
    answerer_api_key: str | None = ANSWERER_API_KEY_OPTION,
    judge: str | None = JUDGE_OPTION,
    reward_qa: str = REWARD_QA_OPTION,
) -> None:
    """Score a policy's edits with the QA proxy, before -> after, per category; with --answerer, also
    with an LLM reading the same context (LoCoMo F1, BLEU-1, --judge accuracy).

    `memupdate eval factconsolidation --file FILE`: MemoryAgentBench's FactConsolidation instead.

    Exit codes: 0 done; 1 too many episodes failed (see --max-failure-share); 2 bad input; 130 Ctrl-C.
    """
    if ctx.invoked_subcommand is not None:  # `memupdate eval factconsolidation ...`: its own options
        return
    from memupdate.rl.evaluate import EvalConfig
    from memupdate.scoring.reward import RewardConfig

    if mode not in ("targeted", "blind"):
        raise MemupdateError(f"--mode {mode!r} is not targeted or blind")
    if reward_qa not in ("proxy", "answerer") or (reward_qa == "answerer" and not answerer):
        raise MemupdateError(f"--reward-qa {reward_qa!r}: choose proxy, or answerer together with --answerer MODEL")
    # Everything that can be checked is checked before the run, so a finished run is never lost.
    check_output(json_out, "--out")
    check_output(plot, "--plot", PLOT_SUFFIXES)
    reader = checked_answerer(answerer, answerer_base_url, answerer_api_key, judge)  # before any work
    chosen = load_conversations(locomo, conversations)
    store, chat_model = _open_policy(url, reader, policy, model=model, base_url=base_url, api_key=api_key, seed=seed,
                                     max_operations=max_operations, max_new_tokens=max_new_tokens, max_prose_tokens=max_prose_tokens)
    config = EvalConfig(
        mode=mode,
        include_adversarial=include_adversarial,
        max_questions=max_questions,
        max_operations=max_operations,
        reward=RewardConfig(
            collateral_questions=collateral,
            qa=reward_qa,
            answerer_model=answerer if reward_qa == "answerer" else None,
            answerer_base_url=answerer_base_url,
            answerer_api_key=answerer_api_key,
        ),
        max_failure_share=max_failure_share,
    )
    with json_to_stdout(as_json):
        report = evaluate_with_progress(f"eval {policy} ({mode})", store, chosen, chat_model, config, policy, reader)
        save_report(report, json_out, plot)
        print_report(report)
    if as_json:
        print_json(report)
    if report["failures"]["over_threshold"]:
        raise typer.Exit(EXIT_FAILED_RUN)


PLOT_SUFFIXES = (".png", ".pdf", ".svg")


def save_report(report: dict[str, Any], json_out: Path | None, plot: Path | None) -> None:
    """Write the JSON report and the plot; if a path fails now (it was checked before the run), the JSON
    goes to a temporary file instead, so a finished report is never lost."""
    import tempfile

    from memupdate.rl.evaluate import plot_report

    text = json.dumps(report, indent=2)
    if json_out:
        try:
            json_out.write_text(text)
            console.print(f"report written to {json_out}", highlight=False)
        except OSError as exc:
            fd, fallback = tempfile.mkstemp(prefix="memupdate-eval-", suffix=".json")
            with open(fd, "w") as handle:
                handle.write(text)
            err_console.print(f"[yellow]could not write {json_out} ({exc.strerror}); report written to {fallback}[/]")
    if plot:
        try:
            plot_report(report, str(plot))
            console.print(f"plot written to {plot}", highlight=False)
        except (OSError, ValueError) as exc:
            err_console.print(f"[yellow]could not write the plot {plot}: {exc}[/]", highlight=False)


def evaluate_with_progress(description: str, store, conversations, policy, config, policy_name: str, answerer=None) -> dict[str, Any]:
    """`evaluate` under a progress bar of questions done (then of answers, with an answerer)."""
    from memupdate.rl.evaluate import evaluate

    with progress_bar(description) as bar:
        task = bar.add_task(description, total=None)
        def progress(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)
            raise_if_interrupted()  # a Ctrl-C swallowed inside a finalizer still stops the run here

        return evaluate(
            store, conversations, policy, config, policy_name=policy_name, progress=progress, answerer=answerer
        )


def print_report(report: dict[str, Any]) -> None:
    table = Table(title=f"{report['policy']} policy, {report['mode']} mode, {report['questions']} questions")
    for column in ("category", "questions", "QA before", "QA after", "recall before", "recall after"):
        table.add_column(column, justify="right")
    before, after = report["before"], report["after"]
    for name, b in before["by_category"].items():
        a = after["by_category"][name]
        table.add_row(
            name, str(b["questions"]), f"{b['qa_score']:.3f}", f"{a['qa_score']:.3f}",
            f"{b['evidence_recall']:.3f}", f"{a['evidence_recall']:.3f}",
        )
    table.add_row(
        "[bold]all[/]", str(report["questions"]), f"[bold]{before['qa_score']:.3f}[/]", f"[bold]{after['qa_score']:.3f}[/]",
        f"{before['evidence_recall']:.3f}", f"{after['evidence_recall']:.3f}",
    )
    console.print(table)
    console.print(
        f"reward mean {report['reward_mean']:+.4f} | memories {report['memories']['before']:.1f} -> "
        f"{report['memories']['after']:.1f} | context tokens {before['context_tokens']:.1f} -> "
        f"{after['context_tokens']:.1f} | unsupported tokens/episode {report['unsupported_tokens']:.1f} | "
        f"collateral delta {report['collateral_delta']:+.4f}"
    )
    console.print(f"tool calls {report['tool_calls'] or '-'} | {report['seconds']} s"
    )
    failures = report.get("failures", {})
    if failures.get("failed"):
        first = next(e["error"] for e in report["errors"] if e.get("episode_failed"))
        colour = "bold red" if failures["over_threshold"] else "yellow"
        verdict = "this is not a result" if failures["over_threshold"] else "within --max-failure-share"
        err_console.print(
            f"[{colour}]{failures['failed']} of {failures['episodes']} episodes failed ({failures['share']:.0%}; "
            f"{verdict}).[/] First error: {first}",
            highlight=False,
        )
    skipped = len(report["errors"]) - failures.get("failed", 0)
    if skipped > 0:
        console.print(f"[yellow]{skipped} questions skipped[/] (see the JSON report)")
    if report.get("answerer"):
        print_answerer_report(report["answerer"])


def print_answerer_report(section: dict[str, Any]) -> None:
    """LoCoMo F1, BLEU-1 and judge accuracy of the LLM answerer, before -> after, per category."""
    judge = f", judge {section['judge']}" if section["judge"] else ""
    table = Table(title=f"answerer {section['model']}{judge}: read from the proxy's context")
    for column in ("category", "questions", "F1 before", "F1 after", "BLEU-1 before", "BLEU-1 after",
                   "judge before", "judge after"):
        table.add_column(column, justify="right")

    def judged(block: dict[str, Any]) -> str:
        return "-" if block["judge_accuracy"] is None else f"{block['judge_accuracy']:.3f}"

    before, after = section["before"], section["after"]
    rows = [(name, b, after["by_category"][name]) for name, b in before["by_category"].items()]
    for name, b, a in [*rows, ("[bold]all[/]", before, after)]:
        table.add_row(
            name, str(b["questions"]), f"{b['f1']:.3f}", f"{a['f1']:.3f}", f"{b['bleu1']:.3f}", f"{a['bleu1']:.3f}",
            judged(b), judged(a),
        )
    console.print(table)
    r = section["proxy_f1_pearson"]
    shown = " | ".join(f"{side} {'-' if r[side] is None else f'{r[side]:+.3f}'}" for side in ("before", "after", "all"))
    console.print(f"Pearson r, proxy score vs answerer F1 over questions: {shown} | {section['requests']} requests")



@user_errors
def demo(
    locomo: Path | None = typer.Option(None, "--locomo", help="Use this LoCoMo file instead of the shipped sample."),
    conversations: str | None = CONVERSATIONS_OPTION,
    questions: int | None = typer.Option(
        None, "--questions", min=1, help="Questions per conversation (default: all of the sample, 8 of a LoCoMo file)."
    ),
    url: str | None = URL_OPTION,
) -> None:
    """The main job, then the training task: start the embedded database, migrate, load a conversation;
    compact a copy of its bank (review page, QA before -> after, applied and undone); then let the
    heuristic policy edit the memory for each question with its answer in hand, and print QA before -> after."""
    from memupdate.agent.policies import make_policy
    from memupdate.cli.demo import show_compaction
    from memupdate.rl.data.locomo import load_sample
    from memupdate.rl.evaluate import EvalConfig

    if conversations is not None and not locomo:
        raise MemupdateError(
            "--conversations picks conversations of a LoCoMo file: add --locomo FILE (the shipped sample has one)"
        )
    chosen = load_conversations(locomo, conversations) if locomo else load_sample()
    if locomo:
        chosen = chosen if conversations else chosen[:1]
        questions = questions or 8
    store = open_store(url)
    console.print(f"database: {database_name(store.engine.url)}", highlight=False, soft_wrap=True)
    show_compaction(store, chosen[0])
    console.rule("2. the training task: one edit per question, its answer in hand", style="bold")
    policy = make_policy("heuristic", store)
    config = EvalConfig(mode="targeted", max_questions=questions)
    print_report(evaluate_with_progress("demo: heuristic policy, targeted", store, chosen, policy, config, "heuristic"))




def database_name(url) -> str:
    """The database as a person reads it on one line: the embedded server's data dir (its URL is a long
    socket path: <data dir>/pg), else the configured URL without its password."""
    socket = url.query.get("host", "")
    if isinstance(socket, str) and socket.startswith("/") and Path(socket).name == "pg":
        data_dir, home = str(Path(socket).parent), str(Path.home())
        return f"the embedded PostgreSQL in {data_dir.replace(home, '~', 1) if data_dir.startswith(home) else data_dir}"
    return url.render_as_string(hide_password=True)


# -- memupdate eval factconsolidation ------------------------------------------------------------


def factconsolidation_report(
    store, sets, chat_model, reader=None, *, policy_name: str = "heuristic", max_questions: int | None = None,
    max_operations: int | None = None, size: int | None = None, progress=None,
) -> dict[str, Any]:
    """Load each context of `sets` once, compact it with `chat_model` (None: no edits) through the one
    compaction service, and report per sub-dataset: the QA proxy before -> after and, with `reader`, its
    substring exact-match accuracy before -> after on the very contexts the proxy read, paired per
    question, and their Pearson r. `progress(description, done, total)` follows the work."""
    import time
    import uuid

    from memupdate.agent.compaction import compact
    from memupdate.rl.data.factconsolidation import context_namespace, load_context
    from memupdate.rl.data.namespaces import trajectory_namespace
    from memupdate.scoring.answer_report import reader_change
    from memupdate.scoring.qa_change import QAChange, qa_change

    def step(description: str):
        return (lambda done, total: progress(description, done, total)) if progress else None

    report: dict[str, Any] = {"policy": policy_name, "reader": reader.model if reader else None, "sources": {}, "contexts": {}}
    groups: dict[str, list] = {}
    for fc in sets:
        groups.setdefault(fc.context.context_id, []).append(fc)
    for context_id, members in groups.items():
        context = members[0].context
        started = time.perf_counter()
        loaded = load_context(store, context)
        load_seconds = time.perf_counter() - started
        bank = loaded.base
        asked = [list(fc.qa[:max_questions]) for fc in members]
        questions = [q for group in asked for q in group]
        fork = None
        started = time.perf_counter()
        if chat_model is None:
            qa, episodes, calls = qa_change(bank, bank, questions), 0, []
            memories_after = bank.count()
        else:
            done = compact(
                chat_model, bank, trajectory_namespace(context_namespace(context), f"fc-{uuid.uuid4().hex[:8]}"),
                questions, max_operations=max_operations, review=False, **({"size": size} if size else {}),
                on_plan=(lambda n: progress("compacting", 0, n)) if progress else None,
                on_episode=_counter(progress, "compacting"),
            )
            fork, qa, episodes, calls = done.fork, done.qa, done.result.episodes, done.result.calls
            memories_after = fork.count()
        seconds = time.perf_counter() - started
        try:
            tools: dict[str, int] = {}
            for call in calls:
                tools[call["tool"]] = tools.get(call["tool"], 0) + 1
            report["contexts"][context_id] = {
                "namespace": bank.path, "facts": len(context.facts), "added": loaded.added,
                "load_seconds": round(load_seconds, 1), "compact_seconds": round(seconds, 1), "episodes": episodes,
                "memories": {"before": bank.count(), "after": memories_after}, "write_calls": tools,
                "sources": [fc.name for fc in members],
            }
            offset = 0
            for fc, group in zip(members, asked, strict=True):
                part = slice(offset, offset + len(group))
                offset += len(group)
                change = QAChange(group, qa.before[part], qa.after[part])
                entry: dict[str, Any] = {"source": fc.source, "context": context_id, "proxy": change.summary()}
                if reader is not None:
                    entry["reader"] = reader_change(reader, group, change.before, change.after,
                                                    step(f"reading {fc.name}"), score=exact_match_rule(fc))
                report["sources"][fc.name] = entry
        finally:
            if fork is not None:
                fork.drop()
    return report


def _counter(progress, description: str):
    if progress is None:
        return None
    count = [0]

    def advance() -> None:
        count[0] += 1
        progress(description, count[0], None)

    return advance


def exact_match_rule(fc):
    """The benchmark's rule for the questions of `fc`: substring exact match against every accepted answer."""
    from memupdate.scoring.metrics import substring_exact_match as matches

    def substring_exact_match(answer: str, question: Any) -> float:
        return matches(answer, fc.accepted[question.index])

    return substring_exact_match


@user_errors
def factconsolidation_command(
    file: Path = typer.Option(..., "--file", help="MemoryAgentBench FactConsolidation rows (JSONL), never downloaded."),
    sources: str | None = typer.Option(None, "--sources", help="Comma-separated, e.g. sh_6k,mh_6k (default: every row)."),
    policy: str = POLICY_OPTION,
    model: str | None = MODEL_OPTION,
    base_url: str | None = BASE_URL_OPTION,
    api_key: str | None = API_KEY_OPTION,
    max_questions: int | None = typer.Option(None, "--max-questions", min=1, help="Per sub-dataset, for quick runs."),
    max_operations: int | None = typer.Option(None, "--max-operations", min=1, help="Tool calls per episode (default 30)."),
    size: int = SIZE_OPTION,
    max_new_tokens: int = MAX_NEW_TOKENS_OPTION,
    max_prose_tokens: int | None = MAX_PROSE_TOKENS_OPTION,
    seed: int = SEED_OPTION,
    answerer: str | None = ANSWERER_OPTION,
    answerer_base_url: str | None = ANSWERER_BASE_URL_OPTION,
    answerer_api_key: str | None = ANSWERER_API_KEY_OPTION,
    as_json: bool = typer.Option(False, "--json", help="Print the report as JSON to stdout (the tables go to stderr)."),
    json_out: Path | None = typer.Option(None, "--out", help="Write the report as JSON to this file (folders are created)."),
    url: str | None = URL_OPTION,
) -> None:
    """MemoryAgentBench FactConsolidation: load each context into a bank ("factconsolidation/<context>"),
    compact it with the policy, and report per sub-dataset the QA proxy before -> after and, with
    --answerer (e.g. hf:qwen2.5-coder-0.5b), the reader's substring exact-match accuracy, with paired 95%
    intervals over questions.

    Exit codes: 0 done; 2 bad input; 130 Ctrl-C.
    """
    from memupdate.rl.data.factconsolidation import load_factconsolidation, select_sources

    chosen = select_sources(load_factconsolidation(file), sources)
    check_output(json_out, "--out")
    reader = checked_answerer(answerer, answerer_base_url, answerer_api_key)
    store, chat_model = _open_policy(url, reader, policy, model=model, base_url=base_url, api_key=api_key, seed=seed,
                                     max_operations=max_operations, max_new_tokens=max_new_tokens, max_prose_tokens=max_prose_tokens)
    with progress_bar("factconsolidation") as bar:
        task = bar.add_task("factconsolidation", total=None)

        def progress(description: str, done: int, total: int | None) -> None:
            bar.update(task, description=description, completed=done, **({"total": total} if total else {}))
            raise_if_interrupted()

        report = factconsolidation_report(store, chosen, chat_model, reader, policy_name=policy,
                                          max_questions=max_questions, max_operations=max_operations, size=size,
                                          progress=progress)
    with json_to_stdout(as_json):
        if json_out:
            save_report(report, json_out, None)
        print_factconsolidation(report)
    if as_json:
        print_json(report)


def print_factconsolidation(report: dict[str, Any]) -> None:
    def change(block: dict[str, Any]) -> str:
        c = block["change"]
        return f"{c['mean']:+.3f} [{c['low']:+.3f}, {c['high']:+.3f}]"

    reader = report["reader"]
    table = Table(title=f"FactConsolidation, {report['policy']} policy" + (f", reader {reader} (substring exact match)" if reader else ""))
    columns = ["source", "questions", "memories", "proxy before", "proxy after", "proxy change"]
    columns += ["EM before", "EM after", "EM change", "r proxy~EM"] if reader else []
    for column in columns:
        table.add_column(column, justify="right")
    for name, entry in report["sources"].items():
        proxy, memories = entry["proxy"], report["contexts"][entry["context"]]["memories"]
        row = [name, str(proxy["questions"]), f"{memories['before']} -> {memories['after']}", f"{proxy['before']:.3f}",
               f"{proxy['after']:.3f}", change(proxy)]
        if reader:
            em, r = entry["reader"], entry["reader"]["proxy_f1_pearson"]
            row += [f"{em['before']:.3f}", f"{em['after']:.3f}", change(em), "-" if r is None else f"{r:+.3f}"]
        table.add_row(*row)
    console.print(table)
    for block in report["contexts"].values():
        calls = ", ".join(f"{n} {tool}" for tool, n in block["write_calls"].items()) or "no writes"
        console.print(f"{block['namespace']}: {block['facts']} facts, loaded in {block['load_seconds']} s, compacted in "
                      f"{block['compact_seconds']} s ({block['episodes']} episodes; {calls})", highlight=False)


# `memupdate eval` runs LoCoMo with its own options; `memupdate eval factconsolidation` is its one subcommand.
eval_app = typer.Typer(invoke_without_command=True, no_args_is_help=False, add_completion=False)
eval_app.callback()(eval_command)
eval_app.command("factconsolidation")(factconsolidation_command)


def _open_policy(url, reader, policy: str, **options):
    """(the store, the policy's chat model), the endpoint checked first and the reader's cache in the store."""
    from memupdate.agent.policies import make_policy

    check_policy_endpoint(policy, options["model"], options["base_url"], options["api_key"])
    store = open_store(url)
    if reader is not None:
        reader.use_cache(store.engine)
    return store, make_policy(policy, store, **options)
