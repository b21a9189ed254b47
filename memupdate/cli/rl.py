"""`memupdate rl`: train with verl, export what was trained, learn offline (`rl learn`, in learn.py).

    memupdate rl train --dry-run                                   # checks, then prints the command and config
    memupdate rl train --config locomo_memory_dapo trainer.n_gpus_per_node=4
    memupdate rl export checkpoints/memupdate/locomo_memory_grpo models/grpo
"""

from __future__ import annotations

from pathlib import Path

import typer

from memupdate.cli.common import URL_OPTION, console, err_console, user_errors

app = typer.Typer(help="Train a memory-editing policy (verl GRPO/DAPO, offline distillation) and export it.", no_args_is_help=True)


@app.command("train", context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
@user_errors
def rl_train(
    overrides: list[str] | None = typer.Argument(
        None, help="Hydra overrides for verl, e.g. trainer.n_gpus_per_node=4 actor_rollout_ref.model.path=/models/qwen"
    ),
    config: str = typer.Option(
        "locomo_memory_grpo", "--config", help="A config in configs/ (locomo_memory_grpo, locomo_memory_dapo, locomo_memory_compaction_grpo, relation_grpo) "
        "or a .yaml path."
    ),
    dry_run: bool = typer.Option(False, "--dry-run", help="Check everything, print the command and config, run nothing."),
    prune_older_than: str = typer.Option(
        "1h", "--prune-older-than", help="Drop leftover trajectory forks not written for this long (e.g. 30m, 6h)."
    ),
    keep_forks: bool = typer.Option(False, "--keep-forks", help="Do not drop leftover forks at start-up."),
    url: str | None = URL_OPTION,
) -> None:
    """Check the database, base namespaces and parquet files, then run verl's trainer (GPUs needed)."""
    from memupdate.errors import MemupdateError
    from memupdate.rl.leftover_forks import parse_duration
    from memupdate.rl.verl.launch import plan_training

    try:
        prune_after = None if keep_forks else parse_duration(prune_older_than)
    except ValueError as exc:
        raise MemupdateError(f"--prune-older-than: {exc}") from None
    with console.status("composing the config and checking the database and data ..."):
        plan = plan_training(config, overrides or [], url=url, prune_after=prune_after, dry_run=dry_run)
    for line in plan.checks:
        err_console.print(f"[green]ok[/] {line}", highlight=False)
    if dry_run:
        # Plain text, never wrapped: both are meant to be copied or piped.
        typer.echo("# resolved config\n" + plan.config_yaml())
        typer.echo("# command\n" + plan.shell_command())
        return
    err_console.print(f"running verl; checkpoints in {plan.checkpoint_dir}", highlight=False)
    raise typer.Exit(plan.run())


@app.command("export")
@user_errors
def rl_export(
    ckpt_dir: Path = typer.Argument(..., help="verl's trainer.default_local_dir, a global_step_N folder or its actor folder."),
    out: Path = typer.Argument(..., help="A new folder for the Hugging Face model."),
    step: int | None = typer.Option(None, "--step", help="The global step to export (default: the latest)."),
    merge: bool = typer.Option(False, "--merge", help="Join the FSDP shards even when a huggingface/ copy exists."),
) -> None:
    """Turn a verl FSDP checkpoint into a Hugging Face folder that `--policy hf --model OUT` loads."""
    from memupdate.rl.verl.export import export_checkpoint

    with console.status(f"exporting {ckpt_dir} ..."):
        result = export_checkpoint(ckpt_dir, out, step=step, merge=merge)
    console.print(
        f"exported step {result.step if result.step is not None else '?'} of {result.actor_dir} ({result.source}, "
        f"base model {result.base_model or 'unknown'}) to {result.out}\n"
        f"run it: memupdate agent run --namespace locomo/conv-26 --policy hf --model {result.out}",
        highlight=False,
    )
