"""A policy behind an OpenAI-compatible ``/v1/chat/completions`` endpoint."""

from __future__ import annotations

import os

from langchain_openai import ChatOpenAI


def make_openai_policy(
    model: str,
    base_url: str | None = None,
    api_key: str | None = None,
    temperature: float = 0.0,
    timeout: float = 60.0,
) -> ChatOpenAI:
    """Return a ``ChatOpenAI`` chat model; bind the memory tools with ``.bind_tools(tools)``.

    This is how a trained checkpoint is used at scale: serve it with SGLang
    (``python -m sglang.launch_server --model-path <ckpt> --tool-call-parser qwen25``) or vLLM
    (``vllm serve <ckpt> --enable-auto-tool-choice --tool-call-parser hermes``), then pass
    ``base_url="http://host:port/v1"`` and the served model name. The server turns the model's
    Hermes ``<tool_call>`` blocks into OpenAI ``tool_calls``. Without ``base_url`` it talks to OpenAI.

    ``api_key`` falls back to ``$OPENAI_API_KEY``, then to ``"EMPTY"`` (SGLang and vLLM accept any key).
    """
    return ChatOpenAI(
        model=model,
        base_url=base_url,
        api_key=api_key or os.environ.get("OPENAI_API_KEY") or "EMPTY",
        temperature=temperature,
        timeout=timeout,
    )
