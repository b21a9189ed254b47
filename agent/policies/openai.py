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


def check_openai_endpoint(model: str, base_url: str | None = None, api_key: str | None = None, timeout: float = 5.0) -> None:
    """Raise `MemupdateError` unless the endpoint answers `GET /models` and serves `model`.

    Run before an evaluation or an episode: a policy that cannot reach its server fails on every
    episode, which must be one clear line up front, not a run of failed episodes.
    """
    import httpx

    from memupdate.store.errors import MemupdateError

    root = (base_url or "https://api.openai.com/v1").rstrip("/")
    key = api_key or os.environ.get("OPENAI_API_KEY") or "EMPTY"
    try:
        response = httpx.get(f"{root}/models", headers={"Authorization": f"Bearer {key}"}, timeout=timeout)
    except httpx.HTTPError as exc:
        raise MemupdateError(
            f"the openai policy's endpoint {root} does not answer ({type(exc).__name__}: {exc or 'no reply'}): "
            "start the server (SGLang or vLLM) or fix --base-url"
        ) from None
    if response.status_code in (401, 403):
        raise MemupdateError(f"the endpoint {root} refused the API key (HTTP {response.status_code}): pass --api-key")
    if response.status_code >= 400:
        # Some servers have no /models: the endpoint answered, so let the run find out about the model.
        return
    try:
        served = [entry["id"] for entry in response.json().get("data", [])]
    except (ValueError, AttributeError, KeyError, TypeError):
        raise MemupdateError(
            f"{root}/models did not answer as an OpenAI-compatible endpoint: check --base-url (it ends in /v1)"
        ) from None
    if served and model not in served:
        raise MemupdateError(
            f"the endpoint {root} does not serve model {model!r}; it serves {', '.join(served[:10])}: fix --model"
        )
