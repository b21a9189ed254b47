"""The compaction task: what users run. One neighbourhood of a bank per training unit, edited blind, scored
on every question of the bank; a held-out bank is evaluated whole, the way `memupdate compact` runs it.

    from memupdate.rl.distill.compaction import CompactionTask
    task = CompactionTask(store, RewardConfig(), size=10, max_turns=4, max_operations=6)
    units = task.training_units(conversations, 6)    # 6 neighbourhoods spread over each conversation's bank
    labels = task.label_units(conversations, 50, units)   # up to 50 more each, where the rule edits or stops: labels only
    record = task.rollout(policy, base, units[0])    # fork, one blind episode, score, drop
    banks = task.evaluation_units(held_out, 0)       # one unit per held-out bank: compact it whole

A neighbourhood is the cut `memupdate compact` makes (`agent.compaction.neighbourhoods`, at most `size`
memories that lie close together). Its episode sees only those memories (`neighbourhood_episode`) and
its reward is `compute_compaction_reward`: the QA proxy change over every question per question the
neighbourhood can reach, times efficiency, minus unsupported text, lost information and calls that did
not run.

An evaluation unit is a whole held-out bank: `compact` (what `memupdate compact` calls) runs one
episode per neighbourhood into one fork, and the record holds every question's QA proxy before -> after
(`question_deltas`, paired per question), memories before -> after, lost sources and the calls.

verl trains on the same units: `preprocess_compaction` (`memupdate data preprocess --task compaction`)
writes each training unit as one of verl's rows (`rl.data.preprocess.compaction_rows`).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from langchain_core.language_models import BaseChatModel

from memupdate.agent.compaction import DEFAULT_NEIGHBOURHOOD, compact, neighbourhood_episode, neighbourhoods
from memupdate.llm.chat import to_chat_dicts
from memupdate.rl.data.conversation import Conversation
from memupdate.rl.data.ingest import load_bank
from memupdate.rl.data.locomo import split_conversations
from memupdate.rl.data.namespaces import trajectory_namespace
from memupdate.rl.data.preprocess import DATA_SOURCE, CompactionBank, compaction_rows, write_splits
from memupdate.rl.distill.config import STUDENT_NEIGHBOURHOOD
from memupdate.rl.distill.rollouts import LOOKS, call_summary
from memupdate.rl.distill.task import Rollout, spread
from memupdate.rl.evaluate import EvalConfig, eval_questions
from memupdate.scoring.questions import QAItem, scorable_questions
from memupdate.scoring.reward import (
    RewardBreakdown,
    RewardConfig,
    base_scores,
    compute_compaction_reward,
    reachable,
)
from memupdate.scoring.summaries import interval, mean
from memupdate.store import MemoryStore

if TYPE_CHECKING:
    from memupdate.rl.data.factconsolidation import FactBank, FactConsolidationSet
    from memupdate.rl.distill.config import LearnConfig


@dataclass(frozen=True)
class Neighbourhood:
    """One neighbourhood of a conversation's bank: a training unit."""

    conversation: Conversation
    index: int
    keys: tuple[str, ...]
    cut: int = 0  # which cut of the bank (`CompactionTask.label_cuts`): 0 is the one `memupdate compact` makes

    @property
    def group(self) -> str:
        return f"{self.conversation.sample_id}/{f'c{self.cut}' if self.cut else ''}n{self.index:03d}"


@dataclass(frozen=True)
class WholeBank:
    """A whole held-out bank: an evaluation unit, compacted as `memupdate compact` does."""

    conversation: Conversation

    @property
    def group(self) -> str:
        return f"{self.conversation.sample_id}/bank"


@dataclass(frozen=True)
class CompactionTask:
    store: MemoryStore
    reward: RewardConfig
    size: int = STUDENT_NEIGHBOURHOOD
    max_turns: int | None = None
    max_operations: int | None = None
    teacher_operations: int = 4  # the rule's plan: its look and up to three edits (LearnConfig.teacher_operations)
    label_cuts: int = 1  # label units come from this many cuts of each bank, seeded 0, 1, ... (LearnConfig.label_cuts)
    name: str = "compaction"
    _rule_runs: dict = field(default_factory=dict, compare=False, repr=False)  # `_reaching`'s, per bank
    score: ClassVar[str] = "qa_delta"  # each held-out question's QA proxy change on its compacted bank

    @classmethod
    def from_config(cls, config: LearnConfig, store: MemoryStore) -> CompactionTask:
        return cls(store, config.reward, config.neighbourhood, config.max_turns, config.max_operations, config.teacher_operations,
                   config.label_cuts)

    def training_units(self, conversations: Sequence[Conversation], per_conversation: int) -> list[Neighbourhood]:
        """`per_conversation` neighbourhoods of each bank (all of them for 0), of those that reach a question:
        a neighbourhood no question's context reads (nor its evidence) scores 0 whatever a policy does, so
        it teaches nothing (most of a FactConsolidation bank, whose 100 questions read few facts). Chosen
        first, spread over the bank: those where the rule's own edits move a question (one greedy rollout of
        `rule()` each), where a decision has a consequence the reward sees; then the rest, spread, so that a
        student also meets neighbourhoods where nothing is worth an edit."""
        units = []
        for conversation in conversations:
            if not per_conversation:
                units += [unit for unit, _ in self._reaching(conversation, ruled=False)]
                continue
            reaching = self._reaching(conversation)
            moved = [unit for unit, record in reaching if record.reward != 0]
            units += first_then_rest(moved, [unit for unit, _ in reaching], per_conversation)
        return units

    def label_units(self, conversations: Sequence[Conversation], per_conversation: int, taken: Sequence[Neighbourhood]) -> list[Neighbourhood]:
        """Up to `per_conversation` more neighbourhoods of each bank that reach a question and are not in
        `taken`, spread over it: first those where the rule edits, then those where it stops at once. The
        rule's action there is a label whether or not the reward sees it (a supersession whose question
        nobody asks scores 0 and is still the right edit; so is a stop where nothing is listed to date), so
        a student imitates the rule on states where a decision is made, stopping among them.

        With `label_cuts` above 1, each later cut of the bank (its k-means cells seeded 1, 2, ...) gives up to
        `per_conversation` more, after every bank's first: the same memories in other company, so the pairs a
        supersession names meet other lines that begin alike. A bank of one cell (`CELL_SIZE` memories or
        fewer: a LoCoMo bank) is cut the same whatever the seed, and a neighbourhood already taken is not
        taken again."""
        taken_keys = {frozenset(u.keys) for u in taken}
        units = []
        for cut in range(self.label_cuts):
            for conversation in conversations:
                if cut and {frozenset(keys) for keys in self._cut(load_bank(self.store, conversation), cut)} <= taken_keys:
                    continue  # one cell: cut as before, nothing new (and no rule rollouts to spend)
                rest = [(unit, record) for unit, record in self._reaching(conversation, cut=cut) if frozenset(unit.keys) not in taken_keys]
                edited = [unit for unit, record in rest if any(c["ok"] and c["name"] not in LOOKS for c in record.calls)]
                chosen = first_then_rest(edited, [unit for unit, _ in rest], per_conversation)
                taken_keys |= {frozenset(u.keys) for u in chosen}
                units += chosen
        return units

    def _reaching(self, conversation: Conversation, ruled: bool = True, cut: int = 0) -> list[tuple[Neighbourhood, Rollout | None]]:
        """The neighbourhoods of the bank (its `cut`) that reach a question, each with the rule's greedy
        rollout on it (`ruled`; kept for the task's life: the unit choices read it twice)."""
        key = (conversation.sample_id, ruled, cut)
        if key not in self._rule_runs:
            base = load_bank(self.store, conversation)
            questions, _ = eval_questions(conversation, EvalConfig())
            scores, memories = base_scores(base, questions, self.reward), base.snapshot()
            reaching = [Neighbourhood(conversation, index, tuple(keys), cut) for index, keys in enumerate(self._cut(base, cut))
                        if reachable(questions, scores, [memories[k] for k in keys]) > 0]
            rule = self.rule() if ruled else None
            self._rule_runs[key] = [(unit, self.rollout(rule, base, unit) if ruled else None) for unit in reaching]
        return self._rule_runs[key]

    def rule(self) -> BaseChatModel:
        """The rule a learning run's teacher is, without exploration: the heuristic policy as the task's
        teacher runs it (`teacher_options`), its plan the look and up to `teacher_operations - 1` edits."""
        from memupdate.agent.policies import make_policy

        return make_policy("heuristic", self.store, max_operations=self.teacher_operations, look_first=True, **self.teacher_options(0))

    def evaluation_units(self, conversations: Sequence[Conversation], per_conversation: int = 0) -> list[WholeBank]:
        """Every held-out bank, whole (`per_conversation` is not used: a bank is compacted whole)."""
        return [WholeBank(conversation) for conversation in conversations]

    def neighbourhoods(self, conversation: Conversation) -> list[list[str]]:
        """The conversation's bank cut as `memupdate compact --size {size}` cuts it."""
        return self._cut(load_bank(self.store, conversation))

    def _cut(self, base: MemoryStore, seed: int = 0) -> list[list[str]]:
        keys, vectors = base.vectors()
        return neighbourhoods(keys, vectors, self.size, seed=seed)

    def rollout(self, policy: BaseChatModel | None, base: MemoryStore, unit: Neighbourhood | WholeBank) -> Rollout:
        """Fork the bank, compact the unit (one neighbourhood, or the whole bank) blind, score it on every
        question, drop the fork."""
        started = time.perf_counter()
        questions, _ = eval_questions(unit.conversation, EvalConfig())
        sample_id = unit.conversation.sample_id
        label = unit.group.rsplit("/", 1)[1]
        namespace = trajectory_namespace(base.namespace, f"{sample_id}-{label}-{uuid.uuid4().hex[:8]}")
        if isinstance(unit, Neighbourhood):
            with base.forked(namespace) as fork:
                episode = neighbourhood_episode(
                    policy, fork, unit.keys, "e", max_turns=self.max_turns, max_operations=self.max_operations
                ) if policy is not None else None
                messages = episode.messages if episode else []
                calls = call_summary(messages)
                reward = compute_compaction_reward(base, fork, questions, unit.keys, self.reward, calls["failed_calls"])
            stop_reason = episode.stop_reason if episode else None
            facts = {"neighbourhood": list(unit.keys)}
        else:  # a whole bank's stop reasons are in `facts["stop_reasons"]`
            messages, calls, reward, facts = self._compact_whole(policy, base, namespace, questions)
            stop_reason = None
        return Rollout(
            unit.group,
            to_chat_dicts(messages),  # a whole bank's: every episode's transcript, one after another
            reward.reward, reward.as_dict(), **calls, stop_reason=stop_reason,
            turns=sum(1 for m in messages if m.type == "ai"), seconds=round(time.perf_counter() - started, 2),
            facts={"sample_id": sample_id, **facts},
        )

    # -- what learning reports of this task (task.Task) --

    def teacher_options(self, stepwise: int) -> dict[str, Any]:
        """Blind, the heuristic teacher's first look shows the whole neighbourhood and it makes one edit a
        turn, so each edit follows the result that names what is left to date (`stepwise` is not used)."""
        return {"stepwise": self.size, "calls_per_turn": 1}

    def as_users_run(self) -> CompactionTask:
        """The reference users have: `memupdate compact --policy heuristic`, as it runs (its neighbourhood,
        no budgets)."""
        return replace(self, size=DEFAULT_NEIGHBOURHOOD, max_turns=None, max_operations=None)

    def evaluation(self, records: Sequence[Rollout]) -> dict[str, Any]:
        """Whole banks: each question's QA change (paired per question), and what a compaction left."""
        facts = [r.facts for r in records]
        if not all("question_deltas" in f for f in facts):
            return {}
        return {
            "question_deltas": [d for f in facts for d in f["question_deltas"]],
            "qa_before": mean([q for f in facts for q in f["qa_before"]]),
            "memories_before": sum(f["memories_before"] for f in facts),
            "memories_after": sum(f["memories_after"] for f in facts),
            "lost_sources": sum(f["lost_sources"] for f in facts),
            "seconds": sum(r.seconds for r in records),
        }

    def evaluation_row(self, result: dict[str, Any], reference: dict[str, Any] | None) -> dict[str, Any]:
        """The QA change with its interval, its share of the heuristic compaction's, questions better and
        worse, memories before and after, lost sources per 100 memories."""
        if "question_deltas" not in result:
            return {}
        deltas = result["question_deltas"]
        gain = mean(reference["question_deltas"]) if reference else 0.0
        return {
            "qa_delta": interval(deltas),
            "qa_before": result["qa_before"],
            "share_of_heuristic": round(mean(deltas) / gain, 3) if gain > 0 else None,
            "better_worse": [sum(d > 1e-9 for d in deltas), sum(d < -1e-9 for d in deltas)],
            "memories": [result["memories_before"], result["memories_after"]],
            "lost_sources_per_100": round(100 * result["lost_sources"] / max(result["memories_before"], 1), 2),
            "seconds": result["seconds"],
        }

    def paired_values(self, result: dict[str, Any]) -> list[float]:
        return result.get("question_deltas", result["rewards"])

    def held_out_skipped(self) -> dict[str, Any]:
        return {}  # every held-out bank is compacted whole

    def _compact_whole(
        self, policy: BaseChatModel | None, base: MemoryStore, namespace: Sequence[str], questions: list[QAItem]
    ) -> tuple[list[Any], dict[str, Any], RewardBreakdown, dict[str, Any]]:
        """`compact` of the whole bank (no edits for `policy=None`), scored on every question: every
        episode's messages one after another, their calls, the reward and the bank's facts."""
        if policy is None:
            with base.forked(namespace) as fork:
                reward = compute_compaction_reward(base, fork, questions, None, self.reward)
            return [], call_summary([]), reward, bank_facts(reward, questions)
        # The compaction users run (`memupdate compact`); the reward below scores its fork on every question.
        result = compact(policy, base, namespace, size=self.size, max_turns=self.max_turns, max_operations=self.max_operations,
                         review=False).result
        messages = [m for transcript in result.messages for m in transcript]
        calls = call_summary(messages)
        try:
            reward = compute_compaction_reward(base, result.fork, questions, None, self.reward, calls["failed_calls"])
        finally:
            result.fork.drop()
        facts = bank_facts(reward, questions) | {
            "episodes": result.episodes, "failed_episodes": result.failed_episodes, "stop_reasons": result.stop_reasons,
        }
        return messages, calls, reward, facts


def first_then_rest(first: Sequence[Neighbourhood], every: Sequence[Neighbourhood], n: int) -> list[Neighbourhood]:
    """`n` of a bank's neighbourhoods `every`: spread over those in `first`, topped up spread over the
    rest; in bank order."""
    chosen = spread(first, n)
    groups = {unit.group for unit in first}
    chosen += spread([unit for unit in every if unit.group not in groups], n - len(chosen))
    return sorted(chosen, key=lambda unit: unit.index)


def bank_facts(reward: RewardBreakdown, questions: Sequence[QAItem]) -> dict[str, Any]:
    """A whole bank's evaluation, paired per question: each question's QA proxy before and after."""
    return {
        "questions": [q.index for q in questions],
        "qa_before": [s.qa_score for s in reward.base_scores],
        "question_deltas": [a.qa_score - b.qa_score for b, a in zip(reward.base_scores, reward.fork_scores, strict=True)],
        "memories_before": reward.efficiency.memories_before,
        "memories_after": reward.efficiency.memories_after,
        "lost_sources": reward.lost_sources,
    }


# -- verl's rows of the task: one per training unit (`memupdate data preprocess --task compaction`) ---------


def compaction_banks(
    store: MemoryStore, banks: Sequence[Conversation | FactBank], size: int | None = None, include_adversarial: bool = False
) -> list[CompactionBank]:
    """Each bank loaded, with the offline learner's training units of it (`CompactionTask.training_units`:
    the neighbourhoods `memupdate compact --size` cuts that reach a question; the others score 0 whatever a
    policy does). `size`: the learner's by default."""
    from memupdate.rl.data.factconsolidation import DATASET as FACTS_DATASET
    from memupdate.rl.data.factconsolidation import FactBank

    task = CompactionTask(store, RewardConfig(), size=size or STUDENT_NEIGHBOURHOOD)
    loaded = []
    for bank in banks:
        units = tuple((u.index, tuple(u.keys)) for u in task.training_units([bank], 0))
        source = FACTS_DATASET if isinstance(bank, FactBank) else DATA_SOURCE
        questions = tuple(scorable_questions(bank, include_adversarial)[0])
        loaded.append(CompactionBank(load_bank(store, bank), bank.sample_id, source, questions, units))
    return loaded


def preprocess_compaction(
    store: MemoryStore,
    conversations: Sequence[Conversation],
    out_dir: Path,
    *,
    factconsolidation: Sequence[FactConsolidationSet] = (),
    n_train: int = 7,
    size: int | None = None,
    include_adversarial: bool = False,
    progress: Callable[[str], None] | None = None,
) -> dict[str, int]:
    """Load the banks, then write `train.parquet` (the first `n_train` conversations' units and
    FactConsolidation's training banks', `fact_banks`) and `test.parquet` (the other conversations'), rows
    as `rl.data.preprocess.compaction_rows` writes them; the row counts. `size`: memories per neighbourhood,
    the offline learner's by default."""
    from memupdate.rl.data.factconsolidation import fact_banks

    train, test = split_conversations(list(conversations), n_train)
    training_facts = fact_banks(list(factconsolidation))[0] if factconsolidation else []
    splits: dict[str, list[dict[str, Any]]] = {"train": [], "test": []}
    for split, banks in (("train", [*train, *training_facts]), ("test", test)):
        for bank in banks:
            (loaded,) = compaction_banks(store, [bank], size, include_adversarial)
            splits[split] += compaction_rows(loaded, split)
            if progress:
                progress(bank.sample_id)
    return write_splits(splits, out_dir)
