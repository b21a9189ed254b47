"""Train the screen (`judge.screen`) on the judge's own decisions over every pair that meets in people's stores.

    from memupdate.rl.screen_training import judge_readings, train_screen
    readings = judge_readings(Path("../shared/data"), Path("runs/screen"))   # cached: a rerun reads no pair
    screen, figures = train_screen(readings, judge_digest())   # fit on "train", threshold on "recipe"; never reads "eval"
    screen.save()                                 # judge/weights/relation-screen.npz

The banks are the store view's (`rl.data.relations.store_banks`, split by person; LoCoMo's conversations
and FactConsolidation's 32k context outside the recipe and evaluation banks train too); each is read as given
and, outside LoCoMo and FactConsolidation, in other forms (`text.forms`: every form to train, the forms the
judge's thresholds were calibrated in to choose the threshold), each statement embedded in its form, as a
store would hold it; the evaluation part only as given. A pair is worth
keeping where the shipped judge's decision (`auto_apply.act`) is "apply" or "ask". The threshold is the
highest score that keeps at least `RECALL` of those pairs in every source of the recipe part.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from memupdate.judge.screen import FEATURES, RECALL, Screen, features, judge_digest

ACTS = ("leave", "ask", "apply")


@dataclass
class Readings:
    """The judge's decision on every pair that meets, with both statements' vectors and texts: row k of
    `first` and `second` is pair k's (unit vectors), `texts` its two statements, `act` its index in ACTS,
    and its `source`, `part`, `form`, `group`."""

    first: np.ndarray
    second: np.ndarray
    texts: np.ndarray  # (pairs, 2) str
    act: np.ndarray
    source: np.ndarray
    part: np.ndarray
    form: np.ndarray
    group: np.ndarray

    @property
    def kept_worthy(self) -> np.ndarray:
        return self.act > 0

    def where(self, mask: np.ndarray) -> Readings:
        return Readings(*(getattr(self, name)[mask] for name in self.__dataclass_fields__))

    @classmethod
    def joined(cls, parts: Sequence[Readings]) -> Readings:
        return cls(*(np.concatenate([getattr(r, name) for r in parts]) for name in cls.__dataclass_fields__))


def judge_readings(data: Path, cache: Path, *, judge=None, embed=None,
                   progress: Callable[[str], None] | None = None) -> Readings:
    """Every pair that meets in the development data's banks (every part, see the module docstring), read
    by `judge` (default the shipped `LocalJudge`); each part and form cached in `cache` under the judge's
    digest, so a rerun reads nothing again."""
    from memupdate.judge.store_view import judge_banks, met_pairs
    from memupdate.rl.data.relation_forms import bank_in_form
    from memupdate.rl.data.relations import CALIBRATION_FORMS, LARGE_SOURCES, store_banks, store_banks_large
    from memupdate.text.forms import FORMS

    digest = judge_digest(judge)
    cache.mkdir(parents=True, exist_ok=True)
    banks = None
    found = []
    for part in ("train", "recipe", "eval"):
        for form in {"train": FORMS, "recipe": CALIBRATION_FORMS, "eval": ("given",)}[part]:
            path = cache / f"readings-{digest}-{part}-{form}.npz"
            if not _cached(path):
                if banks is None:
                    if progress:
                        progress("building a bank per person ...")
                    embed = embed or _embed
                    banks = store_banks(data, embed)
                    banks["train"] += store_banks_large(data, embed, ("train",))["train"]
                    if judge is None:
                        from memupdate.judge.local import LocalJudge

                        judge = LocalJudge()
                chosen = [bank_in_form(b, form) for b in banks[part] if form == "given" or b.source not in LARGE_SOURCES]
                started = time.perf_counter()
                if progress:
                    progress(f"{part}, {form}: reading {sum(len(b.met) for b in chosen)} pairs ...")
                acts = [ACTS.index(judge.auto_apply.act(v)) for v in judge_banks(judge, chosen)]
                first, second = pair_vectors(chosen, embed)
                met = met_pairs(chosen)
                np.savez_compressed(
                    path, first=first.astype(np.float16), second=second.astype(np.float16),
                    texts=np.asarray([(b.statements[i].text, b.statements[j].text) for b, (i, j) in met], dtype=str).reshape(-1, 2),
                    act=np.asarray(acts, dtype=np.int8), source=np.asarray([b.source for b, _ in met]),
                    group=np.asarray([b.group for b, _ in met]), seconds=time.perf_counter() - started)
            with np.load(path) as stored:
                count = len(stored["act"])
                found.append(Readings(stored["first"].astype(np.float32), stored["second"].astype(np.float32),
                                      stored["texts"], stored["act"], stored["source"], np.full(count, part), np.full(count, form), stored["group"]))
    return Readings.joined(found)


def _cached(path: Path) -> bool:
    """Whether `path` holds readings as this module writes them (an older file, without the texts, is read again)."""
    if not path.is_file():
        return False
    with np.load(path) as stored:
        return "texts" in stored.files


def _embed(texts):
    from memupdate.store import get_embedder

    return get_embedder().embed(texts)


def pair_vectors(banks: Sequence, embed) -> tuple[np.ndarray, np.ndarray]:
    """The two statements' vectors of every pair that meets in `banks` (`judge.store_view.StoreBank`s), in
    `met_pairs` order: each bank's statements embedded as a store holds them."""
    firsts, seconds = [], []
    for bank in banks:
        if bank.met:
            vectors = np.asarray(embed([s.text for s in bank.statements]), dtype=np.float32)
            firsts.append(vectors[[i for i, _ in bank.met]])
            seconds.append(vectors[[j for _, j in bank.met]])
    return _stack(firsts), _stack(seconds)


def _stack(rows: list[np.ndarray]) -> np.ndarray:
    return np.concatenate(rows) if rows else np.zeros((0, 384), dtype=np.float32)


@dataclass
class ScreenTrainConfig:
    """The shipped screen's recipe (chosen on the recipe part: docs/relations.md, "The screen")."""

    # Chosen on the recipe part, by the share dropped at RECALL: over the vectors alone 15-22% (a logistic
    # regression 12%); with the words' features 30-41% (64 units 32%, 128 41%, 256 40%; 20 epochs 37%; a
    # regression on the judge's logit 37%). FactConsolidation's template bounds it: the judge asks about
    # 14% of its pairs that meet, two subjects sharing a value among them, and the screen drops 5-8% of it.
    hidden: int = 128
    epochs: int = 10
    learning_rate: float = 3e-3
    weight_decay: float = 0.05
    dropout: float = 0.2
    positive_weight: float = 10.0  # pairs the judge applies or asks about are rare, and losing one costs most
    recall: float = RECALL
    seed: int = 0


@dataclass
class ScreenFigures:
    """What the screen does to one source's pairs that meet: how many it drops, and how many of those
    the judge applies or asks about it loses."""

    source: str
    pairs: int = 0
    dropped: int = 0
    worthy: int = 0  # pairs the judge applies or asks about
    lost: int = 0  # of them, dropped

    @property
    def dropped_share(self) -> float:
        return self.dropped / self.pairs if self.pairs else 0.0

    @property
    def lost_share(self) -> float:
        return self.lost / self.worthy if self.worthy else 0.0

    def to_json(self) -> dict:
        return {"pairs": self.pairs, "dropped": self.dropped, "dropped_share": round(self.dropped_share, 4),
                "worthy": self.worthy, "lost": self.lost, "lost_share": round(self.lost_share, 4)}


def screen_figures(keep: np.ndarray, worthy: np.ndarray, sources: np.ndarray) -> dict[str, ScreenFigures]:
    """Per source, the pairs that meet, those dropped (not `keep`), and the `worthy` ones lost."""
    found: dict[str, ScreenFigures] = {}
    for source in sorted(set(sources.tolist())):
        mine = sources == source
        found[source] = ScreenFigures(source, int(mine.sum()), int((mine & ~keep).sum()), int((mine & worthy).sum()),
                                      int((mine & worthy & ~keep).sum()))
    return found


def choose_threshold(scores: np.ndarray, worthy: np.ndarray, sources: np.ndarray, recall: float = RECALL) -> float:
    """The highest threshold that keeps at least `recall` of the `worthy` pairs in every source (a source
    with fewer than 1 / (1 - recall) of them keeps them all)."""
    threshold = np.inf
    for source in set(sources.tolist()):
        positives = np.sort(scores[(sources == source) & worthy])
        if len(positives):
            threshold = min(threshold, float(positives[int(np.floor((1 - recall) * len(positives) + 1e-9))]))
    return float(threshold) if np.isfinite(threshold) else float(scores.min(initial=0.0))


def train_screen(readings: Readings, digest: str, config: ScreenTrainConfig | None = None,
                 progress: Callable[[int, int, float], None] | None = None) -> tuple[Screen, dict]:
    """The screen fitted on the training part's readings (by the judge whose weights' digest is `digest`),
    its threshold chosen on the recipe part's; returns it and the recipe part's figures (per source, and the
    drop share at other recalls)."""
    import torch

    config = config or ScreenTrainConfig()
    torch.manual_seed(config.seed)
    train, recipe = readings.where(readings.part == "train"), readings.where(readings.part == "recipe")
    x = torch.from_numpy(features(train.first, train.second, train.texts))
    y = torch.from_numpy(train.kept_worthy.astype(np.float32))
    scale = x.std(dim=0).clamp_min(1e-3)  # folded into the first layer when shipped
    network = torch.nn.Sequential(torch.nn.Linear(x.shape[1], config.hidden), torch.nn.ReLU(), torch.nn.Dropout(config.dropout),
                                  torch.nn.Linear(config.hidden, 1))
    optimizer = torch.optim.AdamW(network.parameters(), lr=config.learning_rate, weight_decay=config.weight_decay)
    loss_of = torch.nn.BCEWithLogitsLoss(pos_weight=torch.tensor(config.positive_weight))
    generator = torch.Generator().manual_seed(config.seed)
    steps = config.epochs * ((len(x) + 255) // 256)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: max(0.0, 1 - s / steps))
    step = 0
    for _ in range(config.epochs):
        for batch in torch.randperm(len(x), generator=generator).split(256):
            loss = loss_of(network(x[batch] / scale).squeeze(1), y[batch])
            loss.backward()
            optimizer.step()
            schedule.step()
            optimizer.zero_grad()
            step += 1
            if progress:
                progress(step, steps, float(loss.detach()))
    first, last = network[0], network[3]
    screen = Screen((first.weight.detach() / scale).T.numpy().copy(), first.bias.detach().numpy().copy(),
                    last.weight.detach()[0].numpy().copy(), float(last.bias.detach()[0]), 0.0)
    scores = screen.scores(recipe.first, recipe.second, recipe.texts)
    screen.threshold = choose_threshold(scores, recipe.kept_worthy, recipe.source, config.recall)
    keep = scores >= screen.threshold
    curve = {str(r): round(1 - float(np.mean(scores >= choose_threshold(scores, recipe.kept_worthy, recipe.source, r))), 4)
             for r in (0.99, 0.995, 0.999, 1.0)}
    figures = screen_figures(keep, recipe.kept_worthy, recipe.source)
    screen.card = {
        "digest": digest, "features": FEATURES, "recall": config.recall, "threshold": round(screen.threshold, 4), "recipe": asdict(config),
        "train_pairs": len(train.act), "train_worthy": int(train.kept_worthy.sum()),
        "recipe_pairs": len(recipe.act), "recipe_worthy": int(recipe.kept_worthy.sum()),
        "recipe_dropped_share": round(1 - float(np.mean(keep)), 4),
        "recipe_drop_at_recall": curve,
    }
    return screen, {"sources": {k: v.to_json() for k, v in figures.items()}, "drop_at_recall": curve}


def screen_view(screen: Screen, banks: Sequence, acts: Sequence[str], embed=None) -> tuple[dict[str, ScreenFigures], float]:
    """What `screen` does to every pair that meets in `banks` (`judge.store_view.StoreBank`s), whose
    judge's decisions are `acts` (in `met_pairs` order): per source, and the screen's microseconds a pair
    (the statements embedded as a store holds them; the embedding is not counted: the store has it)."""
    first, second = pair_vectors(banks, embed or _embed)
    sources = [bank.source for bank in banks for _ in bank.met]
    texts = [(bank.statements[i].text, bank.statements[j].text) for bank in banks for i, j in bank.met]
    started = time.perf_counter()
    keep = screen.keep(first, second, texts)
    micro = 1e6 * (time.perf_counter() - started) / max(1, len(keep))
    worthy = np.asarray([act != "leave" for act in acts], dtype=bool)
    return screen_figures(keep, worthy, np.asarray(sources)), micro
