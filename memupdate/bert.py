"""A BERT checkpoint (all-MiniLM-L6-v2 and the judge trained from it) read without `transformers`: its
forward in plain torch over the Rust `tokenizers`.

    from memupdate.bert import Bert
    bert = Bert.load(folder, max_tokens=256)          # a Hugging Face BERT folder: model.safetensors, tokenizer.json
    bert.embed(["Sam lives in Paris"])                # (1, 384) mean-pooled, unit norm: sentence-transformers' output
    judge = Bert.load(judge_folder, max_tokens=96)    # a sequence classifier (the relation judge)
    judge.classify(judge.tokenize([("Sam lives in Paris", "Sam moved to Berlin")]))   # (1, labels) logits

What a command pays before its first vector: importing sentence-transformers (which imports transformers)
takes 7.3 s on this machine, torch alone 1.6 s (benchmarks.md, "steady command"). A watcher's steady pass
embeds a few new memories and judges a few pairs, so the few lines of BERT below are read instead; they
compute what `BertModel` and `BertForSequenceClassification` compute (`tests/test_bert.py` holds them to
transformers' readings within 1e-5). Training still uses transformers (`judge/train.py`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors.torch import load_file
from tokenizers import Tokenizer

from memupdate.errors import MemupdateError


@dataclass
class Bert:
    """A BERT's weights (names as transformers saves them, without a sequence classifier's `bert.` prefix:
    its `classifier.*` sit beside), its tokenizer, and the config the forward needs."""

    weights: dict[str, torch.Tensor]
    tokenizer: Tokenizer
    heads: int
    eps: float
    layers: int

    @classmethod
    def load(cls, folder: str | Path, *, max_tokens: int) -> Bert:
        """The checkpoint in `folder`, its inputs cut to `max_tokens` (longest first, as transformers'
        `truncation=True`; fixed here, so that threads can tokenize at once)."""
        folder = Path(folder)
        files = [folder / "model.safetensors", folder / "tokenizer.json", folder / "config.json"]
        if missing := [f.name for f in files if not f.is_file()]:
            raise MemupdateError(f"{folder} is not a BERT checkpoint (no {', '.join(missing)}): point it at a Hugging Face BERT folder")
        config = json.loads(files[2].read_text())
        if config.get("model_type") != "bert" or config.get("hidden_act", "gelu") != "gelu":
            raise MemupdateError(f"{folder} holds a {config.get('model_type')!r} model: only BERT with GELU is read without transformers")
        weights = {name.removeprefix("bert."): tensor.float() for name, tensor in load_file(str(files[0])).items()}
        tokenizer = Tokenizer.from_file(str(files[1]))
        tokenizer.no_padding()
        tokenizer.enable_truncation(max_tokens, strategy="longest_first")
        return cls(weights, tokenizer, int(config["num_attention_heads"]), float(config["layer_norm_eps"]), int(config["num_hidden_layers"]))

    @property
    def dims(self) -> int:
        return int(self.weights["embeddings.word_embeddings.weight"].shape[1])

    def to(self, dtype: torch.dtype) -> Bert:
        """A copy computing in `dtype` (bfloat16: the judge's screen)."""
        return Bert({k: v.to(dtype) for k, v in self.weights.items()}, self.tokenizer, self.heads, self.eps, self.layers)

    def tokenize(self, texts: Sequence[str] | Sequence[tuple[str, str]]) -> list[tuple[list[int], list[int]]]:
        """Each text (or pair, one input) as token ids and token types, cut to the checkpoint's limit."""
        return [(e.ids, e.type_ids) for e in self.tokenizer.encode_batch(list(texts))]

    def hidden(self, batch: Sequence[tuple[list[int], list[int]]], *, first_only: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        """The last layer's states of a batch of tokenized inputs (padded here), and its mask; with
        `first_only`, the last layer's state of the first token ([CLS]) alone (a classifier reads no other:
        that layer's queries, attention output and feed-forward are computed for one token, not all)."""
        w = self.weights
        longest = max(len(ids) for ids, _ in batch)
        ids = torch.zeros((len(batch), longest), dtype=torch.long)
        types = torch.zeros_like(ids)
        mask = torch.zeros((len(batch), longest), dtype=torch.bool)
        for row, (token_ids, type_ids) in enumerate(batch):
            ids[row, : len(token_ids)] = torch.tensor(token_ids)
            types[row, : len(type_ids)] = torch.tensor(type_ids)
            mask[row, : len(token_ids)] = True
        x = w["embeddings.word_embeddings.weight"][ids] + w["embeddings.position_embeddings.weight"][:longest] + w["embeddings.token_type_embeddings.weight"][types]
        x = self._norm(x, "embeddings.LayerNorm")
        attend = mask[:, None, None, :]
        size = x.shape[-1] // self.heads
        for n in range(self.layers):
            p = f"encoder.layer.{n}."
            k, v = (self._linear(x, p + f"attention.self.{m}").view(*x.shape[:2], self.heads, size).transpose(1, 2) for m in ("key", "value"))
            if first_only and n == self.layers - 1:
                x = x[:, :1]
            q = self._linear(x, p + "attention.self.query").view(*x.shape[:2], self.heads, size).transpose(1, 2)
            attended = F.scaled_dot_product_attention(q, k, v, attn_mask=attend).transpose(1, 2).reshape(x.shape)
            x = self._norm(self._linear(attended, p + "attention.output.dense") + x, p + "attention.output.LayerNorm")
            inner = F.gelu(self._linear(x, p + "intermediate.dense"))
            x = self._norm(self._linear(inner, p + "output.dense") + x, p + "output.LayerNorm")
        return x, mask

    def embed(self, texts: Sequence[str], *, batch_size: int = 64) -> torch.Tensor:
        """Mean-pooled, unit-norm sentence vectors (all-MiniLM-L6-v2's pipeline), longest texts batched together."""
        encoded = self.tokenize(texts)
        out = torch.zeros((len(texts), self.dims))
        with torch.inference_mode():
            order = sorted(range(len(texts)), key=lambda i: -len(encoded[i][0]))
            for chosen in (order[start : start + batch_size] for start in range(0, len(order), batch_size)):
                states, mask = self.hidden([encoded[i] for i in chosen])
                summed = (states.float() * mask[..., None]).sum(1) / mask.sum(1, keepdim=True).clamp(min=1)
                out[chosen] = F.normalize(summed, dim=-1)
        return out

    def classify(self, batch: Sequence[tuple[list[int], list[int]]]) -> torch.Tensor:
        """A sequence classifier's logits for a batch of tokenized inputs (pooler over [CLS], then the head)."""
        if "classifier.weight" not in self.weights:
            raise MemupdateError("this BERT checkpoint has no classification head: load a judge folder (`memupdate judge train`)")
        with torch.inference_mode():
            # In full precision the last layer for [CLS] alone is 12-18% faster a pair; in bfloat16 it is slower
            # here (0.59-0.63 ms against 0.51-0.56 for everyday pairs), so that copy reads the whole layer.
            states, _ = self.hidden(batch, first_only=self.weights["classifier.weight"].dtype == torch.float32)
            pooled = torch.tanh(self._linear(states[:, 0], "pooler.dense"))
            return self._linear(pooled, "classifier").float()

    def _linear(self, x: torch.Tensor, name: str) -> torch.Tensor:
        return F.linear(x, self.weights[name + ".weight"], self.weights[name + ".bias"])

    def _norm(self, x: torch.Tensor, name: str) -> torch.Tensor:
        return F.layer_norm(x, x.shape[-1:], self.weights[name + ".weight"], self.weights[name + ".bias"], self.eps)
