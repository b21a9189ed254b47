"""Rollouts: who edits (teachers, and students as policies), on which questions, and the trajectory log.

    from memupdate.rl.distill.rollouts import TrajectoryLog, collect, make_teacher, training_prompts
    log = TrajectoryLog(out / "trajectories.jsonl")           # append-only; what is logged is not redone
    records = collect(store, make_teacher("heuristic", store, config), training_prompts(train, config), 4, "it1", log, config)

A rollout forks the question's base bank, lets the policy edit the fork through the LangGraph graph
and tools, scores the fork with the reward (target question plus its collateral sample) and drops it.
Its record holds the chat messages as the student's chat template takes them, each tool call with its
result, the counts behind the share of valid calls, and the reward with its parts. `config` is a
`run.DistillConfig` (mode, budgets, reward, seed, sampling).
"""

from __future__ import annotations

import hashlib
import json
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, ToolMessage

from memupdate.agent.policies.hf import to_chat_dicts
from memupdate.rl.data.ingest import ingest_conversation
from memupdate.rl.data.locomo import Conversation, QAItem
from memupdate.rl.episode import scored_episode
from memupdate.rl.evaluate import EvalConfig, eval_questions
from memupdate.rl.namespaces import trajectory_id
from memupdate.rl.scoring.reward import collateral_sample, compute_reward
from memupdate.rl.scoring.summaries import mean
from memupdate.store import MemoryStore, MemupdateError

if TYPE_CHECKING:
    from memupdate.rl.distill.run import DistillConfig

Progress = Callable[[str, int, int], None]


# -- teachers --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Teacher:
    """Who rolls out a group: `make(seed)` gives one member's chat model (None: no edits)."""

    name: str
    make: Callable[[int], BaseChatModel | None]


def make_teacher(spec: str, store: MemoryStore, config: DistillConfig, *, temperature: float | None = None) -> Teacher:
    """`heuristic`, `openai:MODEL` or `hf:DIR` (also `none`: no edits), stochastic across seeds."""
    from memupdate.agent.policies import make_policy
    from memupdate.agent.policies.heuristic import HeuristicPolicy
    from memupdate.agent.policies.hf import HuggingFaceChatModel
    from memupdate.settings import get_settings

    kind, _, model = spec.partition(":")
    temperature = config.temperature if temperature is None else temperature
    if kind == "none":
        return Teacher(spec, lambda seed: None)
    if kind == "heuristic" and not model:
        operations = config.max_operations or get_settings().max_operations
        explore = config.explore if temperature > 0 else 0.0
        return Teacher(spec, lambda seed: HeuristicPolicy(store=store, seed=seed, explore=explore, max_operations=operations))
    if kind == "openai" and model:
        base = make_policy("openai", store, model=model, base_url=config.base_url, api_key=config.api_key, temperature=temperature)
        return Teacher(spec, lambda seed: base.model_copy(update={"seed": seed}))
    if kind == "hf" and model:
        loaded = make_policy("hf", store, model=model, temperature=temperature)
        assert isinstance(loaded, HuggingFaceChatModel)

        def member(seed: int) -> HuggingFaceChatModel:  # shares the loaded weights; its own sampling seed
            return HuggingFaceChatModel(
                hf_model=loaded.hf_model, tokenizer=loaded.tokenizer, max_new_tokens=config.max_new_tokens,
                temperature=temperature, seed=seed, system_prompt=loaded.system_prompt,
                tool_result_chars=loaded.tool_result_chars,
            )

        return Teacher(spec, member)
    raise MemupdateError(f"--teacher {spec!r} is not one of heuristic, openai:MODEL (e.g. openai:Qwen/Qwen2.5-7B-Instruct), hf:DIR")


# -- rollouts ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Prompt:
    """One question to roll out a group on, with the questions its reward scores (target first)."""

    conversation: Conversation
    qa: QAItem
    scored: list[QAItem]

    @property
    def group(self) -> str:
        return f"{self.conversation.sample_id}/qa{self.qa.index}"


def training_prompts(conversations: Sequence[Conversation], config: DistillConfig) -> list[Prompt]:
    """The first `max_questions` answerable questions of each conversation, each with its collateral sample."""
    prompts = []
    for conversation in conversations:
        questions, _ = eval_questions(conversation, EvalConfig())
        for qa in questions[: config.max_questions]:
            scored = [qa, *collateral_sample(questions, qa.index, config.reward.collateral_questions)]
            prompts.append(Prompt(conversation, qa, scored))
    return prompts


def held_back_prompts(conversations: Sequence[Conversation], used: Sequence[Prompt], config: DistillConfig) -> list[Prompt]:
    """Up to `eval_questions` questions per conversation that no training group used."""
    seen = {p.group for p in used}
    prompts = []
    for conversation in conversations:
        questions, _ = eval_questions(conversation, EvalConfig())
        fresh = [qa for qa in questions if f"{conversation.sample_id}/qa{qa.index}" not in seen]
        for qa in fresh[: config.eval_questions]:
            prompts.append(Prompt(conversation, qa, [qa, *collateral_sample(questions, qa.index, config.reward.collateral_questions)]))
    return prompts


def member_seed(config: DistillConfig, key: str) -> int:
    """A seed per trajectory key: a resumed run draws the same rollouts as an uninterrupted one."""
    return int.from_bytes(hashlib.sha256(f"{config.seed}:{key}".encode()).digest()[:4], "big")


def rollout(
    policy: BaseChatModel | None, base: MemoryStore, prompt: Prompt, config: DistillConfig
) -> dict[str, Any]:
    """Fork the base, let `policy` edit the fork, score it with the reward, drop it; the trajectory record."""
    started = time.perf_counter()
    sample_id = prompt.conversation.sample_id
    question = prompt.qa.question if config.mode == "targeted" else None
    done = scored_episode(
        policy,
        base,
        trajectory_id(sample_id, prompt.qa.index),
        question,
        lambda fork: compute_reward(base, fork, prompt.scored, config.reward),
        max_turns=config.max_turns,
        max_operations=config.max_operations,
    )
    episode, reward = done.result, done.score
    messages = episode.messages if episode else []
    return {
        "sample_id": sample_id,
        "qa_index": prompt.qa.index,
        "question": prompt.qa.question,
        "group": prompt.group,
        "messages": to_chat_dicts(messages),
        **call_summary(messages),
        "stop_reason": episode.stop_reason if episode else None,
        "turns": episode.turns if episode else 0,
        "reward": reward.reward,
        "reward_parts": reward.as_dict(),
        "seconds": round(time.perf_counter() - started, 2),
    }


def call_summary(messages: Sequence) -> dict[str, Any]:
    """Each tool call with its result, and the counts behind the share of valid calls."""
    results = {m.tool_call_id: m for m in messages if isinstance(m, ToolMessage)}
    calls, invalid = [], 0
    for message in messages:
        if not isinstance(message, AIMessage):
            continue
        invalid += len(message.invalid_tool_calls)
        for call in message.tool_calls:
            result = results.get(call["id"])
            ok = result is not None and result.status == "success"
            calls.append({"name": call["name"], "args": call["args"], "ok": ok, "result": result.content if result else None})
    return {
        "calls": calls,
        "valid_calls": len(calls),
        "invalid_calls": invalid,
        "ok_calls": sum(c["ok"] for c in calls),
    }


class TrajectoryLog:
    """An append-only JSONL of records keyed by `key`; what is already there is not rolled out again."""

    def __init__(self, path: Path):
        self.path = path
        self.records: dict[str, dict[str, Any]] = {}
        if path.is_file():
            lines = path.read_text().splitlines()
            for number, line in enumerate(lines):
                try:
                    record = json.loads(line)
                except json.JSONDecodeError:
                    if number == len(lines) - 1:  # a run killed mid-write leaves a partial last line
                        break
                    raise MemupdateError(f"{path}, line {number + 1}, is not JSON: fix or delete that line to resume") from None
                self.records[record["key"]] = record
            # Rewrite without a partial tail, so appends start on a fresh line.
            path.write_text("".join(json.dumps(r) + "\n" for r in self.records.values()))
        path.touch()  # the dataset's place exists from the start, even if the first rollout fails

    def __contains__(self, key: str) -> bool:
        return key in self.records

    def append(self, record: dict[str, Any]) -> None:
        self.records[record["key"]] = record
        with self.path.open("a") as f:
            f.write(json.dumps(record) + "\n")


def collect(
    store: MemoryStore,
    teacher: Teacher,
    prompts: Sequence[Prompt],
    members: int,
    prefix: str,
    log: TrajectoryLog,
    config: DistillConfig,
    progress: Progress | None = None,
    stage: str = "rollouts",
) -> list[dict[str, Any]]:
    """`members` rollouts of `teacher` per prompt, keyed `{prefix}/{group}/g{member}`; logged ones are reused."""
    records, done, total = [], 0, len(prompts) * members
    for conversation, group in _by_conversation(prompts):
        base = ingest_conversation(store, conversation)
        if base.count() == 0:
            raise MemupdateError(f"conversation {conversation.sample_id} has no facts to remember: leave it out of --conversations")
        for prompt in group:
            for member in range(members):
                key = f"{prefix}/{prompt.group}/g{member}"
                if key not in log:
                    seed = member_seed(config, key)
                    try:
                        record = rollout(teacher.make(seed), base, prompt, config)
                    except MemupdateError:
                        raise
                    except Exception as exc:  # the teacher (an endpoint, a checkpoint) failed: keep what is logged
                        raise MemupdateError(
                            f"teacher {teacher.name} failed on {key}: {type(exc).__name__}: {exc}. The {len(log.records)} "
                            f"trajectories so far are kept in {log.path}; fix the teacher and rerun the same command to resume"
                        ) from exc
                    log.append({"key": key, "policy": teacher.name, "member": member, "seed": seed, **record})
                records.append(log.records[key])
                done += 1
                if progress:
                    progress(stage, done, total)
    return records


def _by_conversation(prompts: Sequence[Prompt]) -> list[tuple[Conversation, list[Prompt]]]:
    grouped: dict[str, tuple[Conversation, list[Prompt]]] = {}
    for prompt in prompts:
        grouped.setdefault(prompt.conversation.sample_id, (prompt.conversation, []))[1].append(prompt)
    return list(grouped.values())


# -- summaries ------------------------------------------------------------------------------------------


def summarize(records: Sequence[dict[str, Any]]) -> dict[str, Any]:
    valid = sum(r["valid_calls"] for r in records)
    invalid = sum(r["invalid_calls"] for r in records)
    tools = Counter(c["name"] for r in records for c in r["calls"])
    tools_ok = Counter(c["name"] for r in records for c in r["calls"] if c["ok"])
    return {
        "questions": len(records),
        "reward_mean": mean([r["reward"] for r in records]),
        "qa_delta_mean": mean([r["reward_parts"]["performance_delta"] for r in records]),
        "valid_call_share": valid / (valid + invalid) if valid + invalid else None,
        "ok_call_share": sum(r["ok_calls"] for r in records) / valid if valid else None,
        "calls_per_episode": (valid + invalid) / len(records) if records else 0.0,
        "tool_calls": {name: {"calls": n, "ok": tools_ok[name]} for name, n in sorted(tools.items())},
        "stop_reasons": dict(Counter(str(r["stop_reason"]) for r in records)),
    }
