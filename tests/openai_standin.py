"""A scripted stand-in for an OpenAI-compatible server, on 127.0.0.1 only.

No pretrained LLM weights can be downloaded here and there is no SGLang/vLLM server, so a tiny
http.server plays one: `POST /v1/chat/completions` records the request body and answers with what
`reply(body)` returns (a full completion dict, a string wrapped as the assistant's message, or an
int: that HTTP error status);
`GET /v1/models` lists `models`.

    with OpenAIStandIn(lambda body: "Berlin") as server:
        ChatEndpoint("m", base_url=server.base_url).complete("Where?", 8)   # "Berlin"
        server.requests                                                   # [the request body]
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
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


class OpenAIStandIn:
    """Context manager: a threaded server on 127.0.0.1 at a free port; `base_url` ends in /v1."""

    def __init__(self, reply: Callable[[dict], dict | str | int], models: tuple[str, ...] = ("memupdate-policy",)):
        self.reply, self.models = reply, models
        self.requests: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                if self.path != "/v1/models":
                    self.send_error(404)
                    return
                self._send({"object": "list", "data": [{"id": m, "object": "model"} for m in server.models]})

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                if self.path != "/v1/chat/completions":
                    self.send_error(404)
                    return
                with server._lock:
                    server.requests.append(body)
                    answer = server.reply(body)
                if isinstance(answer, int):
                    self.send_error(answer)
                    return
                if isinstance(answer, str):
                    answer = completion({"role": "assistant", "content": answer}, model=body.get("model", ""))
                self._send(answer)

            def _send(self, payload: dict) -> None:
                data = json.dumps(payload).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
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
