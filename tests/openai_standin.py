"""A scripted stand-in for an OpenAI-compatible server, on 127.0.0.1 only.

No pretrained LLM weights can be downloaded here and there is no SGLang/vLLM server, so a tiny
http.server plays one: `POST /v1/chat/completions` records the request body and answers with what
`reply(body)` returns (a full completion dict, a string wrapped as the assistant's message, an
int: that HTTP error status, or a `Failure`: a status with a Retry-After header);
`POST /v1/embeddings` answers with `embed(body)` (a list of vectors, or an int or `Failure`);
`GET /v1/models` lists `models` (`models=None`: HTTP 404, a server without the route; an int: that status).

    with OpenAIStandIn(lambda body: "Berlin") as server:
        ChatEndpoint("m", server.base_url).complete("Where?", 8)   # "Berlin" (memupdate.scoring.readers)
        server.requests                                                   # [the request body]
        server.paths, server.times, server.headers                        # per request: route, arrival, headers (lower-case names)
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


def completion(message: dict, finish_reason: str = "stop", model: str = "memupdate-policy") -> dict:
    """A `/chat/completions` response body holding one choice."""
    return {
        "id": "chatcmpl-test",
        "object": "chat.completion",
        "created": 0,
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
    }


@dataclass(frozen=True)
class Failure:
    """An HTTP error reply: `status`, a plain-text `body` and extra headers (e.g. Retry-After)."""

    status: int
    body: str = "stand-in failure"
    headers: dict[str, str] = field(default_factory=dict)

    @classmethod
    def retry_after(cls, status: int, seconds: str) -> Failure:
        return cls(status, f"busy, retry after {seconds} s", {"Retry-After": seconds})


class OpenAIStandIn:
    """Context manager: a threaded server on 127.0.0.1 at a free port; `base_url` ends in /v1."""

    def __init__(
        self,
        reply: Callable[[dict], dict | str | int | Failure],
        models: tuple[str, ...] | int | None = ("memupdate-policy",),
        embed: Callable[[dict], list[list[float]] | int | Failure] | None = None,
    ):
        self.reply, self.models, self.embed = reply, models, embed
        self.requests: list[dict[str, Any]] = []
        self.paths: list[str] = []
        self.times: list[float] = []
        self.headers: list[dict[str, str]] = []
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                if self.path != "/v1/models" or not isinstance(server.models, tuple):
                    self.send_error(server.models if isinstance(server.models, int) else 404)
                    return
                self._send({"object": "list", "data": [{"id": m, "object": "model"} for m in server.models]})

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                route = {"/v1/chat/completions": server.reply, "/v1/embeddings": server.embed}.get(self.path)
                if route is None:
                    self.send_error(404)
                    return
                with server._lock:
                    server.requests.append(body)
                    server.paths.append(self.path)
                    server.times.append(time.monotonic())
                    server.headers.append({k.lower(): v for k, v in self.headers.items()})
                    answer = route(body)
                if isinstance(answer, int):
                    answer = Failure(answer)
                if isinstance(answer, Failure):
                    self._send(answer.body.encode(), answer.status, "text/plain", answer.headers)
                    return
                if isinstance(answer, str):
                    answer = completion({"role": "assistant", "content": answer}, model=body.get("model", ""))
                if self.path == "/v1/embeddings":
                    rows = [{"object": "embedding", "index": i, "embedding": v} for i, v in enumerate(answer)]
                    # Out of order on purpose: clients must sort by `index`.
                    answer = {"object": "list", "data": rows[::-1], "model": body.get("model", "")}
                self._send(answer)

            def _send(self, payload: dict | bytes, status: int = 200, kind: str = "application/json",
                      headers: dict[str, str] | None = None) -> None:
                data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
                self.send_response(status)
                for name, value in (headers or {}).items():
                    self.send_header(name, value)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):  # Keep pytest output clean.
                pass

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    @property
    def port(self) -> int:
        return self._httpd.server_address[1]

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def __enter__(self) -> OpenAIStandIn:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join()
