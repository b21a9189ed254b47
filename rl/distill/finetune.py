"""Fine-tuning a student on weighted trajectories: a config, small functions, one loop (nanoGPT-style).

    from memupdate.rl.distill.finetune import TrainConfig, finetune
    report = finetune("smollm2-dir", "out/student", examples, held_out, TrainConfig(top_layers=4, learning_rate=3e-4))
    report["held_out_loss"]  # per epoch, on trajectories training never sees: the measure of the learning rate
    report["kept_epoch"]     # the epoch saved: the last, or with `keep_best` the lowest held-out loss's
    # held_out may be parts ({"locomo": [...], "factconsolidation": [...]}): the loss is the mean of the
    # parts' losses, each part weighing alike however many trajectories it holds (`held_out_loss_by_part`)

`examples` are `(messages, weight)` pairs: chat-template dicts as the student saw them (`student_messages`)
and the weight of their loss (1 for imitation, the scaled advantage for an advantage-weighted update).
Only the assistant's tokens count (`render.tokenize_with_mask`):
- weight w > 0: w x cross-entropy, pulled up as far as the epochs take it (the teacher's trajectories are
  far from the student, so a bound like PPO's would stop imitation early): `pull_up_loss`;
- weight w < 0: |w| x max(ratio, 1 - clip) per token, ratio = p_now / p_at_start: PPO's clipped objective
  for a negative advantage. Each token is pushed down until its probability has fallen by `clip`, then left
  alone, so a harmful trajectory is made rarer without driving its shared tokens (the call format) to zero:
  `push_down_loss`.

On a GPU the weights stay float32 (a 1e-5 step is below bf16's resolution) under bf16 autocast.
With `lora_rank = r > 0` LoRA adapters train instead (merged into the saved weights; `top_layers` 0).
With `top_layers = k > 0` only the last k transformer layers and the final norm train. The layers below
are frozen, so their output for an example never changes: it is computed once, before the first epoch,
and each optimiser step runs only the top k layers forward and backward. On SmolLM2 (30 layers) with
k = 4 an epoch costs about 4/30 of a full pass instead of a full forward and backward; that is what
makes several epochs affordable on two CPU cores. `top_layers = 0` trains every weight (GPU).

Limits (memory): one trajectory at a time (`batch_size` trajectories per optimiser step by gradient
accumulation), cut to `max_length` tokens, logits only on the trained tokens; peak memory is about the
model, AdamW's two moments and one sequence's activations.
"""

from __future__ import annotations

import json
import math
import random
import resource
import shutil
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import torch

from memupdate.errors import MemupdateError
from memupdate.rl.distill.config import TrainConfig

Progress = Callable[[str, int, int], None]


@dataclass
class Example:
    """One trajectory as training reads it. `ids` is [1, T]; `mask` marks which of the T - 1 predicted
    tokens are the assistant's (token t is predicted from those before it); `frozen` is the frozen
    bottom's output (None: nothing is frozen); `start_logps`, for a pushed-down example, its masked
    tokens' log-probabilities before training (the PPO ratio's denominator)."""

    ids: torch.Tensor
    mask: torch.Tensor
    weight: float = 1.0
    cut: bool = False  # longer than `max_length`: its start was kept
    part: str = ""  # a held-out example's part (`finetune`'s held_out parts)
    frozen: torch.Tensor | None = None
    start_logps: torch.Tensor | None = None

    @property
    def tokens(self) -> int:
        return int(self.mask.sum())


@dataclass
class Student:
    """The model being trained, split where training starts: layers from `split` on train (0: all)."""

    model: Any
    tokenizer: Any
    split: int
    device: str

    @property
    def body(self) -> Any:
        return self.model.get_decoder()

    @property
    def head(self) -> Any:
        return self.model.get_output_embeddings()


# -- the model ------------------------------------------------------------------------------------------


def load_student(start: str | Path, config: TrainConfig) -> Student:
    """The checkpoint at `start` in float32 (with LoRA adapters when `lora_rank` > 0), on the GPU if any."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    device = "cuda" if torch.cuda.is_available() else "cpu"
    tokenizer = AutoTokenizer.from_pretrained(start, local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(start, local_files_only=True, dtype=torch.float32).to(device)
    if config.gradient_checkpointing:
        model.gradient_checkpointing_enable()
    if config.lora_rank:
        from peft import LoraConfig, get_peft_model

        model = get_peft_model(model, LoraConfig(r=config.lora_rank, lora_alpha=2 * config.lora_rank, target_modules="all-linear"))
    layers = len(model.get_decoder().layers)
    if config.top_layers > layers:
        raise MemupdateError(f"--top-layers {config.top_layers}: the student has {layers} layers; give at most {layers} (0: all)")
    return Student(model, tokenizer, layers - config.top_layers if config.top_layers else 0, device)


def freeze_bottom(student: Student) -> list[torch.nn.Parameter]:
    """Freeze every layer below `split` (and the embeddings); the parameters that train (with LoRA: the adapters)."""
    if student.split:
        body = student.body
        for p in student.model.parameters():
            p.requires_grad_(False)
        for p in [*body.layers[student.split :].parameters(), *body.norm.parameters()]:
            p.requires_grad_(True)
    return [p for p in student.model.parameters() if p.requires_grad]


def bottom_output(student: Student, ids: torch.Tensor) -> torch.Tensor | None:
    """The frozen layers' output for `ids`, the top layers' input (None when nothing is frozen)."""
    if not student.split:
        return None
    with torch.no_grad():
        return student.body(input_ids=ids, output_hidden_states=True).hidden_states[student.split]


def encode(student: Student, messages: list[dict[str, str]], weight: float, max_length: int, tools: list[dict[str, Any]] | None = None) -> Example:
    """Tokenise one trajectory with its loss mask (the assistant's tokens), cut to `max_length` tokens."""
    from memupdate.rl.distill.render import tokenize_with_mask

    ids, mask = tokenize_with_mask(student.tokenizer, messages, tools=tools)
    cut = len(ids) > max_length
    ids, mask = ids[:max_length], mask[:max_length]
    return Example(torch.tensor([ids], device=student.device), torch.tensor(mask[1:], device=student.device), weight, cut)


def token_logps(student: Student, example: Example) -> torch.Tensor:
    """The log-probability of each masked token of `example` under the student as it is now."""
    body, ids, mask = student.body, example.ids, example.mask
    if example.frozen is None:
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=student.device == "cuda"):
            hidden = body(input_ids=ids).last_hidden_state
    else:
        from transformers.masking_utils import create_causal_mask

        positions = torch.arange(ids.shape[1], device=student.device).unsqueeze(0)
        rotary = body.rotary_emb(example.frozen, position_ids=positions)
        causal = create_causal_mask(
            config=student.model.config, inputs_embeds=example.frozen, attention_mask=None, past_key_values=None, position_ids=positions
        )
        hidden = example.frozen
        for layer in body.layers[student.split :]:
            hidden = layer(hidden, attention_mask=causal, position_embeddings=rotary, position_ids=positions)
        hidden = body.norm(hidden)
    logits = student.head(hidden[0, :-1][mask]).float()  # only where the loss is: the vocabulary x all tokens is large
    return -torch.nn.functional.cross_entropy(logits, ids[0, 1:][mask], reduction="none")


# -- the losses ------------------------------------------------------------------------------------------


def pull_up_loss(logps: torch.Tensor, weight: float) -> torch.Tensor:
    """`weight` x the summed cross-entropy of the masked tokens (weight > 0: imitate, unbounded)."""
    return -weight * logps.sum()


def push_down_loss(logps: torch.Tensor, start_logps: torch.Tensor, weight: float, clip: float) -> torch.Tensor:
    """PPO's clipped objective for a negative advantage `weight`: |weight| x sum of max(ratio, 1 - clip),
    ratio = p_now / p_at_start per token. Its gradient lowers a token's probability until the ratio
    reaches 1 - clip, and is zero after: a harmful trajectory is made rarer, never driven to zero."""
    ratio = torch.exp(logps - start_logps)
    return -weight * torch.clamp(ratio, min=1.0 - clip).sum()


def example_loss(student: Student, example: Example, clip: float) -> torch.Tensor:
    """The loss of one example: pulled up (weight > 0) or pushed down (weight < 0), summed over its tokens."""
    logps = token_logps(student, example)
    if example.weight > 0:
        return pull_up_loss(logps, example.weight)
    return push_down_loss(logps, example.start_logps, example.weight, clip)


def evaluate(student: Student, held: Sequence[Example]) -> float | None:
    """The held-out loss: the mean over `held`'s parts of each one's cross-entropy per assistant token
    (None: nothing held out)."""
    return held_out_loss(evaluate_parts(student, held))


def evaluate_parts(student: Student, held: Sequence[Example]) -> dict[str, float]:
    """Each part of `held`'s mean cross-entropy per assistant token."""
    totals: dict[str, list[float]] = {}
    student.model.eval()
    with torch.no_grad():
        for e in held:
            total = totals.setdefault(e.part, [0.0, 0])
            total[0] += float(pull_up_loss(token_logps(student, e), 1.0))
            total[1] += e.tokens
    student.model.train()
    return {part: loss / tokens for part, (loss, tokens) in totals.items() if tokens}


# -- the loop -------------------------------------------------------------------------------------------


def get_batches(rows: Sequence[int], batch_size: int, epochs: int, seed: int) -> Iterator[list[list[int]]]:
    """Each epoch's batches of `rows`, reshuffled every epoch by one generator seeded with `seed`."""
    order, shuffle = list(rows), random.Random(seed)
    for _ in range(epochs):
        shuffle.shuffle(order)
        yield [order[first : first + batch_size] for first in range(0, len(order), batch_size)]


def learning_rate_factor(step: int, warmup_steps: int, steps: int) -> float:
    """Linear warm-up over `warmup_steps`, then linear decay to 0 at `steps`."""
    return min(1.0, (step + 1) / max(warmup_steps, 1)) * max(0.0, 1.0 - step / steps)


def train_step(student: Student, trained: list[torch.nn.Parameter], optimizer: Any, batch: Sequence[Example], clip: float) -> float:
    """One optimiser step over `batch`, one example at a time, the loss per assistant token; that loss."""
    tokens = sum(e.tokens for e in batch)
    total = 0.0
    for example in batch:
        loss = example_loss(student, example, clip) / tokens
        loss.backward()
        total += loss.item()
    torch.nn.utils.clip_grad_norm_(trained, 1.0)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return round(total, 4)


def train(
    student: Student, trained: list[torch.nn.Parameter], examples: Sequence[Example], held: Sequence[Example],
    rows: Sequence[int], learning_rate: float, epochs: int, config: TrainConfig, label: str, progress: Progress | None = None,
    keep_best: bool = False,
) -> tuple[list[float], list[dict[str, float]], int]:
    """AdamW over `examples[rows]` for `epochs`; the loss per step, the held-out loss of each part before
    and after each epoch (`held_out_loss` reads their mean), and the epoch whose weights the student ends
    with: the last, or with `keep_best` the one with the lowest held-out loss (0: the start's weights, put
    back; Trainer's `load_best_model_at_end`)."""
    optimizer = torch.optim.AdamW(trained, lr=learning_rate, weight_decay=0.0)
    steps = epochs * math.ceil(len(rows) / config.batch_size)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: learning_rate_factor(step, config.warmup_steps, steps))
    parts = [evaluate_parts(student, held)]
    keep_best = keep_best and bool(parts[0])
    best = copy_weights(trained) if keep_best else []
    losses: list[float] = []
    student.model.train()
    for epoch in get_batches(rows, config.batch_size, epochs, config.seed):
        for batch in epoch:
            losses.append(train_step(student, trained, optimizer, [examples[i] for i in batch], config.clip))
            schedule.step()
            if progress:
                progress(label, len(losses), steps)
        parts.append(evaluate_parts(student, held))
        if keep_best and held_out_loss(parts[-1]) < min(held_out_loss(p) for p in parts[:-1]):
            best = copy_weights(trained)
    if not keep_best:
        return losses, parts, epochs
    put_back(trained, best)
    means = [held_out_loss(p) for p in parts]
    return losses, parts, means.index(min(means))


def held_out_loss(parts: dict[str, float]) -> float | None:
    """The held-out loss: the mean of its parts' (None: nothing held out)."""
    return sum(parts.values()) / len(parts) if parts else None


def copy_weights(trained: list[torch.nn.Parameter]) -> list[torch.Tensor]:
    return [p.detach().clone() for p in trained]


def put_back(trained: list[torch.nn.Parameter], weights: list[torch.Tensor]) -> None:
    """The trained parameters set to `weights` (a `copy_weights` of them)."""
    with torch.no_grad():
        for p, w in zip(trained, weights, strict=True):
            p.copy_(w)


def sweep_learning_rate(
    student: Student, trained: list[torch.nn.Parameter], examples: Sequence[Example], held: Sequence[Example],
    config: TrainConfig, progress: Progress | None = None,
) -> tuple[float, dict[float, float]]:
    """The candidate of `config.sweep` whose one pass from the start gives the lowest held-out loss, with
    each candidate's loss; the weights are put back after each pass (no sweep: `config.learning_rate`)."""
    if not (config.sweep and held):
        return config.learning_rate, {}
    start_weights = copy_weights(trained)
    pulled = [i for i, e in enumerate(examples) if e.weight > 0]
    rows = random.Random(config.seed).sample(pulled, min(config.sweep_examples, len(pulled)))
    results = {}
    for candidate in config.sweep:
        parts = train(student, trained, examples, held, rows, candidate, 1, config, f"learning rate {candidate:g}", progress)[1]
        results[candidate] = held_out_loss(parts[-1])
        put_back(trained, start_weights)
    return min(results, key=lambda c: results[c]), results


def save_student(student: Student, start: str | Path, out: Path, config: TrainConfig) -> None:
    """Weights (adapters merged), tokenizer, and how the student saw its prompts (`STUDENT_SETTINGS`)."""
    from memupdate.llm.chat import STUDENT_SETTINGS

    model = student.model.merge_and_unload() if config.lora_rank else student.model
    out.mkdir(parents=True, exist_ok=True)
    model.to("cpu").save_pretrained(out)
    student.tokenizer.save_pretrained(out)
    if (Path(start) / STUDENT_SETTINGS).is_file():
        shutil.copy2(Path(start) / STUDENT_SETTINGS, out / STUDENT_SETTINGS)


def finetune(
    start: str | Path,
    out: str | Path,
    examples: Sequence[tuple[list[dict[str, str]], float]],
    held_out: Sequence[list[dict[str, str]]] | Mapping[str, Sequence[list[dict[str, str]]]],
    config: TrainConfig,
    tools: list[dict[str, Any]] | None = None,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """Train the checkpoint at `start` on `examples`; save it to `out` (tokenizer, student settings); the report."""
    started = time.perf_counter()
    if config.lora_rank and config.top_layers:
        raise MemupdateError("LoRA trains adapters on every layer: give top_layers=0 with lora_rank > 0")
    torch.manual_seed(config.seed)
    student = load_student(start, config)

    # 1. Tokenise: ids, the loss mask (assistant tokens), the weight.
    weighted = [encode(student, m, w, config.max_length, tools) for m, w in examples if w != 0]
    parts = held_out if isinstance(held_out, Mapping) else {"": held_out}
    held = [replace(encode(student, m, 1.0, config.max_length, tools), part=part) for part, trajectories in parts.items() for m in trajectories]
    train_set = [e for e in weighted if e.mask.any()]
    if not any(e.weight > 0 for e in train_set):
        raise MemupdateError("no trajectory with a positive weight has an assistant token to train on")

    # 2. Freeze the bottom, and compute its output once per example (it never changes); the pushed-down
    # examples' probabilities at the start, which their ratios are measured against.
    trained = freeze_bottom(student)
    for example in [*train_set, *held]:
        example.frozen = bottom_output(student, example.ids)
    with torch.no_grad():
        for example in train_set:
            if example.weight < 0:
                example.start_logps = token_logps(student, example)

    # 3. The learning rate (measured, if a sweep is given), then the loop.
    learning_rate, sweep = sweep_learning_rate(student, trained, train_set, held, config, progress)
    losses, held_parts, kept = train(
        student, trained, train_set, held, range(len(train_set)), learning_rate, config.epochs, config, "fine-tune", progress, config.keep_best,
    )

    # 4. Save, and report.
    out = Path(out)
    save_student(student, start, out, config)
    report = {
        **asdict(config),
        "examples": len(train_set),
        "pushed_down": sum(e.weight < 0 for e in train_set),
        "cut_to_max_length": sum(e.cut for e in [*weighted, *held]),
        "held_out_examples": len(held),
        "trained_tokens": sum(e.tokens for e in train_set),
        "trained_parameters": sum(p.numel() for p in trained),
        "steps": len(losses),
        "learning_rate": learning_rate,
        "sweep_held_out_loss": {f"{c:g}": round(v, 4) for c, v in sweep.items()},
        "losses": losses,
        "loss_first": losses[0],
        "loss_last": losses[-1],
        "held_out_loss": [None if (v := held_out_loss(p)) is None else round(v, 4) for p in held_parts],
        "held_out_loss_by_part": {part: [round(p[part], 4) for p in held_parts] for part in parts if len(parts) > 1 and part in held_parts[0]},
        "held_out_examples_by_part": {part: len(m) for part, m in parts.items()} if len(parts) > 1 else {},
        "kept_epoch": kept,
        "seconds": round(time.perf_counter() - started, 1),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
    }
    (out / "training.json").write_text(json.dumps(report, indent=1))
    return json.loads(json.dumps(report))  # as a resumed run reads it back (tuples become lists)
