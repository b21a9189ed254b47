"""The compaction task: what users run. One neighbourhood of a bank per training unit, edited blind, scored
on every question of the bank; a held-out bank is evaluated whole, the way `memupdate compact` runs it.

    from memupdate.rl.distill.compaction import CompactionTask
    task = CompactionTask(store, RewardConfig(), size=10, max_turns=4, max_operations=6)
    units = task.training_units(conversations, 6)    # 6 neighbourhoods spread over each conversation's bank
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
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from langchain_core.language_models import BaseChatModel

from memupdate.agent.compaction import compact, neighbourhood_episode, neighbourhoods
from memupdate.bank.change_log import bank_vectors
from memupdate.llm.chat import to_chat_dicts
from memupdate.rl.data.conversation import Conversation
from memupdate.rl.data.ingest import ingest_conversation
from memupdate.rl.data.namespaces import trajectory_namespace
from memupdate.rl.distill.config import STUDENT_NEIGHBOURHOOD
from memupdate.rl.distill.rollouts import call_summary
from memupdate.rl.distill.targeted import spread
from memupdate.rl.evaluate import EvalConfig, eval_questions
from memupdate.scoring.questions import QAItem
from memupdate.scoring.reward import RewardBreakdown, RewardConfig, compute_compaction_reward
from memupdate.store import MemoryStore


@dataclass(frozen=True)
class Neighbourhood:
    """One neighbourhood of a conversation's bank: a training unit."""

    conversation: Conversation
    index: int
    keys: tuple[str, ...]

    @property
    def group(self) -> str:
        return f"{self.conversation.sample_id}/n{self.index:03d}"


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
    name: str = "compaction"

    def training_units(self, conversations: Sequence[Conversation], per_conversation: int) -> list[Neighbourhood]:
        """`per_conversation` neighbourhoods spread over each conversation's bank (all of them for 0)."""
        units = []
        for conversation in conversations:
            groups = self.neighbourhoods(conversation)
            chosen = spread(list(enumerate(groups)), per_conversation) if per_conversation else list(enumerate(groups))
            units += [Neighbourhood(conversation, index, tuple(keys)) for index, keys in chosen]
        return units

    def evaluation_units(self, conversations: Sequence[Conversation], per_conversation: int = 0) -> list[WholeBank]:
        """Every held-out bank, whole (`per_conversation` is not used: a bank is compacted whole)."""
        return [WholeBank(conversation) for conversation in conversations]

    def neighbourhoods(self, conversation: Conversation) -> list[list[str]]:
        """The conversation's bank cut as `memupdate compact --size {size}` cuts it."""
        keys, vectors = bank_vectors(ingest_conversation(self.store, conversation))
        return neighbourhoods(keys, vectors, self.size)

    def rollout(self, policy: BaseChatModel | None, base: MemoryStore, unit: Neighbourhood | WholeBank) -> dict[str, Any]:
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
            facts = {"neighbourhood": list(unit.keys), "stop_reason": episode.stop_reason if episode else None}
        else:
            messages, calls, reward, facts = self._compact_whole(policy, base, namespace, questions)
        return {
            "sample_id": sample_id,
            "group": unit.group,
            "messages": to_chat_dicts(messages),  # a whole bank's: every episode's transcript, one after another
            **calls,
            "turns": sum(1 for m in messages if m.type == "ai"),
            "reward": reward.reward,
            "reward_parts": reward.as_dict(),
            **facts,
            "seconds": round(time.perf_counter() - started, 2),
        }

    def _compact_whole(
        self, policy: BaseChatModel | None, base: MemoryStore, namespace: Sequence[str], questions: list[QAItem]
    ) -> tuple[list[Any], dict[str, Any], RewardBreakdown, dict[str, Any]]:
        """`compact` of the whole bank (no edits for `policy=None`), scored on every question: every
        episode's messages one after another, their calls, the reward and the bank's facts."""
        if policy is None:
            with base.forked(namespace) as fork:
                reward = compute_compaction_reward(base, fork, questions, None, self.reward)
            return [], call_summary([]), reward, bank_facts(reward, questions) | {"stop_reason": None}
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
            "stop_reason": None,  # a whole bank's are in `stop_reasons`
            "episodes": result.episodes, "failed_episodes": result.failed_episodes, "stop_reasons": result.stop_reasons,
        }
        return messages, calls, reward, facts


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
