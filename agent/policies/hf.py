"""A local Hugging Face checkpoint as a LangChain chat model (CPU, Hermes tool calls).

Use it to run a trained policy without a server, e.g. the directory written by verl's model merger::

    policy = HuggingFaceChatModel.from_pretrained("checkpoints/merged", temperature=0.0)
    agent_model = policy.bind_tools(tools)

For faster inference serve the checkpoint with SGLang or vLLM and use :mod:`.openai` instead.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import nullcontext
from pathlib import Path
from typing import Any

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, SystemMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.runnables import Runnable
from langchain_core.tools import BaseTool
from langchain_core.utils.function_calling import convert_to_openai_tool
from pydantic import PrivateAttr

from memupdate.llm import hermes
from memupdate.llm.chat import prompt_settings, student_view, to_chat_dicts
from memupdate.llm.checkpoints import CHECKPOINT_HELP, checkpoint_tokenizer, stop_and_pad_ids

from .handles import HandleConstraint, live_handles, to_date


class HuggingFaceChatModel(BaseChatModel):
    """Chat model over a local ``AutoModelForCausalLM`` whose chat template speaks Hermes tool calls.

    ``temperature == 0`` decodes greedily; otherwise it samples, reproducibly for a given ``seed``
    (each instance draws per-call seeds from its own generator and leaves torch's global RNG alone).
    """

    hf_model: Any
    tokenizer: Any
    max_new_tokens: int = 512
    temperature: float = 0.0
    seed: int | None = None
    tools: list[dict[str, Any]] = []
    system_prompt: str | None = None  # replaces the graph's system prompt (a small student's shorter one)
    tool_result_chars: int | None = None  # tool results cut to this many characters
    reuse_cache: bool = True  # keep the KV cache of the last turn and prefill only the new tokens
    # Stop a turn that has written this many tokens without opening a <tool_call> (None: never): a reply
    # is either calls or a short closing sentence, so long prose is a loop, and decoding costs ~0.1 s a token.
    max_prose_tokens: int | None = None
    # Inside a "memory_id(s)" or "superseded_by" value, only handles this episode's tool results showed and
    # no call has consumed, each once, and a supersession's those its reason names (see .handles): a small
    # model's repeated or invented handles never reach a tool.
    constrain_handles: bool = True
    # A `.batched.BatchDecoder`: set (by `.batched.batched`) on the copies that run episodes together, whose
    # turns are then decoded in one batch; None decodes alone with `generate`, as a single episode does.
    batcher: Any = None
    batch_episodes: bool = True  # False: episodes run together (`.batched`) still decode one by one, alone
    _rng: Any = PrivateAttr(default=None)
    _cache: Any = PrivateAttr(default=None)  # (token ids the cache holds, the cache)

    def model_post_init(self, context: Any) -> None:
        import torch

        if self.seed is not None:
            self._rng = torch.Generator().manual_seed(self.seed)

    @classmethod
    def from_pretrained(
        cls,
        path: str | Path,
        *,
        max_new_tokens: int = 512,
        max_prose_tokens: int | None = None,
        temperature: float = 0.0,
        seed: int | None = None,
        dtype: Any = "auto",
    ) -> HuggingFaceChatModel:
        """Load tokenizer and model from a local checkpoint directory (no downloads), onto the GPU where
        there is one."""
        import torch
        from transformers import AutoModelForCausalLM

        path = Path(path)
        tokenizer = checkpoint_tokenizer(path)
        try:
            model = AutoModelForCausalLM.from_pretrained(path, local_files_only=True, dtype=dtype)
        except (OSError, ValueError) as e:
            raise ValueError(f"cannot load a model from {str(path)!r} ({e}); {CHECKPOINT_HELP}") from e
        model.eval()
        if torch.cuda.is_available():
            model.to("cuda")
        return cls(
            hf_model=model,
            tokenizer=tokenizer,
            max_new_tokens=max_new_tokens,
            max_prose_tokens=max_prose_tokens,
            temperature=temperature,
            seed=seed,
            **prompt_settings(path),
        )

    @property
    def _llm_type(self) -> str:
        return "huggingface-hermes"

    @property
    def _identifying_params(self) -> dict[str, Any]:
        name = getattr(self.hf_model.config, "_name_or_path", "")
        return {"model": name, "max_new_tokens": self.max_new_tokens, "temperature": self.temperature}

    def bind_tools(
        self,
        tools: Sequence[dict[str, Any] | type | Callable | BaseTool],
        *,
        tool_choice: str | None = None,
        **kwargs: Any,
    ) -> Runnable[Any, AIMessage]:
        """Return a copy that lists ``tools`` (as OpenAI function schemas) in every prompt."""
        if tool_choice not in (None, "auto"):
            raise NotImplementedError("the Hermes chat template cannot force a tool choice")
        schemas = [convert_to_openai_tool(t) for t in tools]
        bound = self.model_copy(update={"tools": schemas})
        return bound.bind(**kwargs) if kwargs else bound

    def render_prompt(self, messages: Sequence[BaseMessage]) -> str:
        """The exact prompt text the model continues: chat template + bound tools + generation prompt
        (the task without its bank line: `llm.chat.without_bank_line`)."""
        return self.tokenizer.apply_chat_template(
            student_view(to_chat_dicts(messages), self.system_prompt, self.tool_result_chars),
            tools=self.tools or None,
            add_generation_prompt=True,
            tokenize=False,
        )

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        import torch

        if self.batcher is not None:
            return self._generate_batched(messages, stop)
        prompt = self.render_prompt(messages)
        inputs = self.tokenizer(prompt, return_tensors="pt", add_special_tokens=False).to(self.hf_model.device)
        options: dict[str, Any] = {"max_new_tokens": self.max_new_tokens, **stop_and_pad_ids(self.hf_model, self.tokenizer)}
        if self.temperature > 0:
            options.update(do_sample=True, temperature=self.temperature)
        else:
            options.update(do_sample=False, temperature=None, top_p=None, top_k=None)

        # Seeded: fork the global RNG so only this instance's generator decides the sample.
        seeded = self._rng is not None
        with torch.no_grad(), torch.random.fork_rng(devices=[]) if seeded else nullcontext():
            if seeded:
                torch.manual_seed(self._next_seed())
            cache = self._reusable_cache(inputs["input_ids"][0].tolist())
            held = cache.get_seq_length() if cache is not None else 0
            prompt_length = inputs["input_ids"].shape[1]
            if self.max_prose_tokens:
                options["stopping_criteria"] = [_ProseLimit(self.tokenizer, prompt_length, self.max_prose_tokens)]
            handles = live_handles(messages) if self.constrain_handles else None
            if handles:
                options["logits_processor"] = [HandleConstraint(self.tokenizer, prompt_length, handles, datable=to_date(messages, handles))]
            output = self.hf_model.generate(**inputs, **options, past_key_values=cache, return_dict_in_generate=True)
        cache = getattr(output, "past_key_values", None)
        output = getattr(output, "sequences", output)  # a plain tensor where generate is scripted (tests)
        if self.reuse_cache and cache is not None:
            self._cache = (output[0, : cache.get_seq_length()].tolist(), cache)
        new_tokens = output[0, inputs["input_ids"].shape[1] :]
        return self._reply(new_tokens, int(prompt_length), int(prompt_length) - held, stop)

    def _reply(self, new_tokens: Any, n_in: int, prefilled: int, stop: list[str] | None) -> ChatResult:
        """The decoded reply as an AIMessage with its tool calls and token counts (`prefill_tokens`: the
        prompt tokens the model ran this turn, the rest came from a cache)."""
        text = self.tokenizer.decode(new_tokens, skip_special_tokens=True)
        for s in stop or []:
            text = text.split(s, 1)[0]
        n_out = len(new_tokens)
        message = hermes.to_ai_message(
            text,
            usage_metadata={"input_tokens": n_in, "output_tokens": n_out, "total_tokens": n_in + n_out},
            response_metadata={"model_name": self._identifying_params["model"], "prefill_tokens": prefilled},
        )
        return ChatResult(generations=[ChatGeneration(message=message)])

    def _next_seed(self) -> int:
        """The next per-call seed from this instance's own generator."""
        import torch

        return int(torch.randint(0, 2**62, (1,), generator=self._rng))

    def _generate_batched(self, messages: list[BaseMessage], stop: list[str] | None) -> ChatResult:
        """This turn decoded by the batcher together with the other live episodes' turns."""
        from .batched import DecodeRequest

        ids = self.tokenizer(self.render_prompt(messages), add_special_tokens=False)["input_ids"]
        handles = live_handles(messages) if self.constrain_handles else None
        request = DecodeRequest(
            ids=ids,
            cache=self._cache if self.reuse_cache else None,
            prefix=self._prefix_ids(messages),
            max_new_tokens=self.max_new_tokens,
            temperature=self.temperature,
            seed=self._next_seed() if self._rng is not None and self.temperature > 0 else None,
            max_prose_tokens=self.max_prose_tokens,
            handles=handles,
            datable=to_date(messages, handles) if handles else frozenset(),
        )
        reply = self.batcher.decode(request)
        if self.reuse_cache:
            self._cache = reply.cache
        return self._reply(reply.tokens, len(ids), reply.prefilled, stop)

    def _prefix_ids(self, messages: list[BaseMessage]) -> list[int] | None:
        """The token ids of the system turn with the tool list: every episode's prompt starts with them."""
        if not messages or not isinstance(messages[0], SystemMessage):
            return None
        text = self.tokenizer.apply_chat_template(
            student_view(to_chat_dicts(messages[:1]), self.system_prompt), tools=self.tools or None, tokenize=False
        )
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    def episode_finished(self) -> None:
        """The episode that called this model ended: it leaves its batch (no-op when decoding alone)."""
        if self.batcher is not None:
            self.batcher.leave()

    def _reusable_cache(self, ids: list[int]) -> Any:
        """The last turn's KV cache cut to the tokens this prompt shares with it (None: start afresh).
        The next turn's prompt repeats the last one and the reply, so only tool results are prefilled;
        a reply re-rendered differently (a call's JSON re-serialised) is re-encoded from where it differs."""
        if not self.reuse_cache or self._cache is None:
            return None
        cached, cache = self._cache
        shared = 0
        for a, b in zip(cached, ids[:-1], strict=False):  # the last token is always fed: generate needs an input
            if a != b:
                break
            shared += 1
        if shared < 16:
            return None
        cache.crop(shared)
        return cache


class _ProseLimit:
    """A `generate` stopping criterion: stop once `limit` new tokens hold no `<tool_call>`."""

    def __init__(self, tokenizer: Any, prompt_length: int, limit: int):
        self.tokenizer, self.prompt_length, self.limit = tokenizer, prompt_length, limit

    def __call__(self, input_ids: Any, scores: Any, **kwargs: Any) -> Any:
        import torch

        new = input_ids[0, self.prompt_length :]
        done = len(new) >= self.limit and hermes.OPEN not in self.tokenizer.decode(new, skip_special_tokens=True)
        return torch.full((input_ids.shape[0],), done, dtype=torch.bool)
