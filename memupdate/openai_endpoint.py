"""The one way memupdate talks to an OpenAI-compatible endpoint (OpenAI, SGLang, vLLM, TEI): the `openai` SDK.

    from memupdate.openai_endpoint import EndpointRole, check_endpoint, openai_client
    client = openai_client("http://localhost:30000/v1", api_key=None, timeout=60.0, retries=2)
    role = EndpointRole("answerer", "--answerer-base-url", "--answerer-api-key", "--answerer")
    check_endpoint(client, "qwen2.5-7b-instruct", role)   # one cheap request; one line naming the fix
    client.chat.completions.create(model=..., messages=[...])   # retried on 408/409/429/5xx and lost connections

The SDK retries with jittered exponential backoff (0.5 s doubling to 8 s) and honours a server's
Retry-After (up to two minutes); its typed errors are mapped here onto one-line messages that name
the endpoint, the problem and the option that fixes it. The API key falls back once, here:
the given key, else `$OPENAI_API_KEY`, else "EMPTY" (SGLang and vLLM accept any key); an empty
value counts as unset.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING

from memupdate.errors import MemupdateError

if TYPE_CHECKING:
    import openai

DEFAULT_BASE_URL = "https://api.openai.com/v1"
API_KEY_VARIABLE = "OPENAI_API_KEY"
NO_KEY = "EMPTY"  # what a local server is sent when no key is configured
DEFAULT_RETRIES = 2
CHECK_TIMEOUT = 10.0  # the check is one cheap request: a dead endpoint must fail in seconds


def resolve_api_key(given: str | None = None) -> str:
    """`given`, else `$OPENAI_API_KEY`, else "EMPTY"; blank values count as unset.

        resolve_api_key("sk-1")   # "sk-1"
        resolve_api_key(None)     # $OPENAI_API_KEY when set and not blank, else "EMPTY"
    """
    for candidate in (given, os.environ.get(API_KEY_VARIABLE)):
        if candidate and candidate.strip():
            return candidate.strip()
    return NO_KEY


def endpoint_url(base_url: str | None) -> str:
    """The endpoint's base URL as shown in messages: OpenAI's when none is given, no trailing slash."""
    return (base_url or DEFAULT_BASE_URL).rstrip("/")


def openai_client(
    base_url: str | None, api_key: str | None = None, *, timeout: float, retries: int = DEFAULT_RETRIES
) -> openai.OpenAI:
    """An `openai.OpenAI` client on `base_url` (None: OpenAI) with the key fallback, a timeout per
    request and `retries` retries after the first try."""
    import openai

    return openai.OpenAI(
        base_url=endpoint_url(base_url), api_key=resolve_api_key(api_key), timeout=timeout, max_retries=retries
    )


@dataclass(frozen=True)
class EndpointRole:
    """Who uses an endpoint and which options fix it, for messages such as
    "answerer endpoint http://… does not answer (…): start the server (SGLang or vLLM) or check --answerer-base-url"."""

    who: str  # "answerer", "judge", "openai policy", ...
    base_url_option: str
    api_key_option: str
    model_option: str


def unreachable(role: EndpointRole, url: str, exc: BaseException) -> str:
    """The one-line message for an endpoint that does not answer (refused, timed out, bad host)."""
    detail = str(exc) or "no reply"
    cause = exc.__cause__
    if cause is not None and str(cause) and str(cause) not in detail:
        detail = f"{detail} {cause}"  # the SDK's "Connection error." alone does not say what failed
    return (
        f"{role.who} endpoint {url} does not answer ({type(exc).__name__}: {detail}): "
        f"start the server (SGLang or vLLM) or check {role.base_url_option}"
    )


def refused_key(role: EndpointRole, url: str, status: int) -> str:
    """The one-line message for a key the endpoint refuses (HTTP 401 or 403)."""
    return (
        f"{role.who} endpoint {url} refused the API key (HTTP {status}): "
        f"pass {role.api_key_option} or set {API_KEY_VARIABLE}"
    )


@contextmanager
def mapped_errors(
    role: EndpointRole, url: str, error: type[MemupdateError], on_status: Callable[[openai.APIStatusError], str]
) -> Iterator[None]:
    """Turn the SDK's typed errors into one line each: no answer, a refused key, or `on_status(exc)`."""
    import openai

    try:
        yield
    except openai.APIConnectionError as exc:  # also APITimeoutError
        raise error(unreachable(role, url, exc)) from None
    except (openai.AuthenticationError, openai.PermissionDeniedError) as exc:
        raise error(refused_key(role, url, exc.status_code)) from None
    except openai.APIStatusError as exc:
        raise error(on_status(exc)) from None


def check_endpoint(
    client: openai.OpenAI, model: str, role: EndpointRole, error: type[MemupdateError] = MemupdateError
) -> None:
    """Raise `error` with one line naming the fix unless the endpoint answers and serves `model`.

    One request, no retries: `GET /models`. A server without `/models` (HTTP 404) is asked a 1-token
    completion instead, so the model name is still checked before any work.
    """
    import openai

    url = endpoint_url(str(client.base_url))
    timeout = client.timeout if isinstance(client.timeout, int | float) else CHECK_TIMEOUT
    quick = client.with_options(max_retries=0, timeout=min(float(timeout), CHECK_TIMEOUT))

    def not_a_v1_url(exc: openai.APIStatusError) -> str:
        return (
            f"{role.who} endpoint {url} answered GET /models with HTTP {exc.status_code}: "
            f"check that it is an OpenAI-compatible /v1 URL ({role.base_url_option})"
        )

    def unknown_model(exc: openai.APIStatusError) -> str:
        return (
            f"{role.who} endpoint {url} has no GET /models and answered a 1-token completion for model "
            f"{model!r} with HTTP {exc.status_code}: check {role.model_option} and {role.base_url_option} (it ends in /v1)"
        )

    with mapped_errors(role, url, error, not_a_v1_url):
        try:
            listed = quick.models.list().data
        except openai.NotFoundError:
            listed = None
        except (openai.APIResponseValidationError, ValueError, TypeError, AttributeError):
            raise error(
                f"{role.who} endpoint {url} did not answer GET /models as an OpenAI-compatible endpoint: "
                f"check {role.base_url_option} (it ends in /v1)"
            ) from None
    if listed is None:
        with mapped_errors(role, url, error, unknown_model):
            quick.chat.completions.create(
                model=model, messages=[{"role": "user", "content": "ping"}], max_tokens=1, temperature=0.0
            )
        return
    served = [entry.id for entry in listed if isinstance(getattr(entry, "id", None), str)]
    if served and model not in served:
        raise error(
            f"{role.who} model {model!r} is not served at {url} (it serves {', '.join(served[:5])}): "
            f"pass one of those to {role.model_option}"
        )


def status_detail(exc: openai.APIStatusError) -> str:
    """The start of an error response's body, on one line, for messages."""
    try:
        text = exc.response.text
    except Exception:  # a streamed or closed body: the SDK's message is what there is
        text = exc.message
    return " ".join(text.split())[:200]


__all__ = [
    "DEFAULT_BASE_URL",
    "DEFAULT_RETRIES",
    "EndpointRole",
    "check_endpoint",
    "endpoint_url",
    "mapped_errors",
    "openai_client",
    "refused_key",
    "resolve_api_key",
    "status_detail",
    "unreachable",
]
