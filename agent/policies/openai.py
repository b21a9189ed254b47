"""A policy behind an OpenAI-compatible ``/v1/chat/completions`` endpoint."""

from __future__ import annotations

from langchain_openai import ChatOpenAI

from memupdate.openai_endpoint import EndpointRole, check_endpoint, openai_client, resolve_api_key

POLICY_ENDPOINT = EndpointRole("openai policy", "--base-url", "--api-key", "--model")


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

    The key falls back as every OpenAI-compatible call here does (`memupdate.openai_endpoint.resolve_api_key`):
    ``$OPENAI_API_KEY``, then ``"EMPTY"`` (SGLang and vLLM accept any key).
    """
    return ChatOpenAI(
        model=model, base_url=base_url, api_key=resolve_api_key(api_key), temperature=temperature, timeout=timeout
    )


def check_openai_endpoint(model: str, base_url: str | None = None, api_key: str | None = None, timeout: float = 5.0) -> None:
    """Raise `MemupdateError` unless the endpoint answers `GET /models` and serves `model`.

    Run before an evaluation or an episode: a policy that cannot reach its server fails on every
    episode, which must be one clear line up front, not a run of failed episodes.
    """
    check_endpoint(openai_client(base_url, api_key, timeout=timeout, retries=0), model, POLICY_ENDPOINT)
