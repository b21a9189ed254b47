"""`memupdate rl export`: verl checkpoints -> Hugging Face folders the memory graph loads.

No pretrained weights exist here: the model is the tiny Qwen2 of the `tiny_model` fixture (conftest.py, built from
a config, tokenizer trained locally). The fast tests use the layout of verl's `hf_model` copy; the slow
one makes real checkpoints with verl's FSDPCheckpointManager in two CPU processes (torchrun, gloo),
merges one with verl's model merger, and runs the exported model in the memory graph.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

pytest.importorskip("verl")

from typer.testing import CliRunner
from verl_support import REPO, load_base

from memupdate.cli import app
from memupdate.rl.verl.export import METADATA_FILE, TRAIN_CONFIG_FILE, ExportError, export_checkpoint

runner = CliRunner()


@pytest.fixture
def run_dir(tiny_model, tmp_path):
    """trainer.default_local_dir of a run: two steps, each with verl's Hugging Face copy, and the
    config `memupdate rl train` saves."""
    root = tmp_path / "checkpoints"
    for step in (25, 50):
        shutil.copytree(tiny_model, root / f"global_step_{step}" / "actor" / "huggingface")
    (root / "latest_checkpointed_iteration.txt").write_text("50")
    (root / TRAIN_CONFIG_FILE).write_text(
        "actor_rollout_ref:\n  model:\n    path: Qwen/Qwen2.5-3B-Instruct\n"
    )
    return root


def test_export_takes_the_latest_step_and_loads_as_the_hf_policy(run_dir, tmp_path) -> None:
    from memupdate.agent.policies.hf import HuggingFaceChatModel

    result = runner.invoke(app, ["rl", "export", str(run_dir), str(tmp_path / "model")])
    assert result.exit_code == 0, result.output
    assert "exported step 50" in result.output and "huggingface copy" in result.output
    metadata = json.loads((tmp_path / "model" / METADATA_FILE).read_text())
    assert metadata["step"] == 50 and metadata["base_model"] == "Qwen/Qwen2.5-3B-Instruct"
    assert metadata["config"]["actor_rollout_ref"]["model"]["path"] == "Qwen/Qwen2.5-3B-Instruct"
    from langchain_core.messages import HumanMessage

    from memupdate.agent.tools import tool_schemas

    policy = HuggingFaceChatModel.from_pretrained(tmp_path / "model", max_new_tokens=4).bind_tools(
        tool_schemas()
    )
    assert "split_memory" in policy.render_prompt([HumanMessage("Memory bank: locomo/conv-26")])


def test_export_of_one_step_or_actor_folder(run_dir, tmp_path) -> None:
    assert export_checkpoint(run_dir, tmp_path / "a", step=25).step == 25
    assert export_checkpoint(run_dir / "global_step_25", tmp_path / "b").step == 25
    assert export_checkpoint(run_dir / "global_step_25" / "actor", tmp_path / "c").step == 25


@pytest.mark.parametrize(
    ("where", "options", "message"),
    [
        ("missing", {}, "does not exist"),
        ("empty", {}, "holds no verl checkpoint"),
        ("run", {"step": 7}, "no global_step_7 in"),
    ],
)
def test_bad_checkpoint_folders_are_clear(run_dir, tmp_path, where, options, message) -> None:
    folder = {"missing": tmp_path / "nope", "empty": tmp_path, "run": run_dir}[where]
    with pytest.raises(ExportError, match=message):
        export_checkpoint(folder, tmp_path / "out", **options)
    assert not (tmp_path / "out").exists()


def test_output_must_be_new_and_a_template_without_tool_calls_is_refused(run_dir, tmp_path) -> None:
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "x").write_text("x")
    with pytest.raises(ExportError, match="is not empty"):
        export_checkpoint(run_dir, tmp_path / "taken")
    hf = run_dir / "global_step_50" / "actor" / "huggingface"
    (hf / "chat_template.jinja").write_text("{% for m in messages %}{{ m.content }}{% endfor %}")
    with pytest.raises(ExportError, match="does not render Hermes tool calls"):
        export_checkpoint(run_dir, tmp_path / "out")
    assert not (tmp_path / "out").exists()  # nothing half-written left behind


@pytest.mark.slow
def test_fsdp_checkpoints_from_two_cpu_processes_export_and_run_in_the_graph(
    tiny_model, tmp_path, store, database_url
) -> None:
    """~40 s: torchrun, 2 processes, gloo; verl's FSDPCheckpointManager saves, verl's merger merges."""
    import torch
    from transformers import AutoModelForCausalLM

    ckpt = tmp_path / "ckpt"
    job = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
         str(REPO / "tests" / "fsdp_checkpoint_job.py"), str(tiny_model), str(ckpt)],
        capture_output=True, text=True, timeout=600, env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert job.returncode == 0, job.stderr[-3000:]
    merged = export_checkpoint(ckpt, tmp_path / "merged", step=1)  # FSDP shards only
    copied = export_checkpoint(ckpt, tmp_path / "copied")  # latest step: shards + the hf_model copy
    assert (merged.source, copied.source, copied.step) == ("merged FSDP shards", "huggingface copy", 2)
    for result, step in ((merged, 1), (copied, 2)):
        reference = torch.load(ckpt / f"reference_step_{step}.pt")
        exported = AutoModelForCausalLM.from_pretrained(result.out).state_dict()
        for key, value in reference.items():  # verl writes bf16: equal to the trained fp32 weights, rounded
            assert torch.equal(exported[key], value.to(exported[key].dtype)), key

    load_base(store)
    result = runner.invoke(app, ["agent", "run", "--namespace", store.path, "--policy", "hf",
                                 "--model", str(merged.out), "--url", database_url])
    assert result.exit_code == 0, result.output
    assert "stopped:" in result.output and store.count() == 6
