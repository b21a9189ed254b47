"""Fine-tuning a student on weighted trajectories: one loop, top to bottom (nanoGPT-style).

    from memupdate.rl.distill.finetune import TrainConfig, finetune
    report = finetune("smollm2-dir", "out/student", examples, held_out, TrainConfig(top_layers=4, learning_rate=3e-4))
    report["held_out_loss"]  # per epoch, on trajectories training never sees: the measure of the learning rate

`examples` are `(messages, weight)` pairs: chat-template dicts as the student saw them (`student_messages`)
and the weight of their loss (1 for imitation, the scaled advantage for an advantage-weighted update).
Only the assistant's tokens count (`render.tokenize_with_mask`):
- weight w > 0: w x cross-entropy, pulled up as far as the epochs take it (the teacher's trajectories are
  far from the student, so a bound like PPO's would stop imitation early);
- weight w < 0: |w| x max(ratio, 1 - clip) per token, ratio = p_now / p_at_start: PPO's clipped objective
  for a negative advantage. Each token is pushed down until its probability has fallen by `clip`, then left
  alone, so a harmful trajectory is made rarer without driving its shared tokens (the call format) to zero.

On a GPU the weights stay float32 (a 1e-5 step is below bf16's resolution) under bf16 autocast.
With `lora_rank = r > 0` LoRA adapters train instead (merged into the saved weights; `top_layers` 0).
With `top_layers = k > 0` only the last k transformer layers and the final norm train. The layers below
are frozen, so their output for an example never changes: it is computed once, before the first epoch,
and each optimiser step runs only the top k layers forward and backward. On SmolLM2 (30 layers) with
k = 4 an epoch costs about 4/30 of a full pass instead of a full forward and backward; that is what
makes several epochs affordable on two CPU cores. `top_layers = 0` trains every weight (GPU).
"""

from __future__ import annotations

import json
import math
import random
import resource
import shutil
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from memupdate.store import MemupdateError


@dataclass(frozen=True)
class TrainConfig:
    learning_rate: float = 3e-4
    epochs: int = 3
    batch_size: int = 8  # trajectories per optimiser step (accumulated one at a time)
    top_layers: int = 4  # 0: all weights
    max_length: int = 2048  # tokens per trajectory; the start is kept
    warmup_steps: int = 2
    seed: int = 0
    # Candidates tried first, one short pass each from the same start on up to `sweep_examples` examples;
    # the one with the lowest held-out loss trains (empty: `learning_rate` as given).
    sweep: tuple[float, ...] = ()
    sweep_examples: int = 32
    lora_rank: int = 0  # > 0: LoRA adapters on every linear layer (peft, with the `rl` extra), merged on save
    clip: float = 0.2  # a negative-weight token stops being pushed down once its probability fell by this share
    gradient_checkpointing: bool = False


def finetune(
    start: str | Path,
    out: str | Path,
    examples: Sequence[tuple[list[dict[str, str]], float]],
    held_out: Sequence[list[dict[str, str]]],
    config: TrainConfig,
    tools: list[dict[str, Any]] | None = None,
    progress: Any = None,
) -> dict[str, Any]:
    """Train the checkpoint at `start` on `examples`; save it to `out` (tokenizer, student settings); the report."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.masking_utils import create_causal_mask

    from memupdate.rl.distill.render import tokenize_with_mask

    started = time.perf_counter()
    if config.lora_rank and config.top_layers:
        raise MemupdateError("LoRA trains adapters on every layer: give top_layers=0 with lora_rank > 0")
    torch.manual_seed(config.seed)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    tokenizer = AutoTokenizer.from_pretrained(start, local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(start, local_files_only=True, dtype=torch.float32).to(device)
    if config.gradient_checkpointing:
        model.gradient_checkpointing_enable()
    if config.lora_rank:
        from peft import LoraConfig, get_peft_model

        model = get_peft_model(model, LoraConfig(r=config.lora_rank, lora_alpha=2 * config.lora_rank, target_modules="all-linear"))
    body, head = model.get_decoder(), model.get_output_embeddings()
    layers = body.layers
    split = len(layers) - config.top_layers if config.top_layers else 0

    # 1. Tokenise: ids, the loss mask (assistant tokens), the weight.
    cut = 0

    def encode(messages: list[dict[str, str]]) -> tuple[Any, Any]:
        nonlocal cut
        ids, mask = tokenize_with_mask(tokenizer, messages, tools=tools)
        cut += len(ids) > config.max_length
        ids, mask = ids[: config.max_length], mask[: config.max_length]
        return torch.tensor([ids], device=device), torch.tensor(mask[1:], device=device)  # token t is predicted from those before

    train = [(*encode(m), w) for m, w in examples if w != 0]
    train = [t for t in train if t[1].any()]
    held = [encode(m) for m in held_out]
    if not any(w > 0 for _, _, w in train):
        raise MemupdateError("no trajectory with a positive weight has an assistant token to train on")

    # 2. Freeze the bottom, and compute its output once per example (it never changes).
    if split:
        for p in model.parameters():
            p.requires_grad_(False)
        for p in [*layers[split:].parameters(), *body.norm.parameters()]:
            p.requires_grad_(True)
    trained = [p for p in model.parameters() if p.requires_grad]  # with LoRA: the adapters

    def bottom(ids: Any) -> Any:
        if not split:
            return None
        with torch.no_grad():
            return body(input_ids=ids, output_hidden_states=True).hidden_states[split]

    train_inputs = [bottom(ids) for ids, _, _ in train]
    held_inputs = [bottom(ids) for ids, _ in held]

    def token_logps(ids: Any, mask: Any, frozen: Any) -> Any:
        """Log-probability of each masked token of one example."""
        if frozen is None:
            with torch.autocast("cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
                hidden = body(input_ids=ids).last_hidden_state
        else:
            positions = torch.arange(ids.shape[1], device=device).unsqueeze(0)
            rotary = body.rotary_emb(frozen, position_ids=positions)
            causal = create_causal_mask(
                config=model.config, inputs_embeds=frozen, attention_mask=None, past_key_values=None, position_ids=positions
            )
            hidden = frozen
            for layer in layers[split:]:
                hidden = layer(hidden, attention_mask=causal, position_embeddings=rotary, position_ids=positions)
            hidden = body.norm(hidden)
        logits = head(hidden[0, :-1][mask]).float()  # only where the loss is: the vocabulary x all tokens is large
        return -torch.nn.functional.cross_entropy(logits, ids[0, 1:][mask], reduction="none")

    def loss_sum(ids: Any, mask: Any, frozen: Any) -> Any:
        return -token_logps(ids, mask, frozen).sum()

    # A pushed-down example's probabilities at the start: its ratios are measured against them.
    with torch.no_grad():
        start_logps = {i: token_logps(ids, mask, train_inputs[i]) for i, (ids, mask, w) in enumerate(train) if w < 0}

    def weighted_loss(i: int) -> Any:
        ids, mask, weight = train[i]
        if weight > 0:
            return weight * loss_sum(ids, mask, train_inputs[i])
        ratio = torch.exp(token_logps(ids, mask, train_inputs[i]) - start_logps[i])
        return -weight * torch.clamp(ratio, min=1.0 - config.clip).sum()

    def held_out_loss() -> float | None:
        if not held:
            return None
        model.eval()
        with torch.no_grad():
            total = sum(float(loss_sum(ids, mask, f)) for (ids, mask), f in zip(held, held_inputs, strict=True))
        model.train()
        return total / sum(int(mask.sum()) for _, mask in held)

    # 3. The loop: AdamW, linear warm-up then linear decay, gradient clipping.
    def train_loop(learning_rate: float, epochs: int, rows: list[int], label: str) -> tuple[list[float], list[float | None]]:
        optimizer = torch.optim.AdamW(trained, lr=learning_rate, weight_decay=0.0)
        steps = epochs * math.ceil(len(rows) / config.batch_size)

        def rate(step: int) -> float:
            return min(1.0, (step + 1) / max(config.warmup_steps, 1)) * max(0.0, 1.0 - step / steps)

        schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, rate)
        losses, held_losses = [], [held_out_loss()]
        order, shuffle, step = list(rows), random.Random(config.seed), 0
        model.train()
        for _ in range(epochs):
            shuffle.shuffle(order)
            for first in range(0, len(order), config.batch_size):
                batch = order[first : first + config.batch_size]
                tokens = sum(int(train[i][1].sum()) for i in batch)
                total = 0.0
                for i in batch:
                    loss = weighted_loss(i) / tokens
                    loss.backward()
                    total += loss.item()
                torch.nn.utils.clip_grad_norm_(trained, 1.0)
                optimizer.step()
                schedule.step()
                optimizer.zero_grad(set_to_none=True)
                losses.append(round(total, 4))
                step += 1
                if progress:
                    progress(label, step, steps)
            held_losses.append(held_out_loss())
        return losses, held_losses

    learning_rate, sweep = config.learning_rate, {}
    if config.sweep and held:
        start_weights = [p.detach().clone() for p in trained]
        pulled = [i for i, (_, _, w) in enumerate(train) if w > 0]
        rows = random.Random(config.seed).sample(pulled, min(config.sweep_examples, len(pulled)))
        for candidate in config.sweep:
            sweep[candidate] = train_loop(candidate, 1, rows, f"learning rate {candidate:g}")[1][-1]
            with torch.no_grad():
                for p, w in zip(trained, start_weights, strict=True):
                    p.copy_(w)
        learning_rate = min(sweep, key=lambda c: sweep[c])
    losses, held_losses = train_loop(learning_rate, config.epochs, list(range(len(train))), "fine-tune")

    # 4. Save: weights (adapters merged), tokenizer, and how the student saw its prompts.
    if config.lora_rank:
        model = model.merge_and_unload()
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    model.to("cpu").save_pretrained(out)
    tokenizer.save_pretrained(out)
    from memupdate.agent.policies.hf import STUDENT_SETTINGS

    if (Path(start) / STUDENT_SETTINGS).is_file():
        shutil.copy2(Path(start) / STUDENT_SETTINGS, out / STUDENT_SETTINGS)
    report = {
        **asdict(config),
        "examples": len(train),
        "pushed_down": sum(w < 0 for _, _, w in train),
        "cut_to_max_length": cut,
        "held_out_examples": len(held),
        "trained_tokens": sum(int(m.sum()) for _, m, _ in train),
        "trained_parameters": sum(p.numel() for p in trained),
        "steps": len(losses),
        "learning_rate": learning_rate,
        "sweep_held_out_loss": {f"{c:g}": round(v, 4) for c, v in sweep.items()},
        "losses": losses,
        "loss_first": losses[0],
        "loss_last": losses[-1],
        "held_out_loss": [None if v is None else round(v, 4) for v in held_losses],
        "seconds": round(time.perf_counter() - started, 1),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
    }
    (out / "training.json").write_text(json.dumps(report, indent=1))
    return json.loads(json.dumps(report))  # as a resumed run reads it back (tuples become lists)
