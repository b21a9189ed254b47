"""`memupdate rl export`: a verl FSDP checkpoint -> a Hugging Face folder the memory graph loads.

    from memupdate.rl.verl.export import export_checkpoint
    result = export_checkpoint("checkpoints/memupdate/locomo_memory_grpo", "models/grpo")   # latest step
    result.out, result.step, result.source

    memupdate agent run --namespace locomo/conv-26 --policy hf --model models/grpo
    memupdate eval --locomo locomo10.json --policy hf --model models/grpo

`CKPT_DIR` is verl's `trainer.default_local_dir` (the latest `global_step_N`, or `--step N`), one
`global_step_N` folder, or its `actor` folder. When the checkpoint saved a Hugging Face copy
(`actor/huggingface/` with weights: the configs ask for it with `save_contents: [..., hf_model]`)
that copy is used; otherwise verl's own model merger joins the FSDP shards
(`model_world_size_W_rank_R.pt` + `fsdp_config.json`). The result is checked the way the graph
will use it (config, tokenizer, a chat template that renders Hermes tool calls and tool results) and
gets a `memupdate.json`: base model, step, source and the training config `memupdate rl train` saved.
"""

from __future__ import annotations

import json
import re
import shutil
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from memupdate.errors import MemupdateError

METADATA_FILE = "memupdate.json"
# Written by `memupdate rl train` into trainer.default_local_dir: the resolved config of the run.
TRAIN_CONFIG_FILE = "memupdate_train.yaml"
_STEP = re.compile(r"^global_step_(\d+)$")
_WEIGHTS = ("*.safetensors", "pytorch_model*.bin")


class ExportError(MemupdateError):
    """The checkpoint cannot be exported; the message names the folder and the fix."""


@dataclass(frozen=True)
class ExportResult:
    out: Path
    actor_dir: Path
    step: int | None
    source: str  # "huggingface copy" or "merged FSDP shards"
    base_model: str | None


def find_actor_dir(ckpt_dir: Path, step: int | None = None) -> tuple[Path, int | None]:
    """The `actor` folder of the checkpoint to export, and its step."""
    ckpt_dir = Path(ckpt_dir)
    if not ckpt_dir.is_dir():
        raise ExportError(
            f"checkpoint folder {ckpt_dir} does not exist: give verl's trainer.default_local_dir or a global_step_N folder"
        )
    if _is_actor(ckpt_dir):
        return ckpt_dir, _step_of(ckpt_dir.parent)
    if _is_actor(ckpt_dir / "actor"):
        return ckpt_dir / "actor", _step_of(ckpt_dir)
    steps = {int(m.group(1)): p for p in ckpt_dir.iterdir() if p.is_dir() and (m := _STEP.match(p.name))}
    if not steps:
        raise ExportError(
            f"{ckpt_dir} holds no verl checkpoint (no global_step_N/actor with fsdp_config.json or a huggingface/ copy): "
            "point at trainer.default_local_dir of a run with trainer.save_freq > 0"
        )
    if step is None:
        latest = ckpt_dir / "latest_checkpointed_iteration.txt"
        step = int(latest.read_text().strip()) if latest.is_file() else max(steps)
    if step not in steps:
        raise ExportError(f"no global_step_{step} in {ckpt_dir}: the steps saved are {sorted(steps)}")
    actor = steps[step] / "actor"
    if not _is_actor(actor):
        raise ExportError(
            f"{actor} is not a verl actor checkpoint (no fsdp_config.json, no huggingface/ weights)"
        )
    return actor, step


def _is_actor(path: Path) -> bool:
    return path.is_dir() and ((path / "fsdp_config.json").is_file() or _has_weights(path / "huggingface"))


def _has_weights(path: Path) -> bool:
    return path.is_dir() and any(any(path.glob(pattern)) for pattern in _WEIGHTS)


def _step_of(path: Path) -> int | None:
    match = _STEP.match(path.name)
    return int(match.group(1)) if match else None


def export_checkpoint(
    ckpt_dir: Path | str, out: Path | str, *, step: int | None = None, merge: bool = False
) -> ExportResult:
    """Write the checkpoint as a Hugging Face folder at `out` (see the module docstring).

    `merge=True` joins the FSDP shards even when a Hugging Face copy exists."""
    actor, step = find_actor_dir(Path(ckpt_dir), step)
    out = Path(out)
    if out.exists() and any(out.iterdir()):
        raise ExportError(f"output folder {out} is not empty: choose a new folder")
    hf_copy = actor / "huggingface"
    try:
        if _has_weights(hf_copy) and not merge:
            shutil.copytree(hf_copy, out, dirs_exist_ok=True)
            source = "huggingface copy"
        else:
            _merge_fsdp_shards(actor, out)
            source = "merged FSDP shards"
        check_hf_folder(out)
    except BaseException:
        shutil.rmtree(out, ignore_errors=True)  # never leave a half-written model behind
        raise
    train_config = _train_config(actor)
    base_model = _base_model(train_config, out)
    metadata = {
        "producer": "memupdate rl export",
        "base_model": base_model,
        "step": step,
        "source": source,
        "checkpoint": str(actor.resolve()),
        "exported_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "config": train_config,
    }
    (out / METADATA_FILE).write_text(json.dumps(metadata, indent=2, default=str) + "\n")
    return ExportResult(out, actor, step, source, base_model)


def _merge_fsdp_shards(actor: Path, out: Path) -> None:
    from verl.model_merger.base_model_merger import ModelMergerConfig
    from verl.model_merger.fsdp_model_merger import FSDPModelMerger

    if not (actor / "fsdp_config.json").is_file() or not any(actor.glob("model_world_size_*_rank_*.pt")):
        raise ExportError(
            f"{actor} has neither FSDP shards (model_world_size_*_rank_*.pt + fsdp_config.json) nor huggingface/ weights"
        )
    if not (actor / "huggingface" / "config.json").is_file():
        raise ExportError(
            f"{actor / 'huggingface'} has no config.json: verl saves it with every checkpoint; is the folder complete?"
        )
    out.mkdir(parents=True, exist_ok=True)
    config = ModelMergerConfig(
        operation="merge", backend="fsdp", local_dir=str(actor), target_dir=str(out),
        hf_model_config_path=str(actor / "huggingface"),
    )
    merger = FSDPModelMerger(config)
    try:
        merger.merge_and_save()
    except (AssertionError, NotImplementedError, KeyError, RuntimeError) as exc:
        raise ExportError(f"verl's model merger cannot merge {actor}: {type(exc).__name__}: {exc}") from None
    finally:
        merger.cleanup()


def check_hf_folder(path: Path) -> None:
    """The folder loads as the `hf` policy loads it: config, tokenizer, and a chat template that renders
    the tools, a Hermes tool call and a tool result. ExportError naming what is missing."""
    from transformers import AutoConfig

    from memupdate.llm.checkpoints import checkpoint_tokenizer

    try:
        AutoConfig.from_pretrained(path, local_files_only=True)
        tokenizer = checkpoint_tokenizer(path)
    except (OSError, ValueError) as exc:
        raise ExportError(f"{path} does not load as a Hugging Face model: {exc}") from None
    from memupdate.agent.tools import tool_schemas

    call = {"type": "function", "function": {"name": "search_memory", "arguments": {"query": "Ann"}}}
    messages = [
        {"role": "system", "content": "s"}, {"role": "user", "content": "u"},
        {"role": "assistant", "content": "", "tool_calls": [call]}, {"role": "tool", "content": "[f0001] result"},
    ]
    try:
        text = tokenizer.apply_chat_template(
            messages, tools=tool_schemas(), add_generation_prompt=True, tokenize=False
        )
    except Exception as exc:  # jinja raises its own errors
        raise ExportError(f"the chat template in {path} cannot render a tool call: {exc}") from None
    missing = [marker for marker in ("search_memory", "<tool_call>", "[f0001] result") if marker not in text]
    if missing:
        raise ExportError(
            f"the chat template in {path} does not render Hermes tool calls (missing {missing}): the graph's hf "
            "policy and verl's rollout need a Qwen2.5-style template"
        )


def _train_config(actor: Path) -> dict[str, Any] | None:
    """The config `memupdate rl train` saved beside the checkpoints, if this run was started that way."""
    for folder in (actor.parent.parent, actor.parent):
        path = folder / TRAIN_CONFIG_FILE
        if path.is_file():
            import yaml

            return yaml.safe_load(path.read_text())
    return None


def _base_model(train_config: dict[str, Any] | None, out: Path) -> str | None:
    if train_config:
        path = (train_config.get("actor_rollout_ref") or {}).get("model", {}).get("path")
        if path:
            return str(path)
    config = json.loads((out / "config.json").read_text())
    return config.get("_name_or_path") or None
