"""Constrained decoding of memory handles: a model writing a tool call names only memories it was shown.

A small student copies handles badly: SmolLM2 after RL wrote `merge_memory` with the same handle twice
(`["f0197", "f0197"]`) or a handle no tool result held (`"f0013333"`), and the tool refused 38% of its
calls. Inside the value of a `"memory_id"` / `"memory_ids"` key, `HandleConstraint` lets through only tokens
that keep the value naming live handles (shown by a tool result of this episode and not since merged,
split or deleted), each at most once, at least two in a list, as grammar-constrained decoding
(vLLM's guided decoding, Outlines) does for a whole JSON schema. Everything else the model writes is free.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, ToolMessage

from memupdate.store.records import KEY_PATTERN

# A handle as tools show one: leading a line ("[f0012] 0.71 (2023-05-08) ...") or after the verb of a
# write ("created [m1a2b3c4d] ...", "merged 2 memories into [...]"); not a bracket inside a memory's text.
_SHOWN = re.compile(rf"(?:^|\b(?:created|updated|deleted|into|split) )\[({KEY_PATTERN.pattern})\]", re.M)
_KEY = re.compile(r'"(memory_ids?)"')
_CONSUMES = {"merge_memory": "memory_ids", "split_memory": "memory_id", "delete_memory": "memory_id"}
OPEN, DONE = "open", "done"


def live_handles(messages: Sequence[BaseMessage]) -> frozenset[str]:
    """Handles the episode's tool results have shown, less those a call that ran has merged, split or
    deleted since."""
    calls = {c["id"]: c for m in messages if isinstance(m, AIMessage) for c in m.tool_calls}
    live: set[str] = set()
    for m in messages:
        if not isinstance(m, ToolMessage) or str(m.content).startswith("error"):
            continue
        live.update(_SHOWN.findall(str(m.content)))
        call = calls.get(m.tool_call_id)
        gone = call and call["args"].get(_CONSUMES.get(call["name"], ""))
        live.difference_update([gone] if isinstance(gone, str) else gone or [])
    return frozenset(live)


def scan(tail: str, handles: frozenset[str], many: bool) -> str | None:
    """How far `tail`, the text after a `"memory_id"` (`many=False`) or `"memory_ids"` key, gets through
    `: "h"` or `: ["h1", "h2", ...]` over `handles`, each once and two at least in a list: DONE once the
    value is closed, OPEN while it can still become one, None once it cannot."""
    n = len(tail)

    def skip(i: int) -> int:
        while i < n and tail[i].isspace():
            i += 1
        return i

    i = skip(0)
    if i == n:
        return OPEN
    if tail[i] != ":":
        return None
    i = skip(i + 1)
    if many:
        if i == n:
            return OPEN
        if tail[i] != "[":
            return None
        i += 1
    chosen: list[str] = []
    while True:
        i = skip(i)
        if i == n:
            return OPEN
        if many and tail[i] == "]":
            return DONE if len(chosen) >= 2 else None
        if chosen:
            if tail[i] != ",":
                return None
            i = skip(i + 1)
            if i == n:
                return OPEN
        if tail[i] != '"':
            return None
        end = tail.find('"', i + 1)
        name = tail[i + 1 :] if end < 0 else tail[i + 1 : end]
        left = handles.difference(chosen)
        if end < 0:
            return OPEN if any(h.startswith(name) for h in left) else None
        if name not in left:
            return None
        if not many:
            return DONE
        chosen.append(name)
        i = end + 1


class HandleConstraint:
    """A `generate` logits processor: while the reply is inside a `"memory_id(s)"` value, every token that
    would make the value name anything but live, distinct handles is masked out. The best `top` tokens are
    tried first, then more; where none fits (fewer live handles than the list needs, or the value went
    wrong before its key was complete) the model is left free and the tool's error tells it."""

    def __init__(
        self, tokenizer: Any, prompt_length: int, handles: frozenset[str], top: Sequence[int] = (64, 4096)
    ):
        self.tokenizer, self.prompt_length, self.handles, self.top = tokenizer, prompt_length, handles, top
        self._pieces: dict[int, str] = {}

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        import torch

        for row in range(input_ids.shape[0]):
            text = self.tokenizer.decode(input_ids[row, self.prompt_length :], skip_special_tokens=True)
            keys = list(_KEY.finditer(text))
            if not keys:
                continue
            key = keys[-1]
            tail, many = text[key.end() :], key.group(1) == "memory_ids"
            if scan(tail, self.handles, many) != OPEN:
                continue
            allowed = self._allowed(tail, many, scores[row])
            if allowed:
                keep = torch.zeros_like(scores[row], dtype=torch.bool)
                keep[allowed] = True
                scores[row] = scores[row].masked_fill(~keep, float("-inf"))
        return scores

    def _allowed(self, tail: str, many: bool, scores: Any) -> list[int]:
        order = scores.argsort(descending=True)
        for top in self.top:
            fits = [
                i for i in order[:top].tolist() if scan(tail + self._piece(i), self.handles, many) is not None
            ]
            if fits:
                return fits
        return []

    def _piece(self, token: int) -> str:
        if token not in self._pieces:
            self._pieces[token] = self.tokenizer.decode([token])
        return self._pieces[token]
