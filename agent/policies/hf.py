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
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.runnables import Runnable
from langchain_core.tools import BaseTool
from langchain_core.utils.function_calling import convert_to_openai_tool
from pydantic import PrivateAttr

from . import hermes

CHECKPOINT_HELP = (
    "expected a Hugging Face checkpoint directory with config.json, weights and tokenizer files "
    "(e.g. produced by verl's model merger: `python -m verl.model_merger merge --backend fsdp "
    "--local_dir <actor dir> --target_dir <out dir>`)"
)


def _text(content: str | list) -> str:
    """Message content as plain text (LangChain allows a list of content blocks)."""
    if isinstance(content, str):
        return content
    return "".join(b if isinstance(b, str) else b.get("text", "") for b in content)


def to_chat_dicts(messages: Sequence[BaseMessage]) -> list[dict[str, str]]:
    """Convert LangChain messages to chat-template dicts, writing past tool calls in Hermes format."""
    out = []
    for m in messages:
        if isinstance(m, SystemMessage):
            out.append({"role": "system", "content": _text(m.content)})
        elif isinstance(m, HumanMessage):
            out.append({"role": "user", "content": _text(m.content)})
        elif isinstance(m, AIMessage):
            # Re-render calls (malformed ones verbatim) so the model sees exactly what it wrote.
            blocks = [hermes.format_tool_call(c["name"], c["args"]) for c in m.tool_calls]
            blocks += [f"{hermes.OPEN}\n{c['args'] or ''}\n{hermes.CLOSE}" for c in m.invalid_tool_calls]
            content = "\n".join(part for part in [_text(m.content).strip(), *blocks] if part)
            out.append({"role": "assistant", "content": content})
        elif isinstance(m, ToolMessage):
            out.append({"role": "tool", "content": _text(m.content)})
        else:
            raise TypeError(f"cannot render {type(m).__name__} for a chat template")
    return out


def checkpoint_tokenizer(path: str | Path) -> Any:
    """The tokenizer of the Hugging Face checkpoint folder `path`, which must hold config.json and a chat
    template; ValueError naming what is missing and the fix. The one check of a checkpoint that the hf
    policy, `rl distill` (its student) and `rl export` (its output) make."""
    from transformers import AutoTokenizer

    path = Path(path)
    if not path.is_dir():
        raise ValueError(f"checkpoint path {str(path)!r} does not exist or is not a directory; {CHECKPOINT_HELP}")
    if not (path / "config.json").is_file():
        raise ValueError(f"no config.json in {str(path)!r}; {CHECKPOINT_HELP}")
    try:
        tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
    except (OSError, ValueError) as e:
        raise ValueError(f"cannot load the tokenizer in {str(path)!r} ({e}); {CHECKPOINT_HELP}") from e
    if not tokenizer.chat_template:
        raise ValueError(
            f"the tokenizer in {str(path)!r} has no chat template; copy chat_template.jinja (or the "
            "chat_template entry of tokenizer_config.json) from the base model, e.g. Qwen2.5-Instruct, "
            "into the checkpoint directory"
        )
    return tokenizer


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
    _rng: Any = PrivateAttr(default=None)

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
        temperature: float = 0.0,
        seed: int | None = None,
        dtype: Any = "auto",
    ) -> HuggingFaceChatModel:
        """Load tokenizer and model from a local checkpoint directory onto the CPU (no downloads)."""
        from transformers import AutoModelForCausalLM

        path = Path(path)
        tokenizer = checkpoint_tokenizer(path)
        try:
            model = AutoModelForCausalLM.from_pretrained(path, local_files_only=True, dtype=dtype)
        except (OSError, ValueError) as e:
            raise ValueError(f"cannot load a model from {str(path)!r} ({e}); {CHECKPOINT_HELP}") from e
        model.eval()
        return cls(
            hf_model=model,
            tokenizer=tokenizer,
            max_new_tokens=max_new_tokens,
            temperature=temperature,
            seed=seed,
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
        """The exact prompt text the model continues: chat template + bound tools + generation prompt."""
        return self.tokenizer.apply_chat_template(
            to_chat_dicts(messages),
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

        prompt = self.render_prompt(messages)
        inputs = self.tokenizer(prompt, return_tensors="pt", add_special_tokens=False)
        options: dict[str, Any] = {"max_new_tokens": self.max_new_tokens, **stop_and_pad_ids(self.hf_model, self.tokenizer)}
        if self.temperature > 0:
            options.update(do_sample=True, temperature=self.temperature)
        else:
            options.update(do_sample=False, temperature=None, top_p=None, top_k=None)

        # Seeded: fork the global RNG so only this instance's generator decides the sample.
        seeded = self._rng is not None
        with torch.no_grad(), torch.random.fork_rng(devices=[]) if seeded else nullcontext():
            if seeded:
                torch.manual_seed(int(torch.randint(0, 2**62, (1,), generator=self._rng)))
            output = self.hf_model.generate(**inputs, **options)
        new_tokens = output[0, inputs["input_ids"].shape[1] :]
        text = self.tokenizer.decode(new_tokens, skip_special_tokens=True)
        for s in stop or []:
            text = text.split(s, 1)[0]

        n_in, n_out = int(inputs["input_ids"].shape[1]), int(new_tokens.shape[0])
        message = hermes.to_ai_message(
            text,
            usage_metadata={"input_tokens": n_in, "output_tokens": n_out, "total_tokens": n_in + n_out},
            response_metadata={"model_name": self._identifying_params["model"]},
        )
        return ChatResult(generations=[ChatGeneration(message=message)])



def stop_and_pad_ids(model: Any, tokenizer: Any) -> dict[str, Any]:
    """`generate` options that stop at the end of an assistant turn and pad with a known token."""
    # Stop at <|im_end|> too: base-model configs often list only <|endoftext|> as EOS.
    eos = model.generation_config.eos_token_id
    ids = set(eos if isinstance(eos, list) else [eos]) | {tokenizer.eos_token_id}
    ids.add(tokenizer.convert_tokens_to_ids("<|im_end|>"))
    ids = sorted(i for i in ids if isinstance(i, int) and i != tokenizer.unk_token_id)
    # Causal LMs often have no pad token; padding with EOS keeps generate() quiet.
    pad = tokenizer.pad_token_id
    if pad is None and ids:
        pad = ids[0]
    return {"eos_token_id": ids, "pad_token_id": pad}
