"""BERT read without transformers (`memupdate.bert`): the packaged MiniLM's sentence vectors and the judge's
logits are transformers' own, and a command that embeds a few memories imports neither transformers nor
sentence-transformers."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from memupdate.bert import Bert
from memupdate.errors import MemupdateError
from memupdate.judge.local import MAX_TOKENS, base_model_path, ensure_judge
from memupdate.store.embeddings import mean_pooled_bert

TEXTS = ["Caroline went to a LGBTQ support group", "Sam lives in Paris.", "", "word " * 400,  # cut at 256 tokens
         "Alex is no longer vegetarian, he said yesterday at the café (naïve ünïcode)."]
PAIRS = [("Sam lives in Paris", "Sam moved to Berlin last month"), ("I like dogs", "I have a cat named Luna " * 20),
         ("Uses VS Code", "Switching from VS Code to Neovim")]


def test_sentence_vectors_are_sentence_transformers_own() -> None:
    from sentence_transformers import SentenceTransformer

    expected = SentenceTransformer(base_model_path(), device="cpu").encode(TEXTS, normalize_embeddings=True)
    got = Bert.load(base_model_path(), max_tokens=256).embed(TEXTS, batch_size=2).numpy()
    assert got.shape == expected.shape == (len(TEXTS), 384)
    assert np.abs(got - expected).max() < 1e-5


def test_judge_logits_are_transformers_own() -> None:
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    folder = ensure_judge()
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForSequenceClassification.from_pretrained(folder).eval()
    encoded = tokenizer([a for a, _ in PAIRS], [b for _, b in PAIRS], truncation=True, max_length=MAX_TOKENS)
    with torch.inference_mode():
        expected = model(**tokenizer.pad(encoded, return_tensors="pt")).logits.numpy()
    bert = Bert.load(folder, max_tokens=MAX_TOKENS)
    inputs = bert.tokenize(PAIRS)
    assert [ids for ids, _ in inputs] == encoded["input_ids"] and [types for _, types in inputs] == encoded["token_type_ids"]
    assert np.abs(bert.classify(inputs).numpy() - expected).max() < 1e-4


def test_a_folder_that_is_not_a_mean_pooled_bert_is_refused_or_left_to_sentence_transformers(tmp_path) -> None:
    with pytest.raises(MemupdateError, match="is not a BERT checkpoint"):
        Bert.load(tmp_path, max_tokens=MAX_TOKENS)
    assert mean_pooled_bert(tmp_path) is None  # sentence-transformers reads it (and says what is wrong)
    assert mean_pooled_bert(Path(base_model_path())) == 256
    with pytest.raises(MemupdateError, match="no classification head"):
        bert = Bert.load(base_model_path(), max_tokens=MAX_TOKENS)
        bert.classify(bert.tokenize(PAIRS))


def test_embedding_imports_neither_transformers_nor_sentence_transformers() -> None:
    script = ("import sys\nfrom memupdate.store.embeddings import get_embedder\n"
              "print(get_embedder().embed(['Sam lives in Paris']).shape)\n"
              "print('LOADED', [m for m in ('transformers', 'sentence_transformers') if m in sys.modules])")
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    assert "(1, 384)" in run.stdout and "LOADED []" in run.stdout


def test_threads_read_one_checkpoint_at_once() -> None:
    """The tokenizer is set up once: threads embedding at once (a graph's tool calls) share it."""
    from concurrent.futures import ThreadPoolExecutor

    bert = Bert.load(base_model_path(), max_tokens=256)
    alone = bert.embed(TEXTS).numpy()
    with ThreadPoolExecutor(4) as pool:
        together = list(pool.map(lambda _: bert.embed(TEXTS).numpy(), range(16)))
    assert all(np.abs(vectors - alone).max() < 1e-5 for vectors in together)
