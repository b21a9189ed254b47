"""A local Hugging Face checkpoint as the answerer or judge: `--answerer hf:DIR`, on the CPU, no server.

    from memupdate.scoring.hf_reader import HFReader
    reader = HFReader("checkpoints/smollm2")
    reader.check()                                        # the folder holds a checkpoint with a chat template
    reader.complete_batch([prompt_a, prompt_b], max_tokens=32)   # greedy replies, one padded batch

It reads the same prompt as an endpoint answerer, as one user message through the checkpoint's chat
template, decodes greedily and stops at the end of the assistant turn. Its replies go to the same cache,
under `hf:<folder name>@<fingerprint>`: the fingerprint changes when the config or a weights file does,
so a checkpoint trained again in place is asked again. The weights load on the first prompt that is not
cached, so a rerun answered from the cache never loads them.
"""

from __future__ import annotations

import hashlib
import threading
from pathlib import Path
from typing import Any

from memupdate.scoring.answer_prompts import clean_reply
from memupdate.scoring.readers import HF_PREFIX, AnswererUnavailable

DEFAULT_BATCH_SIZE = 8  # one pass over the weights serves 8 prompts; larger batches pad short prompts more
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt")


def checkpoint_fingerprint(path: Path) -> str:
    """12 hex digits over config.json's text and each weights file's name, size and modification time."""
    digest = hashlib.sha256((path / "config.json").read_bytes())
    for file in sorted(path.iterdir()):
        if file.suffix in WEIGHT_SUFFIXES:
            stat = file.stat()
            digest.update(f"{file.name}:{stat.st_size}:{stat.st_mtime_ns}".encode())
    return digest.hexdigest()[:12]


class HFReader:
    """Greedy replies from a local causal LM (float32 on the CPU: bfloat16 is slower on CPUs without bf16)."""

    concurrency = 1  # torch already uses every core for one batch

    def __init__(self, path: str | Path, *, role: str = "answerer", batch_size: int = DEFAULT_BATCH_SIZE):
        self.path, self.role, self.batch_size = Path(path).expanduser(), role, max(1, batch_size)
        self.model = f"{HF_PREFIX}{path}"
        self.requests = 0
        self._tokenizer: Any = None
        self._hf_model: Any = None
        self._load_lock = threading.Lock()

    @property
    def location(self) -> str:
        return str(self.path)

    @property
    def cache_name(self) -> str:
        self.check()
        return f"{HF_PREFIX}{self.path.resolve().name}@{checkpoint_fingerprint(self.path)}"

    def check(self) -> None:
        """The folder holds a checkpoint with a tokenizer and a chat template; else one line naming the fix."""
        if self._tokenizer is not None:
            return
        from memupdate.llm.checkpoints import checkpoint_tokenizer

        try:
            tokenizer = checkpoint_tokenizer(self.path)
        except ValueError as exc:
            raise AnswererUnavailable(f"--{self.role} {self.model}: {exc}") from None
        tokenizer.padding_side = "left"  # generation continues from the right end of every row
        self._tokenizer = tokenizer

    def complete_batch(self, prompts: list[str], max_tokens: int) -> list[str]:
        """Greedy replies to `prompts` (each one user message), generated together in one padded batch."""
        import torch

        from memupdate.llm.checkpoints import stop_and_pad_ids

        model, tokenizer = self._loaded()
        texts = [
            tokenizer.apply_chat_template([{"role": "user", "content": p}], add_generation_prompt=True, tokenize=False)
            for p in prompts
        ]
        options = stop_and_pad_ids(model, tokenizer)
        if tokenizer.pad_token_id is None:
            tokenizer.pad_token_id = options["pad_token_id"]
        inputs = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False)
        with torch.inference_mode():
            output = model.generate(
                **inputs, max_new_tokens=max_tokens, do_sample=False, temperature=None, top_p=None, top_k=None, **options
            )
        self.requests += len(prompts)
        new_tokens = output[:, inputs["input_ids"].shape[1] :]
        return [clean_reply(text) for text in tokenizer.batch_decode(new_tokens, skip_special_tokens=True)]

    def _loaded(self) -> tuple[Any, Any]:
        with self._load_lock:
            if self._hf_model is None:
                self.check()
                from transformers import AutoModelForCausalLM

                try:
                    model = AutoModelForCausalLM.from_pretrained(self.path, local_files_only=True, dtype="float32")
                except (OSError, ValueError) as exc:
                    raise AnswererUnavailable(f"--{self.role} {self.model}: cannot load the model ({exc})") from None
                self._hf_model = model.eval()
        return self._hf_model, self._tokenizer

    def close(self) -> None:
        self._hf_model = None


__all__ = ["DEFAULT_BATCH_SIZE", "HFReader", "checkpoint_fingerprint"]
