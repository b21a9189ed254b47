"""Policies: LangChain chat models that drive the memory graph, named in one registry (`POLICIES`).

    from memupdate.agent.policies import make_policy, with_seed
    policy = make_policy("hf", store, model="runs/smollm2", temperature=0.8)   # --policy hf --model runs/smollm2
    members = [with_seed(policy, seed) for seed in range(4)]                  # a rollout group: weights shared

- `heuristic`: rules, no LLM (the baseline, the distillation teacher, the main job's default);
- `openai`: any OpenAI-compatible endpoint, e.g. a checkpoint served by SGLang or vLLM;
- `hf`: a local Hugging Face checkpoint generating Hermes `<tool_call>` blocks, as verl trains it;
- `none`: no edits (the reference every reward is measured against).

A new policy is one `PolicyKind` added to `POLICIES`: every command's `--policy` (and the learning run's
`--teacher`) reads its choices, help and errors from here.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from memupdate.errors import MemupdateError

if TYPE_CHECKING:  # types only: a command's --policy help must not load LangChain or the store
    import numpy as np
    from langchain_core.language_models import BaseChatModel

    from memupdate.judge.verdict import RelationJudge
    from memupdate.store import MemoryRecord, MemoryStore


@runtime_checkable
class JudgingPolicy(Protocol):
    """A policy that reads the relation judge (the heuristic): what compaction and the watcher may ask of
    it, beyond driving the graph. A policy without a judge (a language model's) is asked none of it."""

    def pairs_to_meet(self, bank: MemoryStore, keys: Sequence[str], vectors: np.ndarray) -> list[tuple[str, str]]:
        """The pairs of the bank that must share an episode (their reading is acted on)."""

    def judge_ahead(self, bank: MemoryStore, keys: Sequence[str], vectors: np.ndarray, groups: Sequence[Sequence[str]]) -> int:
        """Judge in one batch every pair the episodes on `groups` will meet; how many were judged."""

    def judge_banks(self, banks: Sequence[tuple[Sequence[MemoryRecord], np.ndarray]]) -> None:
        """Judge in one batch the pairs that meet in each of many small banks."""

    def has_work(self, bank: MemoryStore, size: int) -> bool:
        """Whether compacting `bank` in neighbourhoods of `size` could edit it."""

    def remembering_judge(self) -> RelationJudge:
        """The policy's judge, remembering every pair it has read (a compaction's review reads with it)."""


@dataclass(frozen=True)
class PolicyOptions:
    """What a command line can say about any policy; each kind reads the ones it needs."""

    model: str | None = None
    base_url: str | None = None
    api_key: str | None = None
    seed: int = 0
    temperature: float = 0.0
    max_operations: int | None = None
    max_new_tokens: int = 512
    max_prose_tokens: int | None = None
    reviewed: bool = False  # a person reviews what it proposes (watch's queue, `compact`'s page): see HeuristicPolicy.asks


@dataclass(frozen=True)
class PolicyKind:
    """One entry of the registry: its name, what `--model` means for it (None: it takes no model), and how
    it is built from a store, the options and the kind's own settings (e.g. the heuristic's `explore`)."""

    name: str
    summary: str
    model: str | None
    build: Callable[..., BaseChatModel | None]

    @property
    def edits(self) -> bool:
        return self.name != "none"


def _heuristic(store: MemoryStore, options: PolicyOptions, **settings: Any) -> BaseChatModel:
    from memupdate.agent.policies.heuristic import HeuristicPolicy
    from memupdate.settings import get_settings

    operations = options.max_operations or get_settings().max_operations
    return HeuristicPolicy(store=store, seed=options.seed, max_operations=operations, asks=options.reviewed, **settings)


def _openai(store: MemoryStore, options: PolicyOptions, **settings: Any) -> BaseChatModel:
    from memupdate.agent.policies.openai import make_openai_policy

    return make_openai_policy(options.model, options.base_url, options.api_key, temperature=options.temperature, **settings)


def _hf(store: MemoryStore, options: PolicyOptions, **settings: Any) -> BaseChatModel:
    from memupdate.agent.policies.hf import HuggingFaceChatModel
    from memupdate.agent.prompts import STUDENT_PROMPT
    from memupdate.llm.models import resolve_model

    try:
        return HuggingFaceChatModel.from_pretrained(
            resolve_model(options.model, STUDENT_PROMPT), temperature=options.temperature, seed=options.seed,
            max_new_tokens=options.max_new_tokens, max_prose_tokens=options.max_prose_tokens, **settings,
        )
    except ValueError as exc:
        raise MemupdateError(str(exc)) from None


POLICIES: dict[str, PolicyKind] = {
    kind.name: kind
    for kind in (
        PolicyKind("heuristic", "rules, no LLM", None, _heuristic),
        PolicyKind("openai", "an OpenAI-compatible endpoint (--base-url)", "the served model's name, e.g. Qwen/Qwen2.5-3B-Instruct", _openai),
        PolicyKind("hf", "a local Hugging Face checkpoint", "a local checkpoint directory (config.json, tokenizer) or smollm2", _hf),
        PolicyKind("none", "no edits", None, lambda store, options, **settings: None),
    )
}
POLICY_NAMES = tuple(POLICIES)
EDITING_POLICIES = tuple(name for name, kind in POLICIES.items() if kind.edits)


def policy_kind(name: str, option: str = "--policy", *, editing: bool = False) -> PolicyKind:
    """The registry's entry for `name`; a clear error naming the choices (`editing`: `none` is refused)."""
    choices = EDITING_POLICIES if editing else POLICY_NAMES
    if name not in choices:
        why = "makes no edits" if name in POLICIES else "is not a policy"
        raise MemupdateError(f"{option} {name!r} {why}: choose one of {', '.join(choices)}")
    return POLICIES[name]


def policy_help(*, editing: bool = False) -> str:
    """`--policy`'s help text, from the registry."""
    return "; ".join(f"{k.name}: {k.summary}" for k in POLICIES.values() if k.edits or not editing)


def model_help() -> str:
    """`--model`'s help text: what it names for each policy that takes one."""
    return "; ".join(f"{k.name}: {k.model}" for k in POLICIES.values() if k.model)


def make_policy(
    name: str,
    store: MemoryStore,
    *,
    model: str | None = None,
    base_url: str | None = None,
    api_key: str | None = None,
    seed: int = 0,
    temperature: float = 0.0,
    max_operations: int | None = None,
    max_new_tokens: int = 512,
    max_prose_tokens: int | None = None,
    reviewed: bool = False,
    option: str = "--policy",
    **settings: Any,
) -> BaseChatModel | None:
    """The policy called `name` (None for `none`: no edits); a clear error names what is missing. `settings`
    go to the kind's own class (e.g. `explore=0.5` for the heuristic, `dtype="float32"` for hf)."""
    kind = policy_kind(name, option)
    if kind.model and not model:
        raise MemupdateError(f"the {name} policy needs --model: {kind.model}")
    options = PolicyOptions(model, base_url, api_key, seed, temperature, max_operations, max_new_tokens, max_prose_tokens, reviewed)
    return kind.build(store, options, **settings)


def with_seed(policy: BaseChatModel | None, seed: int) -> BaseChatModel | None:
    """The same policy with its own seed (a rollout group's member): a fresh instance, so its sampling
    generator and plans are its own, sharing what it holds by reference (an hf checkpoint's weights)."""
    if policy is None:
        return None
    return type(policy)(**{**dict(policy), "seed": seed})
