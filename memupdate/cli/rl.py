"""`memupdate rl`: train with verl, export what was trained, distill offline."""

from __future__ import annotations

import typer

app = typer.Typer(help="Train a memory-editing policy (verl GRPO/DAPO, offline distillation) and export it.", no_args_is_help=True)
