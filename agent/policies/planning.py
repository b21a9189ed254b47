"""A chat model that plans an episode's tool calls from the database and emits them turn by turn.

    class DeleteEverything(PlanningPolicy):
        def plan(self, bank, question):
            return [("delete_memory", {"memory_id": m.key}) for m in bank.list()]

    run_episode(DeleteEverything(store=store), fork, question)

Subclasses write `plan(bank, question)`; this class reads the task message, plans once on the bank's
state before any edit, and sends `calls_per_turn` calls per turn through the same graph, tools,
events and budgets as an LLM. The heuristic policy is one; the tests' scripted exploit policies are
others.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from pydantic import ConfigDict, Field, PrivateAttr

from memupdate.agent.prompts import parse_task
from memupdate.store import MemoryStore

ToolCall = tuple[str, dict[str, Any]]
# What a planning policy says when its plan is spent: the turn that ends an episode.
DONE = "The memory bank is in good shape; no further edits."


class PlanningPolicy(BaseChatModel):
    """Base of the rule-based policies; `store` is any MemoryStore on the same database (the task
    message names the bank)."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    store: MemoryStore
    calls_per_turn: int = Field(6, ge=1)
    # The first call (a look at the bank) alone in the first turn, so later calls can use what it showed.
    look_first: bool = False
    _plans: dict[str, list[ToolCall]] = PrivateAttr(default_factory=dict)

    @property
    def _llm_type(self) -> str:
        return f"memupdate-{type(self).__name__}"

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> PlanningPolicy:
        return self  # it only ever calls memupdate's own six tools

    def plan(self, bank: MemoryStore, question: str | None) -> list[ToolCall]:
        """The episode's tool calls, most valuable first."""
        raise NotImplementedError

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        task = str(next((m.content for m in messages if isinstance(m, HumanMessage)), ""))
        namespace, question = parse_task(task)
        if namespace is None:
            return _reply(AIMessage("I need a task message naming the memory bank ('Memory bank: ...')."))
        turn = sum(isinstance(m, AIMessage) for m in messages)
        if turn == 0:  # plan once, on what the bank holds before any edit; the task text names the episode
            self._plans[task] = self.plan(self.store.scoped(namespace), question)
        plan = self._plans.get(task, [])
        if self.look_first:
            now = plan[:1] if turn == 0 else plan[1 + (turn - 1) * self.calls_per_turn : 1 + turn * self.calls_per_turn]
        else:
            now = plan[turn * self.calls_per_turn : (turn + 1) * self.calls_per_turn]
        if not now:
            self._plans.pop(task, None)
            return _reply(AIMessage(DONE))
        calls = [
            {"name": name, "args": args, "id": f"call_{turn}_{i}", "type": "tool_call"} for i, (name, args) in enumerate(now)
        ]
        return _reply(AIMessage("", tool_calls=calls))


def _reply(message: AIMessage) -> ChatResult:
    return ChatResult(generations=[ChatGeneration(message=message)])
