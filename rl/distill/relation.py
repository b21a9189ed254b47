"""The relation task: the local judge learns the decision a pair of memories asks of a bank, by GRPO over
its own sampled verdicts, rewarded by what each decision does to the answers the pair touches. Its stages
run in a learning run's folder like every task's (`learn.TASKS["relation"]`).

    from pathlib import Path
    from memupdate.rl.distill.learn import LearnConfig, RunInputs, learn
    metrics = learn(store, LearnConfig(task="relation"), "runs/relation", RunInputs(data=Path("../shared/data")))
    # CLI: memupdate rl learn --task relation --data ../shared/data --out runs/relation [--reader hf:DIR]
    #      memupdate judge learn ... for short, with the same options

A unit is a candidate pair of one training bank (`rl.data.relation_units`: two statements that meet, as a
compaction meets them, with the bank's questions). An action is a verdict (duplicate, update, compatible,
events); what it asks of the bank is one of three decisions (`judge.verdict.DECISIONS`): merge the two,
supersede the earlier-stated by the later, or keep both. The reward of a decision is the mean QA proxy
change it makes, in a fork of the bank, on the questions whose context held either statement (none: 0):
on LoCoMo and FactConsolidation banks their own questions; on a Jenverse profile its tests, the credit of
the correct answer minus that of the wrong one; on a LongMemEval question its answer. No label is read:
the rewards of every unit's three decisions are computed once (`reward_table`, a fork each, one typed
row a unit: `rl.data.relation_rewards`) and a sampled verdict's reward is looked up. Where the proxy
cannot see a change (LongMemEval's knowledge-update banks: an answer beside its stale statement earns in
full), `reader` rewards the units by a reader's answer instead (`reader_rewards`). There is no format
term: a classifier's verdict is always well formed; and no efficiency term: it would pay for retiring any
memory no question reads, the harm the judge must not learn.

Stages, each recorded in `out/stages.json` (`run_folder.RunFolder`: a rerun resumes; the reward tables
are also written a unit a line, so an interrupted table resumes too):
1. `sft`: the supervised judge (`judge.train.train_judge`, `memupdate judge train`'s recipe, on the
   labelled training part plus generated pairs, calibrated on the recipe part), or the checkpoint `sft_from`.
2. `rewards`: the reward table of the training units and the recipe units (people training never reads),
   with `reader` the reader's; the stage records how many units of each part teach something.
3. `rl`: GRPO from the SFT weights: per step `batch` units, `group` verdicts sampled from each, DAPO's
   dynamic sampling (a group whose rewards are all equal teaches nothing: it is dropped, counted, and
   another unit drawn), advantages normalised within the group, plus `kl` times the KL divergence from
   the SFT judge. Every `eval_every` steps the greedy judge's mean reward on the recipe units is read;
   the step that scores best (SFT's own step 0 included) is the run's judge, recalibrated on the recipe
   pairs as SFT was, in `out/rl`.
The run ends with `metrics.json` and `learning_curve.png` (`report.plot_grpo_curve`).
"""

from __future__ import annotations

import copy
import json
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from memupdate.errors import MemupdateError
from memupdate.judge.decision import operation
from memupdate.judge.pairs import LabelledPair
from memupdate.judge.verdict import RELATIONS, later
from memupdate.rl.data.relation_rewards import READER_REWARDS, REWARDS, RewardRow, read_rewards
from memupdate.rl.data.relation_units import RelationBank, RelationUnit, relation_banks
from memupdate.rl.distill.config import LearnConfig, RelationConfig
from memupdate.rl.distill.report import plain_config, plot_grpo_curve, stage_times
from memupdate.rl.distill.rollouts import Progress
from memupdate.rl.distill.run_folder import RunFolder
from memupdate.rl.distill.task import RunInputs
from memupdate.store import MemoryStore

READ_K = 8  # statements the reader reads for a question (`reader_rewards`): the nearest live ones, in the order said


@dataclass(frozen=True)
class RewardedPair:
    """A unit's pair and its row of the reward table: what GRPO samples verdicts on and rewards them by."""

    pair: LabelledPair
    row: RewardRow


@dataclass
class RelationRun(RunFolder):
    """What the relation task's stages read: the run folder, the store the reward forks live in, the config
    and the development data folder."""

    store: MemoryStore
    config: LearnConfig
    data: Path
    progress: Progress | None = None

    @cached_property
    def banks(self) -> list[RelationBank]:
        """The training and recipe banks the run's data and settings give (`banks_of`)."""
        return banks_of(self.data, self.config)

    @cached_property
    def rewarded(self) -> list[RewardedPair]:
        """Every unit of the banks with its row: the reward tables, computed where they lack a unit."""
        table = reward_table(self.store, self.banks, self.out / REWARDS, self.progress)
        if self.config.relation.reader:
            from memupdate.scoring.answerer import make_reader

            reader = make_reader(self.config.relation.reader)
            table |= reader_rewards(self.banks, table, reader, self.out / READER_REWARDS, self.store.embedder.embed)
        return [RewardedPair(p, table[RelationUnit(b.group, b.part, p).key]) for b in self.banks for p in b.pairs]


def relation_stages(store: MemoryStore, config: LearnConfig, folder: RunFolder, inputs: RunInputs, progress: Progress | None = None) -> dict[str, Any]:
    """Run (or resume) the stages into `folder`; returns the metrics also written to its `metrics.json`."""
    import torch

    from memupdate.judge.train import JudgeTrainConfig

    if inputs.data is None or not Path(inputs.data).is_dir():
        raise MemupdateError(f"no data folder at {inputs.data}: pass --data with the folder holding locomo/, memoryagentbench/, natural-updates/")
    config = replace(config, threads=config.threads or JudgeTrainConfig.threads)
    torch.set_num_threads(config.threads)
    run = RelationRun(folder.out, folder.done, store, config, Path(inputs.data), progress)

    sft = run.stage("sft", lambda: sft_judge(run))
    rewards = run.stage("rewards", lambda: reward_summary(run.rewarded))
    result = run.stage("rl", lambda: grpo_stage(run, sft))

    metrics = {"task": "relation", "config": plain_config(config), "data": str(run.data), "sft": sft, "rewards": rewards, "rl": result,
               "final_checkpoint": result["checkpoint"], "stages": stage_times(run.done)}
    return run.report(metrics, plot_grpo_curve)


def banks_of(data: Path, config: LearnConfig, embed=None) -> list[RelationBank]:
    """The banks a relation run with `config` reads from `data`: its seed and unit counts decide which
    LoCoMo and FactConsolidation pairs they hold (`relation_units.relation_banks`)."""
    settings = config.relation
    return relation_banks(data, locomo_units=settings.locomo_units, fc_units=settings.fc_units, seed=config.seed, embed=embed)


def run_config(folder: Path) -> LearnConfig:
    """The relation settings and seed of the run in `folder` (its `metrics.json`; a run written before the
    one pipeline kept them flat), else the defaults: what `banks_of` needs to give that run's units again."""
    metrics = Path(folder) / "metrics.json"
    saved = (json.loads(metrics.read_text()).get("config") or {}) if metrics.is_file() else {}
    section = saved.get("relation") or {**saved, "grpo_learning_rate": saved.get("learning_rate", RelationConfig.grpo_learning_rate)}
    known = RelationConfig.__dataclass_fields__
    return LearnConfig(task="relation", seed=saved.get("seed", 0),
                       relation=RelationConfig(**{k: v for k, v in section.items() if k in known}))


# -- the stages ----------------------------------------------------------------------------------------


def sft_judge(run: RelationRun) -> str:
    """The SFT judge's checkpoint: `sft_from`, else `judge train`'s recipe trained into `out/sft`."""
    config = run.config
    if config.relation.sft_from:
        return str(Path(config.relation.sft_from).resolve())
    from memupdate.judge.train import JudgeTrainConfig, train_judge
    from memupdate.rl.data.relations import judge_data

    train_config = JudgeTrainConfig(seed=config.seed, threads=config.threads)
    got = judge_data(run.data, generated=train_config.generated, unrelated=train_config.unrelated, seed=config.seed)
    progress = (lambda step, steps, loss: run.progress("SFT", step, steps)) if run.progress else None
    train_judge(got.train, got.recipe, train_config, run.out / "sft", recipe_banks=got.recipe_banks, progress=progress)
    return str(run.out / "sft")


def reward_summary(rows: Sequence[RewardedPair]) -> dict[str, Any]:
    """Per part: its units, those whose decisions earn different rewards, the mean reward of the best
    decision over those (keeping every pair earns 0: the greedy reward's bounds), and those per source."""
    summary: dict[str, Any] = {}
    for part in ("train", "recipe"):
        mine = [r.row for r in rows if r.row.part == part]
        taught = [r for r in mine if r.informative]
        summary[part] = {"units": len(mine), "informative": len(taught),
                         "best_decision_reward": round(sum(max(r.reward(x) for x in RELATIONS) for r in taught) / max(1, len(taught)), 5),
                         "by_source": {s: sum(1 for r in mine if r.source == s and r.informative) for s in sorted({r.source for r in mine})}}
    return summary


def grpo_stage(run: RelationRun, sft: str) -> dict[str, Any]:
    """GRPO from `sft` on the training units, read on the recipe units, calibrated on the recipe part."""
    from memupdate.rl.data.relations import recipe_banks, relation_pairs, store_banks

    stores = store_banks(run.data)
    recipe_pairs = relation_pairs(run.data, banks=stores)["recipe"]
    rows = run.rewarded
    # The recipe reading is over the recipe units whose decisions earn different rewards (on the rest every judge earns the same).
    train = [r for r in rows if r.row.part == "train"]
    recipe = [r for r in rows if r.row.part == "recipe" and r.row.informative]
    return grpo(sft, train, recipe, recipe_pairs, run.config.relation, run.config.seed, run.out / "rl", run.progress,
                recipe_banks(run.data, banks=stores))  # calibrated as SFT is: the recipe banks in every calibration form


# -- the reward table ----------------------------------------------------------------------------------


def reward_table(store: MemoryStore, banks: Sequence[RelationBank], path: Path, progress: Progress | None = None) -> dict[str, RewardRow]:
    """Each unit's reward per decision (see the module docstring), read from `path` where a unit is
    there already and appended to it as each is computed."""
    from memupdate.agent.tools import run_tool
    from memupdate.scoring.qa_proxy import score_fork, score_questions

    table = read_rewards(path) if path.is_file() else {}
    total = sum(len(b.pairs) for b in banks)
    done = 0
    with path.open("a") as out:
        for bank in banks:
            units = [RelationUnit(bank.group, bank.part, p) for p in bank.pairs]
            todo = [u for u in units if u.key not in table]
            done += len(units) - len(todo)
            if not todo:
                continue
            base = bank.load(store) if bank.load else _written(store, bank)
            keys = {m.content: m.key for m in base.list()}
            before = score_questions(base, bank.probes)
            for unit in todo:
                a, b = keys.get(unit.pair.first), keys.get(unit.pair.second)
                touched = [i for i, s in enumerate(before) if a in s.retrieved or b in s.retrieved] if a and b else []
                rewards: dict[str, float] = {}
                errors: dict[str, str] = {}
                current = later(*unit.pair.statements) or "second"  # a pair is given older first
                for decision in ("update", "duplicate"):
                    if not touched:
                        rewards[decision] = 0.0
                        continue
                    older, newer = operation(decision, current, (unit.pair.first, unit.pair.second)).of((a, b))
                    call = (("delete_memory", {"memory_id": older, "superseded_by": newer}) if decision == "update"
                            else ("merge_memory", {"memory_ids": [a, b], "strategy": "keep_fullest"}))
                    fork = base.fork((*base.namespace, "rl-" + decision))
                    try:
                        result = run_tool(fork, *call)
                        if not result.ok:
                            rewards[decision] = 0.0
                            errors[f"{decision}_error"] = result.text[:200]
                            continue
                        probes = [bank.probes[i] for i in touched]
                        after, _ = score_fork(base, fork, probes)
                        change = [p.sign * (x.qa_score - before[i].qa_score) for p, x, i in zip(probes, after, touched, strict=True)]
                        rewards[decision] = round(float(np.mean(change)), 6)
                    finally:
                        fork.drop()
                row = RewardRow(unit.key, unit.group, unit.part, unit.pair.label, unit.pair.source, keep=0.0, touched=len(touched),
                                **rewards, **errors)
                table[unit.key] = row
                out.write(json.dumps(row.to_json()) + "\n")
                out.flush()
                done += 1
                if progress:
                    progress("reward table (a fork per decision)", done, total)
            if not bank.load:
                base.drop()
    return table


def reader_rewards(banks: Sequence[RelationBank], table: dict[str, RewardRow], reader, path: Path, embed,
                   sources: tuple[str, ...] = ("longmemeval-knowledge-update",)) -> dict[str, RewardRow]:
    """The rewards of the units of `sources`' banks read by `reader` (a `scoring.readers.Reader`) instead of
    the proxy: for each decision, the reader answers the bank's question from its `READ_K` live statements
    nearest the question (dated, in the order said); the reward is the LoCoMo F1 of its answer minus the
    F1 with both statements kept. Where a changed fact's two statements are both in the context, the
    proxy credits the answer in full; a reader may answer with the stale one. Rows are written to `path`
    (read back on a rerun) and returned by key."""
    from memupdate.scoring.answer_prompts import ANSWER_MAX_TOKENS, answer_prompt
    from memupdate.scoring.metrics import locomo_f1

    done = read_rewards(path) if path.is_file() else {}
    replies: dict[str, str] = {}
    with path.open("a") as out:
        for bank in banks:
            if not bank.pairs or not bank.pairs[0].source.startswith(sources) or len(bank.probes) != 1:
                continue
            units = [RelationUnit(bank.group, bank.part, p) for p in bank.pairs]
            todo = [u for u in units if u.key not in done and u.key in table]
            if not todo:
                continue
            probe = bank.probes[0]
            texts = [m.content for m in bank.memories]
            vectors = np.asarray(embed([probe.question, *texts]))
            nearness = dict(zip(texts, vectors[1:] @ vectors[0], strict=True))
            when = {m.content: m.metadata.get("time") or "" for m in bank.memories}
            asks = {}
            for unit in todo:
                a, b = unit.pair.first, unit.pair.second
                current = later(*unit.pair.statements) or "second"  # a pair is given older first
                gone = {"keep": ()} | {d: (operation(d, current, (a, b)).of((a, b))[0],) for d in ("update", "duplicate")}
                asks[unit.key] = {d: answer_prompt(probe, _reader_context(nearness, when, set(g))).prompt for d, g in gone.items()}
            wanted = sorted({p for ask in asks.values() for p in ask.values()} - set(replies))
            for start in range(0, len(wanted), 8):
                chunk = wanted[start : start + 8]
                replies.update(zip(chunk, reader.complete_batch(chunk, ANSWER_MAX_TOKENS), strict=True))
            for unit in todo:
                f1 = {d: locomo_f1(replies[p], probe.answer, probe.category) for d, p in asks[unit.key].items()}
                row = replace(table[unit.key], update=round(f1["update"] - f1["keep"], 6), duplicate=round(f1["duplicate"] - f1["keep"], 6),
                              keep=0.0, reward_by="reader")
                done[unit.key] = row
                out.write(json.dumps(row.to_json()) + "\n")
                out.flush()
    return done


def _reader_context(nearness: dict[str, float], when: dict[str, str], gone: set[str]) -> str:
    """The reader's context: the `READ_K` live statements nearest the question, dated, in the order said."""
    live = sorted((t for t in nearness if t not in gone), key=lambda t: -nearness[t])[:READ_K]
    return "\n".join(f"({when[t][:10]}) {t}" for t in sorted(live, key=lambda t: when[t]))


def _written(store: MemoryStore, bank: RelationBank) -> MemoryStore:
    base = store.scoped((*store.namespace, "relation-rl", bank.group))
    base.drop()  # a bank left by an interrupted run
    base = store.scoped((*store.namespace, "relation-rl", bank.group))
    base.create_many(bank.memories)
    return base


# -- GRPO ----------------------------------------------------------------------------------------------


def greedy_reward(model, tokenizer, rows: Sequence[RewardedPair]) -> float:
    """The mean reward of the judge's verdict (as `LocalJudge` reads it: `judge.local.read_verdicts`)
    over `rows`."""
    import torch

    from memupdate.judge.local import read_verdicts, told_twice
    from memupdate.judge.train import encode_pairs

    total = 0.0
    with torch.inference_mode():
        for start in range(0, len(rows), 64):
            chunk = rows[start : start + 64]
            pairs = [r.pair.statements for r in chunk]
            asked = [r.pair for r, p in zip(chunk, pairs, strict=True) if not told_twice(*p)]
            probs = torch.softmax(model(**encode_pairs(tokenizer, asked)).logits, dim=-1) if asked else []
            for row, verdict in zip(chunk, read_verdicts(pairs, probs, RELATIONS), strict=True):
                total += row.row.reward(verdict.relation)
    return total / max(1, len(rows))


def grpo(sft: str, train: Sequence[RewardedPair], recipe: Sequence[RewardedPair], recipe_pairs: Sequence[LabelledPair],
         settings: RelationConfig, seed: int, out: Path, progress: Progress | None = None, recipe_banks: Sequence = ()) -> dict[str, Any]:
    """GRPO with dynamic sampling from the SFT judge (see the module docstring); saves the chosen step."""
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from memupdate.judge.train import encode_pairs, trainable_names

    torch.manual_seed(seed)
    rng = random.Random(seed)
    tokenizer = AutoTokenizer.from_pretrained(sft)
    model = AutoModelForSequenceClassification.from_pretrained(sft)
    reference = copy.deepcopy(model).eval()
    names = set(trainable_names(model, model.config.num_hidden_layers))
    params = [p for n, p in model.named_parameters() if n in names]
    optimizer = torch.optim.AdamW(params, lr=settings.grpo_learning_rate, weight_decay=0.0)
    pool = [r for r in train if r.row.informative]
    if not pool:
        raise MemupdateError("no training unit whose decisions earn different rewards: check the data folder")
    model.eval()
    curve = [{"step": 0, "recipe_reward": greedy_reward(model, tokenizer, recipe), "train_reward": greedy_reward(model, tokenizer, pool)}]
    best = {"step": 0, "recipe_reward": curve[0]["recipe_reward"], "state": None}
    dropped = drawn = 0
    kl = reward = torch.zeros(())
    started = time.perf_counter()
    for step in range(1, settings.steps + 1):
        model.train()
        batch, samples, rewards = [], [], []
        order = rng.sample(pool, len(pool))  # at most one pass over the pool a step: a policy sure of most units drops most groups
        for start in range(0, len(order), 4 * settings.batch):
            candidates = order[start : start + 4 * settings.batch]
            with torch.no_grad():
                probs = torch.softmax(model(**encode_pairs(tokenizer, [r.pair for r in candidates])).logits, dim=-1)
            for row, p in zip(candidates, probs, strict=True):
                drawn += 1
                picks = torch.multinomial(p, settings.group, replacement=True)
                r = [row.row.reward(RELATIONS[int(i)]) for i in picks]
                if len(set(r)) == 1:  # DAPO's dynamic sampling: a group of equal rewards teaches nothing
                    dropped += 1
                    continue
                batch.append(row)
                samples.append(picks)
                rewards.append(torch.tensor(r))
                if len(batch) == settings.batch:
                    break
            if len(batch) == settings.batch:
                break
        if progress:
            progress("GRPO steps", step, settings.steps)
        if not batch:  # every group dropped: the policy is sure of every unit; nothing to learn this step
            continue
        logits = model(**encode_pairs(tokenizer, [r.pair for r in batch])).logits
        logp = torch.log_softmax(logits, dim=-1)
        with torch.no_grad():
            ref = torch.log_softmax(reference(**encode_pairs(tokenizer, [r.pair for r in batch])).logits, dim=-1)
        policy = torch.stack([logp[i, samples[i]] for i in range(len(batch))])  # batch x group
        reward = torch.stack(rewards)
        advantage = (reward - reward.mean(1, keepdim=True)) / (reward.std(1, keepdim=True) + 1e-6)
        kl = (logp.exp() * (logp - ref)).sum(-1).mean()
        loss = -(advantage * policy).mean() + settings.kl * kl
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        optimizer.step()
        optimizer.zero_grad()
        if step % settings.eval_every == 0 or step == settings.steps:
            model.eval()
            point = {"step": step, "recipe_reward": greedy_reward(model, tokenizer, recipe), "train_reward": greedy_reward(model, tokenizer, pool),
                     "kl": round(float(kl.detach()), 5), "mean_sampled_reward": round(float(reward.mean()), 5), "dropped": dropped, "drawn": drawn,
                     "seconds": round(time.perf_counter() - started, 1)}
            curve.append(point)
            if point["recipe_reward"] > best["recipe_reward"]:
                best = {"step": step, "recipe_reward": point["recipe_reward"], "state": {k: v.detach().clone() for k, v in model.state_dict().items()}}
    if best["state"] is not None:
        model.load_state_dict(best["state"])
    model.eval()
    card = _save(model, tokenizer, sft, recipe_pairs, out, recipe_banks)
    return {"curve": curve, "chosen_step": best["step"], "dropped_groups": dropped, "drawn_groups": drawn, "pool": len(pool),
            "checkpoint": str(out), "card": card}


def _save(model, tokenizer, sft: str, recipe_pairs: Sequence[LabelledPair], out: Path, recipe_banks: Sequence = ()) -> dict[str, Any]:
    """The chosen weights as a judge checkpoint (and the shippable delta), recalibrated: the temperature
    on the recipe pairs, the auto-apply thresholds on the recipe banks."""
    from memupdate.judge.local import CARD
    from memupdate.judge.train import calibrate, calibrate_on_banks, trainable_names, write_judge

    card = json.loads((Path(sft) / CARD).read_text())
    card |= {"temperature": round(calibrate(model, tokenizer, recipe_pairs), 4), "trained_by": "relation RL (GRPO) from SFT"}
    write_judge(model, tokenizer, set(trainable_names(model, model.config.num_hidden_layers)), card, out)
    return calibrate_on_banks(out, recipe_banks, card.get("recipe", {}).get("target_precision", 0.99))
