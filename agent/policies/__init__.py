"""Policies: LangChain chat models that drive the memory graph.

- `heuristic`: rules, no LLM (the baseline, the distillation teacher, the main job's default);
- `openai`: any OpenAI-compatible endpoint, e.g. a checkpoint served by SGLang or vLLM;
- `hf`: a local Hugging Face checkpoint generating Hermes `<tool_call>` blocks, as verl trains it.
"""

from __future__ import annotations

from langchain_core.language_models import BaseChatModel

from memupdate.store import MemoryStore, MemupdateError

POLICY_NAMES = ("heuristic", "openai", "hf", "none")


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
) -> BaseChatModel | None:
    """The policy called `name` (None for `none`: no edits); a clear error names what is missing."""
    if name == "none":
        return None
    if name == "heuristic":
        from memupdate.agent.policies.heuristic import HeuristicPolicy
        from memupdate.settings import get_settings

        return HeuristicPolicy(store=store, seed=seed, max_operations=max_operations or get_settings().max_operations)
    if name == "openai":
        from memupdate.agent.policies.openai import make_openai_policy

        if not model:
            raise MemupdateError("the openai policy needs --model (the served model's name, e.g. Qwen/Qwen2.5-3B-Instruct)")
        return make_openai_policy(model, base_url, api_key, temperature=temperature)
    if name == "hf":
        from memupdate.agent.policies.hf import HuggingFaceChatModel

        if not model:
            raise MemupdateError("the hf policy needs --model: a local checkpoint directory (config.json, tokenizer) or smollm2")
        from memupdate.agent.models import resolve_model

        try:
            return HuggingFaceChatModel.from_pretrained(
                resolve_model(model), temperature=temperature, seed=seed, max_new_tokens=max_new_tokens,
                max_prose_tokens=max_prose_tokens,
            )
        except ValueError as exc:
            raise MemupdateError(str(exc)) from None
    raise MemupdateError(f"unknown policy {name!r}: choose one of {', '.join(POLICY_NAMES)}")
