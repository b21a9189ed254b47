"""What reads a prompt and replies for the answerer and judge: a model on an OpenAI-compatible endpoint,
or a local Hugging Face checkpoint (`hf:DIR`, see `hf_reader.py`).

    from memupdate.scoring.answerer import make_reader
    reader = make_reader("qwen2.5-7b-instruct", base_url="http://localhost:30000/v1")   # ChatEndpoint
    reader = make_reader("hf:checkpoints/smollm2")                                     # HFReader, CPU
    reader.check()                                   # AnswererUnavailable: one line, before any work
    reader.complete_batch(["Where does Ann live?"], max_tokens=32)   # ["Berlin"]

Both are sent the same prompt as one user message at temperature 0 (greedy) and are keyed in the reply
cache by `cache_name`. An endpoint is asked one prompt a call on `concurrency` threads; a checkpoint
generates `batch_size` prompts a call, one call at a time.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Protocol

from memupdate.errors import MemupdateError
from memupdate.openai_endpoint import (
    DEFAULT_RETRIES,
    EndpointRole,
    check_endpoint,
    endpoint_url,
    openai_client,
    status_detail,
)
from memupdate.scoring.answer_prompts import clean_reply

DEFAULT_TIMEOUT = 60.0
DEFAULT_CONCURRENCY = 4
HF_PREFIX = "hf:"


class AnswererError(MemupdateError):
    """The answerer's or judge's endpoint failed or cannot be used."""


class AnswererUnavailable(AnswererError):
    """The endpoint does not answer, refuses the key, or does not serve the model."""


class Reader(Protocol):
    """One model that replies to prompts, for the answerer or the judge."""

    model: str  # as named in reports and errors
    role: str  # "answerer" | "judge"
    requests: int  # prompts generated (not cached), for tests and the report
    batch_size: int  # prompts per `complete_batch` call
    concurrency: int  # calls in flight at once

    @property
    def cache_name(self) -> str: ...  # the model part of the reply cache's key

    @property
    def location(self) -> str: ...  # where it runs: the endpoint's URL or the checkpoint's folder

    def check(self) -> None: ...

    def complete_batch(self, prompts: list[str], max_tokens: int) -> list[str]: ...

    def close(self) -> None: ...


def endpoint_role(role: str) -> EndpointRole:
    """The options that fix the answerer's or judge's endpoint (the judge shares the answerer's)."""
    return EndpointRole(role, "--answerer-base-url", "--answerer-api-key", f"--{role}")


@dataclass
class ChatEndpoint:
    """One model on an OpenAI-compatible `/chat/completions` endpoint, at temperature 0, through the
    `openai` SDK: `retries` retries on lost connections, 408/409/429 and 5xx, with jittered backoff
    that honours Retry-After.

    `base_url=None` is OpenAI's API; the key falls back as everywhere (`openai_endpoint.resolve_api_key`).
    """

    model: str
    base_url: str | None = None
    api_key: str | None = field(default=None, repr=False)
    timeout: float = DEFAULT_TIMEOUT
    retries: int = DEFAULT_RETRIES
    role: str = "answerer"  # names the endpoint and its CLI option in errors
    concurrency: int = DEFAULT_CONCURRENCY
    batch_size: int = 1

    def __post_init__(self) -> None:
        self.base_url = endpoint_url(self.base_url)
        self._client = openai_client(self.base_url, self.api_key, timeout=self.timeout, retries=self.retries)
        self.requests = 0
        self._count_lock = threading.Lock()  # requests run on several threads

    @property
    def cache_name(self) -> str:
        return self.model

    @property
    def location(self) -> str:
        return str(self.base_url)

    def check(self) -> None:
        """One cheap request (`GET /models`, or a 1-token completion where that is missing) that
        raises `AnswererUnavailable` naming the endpoint, the problem and the fix."""
        check_endpoint(self._client, self.model, endpoint_role(self.role), AnswererUnavailable)

    def complete_batch(self, prompts: list[str], max_tokens: int) -> list[str]:
        return [self.complete(prompt, max_tokens) for prompt in prompts]

    def complete(self, prompt: str, max_tokens: int) -> str:
        """The model's reply to one user message (reasoning blocks removed, whitespace stripped)."""
        import openai

        with self._count_lock:
            self.requests += 1
        try:
            response = self._client.chat.completions.create(
                model=self.model,
                messages=[{"role": "user", "content": prompt}],
                temperature=0.0,
                max_tokens=max_tokens,
            )
        except openai.APIStatusError as exc:
            raise AnswererError(
                f"{self.role} endpoint {self.base_url} answered HTTP {exc.status_code} for model {self.model!r} "
                f"({status_detail(exc)}); answers so far are cached, rerun to resume"
            ) from None
        except openai.APIConnectionError as exc:
            raise AnswererError(
                f"{self.role} endpoint {self.base_url} failed after {self.retries + 1} tries "
                f"({type(exc).__name__}: {exc}); answers so far are cached, rerun to resume"
            ) from None
        try:
            content = response.choices[0].message.content or ""
        except (AttributeError, IndexError, TypeError):
            raise AnswererError(
                f"{self.role} endpoint {self.base_url} sent no choices[0].message.content: {str(response)[:200]}"
            ) from None
        return clean_reply(content)

    def close(self) -> None:
        self._client.close()


__all__ = [
    "DEFAULT_CONCURRENCY",
    "DEFAULT_TIMEOUT",
    "HF_PREFIX",
    "AnswererError",
    "AnswererUnavailable",
    "ChatEndpoint",
    "Reader",
    "endpoint_role",
]
