"""`memupdate judge`: the relation judge's data, training and measurement.

    memupdate judge pairs --data ../shared/data --out data/relations     # train / recipe / eval .jsonl, by person
    memupdate judge train --data ../shared/data --out runs/judge         # ~20 min on 2 cores; --ship copies the weights
    memupdate judge screen --data ../shared/data --out runs/screen --ship   # the screen over stored vectors
    memupdate judge confirm --data ../shared/data --out runs/cascade      # the judge with a larger confirmer (opt-in)
    memupdate judge learn --data ../shared/data --out runs/relation --sft-from runs/judge   # GRPO from SFT; --ship
                                                  # (= memupdate rl learn --task relation ..., the same options)
    memupdate eval relations --file data/relations/eval.jsonl --judge rule,local   # precision, recall, intervals
"""

from __future__ import annotations

import inspect
import json
import shutil
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import fields
from pathlib import Path
from typing import Any, get_type_hints

import typer

from memupdate.cli.common import DEV_DATA, console, user_errors
from memupdate.cli.learn import relation_signature, run_learning
from memupdate.judge.train import JudgeTrainConfig

app = typer.Typer(help="The relation judge: labelled pairs, training, the shipped weights.", no_args_is_help=True)

@app.command("pairs")
@user_errors
def pairs_command(
    data: Path = typer.Option(DEV_DATA, "--data", help="The development data folder (locomo/, memoryagentbench/, natural-updates/)."),
    out: Path = typer.Option(Path("data/relations"), "--out", help="Folder for train.jsonl, recipe.jsonl, eval.jsonl."),
) -> None:
    """Labelled pairs from the development data, split by person (generated pairs are added at training)."""
    from memupdate.judge.pairs import write_pairs

    parts = _parts(data)
    for name, pairs in parts.items():
        write_pairs(pairs, out / f"{name}.jsonl")
        console.print(f"{name}: {len(pairs)} pairs -> {out / f'{name}.jsonl'}", highlight=False)


TRAIN_INPUTS = [
    inspect.Parameter("data", inspect.Parameter.KEYWORD_ONLY, annotation=Path,
                      default=typer.Option(DEV_DATA, "--data", help="The development data folder.")),
    inspect.Parameter("out", inspect.Parameter.KEYWORD_ONLY, annotation=Path,
                      default=typer.Option(Path("runs/judge"), "--out", help="The checkpoint folder to write.")),
    inspect.Parameter("ship", inspect.Parameter.KEYWORD_ONLY, annotation=bool,
                      default=typer.Option(False, "--ship", help="Copy the trained weights into judge/weights/ (the default judge).")),
    inspect.Parameter("reliability", inspect.Parameter.KEYWORD_ONLY, annotation=Path | None,
                      default=typer.Option(None, "--reliability", help="Draw the reliability curve on the recipe pairs to this PNG.")),
]


def recipe_parameters(config: type = JudgeTrainConfig) -> list[inspect.Parameter]:
    """One option per field of `config` (a recipe dataclass): `--name-with-dashes`, its default and help."""
    types = get_type_hints(config)
    return [inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY, annotation=types[f.name],
                              default=typer.Option(f.default, f"--{f.name.replace('_', '-')}", help=f.metadata["help"],
                                                   rich_help_panel="The recipe"))
            for f in fields(config)]


@user_errors
def train_command(**given: Any) -> None:
    """Train the local judge on the training part (plus generated pairs and every pair once more in another
    form), calibrate on the recipe part."""
    from memupdate.judge.train import train_judge
    from memupdate.rl.data.relations import judge_data

    data, out = given["data"], given["out"]
    config = JudgeTrainConfig(**{f.name: given[f.name] for f in fields(JudgeTrainConfig)})
    _data_folder(data)
    with console.status("reading the development data ..."):
        got = judge_data(data, generated=config.generated, unrelated=config.unrelated, seed=config.seed)
    started = time.time()
    with _training_bar("the judge") as progress:
        card = train_judge(got.train, got.recipe, config, out, recipe_banks=got.recipe_banks, progress=progress)
    console.print(f"trained on {len(got.train)} pairs in {(time.time() - started) / 60:.1f} min; temperature "
                  f"{card['temperature']}, applies itself at {card['auto_apply']} (calibrated on {card['calibrated_on']['pairs']} "
                  f"pairs that meet in {card['calibrated_on']['banks']} recipe banks); checkpoint in {out}", highlight=False)
    if given["reliability"]:
        from memupdate.judge.calibration import plot_reliability
        from memupdate.judge.calibration import reliability as bins
        from memupdate.judge.local import LocalJudge
        from memupdate.judge.pairs import right

        verdicts = LocalJudge(out).judge([p.statements for p in got.recipe])
        rows = bins([v.confidence for v in verdicts], [right(p, v) for v, p in zip(verdicts, got.recipe, strict=True)])
        plot_reliability(rows, given["reliability"], threshold=card["auto_apply"]["update"], title=f"recipe pairs kept out of training ({len(verdicts)})")
        console.print(f"reliability curve: {given['reliability']}", highlight=False)
    if given["ship"]:
        _ship_judge(out, card)


# Typer reads the options from the signature, as `rl learn` reads LearnConfig's.
train_command.__signature__ = inspect.Signature([*TRAIN_INPUTS, *recipe_parameters()])
app.command("train")(train_command)


@user_errors
def confirm_command(**given: Any) -> None:
    """Train a confirmer (all-mpnet-base-v2) that reads again the pairs the local judge gives a chance of a
    change and does not apply (its reading orders the review queue), and calibrate the two together on the
    recipe part: a judge folder to pass as --judge or MEMUPDATE_JUDGE."""
    from memupdate.judge.confirm import ConfirmTrainConfig, mpnet_base, train_confirmer
    from memupdate.rl.data.relations import judge_data

    data, out = given["data"], given["out"]
    config = ConfirmTrainConfig(**{f.name: given[f.name] for f in fields(ConfirmTrainConfig)})
    _data_folder(data)
    base = mpnet_base()  # before the data: a missing base stops here, in one line
    with console.status("reading the development data ..."):
        got = judge_data(data, generated=JudgeTrainConfig.generated, unrelated=JudgeTrainConfig.unrelated, seed=config.seed)
    started = time.time()
    with _training_bar("the confirmer") as progress:
        card = train_confirmer(got.train, got.recipe_banks, config, out, judge_dir=given["judge"], base=base, progress=progress)
    console.print(f"trained on {card['confirmer']['candidates']} of {len(got.train)} pairs in {(time.time() - started) / 60:.1f} min; "
                  f"the two apply by themselves and ask at {card['auto_apply']} (calibrated on {card['calibrated_on']['pairs']} pairs that meet "
                  f"in {card['calibrated_on']['banks']} recipe banks); use it with --judge {out} or MEMUPDATE_JUDGE={out}", highlight=False)


@contextmanager
def _training_bar(what: str) -> Iterator[Callable[[int, int, float], None]]:
    """A progress bar for training `what`; yields the `progress(step, steps, loss)` a training loop calls."""
    from rich.progress import Progress

    with Progress(console=console) as bar:
        task = bar.add_task(f"training {what}", total=None)
        yield lambda step, steps, loss: bar.update(task, completed=step, total=steps, description=f"training {what} (loss {loss:.3f})")


def _confirm_parameters() -> list[inspect.Parameter]:
    from memupdate.judge.confirm import ConfirmTrainConfig

    out = inspect.Parameter("out", inspect.Parameter.KEYWORD_ONLY, annotation=Path,
                            default=typer.Option(Path("runs/cascade"), "--out", help="The judge folder to write (the local judge and its confirmer)."))
    judge = inspect.Parameter("judge", inspect.Parameter.KEYWORD_ONLY, annotation=Path | None,
                              default=typer.Option(None, "--judge", help="The local judge's checkpoint folder (default the built one)."))
    return [TRAIN_INPUTS[0], out, judge, *recipe_parameters(ConfirmTrainConfig)]


confirm_command.__signature__ = inspect.Signature(_confirm_parameters())
app.command("confirm")(confirm_command)


@app.command("calibrate")
@user_errors
def calibrate_command(
    out: Path = typer.Option(..., "--out", help="The judge checkpoint folder to calibrate again (its card is rewritten)."),
    data: Path = typer.Option(DEV_DATA, "--data", help="The development data folder."),
    ship: bool = typer.Option(False, "--ship", help="Copy the weights and the new card into judge/weights/."),
) -> None:
    """The auto-apply and ask thresholds again, on every pair that meets in the recipe part's banks (in every
    calibration form), without training: after a change of the decision (`judge.decision`)."""
    from memupdate.judge.train import calibrate_on_banks
    from memupdate.rl.data.relations import recipe_banks

    _data_folder(data)
    with console.status("calibrating on the recipe banks ..."):
        card = calibrate_on_banks(out, recipe_banks(data), JudgeTrainConfig().target_precision)
    console.print(f"{out}: applies itself at {card['auto_apply']} (on {card['calibrated_on']['pairs']} pairs that meet in "
                  f"{card['calibrated_on']['banks']} recipe banks)", highlight=False)
    if ship:
        _ship_judge(out, card)


@app.command("screen")
@user_errors
def screen_command(
    data: Path = typer.Option(DEV_DATA, "--data", help="The development data folder."),
    out: Path = typer.Option(Path("runs/screen"), "--out", help="The folder for the judge's readings (cached: a rerun reads no pair) and the screen."),
    ship: bool = typer.Option(False, "--ship", help="Copy the screen into judge/weights/ (used with the shipped judge)."),
) -> None:
    """Train the screen that drops, from the two memories' stored vectors, the pairs the shipped judge would
    leave: fitted on the training part's pairs that meet, its threshold chosen on the recipe part's (at least
    RECALL of the pairs the judge applies or asks about kept in every source)."""
    from rich.progress import Progress
    from rich.table import Table

    from memupdate.judge.screen import RECALL, judge_digest
    from memupdate.rl.screen_training import judge_readings, train_screen

    _data_folder(data)
    with console.status("the judge's readings of every pair that meets ...") as status:
        readings = judge_readings(data, out, progress=status.update)
    with Progress(console=console) as bar:
        task = bar.add_task("training the screen", total=None)
        screen, figures = train_screen(readings, judge_digest(), progress=lambda step, steps, loss: bar.update(task, completed=step, total=steps))
    table = Table("source", "pairs that meet", "dropped", "applies + asks", "lost", title=f"the recipe part, threshold {screen.threshold:.3f} (recall {RECALL})")
    for source, row in figures["sources"].items():
        table.add_row(source, str(row["pairs"]), f"{row['dropped_share']:.1%}", str(row["worthy"]), f"{row['lost']} ({row['lost_share']:.2%})")
    console.print(table)
    console.print("dropped at each recall kept in every source: " + ", ".join(f"{r}: {d:.1%}" for r, d in figures["drop_at_recall"].items()), highlight=False)
    path = screen.save(out / "relation-screen.npz")
    console.print(f"screen: {path}", highlight=False)
    if ship:
        console.print(f"shipped: {screen.save()}", highlight=False)


def _ship_judge(out: Path, card: dict) -> None:
    from memupdate.judge.local import SHIPPED_CARD, SHIPPED_DELTA

    shutil.copy(out / "relation-judge.safetensors", SHIPPED_DELTA)
    SHIPPED_CARD.write_text(json.dumps(card, indent=2) + "\n")
    console.print(f"shipped: {SHIPPED_DELTA}", highlight=False)


@user_errors
def learn_command(**given) -> None:
    """`memupdate rl learn --task relation`, for short: SFT, then GRPO over sampled verdicts rewarded by the
    QA change each decision makes (rerun the same command to resume)."""
    run_learning(given | {"task": "relation"})


learn_command.__signature__ = relation_signature()  # `rl learn`'s options that the relation task reads
app.command("learn")(learn_command)


def relations_eval_command(
    file: Path | None = typer.Option(None, "--file", help="Labelled pairs, JSON lines: first, second, label[, first_time, second_time]."),
    judge: str = typer.Option("rule,local", "--judge", help="Judges, comma-separated: rule, local, a checkpoint folder, openai:<model>."),
    judge_base_url: str | None = typer.Option(None, "--judge-base-url", help="The endpoint of an openai: judge."),
    judge_api_key: str | None = typer.Option(None, "--judge-api-key"),
    out: Path | None = typer.Option(None, "--out", help="Also write the figures as JSON here."),
    sources: str | None = typer.Option(None, "--sources", help="Only pairs whose source begins with one of these, comma-separated (e.g. jenverse,longmemeval)."),
    downstream: bool = typer.Option(False, "--downstream", help="Also build a bank per group (person), compact it with the defaults reading each judge, and count updates resolved, compatible pairs harmed, duplicates merged, statements lost."),
    url: str | None = typer.Option(None, "--url", help="Database URL for --downstream and an endpoint's reply cache (default: the configured or embedded one)."),
    store_view: Path | None = typer.Option(None, "--store-view", help="The development data folder: build a bank per person from each source and judge every pair that meets (not only labelled ones): what each judge's auto-apply decision does by itself."),
    part: str = typer.Option("eval", "--part", help="With --store-view: the part of the people read (eval, recipe or train)."),
    forms: str = typer.Option("given", "--forms", help="With --store-view: the forms the banks are read in, comma-separated: given, first, third, names, past (text.forms)."),
    plot: Path | None = typer.Option(None, "--plot", help="With --store-view: draw the first judge's curves in its first form here (PNG): natural updates by themselves and wrong applies against the model-update bound, and each source's precision-recall curve."),
) -> None:
    """Per-decision precision and recall (95% Wilson intervals), accuracy, and the share of both-true pairs
    harmed, for each judge on the same pairs; generated pairs in the file are left out. With
    --store-view, per source of a person's store: what applies by itself, its precision, the true facts
    it retires, the updates resolved by themselves or waiting for review."""
    from memupdate.errors import MemupdateError
    from memupdate.judge.judges import make_judge
    from memupdate.judge.meeting import MEET_FLOOR, MEET_K, meeting_recall
    from memupdate.judge.pairs import (
        Rate,
        read_pairs,
        score_judge,
    )
    from memupdate.store import get_embedder

    if store_view is not None:
        _store_view(store_view, part, judge, sources, out, judge_base_url, judge_api_key, forms, plot)
        return
    if file is None:
        raise MemupdateError("give --file (labelled pairs) or --store-view (the development data folder)")
    pairs = [p for p in read_pairs(file) if not p.generated]
    if sources:
        pairs = [p for p in pairs if p.source.startswith(tuple(x.strip() for x in sources.split(",")))]
        if not pairs:
            raise MemupdateError(f"no pair of {file} comes from a source beginning with {sources!r}: check --sources")
    met = meeting_recall(pairs, get_embedder().embed)
    console.print(f"pairs that meet (each statement's {MEET_K} nearest at cosine >= {MEET_FLOOR}, a bank a group): "
                  + ", ".join(f"{label} {Rate(*counts)}" for label, counts in sorted(met.items())), highlight=False)
    reports = []
    for spec in [s.strip() for s in judge.split(",") if s.strip()]:
        cache = None
        if spec.startswith("openai:"):  # an endpoint's replies are kept, so a rerun asks nothing again
            from memupdate.cli.common import open_store
            from memupdate.scoring.llm_cache import LLMReplyCache

            cache = LLMReplyCache(open_store(url).engine)
        j = make_judge(spec, base_url=judge_base_url, api_key=judge_api_key, cache=cache)
        started = time.perf_counter()
        report = score_judge(j, pairs)
        elapsed = time.perf_counter() - started
        reports.append(report)
        console.print(f"[bold]{report.judge}[/bold]: {len(pairs)} pairs, {1000 * elapsed / max(1, len(pairs)):.1f} ms a pair")
        for name, score in report.per_relation.items():
            console.print(f"  {name:<9} precision {score.precision}   recall {score.recall}", highlight=False)
        console.print(f"  accuracy {report.accuracy}   both-true harmed {report.harmed}", highlight=False)
        if downstream:
            from memupdate.cli.common import open_store
            from memupdate.rl.relation_banks import compact_pair_banks

            with console.status(f"compacting a bank per group with {report.judge} ..."):
                banks = compact_pair_banks(open_store(url), pairs, j)
            report.downstream = banks.to_json()
            console.print(f"  downstream ({banks.banks} banks): updates resolved {banks.updates_resolved}   compatible "
                          f"harmed {banks.compatible_harmed}   duplicates merged {banks.duplicates_merged}   lost {banks.lost}", highlight=False)
    _compare_judges(pairs, reports)
    if out:
        out.write_text(json.dumps([r.to_json() | {"rule_wrong_right": r.rule_wrong, "minus_first": r.minus_first}
                                   | ({"downstream": r.downstream} if r.downstream else {}) for r in reports], indent=2))


def _compare_judges(pairs, reports) -> None:
    """Each judge's share right where the rule is wrong, and each minus the first on the same pairs
    (accuracy paired over pairs, update F1 by a paired bootstrap), printed and kept on its report."""
    from memupdate.judge.pairs import paired_difference, paired_f1_difference, right
    from memupdate.judge.rule import RuleJudge

    rule = RuleJudge().judge([p.statements for p in pairs])
    rule_wrong = [i for i, (p, v) in enumerate(zip(pairs, rule, strict=True)) if not right(p, v)]
    for report in reports:
        report.rule_wrong = (sum(right(pairs[i], report.verdicts[i]) for i in rule_wrong), len(rule_wrong))
    console.print("where the rule is wrong, right: " + ", ".join(f"{r.judge} {r.rule_wrong[0]}/{r.rule_wrong[1]}" for r in reports), highlight=False)
    for report in reports[1:]:
        mean, low, high = paired_difference(pairs, reports[0].verdicts, report.verdicts)
        f1, f1_low, f1_high = paired_f1_difference(pairs, reports[0].verdicts, report.verdicts)
        report.minus_first = {"accuracy": [mean, low, high], "update_f1": [f1, f1_low, f1_high], "of": reports[0].judge}
        console.print(f"{report.judge} - {reports[0].judge}: accuracy {mean:+.3f} [{low:+.3f}, {high:+.3f}] (paired over pairs), "
                      f"update F1 {f1:+.3f} [{f1_low:+.3f}, {f1_high:+.3f}] (paired bootstrap)", highlight=False)


relations_eval_command = user_errors(relations_eval_command)


def _store_view(data: Path, part: str, judges: str, sources: str | None, out: Path | None,
                base_url: str | None, api_key: str | None, forms: str = "given", plot: Path | None = None) -> None:
    """`eval relations --store-view`: each judge's auto-apply decision over every pair that meets in the
    banks of `part`'s people, per source and form (`judge.store_view`; LoCoMo's and FactConsolidation's
    banks only as given); `plot`: the first judge's curves in the first form (`judge.calibration.plot_bound`)."""
    from rich.table import Table

    from memupdate.errors import MemupdateError
    from memupdate.judge.judges import make_judge
    from memupdate.judge.store_view import judge_banks, store_view
    from memupdate.rl.data.relation_forms import bank_in_form
    from memupdate.rl.data.relations import LARGE_SOURCES, store_banks
    from memupdate.text.forms import FORMS

    if part not in ("train", "recipe", "eval"):
        raise MemupdateError(f"--part {part!r} is not a part: use eval, recipe or train")
    chosen_forms = [f.strip() for f in forms.split(",") if f.strip()]
    if not chosen_forms or set(chosen_forms) - set(FORMS):
        raise MemupdateError(f"--forms {forms!r}: use some of {', '.join(FORMS)}, comma-separated")
    _data_folder(data)
    with console.status("building a bank per person ..."):
        banks = store_banks(data)[part]
    if sources:
        banks = [b for b in banks if b.source.startswith(tuple(x.strip() for x in sources.split(",")))]
    if not banks:
        raise MemupdateError(f"no bank of the {part} part in {data}" + (f" from {sources!r}" if sources else "") + ": check --store-view and --sources")
    found = []
    for spec in [s.strip() for s in judges.split(",") if s.strip()]:
        judge = make_judge(spec, base_url=base_url, api_key=api_key)
        for form in chosen_forms:
            in_form = [bank_in_form(b, form) for b in banks if form == "given" or b.source not in LARGE_SOURCES]
            started = time.perf_counter()
            verdicts = judge_banks(judge, in_form)
            ms = 1000 * (time.perf_counter() - started) / max(1, len(verdicts))
            reports = store_view(judge, in_form, verdicts=verdicts)
            table = Table("source", "banks", "pairs that meet", "applied by itself", "precision", "true facts retired",
                          "updates by themselves", "updates by themselves or waiting", "duplicates merged", "asks right", "update AP",
                          title=f"{judge.name}, form {form}: {judge.auto_apply}, {ms:.1f} ms a pair")
            for r in reports.values():
                table.add_row(r.source, str(r.banks), str(r.pairs), str(r.applied), str(r.precision), str(r.retired_share),
                              str(r.resolved_by_itself), str(r.resolved_or_asked), f"{r.duplicates_applied}/{r.duplicates}", str(r.ask_precision),
                              "n/a" if r.update_ap is None else f"{r.update_ap:.2f} (base {r.base_rate:.3f})")
            console.print(table)
            found.append({"judge": judge.name, "form": form, "auto_apply": judge.auto_apply.to_json(), "ms_a_pair": round(ms, 2),
                          "part": part, "sources": {k: r.to_json() for k, r in reports.items()},
                          "screen": _screen_table(judge, in_form, verdicts, ms)})
            if plot is not None and len(found) == 1:
                from memupdate.judge.calibration import bound_curve, plot_bound

                found[0]["bound_curve"] = bound_curve(in_form, verdicts, judge.auto_apply)
                plot_bound(found[0]["bound_curve"], reports, plot, bound=judge.auto_apply.update,
                           title=f"{judge.name} on the {part} part, form {form}")
                console.print(f"the curves: {plot}")
    if out:
        out.write_text(json.dumps(found, indent=2))


def _screen_table(judge, banks, verdicts, judge_ms: float) -> dict | None:
    """`eval relations --store-view`: what the judge's screen (`judge.screen`) drops of the pairs that meet,
    per source, and the judge's applies and asks it loses; None for a judge without one."""
    from rich.table import Table

    from memupdate.judge.screen import Screen
    from memupdate.rl.screen_training import screen_view

    screen = Screen.for_judge(judge)
    if screen is None:
        return None
    figures, micro = screen_view(screen, banks, [judge.auto_apply.act(v) for v in verdicts])
    table = Table("source", "pairs that meet", "dropped", "applies + asks", "lost",
                  title=f"its screen (threshold {screen.threshold:.2f}): {micro:.1f} µs a pair, the judge {judge_ms:.1f} ms")
    for source, f in figures.items():
        table.add_row(source, str(f.pairs), f"{f.dropped_share:.1%}", str(f.worthy), f"{f.lost} ({f.lost_share:.2%})")
    total = sum(f.pairs for f in figures.values())
    table.add_row("all", str(total), f"{sum(f.dropped for f in figures.values()) / max(1, total):.1%}",
                  str(sum(f.worthy for f in figures.values())), str(sum(f.lost for f in figures.values())))
    console.print(table)
    return {"threshold": screen.threshold, "us_a_pair": round(micro, 2), "sources": {k: f.to_json() for k, f in figures.items()}}


def _parts(data: Path):
    from memupdate.rl.data.relations import relation_pairs

    _data_folder(data)
    with console.status("reading the development data ..."):
        return relation_pairs(data)


def _data_folder(data: Path) -> None:
    from memupdate.errors import MemupdateError

    if not data.is_dir():
        raise MemupdateError(f"no data folder at {data}: pass --data with the folder holding locomo/, memoryagentbench/, natural-updates/")


@user_errors
def watch_eval_command(
    data: Path = typer.Option(DEV_DATA, "--data", help="The development data folder."),
    part: str = typer.Option("eval", "--part", help="The part of the people written (eval, recipe or train)."),
    sources: str = typer.Option("persona", "--sources", help="Sources whose people are written, comma-separated (persona, jenverse, longmemeval, beam)."),
    out: Path | None = typer.Option(None, "--out", help="Also write the figures as JSON here."),
    url: str | None = typer.Option(None, "--url", help="The server the LangGraph store and the banks live on (default: the configured or embedded one)."),
) -> None:
    """People's stores left to the watcher: each person written into a LangGraph store (one namespace a
    person, each statement at its time), one `watch --once` pass, then the true facts no longer current
    and the updates resolved by themselves (`rl.watch_eval`)."""
    from memupdate.cli.common import open_store
    from memupdate.errors import MemupdateError
    from memupdate.rl.data.relations import store_banks
    from memupdate.rl.watch_eval import watch_banks

    _data_folder(data)
    if part not in ("train", "recipe", "eval"):
        raise MemupdateError(f"--part {part!r} is not a part: use eval, recipe or train")
    with console.status("building a bank per person ..."):
        banks = [b for b in store_banks(data, large=False)[part] if b.source.startswith(tuple(x.strip() for x in sources.split(",")))]
    if not banks:
        raise MemupdateError(f"no person of the {part} part in {data} from {sources!r}: check --sources")
    with console.status(f"writing {len(banks)} people and watching them once ..."):
        report = watch_banks(open_store(url), banks)
    console.print(f"{report.people} people, {report.statements} statements: true facts no longer current {report.true_lost}; "
                  f"updates resolved by themselves {report.updates_by_itself}; {report.applied} changes applied by themselves, "
                  f"{report.waiting} waiting for review ({report.asks_right} of them changes a label asks for); the pass took {report.seconds:.1f} s", highlight=False)
    for person, statement in report.lost[:10]:
        console.print(f"  lost: {person}: {statement}", highlight=False)
    if out:
        out.write_text(json.dumps(report.to_json(), indent=2))
