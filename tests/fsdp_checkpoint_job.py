"""A verl FSDP actor checkpoint of a tiny model, made the way verl's trainer makes one, on CPUs:

    torchrun --nproc_per_node 2 tests/fsdp_checkpoint_job.py MODEL_DIR CKPT_DIR

Two processes (gloo) shard the tiny Qwen2 of the `tiny_model` fixture (conftest.py) with FSDP2, train a step,
and save with verl's `FSDPCheckpointManager`: `global_step_1/actor` holds the FSDP shards only
(verl's default contents), `global_step_2/actor` also the Hugging Face copy (`hf_model`, what our
configs ask for). Rank 0 writes the trained weights of each step to `reference_step_N.pt`.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
import torch.distributed as dist
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from transformers import AutoModelForCausalLM, AutoTokenizer
from verl.utils.checkpoint.fsdp_checkpoint_manager import FSDPCheckpointManager


def train_step(model: torch.nn.Module, optimizer: torch.optim.Optimizer, vocab: int) -> float:
    ids = torch.randint(0, vocab, (2, 24))
    loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    return float(loss)


def full_state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))


def main(model_dir: str, ckpt_dir: str) -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    module = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    # FSDP2, as verl's `strategy: fsdp2`, on a CPU mesh (FSDP1 refuses a CPU device for the full
    # state dict verl's hf_model copy gathers with offload_to_cpu).
    mesh = init_device_mesh("cpu", (dist.get_world_size(),), mesh_dim_names=("fsdp",))  # as verl names it
    for layer in module.model.layers:
        fully_shard(layer, mesh=mesh)
    model = fully_shard(module, mesh=mesh)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    for step, contents in (
        (1, ["model", "optimizer", "extra"]),
        (2, ["model", "optimizer", "extra", "hf_model"]),
    ):
        train_step(model, optimizer, module.config.vocab_size)
        manager = FSDPCheckpointManager(
            model, optimizer, None, processing_class=tokenizer,
            checkpoint_config={"save_contents": contents, "load_contents": contents},
        )
        manager.save_checkpoint(str(Path(ckpt_dir) / f"global_step_{step}" / "actor"), global_step=step)
        state = full_state(model)
        if rank == 0:
            torch.save(state, Path(ckpt_dir) / f"reference_step_{step}.pt")
            (Path(ckpt_dir) / "latest_checkpointed_iteration.txt").write_text(str(step))
        dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
