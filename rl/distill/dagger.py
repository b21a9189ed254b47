"""On-policy distillation (DAgger, Ross et al. 2011): the teacher labels the states the student visits.

    group = labelled(student(run, checkpoint, 0.8), teacher(run, 0.0, 0.0).member(0))   # learn.py's groups
    records = collect(store, task, group, units, 3, "rl-1", log)    # each record's facts["teacher_labels"]
    examples = relabelled(records)     # chat messages: the student's own turns, then the teacher's action

Imitating the teacher's trajectories teaches the states the teacher visits; a student that slips (names
the handle it has just edited, stops early, edits what needed nothing) is then somewhere the teacher
never was. Here each turn of a student's rollout also asks the rule what it would do *now*, on the bank
as the student has left it: the rule plans on the current state (`HeuristicPolicy.plan`), and its label
is its look if the student has not looked yet, else the edits of its plan, else its closing reply. Where the
student did none of them, the transcript up to that turn (the student's own, its loss masked) followed by
the teacher's first action is one more imitation example, so the student learns to recover from its own mistakes.
The labels are computed from the bank and never shown to the student: no tool result names them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from pydantic import ConfigDict

from memupdate.agent.policies.planning import DONE, PlanningPolicy, ToolCall
from memupdate.agent.prompts import parse_task
from memupdate.llm import hermes
from memupdate.rl.distill.rollouts import LOOKS, PolicyGroup
from memupdate.rl.distill.task import Rollout

# Arguments that explain a call and change nothing it does: two calls that differ only here agree.
_NOTES = frozenset({"reason"})


class Labels:
    """(turn, the teacher's actions: empty for its closing reply), one per student turn; one object shared
    by a labelled policy and its tool-bound copy."""

    def __init__(self) -> None:
        self.turns: list[tuple[int, list[ToolCall]]] = []


class Labelled(BaseChatModel):
    """`student` as it is, with the teacher's label for each turn's state recorded in `labels`."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    student: Any  # a chat model (or its tool-bound copy)
    teacher: PlanningPolicy
    labels: Labels

    @property
    def _llm_type(self) -> str:
        return "memupdate-labelled"

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> Labelled:
        return Labelled(student=self.student.bind_tools(tools, **kwargs), teacher=self.teacher, labels=self.labels)

    def _generate(
        self, messages: list[BaseMessage], stop: list[str] | None = None, run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        self.labels.turns.append((sum(isinstance(m, AIMessage) for m in messages), teacher_actions(self.teacher, messages)))
        reply = self.student.invoke(messages, stop=stop)
        return ChatResult(generations=[ChatGeneration(message=reply)])


def teacher_actions(teacher: PlanningPolicy, messages: Sequence[BaseMessage]) -> list[ToolCall]:
    """What `teacher` does on the bank the task names, as it is now: its look until a look has run, then
    the edits of a plan made on this state, in its order (any of them is right: they are independent);
    none (its closing reply) when it has nothing to edit."""
    task = str(next((m.content for m in messages if isinstance(m, HumanMessage)), ""))
    namespace, question = parse_task(task)
    if namespace is None:
        return []
    plan = teacher.plan(teacher.store.scoped(namespace), question)
    if plan and not _looked(messages):
        return plan[:1]
    return plan[1:]


def labelled(group: PolicyGroup, teacher: PlanningPolicy) -> PolicyGroup:
    """`group` whose rollouts record the teacher's label of each state they visit, in their record's
    `facts["teacher_labels"]` ([turn, [[name, args], ...]], one per turn; no action: the closing reply)."""

    def run(member: BaseChatModel | None, job: Callable[[BaseChatModel | None], Rollout]) -> Rollout:
        if member is None:  # no edits: nothing to label
            return job(member)
        policy = Labelled(student=member, teacher=teacher, labels=Labels())
        record = job(policy)
        labels = [[turn, [list(action) for action in actions]] for turn, actions in policy.labels.turns]
        return replace(record, facts={**record.facts, "teacher_labels": labels})

    return replace(group, run=run)


def relabelled(records: Sequence[Rollout]) -> list[list[dict[str, Any]]]:
    """One imitation example per student turn that does none of the teacher's actions: the transcript up
    to that turn (the student's turns kept, marked `loss: False`) and the teacher's first action as the turn."""
    examples = []
    for record in records:
        for index, actions, agreed in labelled_turns(record):
            if agreed:
                continue
            before = [{**m, "loss": False} if m["role"] == "assistant" else m for m in record.messages[:index]]
            examples.append([*before, {"role": "assistant", "content": as_turn(actions[0] if actions else None)}])
    return examples


def until_first_slip(records: Sequence[Rollout]) -> list[list[dict[str, Any]]]:
    """One imitation example per rollout, all on states the rule itself reaches: the student's own turns
    while each does one of the rule's actions (trained: its own words for a right decision), then, at its
    first slip, the rule's action as the turn; a rollout with no slip is kept whole. A state after a slip
    (the student has superseded the wrong fact, so the rule would stop) teaches nothing the student can see."""
    examples = []
    for record in records:
        turns = labelled_turns(record)
        if not turns:
            continue
        slip = next((turn for turn in turns if not turn[2]), None)
        if slip is None:
            examples.append(list(record.messages[: turns[-1][0] + 1]))
            continue
        index, actions, _ = slip
        examples.append([*record.messages[:index], {"role": "assistant", "content": as_turn(actions[0] if actions else None)}])
    return examples


def labelled_turns(record: Rollout) -> list[tuple[int, list, bool]]:
    """Each student turn the teacher labelled: its index in `record.messages`, the teacher's actions, and
    whether the turn did one of them (`agrees`)."""
    labels = {turn: actions for turn, actions in record.facts.get("teacher_labels", [])}
    turns = [i for i, m in enumerate(record.messages) if m["role"] == "assistant"]
    return [(index, labels[turn], agrees(record.messages[index]["content"], labels[turn])) for turn, index in enumerate(turns) if turn in labels]


def as_turn(action: Sequence | None) -> str:
    """The teacher's action as its trajectories write it: one Hermes call, or its closing reply."""
    return hermes.format_tool_call(action[0], action[1]) if action else DONE


def agrees(content: str, actions: Sequence[Sequence]) -> bool:
    """Whether a student's turn does one of the teacher's actions: one of them as its single call (notes
    aside), or no call where the teacher closes (no actions)."""
    _, calls, invalid = hermes.parse_tool_calls(content)
    if not actions:
        return not calls and not invalid
    return not invalid and len(calls) == 1 and _plain(calls[0]["name"], calls[0]["args"]) in [_plain(*a) for a in actions]


def _plain(name: str, args: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    return name, {k: v for k, v in args.items() if k not in _NOTES}


def _looked(messages: Sequence[BaseMessage]) -> bool:
    """Whether a look (`sample_memory`, `search_memory`) has run in this episode."""
    looks = {c["id"] for m in messages if isinstance(m, AIMessage) for c in m.tool_calls if c["name"] in LOOKS}
    return any(isinstance(m, ToolMessage) and m.tool_call_id in looks and m.status == "success" for m in messages)
