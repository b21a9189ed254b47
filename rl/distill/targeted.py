"""The targeted task: one question per unit, shown to the policy, scored on it and its collateral sample.

    from memupdate.rl.distill.targeted import TargetedTask
    task = TargetedTask(reward=RewardConfig(), max_turns=4, max_operations=6)
    prompts = task.training_units(conversations, 10)   # 10 questions spread over each conversation

The reward (`compute_reward`) compares the untouched base with the edited fork on the target question
plus `reward.collateral_questions` other questions of the conversation (collateral damage). This is the
seed's setting and verl's; `task.Task` is the seam it and the compaction task (`compaction.py`) plug into.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from langchain_core.language_models import BaseChatModel

from memupdate.llm.chat import to_chat_dicts
from memupdate.rl.data.ingest import ingest_conversation
from memupdate.rl.data.locomo import Conversation, QAItem
from memupdate.rl.data.namespaces import trajectory_id
from memupdate.rl.distill.rollouts import call_summary
from memupdate.rl.distill.task import Rollout, spread
from memupdate.rl.episode import scored_episode
from memupdate.rl.evaluate import EvalConfig, eval_questions
from memupdate.scoring.questions import collateral_sample
from memupdate.scoring.reward import RewardConfig, compute_reward, score
from memupdate.store import MemoryStore

if TYPE_CHECKING:
    from memupdate.rl.distill.config import LearnConfig


@dataclass(frozen=True)
class Prompt:
    """One question to roll out a group on, with the questions its reward scores (target first)."""

    conversation: Conversation
    qa: QAItem
    scored: list[QAItem]

    @property
    def group(self) -> str:
        return f"{self.conversation.sample_id}/qa{self.qa.index}"


@dataclass(frozen=True)
class TargetedTask:
    reward: RewardConfig
    max_turns: int | None = None
    max_operations: int | None = None
    name: str = "targeted"
    store: MemoryStore | None = None  # where held-out banks are scored to draw questions with headroom
    skipped: dict[str, dict[str, int]] = field(default_factory=dict, compare=False)  # per held-out conversation
    score: ClassVar[str] = "reward"  # each held-out question's reward

    @classmethod
    def from_config(cls, config: LearnConfig, store: MemoryStore) -> TargetedTask:
        return cls(config.reward, config.max_turns, config.max_operations, store=store)

    def training_units(self, conversations: Sequence[Conversation], per_conversation: int) -> list[Prompt]:
        """`per_conversation` answerable questions spread over each conversation, each with its collateral sample."""
        prompts = []
        for conversation in conversations:
            questions, _ = eval_questions(conversation, EvalConfig())
            for qa in spread(questions, per_conversation):
                prompts.append(Prompt(conversation, qa, [qa, *collateral_sample(questions, qa.index, self.reward.collateral_questions)]))
        return prompts

    def label_units(self, conversations: Sequence[Conversation], per_conversation: int, taken: Sequence[Prompt]) -> list[Prompt]:
        """None: a question's unit is scored by its own question, so its teacher groups already hold the labels."""
        return []

    def evaluation_units(self, conversations: Sequence[Conversation], per_conversation: int) -> list[Prompt]:
        """Held-out questions spread over each conversation, drawn (with `store`) from those with headroom:
        not answered yet (QA proxy below 1 on the bank) and reachable (some memory of the bank comes from
        the question's evidence). How many were left out, and why, is in `skipped`."""
        if self.store is None:
            return self.training_units(conversations, per_conversation)
        prompts = []
        for conversation in conversations:
            questions, _ = eval_questions(conversation, EvalConfig())
            headroom = self._with_headroom(conversation, questions)
            for qa in spread(headroom, per_conversation):
                prompts.append(Prompt(conversation, qa, [qa, *collateral_sample(questions, qa.index, self.reward.collateral_questions)]))
        return prompts

    def _with_headroom(self, conversation: Conversation, questions: list[QAItem]) -> list[QAItem]:
        base = ingest_conversation(self.store, conversation)
        in_bank = {turn for memory in base.list() for turn in memory.metadata.get("dia_ids") or ()}
        kept, skipped = [], Counter()
        for qa, scored in zip(questions, score(base, questions, self.reward), strict=True):
            if scored.qa_score >= 1.0:
                skipped["answered already"] += 1
            elif not in_bank.intersection(qa.evidence):
                skipped["evidence not in the bank"] += 1
            else:
                kept.append(qa)
        self.skipped[conversation.sample_id] = {"questions": len(questions), "kept": len(kept), **skipped}
        return kept

    def rollout(self, policy: BaseChatModel | None, base: MemoryStore, unit: Prompt) -> Rollout:
        """Fork the base, let `policy` edit the fork for the question, score it with the reward, drop it."""
        started = time.perf_counter()
        sample_id = unit.conversation.sample_id
        done = scored_episode(
            policy, base, trajectory_id(sample_id, unit.qa.index), unit.qa.question,
            lambda fork: compute_reward(base, fork, unit.scored, self.reward),
            max_turns=self.max_turns, max_operations=self.max_operations,
        )
        episode, reward = done.result, done.score
        messages = episode.messages if episode else []
        return Rollout(
            unit.group, to_chat_dicts(messages), reward.reward, reward.as_dict(), **call_summary(messages),
            stop_reason=episode.stop_reason if episode else None, turns=episode.turns if episode else 0,
            seconds=round(time.perf_counter() - started, 2),
            facts={"sample_id": sample_id, "qa_index": unit.qa.index, "question": unit.qa.question},
        )

    # -- what learning reports of this task (task.Task) --

    def teacher_options(self, stepwise: int) -> dict[str, Any]:
        """The heuristic teacher's search shows `stepwise` memories; it edits only those."""
        return {"stepwise": stepwise}

    def as_users_run(self) -> None:
        return None  # verl's and the seed's setting: no product command runs it

    def evaluation(self, records: Sequence[Rollout]) -> dict[str, Any]:
        return {}

    def evaluation_row(self, result: dict[str, Any], reference: dict[str, Any] | None) -> dict[str, Any]:
        return {}

    def paired_values(self, result: dict[str, Any]) -> list[float]:
        return result["rewards"]

    def held_out_skipped(self) -> dict[str, Any]:
        return self.skipped
