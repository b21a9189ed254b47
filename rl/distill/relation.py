"""The relation task: the local judge learns the decision a pair of memories asks of a bank, by GRPO over
its own sampled verdicts, rewarded by what each decision does to the answers the pair touches.

    from memupdate.rl.distill.relation import RelationConfig, learn_relation
    metrics = learn_relation(store, Path("../shared/data"), RelationConfig(), out="runs/relation")
    # CLI: memupdate judge learn --data ../shared/data --out runs/relation [--reader hf:DIR]

A unit is a candidate pair of one training bank (two statements that meet, as a compaction meets them:
`near_pairs`), with the bank's questions. An action is a verdict (duplicate, update, compatible, events);
what it asks of the bank is one of three decisions (`judge.pairs.DECISIONS`): merge the two, supersede
the earlier-stated by the later, or keep both. The reward of a decision is the mean QA proxy change it
makes, in a fork of the bank, on the questions whose context held either statement (none: 0): on
LoCoMo and FactConsolidation banks their own questions; on a Jenverse profile its tests, the credit of
the correct answer minus that of the wrong one; on a LongMemEval question its answer. No label is read:
the rewards of every unit's three decisions are computed once (`reward_table`, a fork each) and a
sampled verdict's reward is looked up. Where the proxy cannot see a change (LongMemEval's knowledge-update
banks: an answer beside its stale statement earns in full), `reader` rewards the units by a reader's
answer instead (`reader_rewards`). There is no format term: a classifier's verdict is always well
formed; and no efficiency term: it would pay for retiring any memory no question reads, the harm the
judge must not learn.

Stages, each recorded in `out/stages.json` (a rerun resumes; the reward table is written a unit a line):
1. `sft`: the supervised judge (`judge.train.train_judge` on the labelled training part plus generated
   pairs, calibrated on the recipe part), or the checkpoint given as `sft_from`.
2. `rewards`: the reward table of the training units and the recipe units (people training never reads).
3. `rl`: GRPO from the SFT weights: per step `batch` units, `group` verdicts sampled from each, DAPO's
   dynamic sampling (a group whose rewards are all equal teaches nothing: it is dropped, counted, and
   another unit drawn), advantages normalised within the group, plus `kl` times the KL divergence from
   the SFT judge. Every `eval_every` steps the greedy judge's mean reward on the recipe units is read;
   the step that scores best (SFT's own step 0 included) is the run's judge, recalibrated on the recipe
   pairs as SFT was. The learning curve and metrics go to `out/`.
"""

from __future__ import annotations

import copy
import json
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from memupdate.errors import MemupdateError
from memupdate.judge.pairs import DECISIONS, LabelledPair
from memupdate.judge.verdict import RELATIONS, later
from memupdate.scoring.categories import MULTI_HOP, SINGLE_HOP
from memupdate.store import MemoryStore, NewMemory

STAGES = "stages.json"
REWARDS = "rewards.jsonl"
READER_REWARDS = "reader_rewards.jsonl"
DECISION_NAMES = ("duplicate", "update", "keep")  # the reward table's columns: what a verdict asks of a bank (`DECISIONS`)
# Jenverse tests whose wrong answer states a value (a stale one, another's); others' wrong answers are
# refusals or generic sentences ("I don't recall ...", "I'll explain things clearly"), no value to count.
VALUE_TESTS = ("contradiction_update", "consolidation", "temporal_relevance", "cross_session")
REWARD_STEP = 0.01  # rewards are compared at this resolution: smaller QA changes are the proxy's noise
READ_K = 8  # statements the reader reads for a question (`reader_rewards`): the nearest live ones, in the order said


@dataclass
class RelationConfig:
    """The relation run's recipe (chosen on the recipe part: see docs/relations.md)."""

    sft_from: str | None = None  # a judge checkpoint to start from; None: train SFT here (`judge train`'s recipe)
    learning_rate: float = 3e-5
    steps: int = 60
    batch: int = 16  # units a step
    group: int = 8  # verdicts sampled per unit
    kl: float = 0.05  # weight of KL(policy || SFT)
    eval_every: int = 10
    locomo_units: int = 300  # training units sampled from LoCoMo's training conversations
    fc_units: int = 400  # ... and from FactConsolidation's training facts
    reader: str | None = None  # e.g. hf:DIR: LongMemEval's knowledge-update units rewarded by this reader (`reader_rewards`)
    seed: int = 0
    threads: int = 2


@dataclass(frozen=True)
class Probe:
    """A question as the QA proxy reads it; `sign` -1: a wrong answer, whose credit counts against."""

    question: str
    answer: str
    evidence: tuple[str, ...] = ()
    category: int = SINGLE_HOP
    sign: float = 1.0


@dataclass
class RelationBank:
    """One bank's statements (keys `s0000`.. or the bank's own), its questions, and its candidate pairs."""

    group: str
    part: str  # train or recipe
    probes: list[Probe]
    pairs: list[LabelledPair]  # label "" where none is known: RL reads none
    memories: list[NewMemory] = field(default_factory=list)  # empty: `load` writes the bank
    load: Callable[[MemoryStore], MemoryStore] | None = None


@dataclass(frozen=True)
class RelationUnit:
    group: str
    part: str
    pair: LabelledPair

    @property
    def key(self) -> str:
        return json.dumps([self.group, self.pair.first, self.pair.second])


# -- the banks ---------------------------------------------------------------------------------------


def relation_banks(data: Path, config: RelationConfig, embed=None) -> list[RelationBank]:
    """The training and recipe banks the development data in `data` gives (evaluation people and
    contexts left out: `rl.data.relations.split_of`)."""
    from memupdate.rl.data.relations import split_of

    if embed is None:
        from memupdate.store import get_embedder

        embed = get_embedder().embed
    banks: list[RelationBank] = []
    natural = data / "natural-updates"
    jenverse = natural / "memorybench-jenverse-dev.json"
    if jenverse.is_file():
        banks += jenverse_banks(json.loads(jenverse.read_text()), embed)
    oracle = natural / "longmemeval-oracle-evidence-dev.jsonl"
    ku = natural / "longmemeval-ku-evidence-dev.jsonl"
    rows = {}
    for path in (oracle, ku):
        if path.is_file():
            for line in path.read_text().splitlines():
                if line.strip():
                    row = json.loads(line)
                    rows[row["question_id"]] = row
    banks += longmemeval_banks(list(rows.values()), embed)
    if (natural / "beam-ku-dev.jsonl").is_file():
        banks += beam_relation_banks(natural, embed)
    rng = random.Random(config.seed)
    banks += locomo_banks(data / "locomo" / "locomo10-dev.json", config.locomo_units, rng, embed)
    banks += factconsolidation_banks(data / "memoryagentbench" / "factconsolidation-dev.jsonl", config.fc_units, rng, embed)
    kept = []
    for bank in banks:
        bank.part = bank.part or split_of(bank.group)
        if bank.part in ("train", "recipe") and bank.pairs and bank.probes:
            kept.append(bank)
    return kept


def _statement_memories(said: dict[str, str | None], event: bool = False) -> tuple[list[NewMemory], dict[str, str]]:
    """Memories for statements (text -> ISO day or time), keyed `s0000`.., each its own provenance."""
    memories, keys = [], {}
    for i, (text, when) in enumerate(said.items()):
        key = f"s{i:04d}"
        meta: dict[str, Any] = {"dia_ids": [key]}
        if when:
            meta |= {"time": when, "date": when[:10]}
        memories.append(NewMemory(text, kind="episodic" if event else "semantic", metadata=meta, key=key))
        keys[text] = key
    return memories, keys


def _meeting(said: dict[str, str | None], embed, group: str, source: str, labels: dict[frozenset, str] | None = None) -> list[LabelledPair]:
    from memupdate.judge.meeting import MEET_FLOOR, MEET_K
    from memupdate.rl.data.relations import near_pairs

    texts = list(said)
    pairs = []
    for i, j in near_pairs(texts, embed, floor=MEET_FLOOR, k=MEET_K):
        a, b = sorted((texts[i], texts[j]), key=lambda t: said[t] or "")
        label = (labels or {}).get(frozenset((a, b)), "")
        pairs.append(LabelledPair(a, b, label, said[a], said[b], source=source, group=group))
    return pairs


def jenverse_banks(data: dict, embed) -> list[RelationBank]:
    """A bank a profile: its expected memories; its tests read the correct answer (+) and the wrong (-),
    every statement of the profile their evidence (a profile is short: all of it fits the context)."""
    from memupdate.rl.data.relations import jenverse_statements

    banks = []
    for profile in data["PROFILES"]:
        group = f"jenverse-{profile['user_id']}"
        said, changes = jenverse_statements(profile)
        updates = {frozenset((old, new)): "update" for old, new, _ in changes}
        memories, keys = _statement_memories(said)
        evidence = tuple(keys.values())
        probes = []
        for test in profile.get("memory_tests", []):
            probes.append(Probe(test["query"], test["correct_answer"], evidence))
            if test.get("wrong_answer") and test.get("category") in VALUE_TESTS:
                probes.append(Probe(test["query"], test["wrong_answer"], evidence, sign=-1.0))
        banks.append(RelationBank(group, "", probes, _meeting(said, embed, group, "jenverse", updates), memories))
    return banks


def longmemeval_banks(rows: Sequence[dict], embed) -> list[RelationBank]:
    """A bank a question: the user's sentences of its evidence sessions, stated at the session's time;
    the question reads its answer, every sentence its evidence."""
    from memupdate.rl.data.relations import _day, user_sentences

    banks: dict[str, RelationBank] = {}
    for row in rows:
        group = f"longmemeval-{row['question_id'].removesuffix('_abs')[:8]}"
        if row["question_id"].endswith("_abs") or not row.get("answer") or group in banks:
            continue
        said: dict[str, str | None] = {}
        for session in sorted(row.get("evidence_sessions") or [], key=lambda s: s["date"]):
            for sentence in user_sentences(session):
                said.setdefault(sentence, _day(session["date"]))
        if len(said) < 2:
            continue
        memories, keys = _statement_memories(said)
        probe = Probe(row["question"], str(row["answer"]), tuple(keys.values()), category=MULTI_HOP if "," in str(row["answer"]) else SINGLE_HOP)
        banks[group] = RelationBank(group, "", [probe], _meeting(said, embed, group, f"longmemeval-{row.get('question_type')}"), memories)
    return list(banks.values())


def beam_relation_banks(natural: Path, embed) -> list[RelationBank]:
    """A bank a BEAM conversation: its store (`rl.data.relations.beam_banks`: knowledge updates and
    contradictions, each statement at its time); its knowledge-update questions read their answers (the
    newer value), every statement their evidence."""
    from memupdate.rl.data.relations import _jsonl, beam_banks, split_of

    updates = _jsonl(natural / "beam-ku-dev.jsonl")
    stores = beam_banks(updates, _jsonl(natural / "beam-contradiction-dev.jsonl"), embed)
    banks = []
    for store in stores:
        said = {st.text: st.time for st in store.statements}
        memories, keys = _statement_memories(said)
        probes = [Probe(row["question"], str(row["answer"]), tuple(keys.values()))
                  for row in updates if f"beam-{row['conversation_id']}" == store.group and row.get("answer")]
        labels = {frozenset((store.statements[i].text, store.statements[j].text)): label for (i, j), label in store.labels.items()}
        # A namespace label holds no "/" ("beam-100K/4"): the bank is named without it, its part kept by the source's name.
        group = store.group.replace("/", "_")
        banks.append(RelationBank(group, split_of(store.group), probes, _meeting(said, embed, group, "beam", labels), memories))
    return banks


def locomo_banks(path: Path, units: int, rng: random.Random, embed) -> list[RelationBank]:
    """LoCoMo's training conversations (not conv-47/48): the ingested bank, its own questions, and up to
    `units` of the pairs that meet, over all of them."""
    from memupdate.rl.data.locomo import load_locomo
    from memupdate.rl.data.relations import EVAL_LOCOMO, locomo_pairs

    if not path.is_file():
        return []
    from memupdate.rl.data.ingest import ingest_conversation

    conversations = [c for c in load_locomo(path) if c.sample_id not in EVAL_LOCOMO]
    pairs = [p for p in locomo_pairs(path, embed) if p.group.removeprefix("locomo-") not in EVAL_LOCOMO]
    pairs = rng.sample(pairs, min(units, len(pairs)))  # labels kept for reports only: RL reads none
    banks = []
    for conversation in conversations:
        mine = [p for p in pairs if p.group == f"locomo-{conversation.sample_id}"]
        probes = [Probe(q.question, q.answer, tuple(q.evidence), q.category) for q in conversation.qa if q.answer]
        banks.append(RelationBank(f"locomo-{conversation.sample_id}", "train", probes, mine,
                                  load=lambda store, c=conversation: ingest_conversation(store, c)))
    return banks


def factconsolidation_banks(path: Path, units: int, rng: random.Random, embed) -> list[RelationBank]:
    """FactConsolidation's training bank (the larger context's facts no evaluation context holds), its
    own questions, and up to `units` of the pairs that meet there."""
    from memupdate.rl.data.factconsolidation import fact_banks, load_factconsolidation
    from memupdate.rl.data.relations import factconsolidation_pairs

    if not path.is_file():
        return []
    training, _ = fact_banks(load_factconsolidation(path))
    pairs = [p for p in factconsolidation_pairs(path, embed) if p.group == "fc-32k"]
    pairs = rng.sample(pairs, min(units, len(pairs)))  # labels kept for reports only: RL reads none
    return [RelationBank(f"fc-{bank.sample_id}", "train", [Probe(q.question, q.answer, tuple(q.evidence), q.category) for q in bank.qa],
                         pairs, load=bank.load) for bank in training]


# -- the reward table --------------------------------------------------------------------------------


def reward_table(store: MemoryStore, banks: Sequence[RelationBank], path: Path, progress: Callable[[int, int], None] | None = None) -> dict[str, dict[str, Any]]:
    """Each unit's reward per decision (see the module docstring), read from `path` where a unit is
    there already and appended to it as each is computed."""
    from memupdate.agent.tools import run_tool
    from memupdate.scoring.qa_proxy import score_fork, score_questions

    table = _logged(path)
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
                row: dict[str, Any] = {"key": unit.key, "group": unit.group, "part": unit.part, "label": unit.pair.label,
                                       "source": unit.pair.source, "keep": 0.0, "touched": 0}
                touched = [i for i, s in enumerate(before) if a in s.retrieved or b in s.retrieved] if a and b else []
                row["touched"] = len(touched)
                for decision in ("update", "duplicate"):
                    if not touched:
                        row[decision] = 0.0
                        continue
                    older, newer = (a, b) if later(*unit.pair.statements) != "first" else (b, a)
                    call = (("delete_memory", {"memory_id": older, "superseded_by": newer}) if decision == "update"
                            else ("merge_memory", {"memory_ids": [a, b], "strategy": "keep_fullest"}))
                    fork = base.fork((*base.namespace, "rl-" + decision))
                    try:
                        result = run_tool(fork, *call)
                        if not result.ok:
                            row[decision] = 0.0
                            row[f"{decision}_error"] = result.text[:200]
                            continue
                        probes = [bank.probes[i] for i in touched]
                        after, _ = score_fork(base, fork, probes)
                        change = [p.sign * (x.qa_score - before[i].qa_score) for p, x, i in zip(probes, after, touched, strict=True)]
                        row[decision] = round(float(np.mean(change)), 6)
                    finally:
                        fork.drop()
                table[unit.key] = row
                out.write(json.dumps(row) + "\n")
                out.flush()
                done += 1
                if progress:
                    progress(done, total)
            if not bank.load:
                base.drop()
    return table


def reader_rewards(banks: Sequence[RelationBank], table: dict[str, dict[str, Any]], reader, path: Path, embed,
                   sources: tuple[str, ...] = ("longmemeval-knowledge-update",)) -> dict[str, dict[str, Any]]:
    """The rewards of the units of `sources`' banks read by `reader` (a `scoring.readers.Reader`) instead of
    the proxy: for each decision, the reader answers the bank's question from its `READ_K` live statements
    nearest the question (dated, in the order said); the reward is the LoCoMo F1 of its answer minus the
    F1 with both statements kept. Where a changed fact's two statements are both in the context, the
    proxy credits the answer in full; a reader may answer with the stale one. Rows are written to `path`
    (read back on a rerun) and returned by key."""
    from memupdate.scoring.answer_prompts import ANSWER_MAX_TOKENS, answer_prompt
    from memupdate.scoring.metrics import locomo_f1

    done = _logged(path)
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
                older = a if later(*unit.pair.statements) != "first" else b
                gone = {"keep": (), "update": (older,), "duplicate": (min((a, b), key=len),)}  # keep_fullest keeps the longer
                asks[unit.key] = {d: answer_prompt(probe, _reader_context(nearness, when, set(g))).prompt for d, g in gone.items()}
            wanted = sorted({p for ask in asks.values() for p in ask.values()} - set(replies))
            for start in range(0, len(wanted), 8):
                chunk = wanted[start : start + 8]
                replies.update(zip(chunk, reader.complete_batch(chunk, ANSWER_MAX_TOKENS), strict=True))
            for unit in todo:
                f1 = {d: locomo_f1(replies[p], probe.answer, probe.category) for d, p in asks[unit.key].items()}
                row = table[unit.key] | {d: round(f1[d] - f1["keep"], 6) for d in ("update", "duplicate")} | {"keep": 0.0, "reward_by": "reader"}
                done[unit.key] = row
                out.write(json.dumps(row) + "\n")
                out.flush()
    return done


def _logged(path: Path) -> dict[str, dict[str, Any]]:
    """The rows a run already wrote to `path` (a reward table, one JSON object a line), by unit key."""
    if not path.is_file():
        return {}
    return {row["key"]: row for row in map(json.loads, filter(str.strip, path.read_text().splitlines()))}


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


def reward_of(row: dict[str, Any], relation: str) -> float:
    """The reward of a verdict of `relation` on the unit `row`, at `REWARD_STEP`."""
    return round(float(row[DECISIONS[relation]]) / REWARD_STEP) * REWARD_STEP


def informative(row: dict[str, Any]) -> bool:
    """Whether the unit's decisions earn different rewards (a group on it can teach something)."""
    return len({reward_of(row, r) for r in RELATIONS}) > 1


# -- GRPO ----------------------------------------------------------------------------------------------


def learn_relation(store: MemoryStore, data: Path, config: RelationConfig, out: str | Path, log: Callable[[str], None] = print) -> dict[str, Any]:
    """Run (or resume) the stages into `out`; returns the metrics also written to `out/metrics.json`."""
    import torch

    torch.set_num_threads(config.threads)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    done = json.loads((out / STAGES).read_text()) if (out / STAGES).is_file() else {}

    def stage(name: str, fn: Callable[[], Any]) -> Any:
        if name not in done:
            started = time.perf_counter()
            done[name] = {"result": fn(), "seconds": round(time.perf_counter() - started, 1)}
            (out / STAGES).write_text(json.dumps(done, indent=1))
        return done[name]["result"]

    from memupdate.rl.data.relations import relation_pairs, store_banks

    stores = store_banks(data)
    parts = relation_pairs(data, banks=stores)
    sft = stage("sft", lambda: _sft(data, config, out))
    banks = relation_banks(data, config)
    log(f"{len(banks)} banks, {sum(len(b.pairs) for b in banks)} candidate pairs")
    table = reward_table(store, banks, out / REWARDS, progress=lambda i, n: log(f"rewards {i}/{n}") if i % 100 == 0 else None)
    if config.reader:
        from memupdate.scoring.answerer import make_reader

        table |= reader_rewards(banks, table, make_reader(config.reader), out / READER_REWARDS, store.embedder.embed)
    rows = [table[RelationUnit(b.group, b.part, p).key] | {"pair": p} for b in banks for p in b.pairs]
    stage("rewards", lambda: _reward_summary(rows))
    # The recipe reading is over the recipe units whose decisions earn different rewards (on the rest every judge earns the same).
    result = stage("rl", lambda: grpo(sft, [r for r in rows if r["part"] == "train"], [r for r in rows if r["part"] == "recipe" and informative(r)],
                                      parts["recipe"], config, out / "rl", log, stores["recipe"]))
    metrics = {"config": asdict(config), "sft": sft, "rewards": done["rewards"]["result"], "rl": result,
               "seconds": {k: v["seconds"] for k, v in done.items()}}
    (out / "metrics.json").write_text(json.dumps(metrics, indent=2))
    _plot(result, out / "learning_curve.png")
    return metrics


def _sft(data: Path, config: RelationConfig, out: Path) -> str:
    if config.sft_from:
        return str(Path(config.sft_from).resolve())
    from memupdate.judge.train import JudgeTrainConfig, train_judge
    from memupdate.rl.data.relations import judge_data

    train_config = JudgeTrainConfig(seed=config.seed, threads=config.threads)
    got = judge_data(data, generated=train_config.generated, unrelated=train_config.unrelated, seed=config.seed)
    train_judge(got.train, got.recipe, train_config, out / "sft", recipe_banks=got.recipe_banks)
    return str(out / "sft")


def _reward_summary(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    summary: dict[str, Any] = {}
    for part in ("train", "recipe"):
        mine = [r for r in rows if r["part"] == part]
        taught = [r for r in mine if informative(r)]
        summary[part] = {"units": len(mine), "informative": len(taught),
                         # the greedy reward's bounds over those: keeping every pair earns 0; the best decision of each, this
                         "best_decision_reward": round(sum(max(reward_of(r, x) for x in RELATIONS) for r in taught) / max(1, len(taught)), 5),
                         "by_source": {s: sum(1 for r in mine if r["source"] == s and informative(r)) for s in sorted({r["source"] for r in mine})}}
    return summary


def greedy_reward(model, tokenizer, rows: Sequence[dict[str, Any]]) -> float:
    """The mean reward of the judge's verdict (as `LocalJudge` reads it: `judge.local.read_verdicts`)
    over `rows`."""
    import torch

    from memupdate.judge.local import read_verdicts, told_twice
    from memupdate.judge.train import encode_pairs

    total = 0.0
    with torch.inference_mode():
        for start in range(0, len(rows), 64):
            chunk = rows[start : start + 64]
            pairs = [r["pair"].statements for r in chunk]
            asked = [r["pair"] for r, p in zip(chunk, pairs, strict=True) if not told_twice(*p)]
            probs = torch.softmax(model(**encode_pairs(tokenizer, asked)).logits, dim=-1) if asked else []
            for row, verdict in zip(chunk, read_verdicts(pairs, probs, RELATIONS), strict=True):
                total += reward_of(row, verdict.relation)
    return total / max(1, len(rows))


def grpo(sft: str, train: Sequence[dict[str, Any]], recipe: Sequence[dict[str, Any]], recipe_pairs: Sequence[LabelledPair],
         config: RelationConfig, out: Path, log: Callable[[str], None], recipe_banks: Sequence = ()) -> dict[str, Any]:
    """GRPO with dynamic sampling from the SFT judge (see the module docstring); saves the chosen step."""
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from memupdate.judge.train import encode_pairs, trainable_names

    torch.manual_seed(config.seed)
    rng = random.Random(config.seed)
    tokenizer = AutoTokenizer.from_pretrained(sft)
    model = AutoModelForSequenceClassification.from_pretrained(sft)
    reference = copy.deepcopy(model).eval()
    names = set(trainable_names(model, model.config.num_hidden_layers))
    params = [p for n, p in model.named_parameters() if n in names]
    optimizer = torch.optim.AdamW(params, lr=config.learning_rate, weight_decay=0.0)
    pool = [r for r in train if informative(r)]
    if not pool:
        raise MemupdateError("no training unit whose decisions earn different rewards: check the data folder")
    model.eval()
    curve = [{"step": 0, "recipe_reward": greedy_reward(model, tokenizer, recipe), "train_reward": greedy_reward(model, tokenizer, pool)}]
    best = {"step": 0, "recipe_reward": curve[0]["recipe_reward"], "state": None}
    log(f"step 0: recipe reward {curve[0]['recipe_reward']:+.5f}, train {curve[0]['train_reward']:+.5f}")
    dropped = drawn = 0
    kl = reward = torch.zeros(())
    started = time.perf_counter()
    for step in range(1, config.steps + 1):
        model.train()
        batch, samples, rewards = [], [], []
        order = rng.sample(pool, len(pool))  # at most one pass over the pool a step: a policy sure of most units drops most groups
        for start in range(0, len(order), 4 * config.batch):
            candidates = order[start : start + 4 * config.batch]
            with torch.no_grad():
                probs = torch.softmax(model(**encode_pairs(tokenizer, [r["pair"] for r in candidates])).logits, dim=-1)
            for row, p in zip(candidates, probs, strict=True):
                drawn += 1
                picks = torch.multinomial(p, config.group, replacement=True)
                r = [reward_of(row, RELATIONS[int(i)]) for i in picks]
                if len(set(r)) == 1:  # DAPO's dynamic sampling: a group of equal rewards teaches nothing
                    dropped += 1
                    continue
                batch.append(row)
                samples.append(picks)
                rewards.append(torch.tensor(r))
                if len(batch) == config.batch:
                    break
            if len(batch) == config.batch:
                break
        if not batch:  # every group dropped: the policy is sure of every unit; nothing to learn this step
            continue
        logits = model(**encode_pairs(tokenizer, [r["pair"] for r in batch])).logits
        logp = torch.log_softmax(logits, dim=-1)
        with torch.no_grad():
            ref = torch.log_softmax(reference(**encode_pairs(tokenizer, [r["pair"] for r in batch])).logits, dim=-1)
        policy = torch.stack([logp[i, samples[i]] for i in range(len(batch))])  # batch x group
        reward = torch.stack(rewards)
        advantage = (reward - reward.mean(1, keepdim=True)) / (reward.std(1, keepdim=True) + 1e-6)
        kl = (logp.exp() * (logp - ref)).sum(-1).mean()
        loss = -(advantage * policy).mean() + config.kl * kl
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        optimizer.step()
        optimizer.zero_grad()
        if step % config.eval_every == 0 or step == config.steps:
            model.eval()
            point = {"step": step, "recipe_reward": greedy_reward(model, tokenizer, recipe), "train_reward": greedy_reward(model, tokenizer, pool),
                     "kl": round(float(kl.detach()), 5), "mean_sampled_reward": round(float(reward.mean()), 5), "dropped": dropped, "drawn": drawn,
                     "seconds": round(time.perf_counter() - started, 1)}
            curve.append(point)
            log(f"step {step}: recipe reward {point['recipe_reward']:+.5f}, train {point['train_reward']:+.5f}, kl {point['kl']}, dropped {dropped}/{drawn}")
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


def _plot(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    curve = result["curve"]
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.plot([p["step"] for p in curve], [p["recipe_reward"] for p in curve], marker="o", label="recipe units (kept out)")
    ax.plot([p["step"] for p in curve], [p["train_reward"] for p in curve], marker=".", label="training units")
    ax.axvline(result["chosen_step"], color="grey", linestyle=":", label="chosen step")
    ax.set_xlabel("GRPO step")
    ax.set_ylabel("mean reward of the greedy verdict")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
