"""Constrained decoding of memory handles: a model writing a tool call names only memories it was shown.

    constraint = HandleConstraint(tokenizer, prompt_length, live_handles(messages),
                                  datable=to_date(messages, live_handles(messages)))
    model.generate(..., logits_processor=[constraint])

`HandleConstraint` masks, while the model writes a tool call, the tokens that would make it one the tool
refuses or one at odds with its own words, as grammar-constrained decoding (vLLM's guided decoding,
Outlines) does for a whole JSON schema; everything else the model writes is free:
- **A handle** (`"memory_id"`, `"memory_ids"`): only live handles (shown by a tool result of this episode
  and not since merged, split or deleted, `live_handles`), each at most once, at least two in a list.
- **A supersession** (`delete_memory` whose reason begins `update:`): its reason's words must begin the
  text of two live memories or more, close only on a whole word (`reason_state`), stay a JSON string with
  no escape but `\\"` and `\\\\` where the lines hold one, and go on with the call once closed; its
  `"memory_id"` and `"superseded_by"` are two distinct lines its reason names (`named_by_reason`).
- **A dating** (an update's `"memory_id"` before any `"content"`): only the live handles last shown with
  the tool's `(date; relative time)` mark (`to_date`), where there are any.
- After a handle's value the call goes on (`,` or `}`).
Which fact changed, which statement is stale, what to date and when to stop stay the policy's: only
calls the tool would refuse, or that name other lines than the call's own reason, are masked. Where no
token fits, the model is left free and the tool's error tells it. Why each rule exists (what a student
wrote without it) is told, dated, in the learning log kept in git: `git show 07cbdca:docs/log.md`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, ToolMessage

from memupdate.agent.tools import RELATIVE_MARK
from memupdate.store import KEY_PATTERN

# A handle as tools show one: leading a line ("[f0012] 0.71 (2023-05-08) ...") or after the verb of a
# write ("created [m1a2b3c4d] ...", "merged 2 memories into [...]"); not a bracket inside a memory's text.
# What follows it on the line, less a score and a (time), is the memory's text.
_SHOWN = re.compile(rf"(?:^|\b(?:created|updated|deleted|into|split) )\[({KEY_PATTERN.pattern})\](.*)$", re.M)
_SCORE_AND_TIME = re.compile(r"^\s*(?:\d+(?:\.\d+)?\s+)?(?:\(([^)]*)\)\s*)?")  # group 1: the time
_DATING = re.compile(r'"action"\s*:\s*"update"')
_KEY = re.compile(r'"(memory_ids?|superseded_by)"')
_CALL = re.compile(r'"name"\s*:\s*"(\w+)"')
_REASON = re.compile(r'"reason"\s*:\s*"((?:[^"\\]|\\.)*)"')
_REASON_KEY = re.compile(r'"reason"\s*:\s*"')
# An escape the next token may complete, at the end of a JSON string's body so far: a lone backslash.
_PENDING_ESCAPE = re.compile(r"(?<!\\)(?:\\\\)*\\$")
# A unicode escape (a backslash and `u`, not an escaped backslash and a `u`): no reason needs one.
_UNICODE_ESCAPE = re.compile(r"(?<!\\)(?:\\\\)*\\u")
# How a supersession's reason begins: the heuristic writes it, the student's constraints read it.
UPDATE_LABEL = "update:"
# The other handle of a supersession's pair, where the call has written it: the two must differ.
_VALUE = {
    "memory_id": re.compile(r'"superseded_by"\s*:\s*"([^"]*)"'),
    "superseded_by": re.compile(r'"memory_id"\s*:\s*"([^"]*)"'),
}
_CONSUMES = {"merge_memory": "memory_ids", "split_memory": "memory_id", "delete_memory": "memory_id"}
OPEN, DONE = "open", "done"


def live_handles(messages: Sequence[BaseMessage]) -> dict[str, str]:
    """Handles the episode's tool results have shown, less those a call that ran has merged, split or
    deleted since; each with the text it was last shown with."""
    calls = {c["id"]: c for m in messages if isinstance(m, AIMessage) for c in m.tool_calls}
    live: dict[str, str] = {}
    for m in messages:
        if not isinstance(m, ToolMessage) or str(m.content).startswith("error"):
            continue
        live.update((key, _SCORE_AND_TIME.sub("", rest).strip()) for key, rest in _SHOWN.findall(str(m.content)))
        call = calls.get(m.tool_call_id)
        gone = call and call["args"].get(_CONSUMES.get(call["name"], ""))
        for key in [gone] if isinstance(gone, str) else gone or []:
            live.pop(key, None)
    return live


def to_date(messages: Sequence[BaseMessage], live: Iterable[str]) -> frozenset[str]:
    """Those of the `live` handles (`live_handles(messages)`) last shown with the `(date; relative time)`
    mark: those an update without content dates (a dating update shows its memory again without it)."""
    marked: dict[str, bool] = {}
    for m in messages:
        if isinstance(m, ToolMessage) and not str(m.content).startswith("error"):
            for key, rest in _SHOWN.findall(str(m.content)):
                marked[key] = (_SCORE_AND_TIME.match(rest).group(1) or "").endswith(RELATIVE_MARK)
    return frozenset(key for key in live if marked.get(key))


def named_by_reason(call: str, texts: Mapping[str, str]) -> frozenset[str]:
    """The live handles a supersession's reason names: those whose text begins with the words after its
    `update:` label, when two or more do; else none. `call` is the call's text so far."""
    reason = _REASON.search(call)
    if not reason or not reason.group(1).startswith(UPDATE_LABEL):
        return frozenset()
    try:
        words = _words(json.loads(f'"{reason.group(1)}"').removeprefix(UPDATE_LABEL))
    except json.JSONDecodeError:
        return frozenset()
    if not words:
        return frozenset()
    named = _begun_by(words + " ", texts)
    return named if len(named) >= 2 else frozenset()


def _words(text: str) -> str:
    return " ".join(text.lower().split())


def _begun_by(start: str, texts: Mapping[str, str]) -> frozenset[str]:
    """The handles whose text, read as words (`_words`) and a space, begins with `start`."""
    return frozenset(key for key, text in texts.items() if (_words(text) + " ").startswith(start))


def reason_state(value: str, texts: Mapping[str, str], last: bool = False) -> str | None:
    """How far `value`, the text after a `delete_memory` call's `"reason": "` (its JSON string so far, and
    what follows once closed), gets to a reason `named_by_reason` reads as two live lines or more (`texts`):
    DONE once closed so and the call goes on to its handles (`,`; or `}` where they came before it: `last`),
    OPEN while it can still become one, None once it cannot. A reason without the `update:` label is free
    (DONE), but for one that may still become the label (OPEN)."""
    raw, after = _string_so_far(value)
    if not raw.startswith(UPDATE_LABEL):
        return OPEN if after is None and UPDATE_LABEL.startswith(raw) else DONE
    if any(ord(ch) < 0x20 for ch in raw):
        return None  # a raw newline or tab: no JSON string holds one
    # The words are written as they are (the labels' JSON keeps non-ASCII): a unicode escape begun may have no
    # fourth digit that keeps them on two lines, and the model, left free, loops in escapes.
    if _UNICODE_ESCAPE.search(raw):
        return None
    if after is None and _PENDING_ESCAPE.search(raw):  # a lone backslash: open only where an escaped quote or
        # backslash the lines hold goes on from it
        fits = (reason_state(value + piece, texts, last) for piece in ('"', "\\"))
        return OPEN if any(state is not None for state in fits) else None
    try:
        written = json.loads(f'"{raw}"').removeprefix(UPDATE_LABEL)
    except json.JSONDecodeError:
        return None  # an escape JSON has not (`\s`)
    if "  " in written or any(ch.isspace() and ch != " " for ch in written):
        return None  # words one space apart, as the tools' texts are read (`_words`)
    words = _words(written)
    if after is not None:
        named = len(_begun_by(words + " ", texts)) if words else 0
        return None if named < 2 else _goes_on(after, ",}" if last else ",")
    words += " " if written[-1:].isspace() and words else ""  # a word ended: the next one is another
    return OPEN if len(_begun_by(words, texts)) >= 2 else None


def _goes_on(rest: str, closers: str) -> str | None:
    """After a value has closed: OPEN while only spaces follow, DONE once the call goes on (one of `closers`),
    None once it goes anywhere else."""
    rest = rest.lstrip()
    return OPEN if not rest else DONE if rest[0] in closers else None


def _open_reason(text: str) -> tuple[str, bool] | None:
    """The reason written so far (and what follows its closing quote, where that is only spaces), where
    `text`, a reply so far, ends inside the reason of a `delete_memory` call or right after it, and whether
    the call's handles came before it; else None."""
    calls = list(_CALL.finditer(text))
    if not calls or calls[-1].group(1) != "delete_memory":
        return None
    opened = list(_REASON_KEY.finditer(text, calls[-1].end()))
    if not opened:
        return None
    value, before = text[opened[-1].end() :], text[calls[-1].end() : opened[-1].start()]
    after = _string_so_far(value)[1]
    if after is not None and after.strip():
        return None
    return value, '"memory_id"' in before and '"superseded_by"' in before


def _string_so_far(value: str) -> tuple[str, str | None]:
    """The body of a JSON string whose opening quote came before `value`, up to its closing quote, and what
    follows that quote (None while it is open)."""
    i = 0
    while i < len(value):
        if value[i] == "\\":
            i += 2
        elif value[i] == '"':
            return value[:i], value[i + 1 :]
        else:
            i += 1
    return value, None


def scan(tail: str, handles: frozenset[str], many: bool) -> str | None:
    """How far `tail`, the text after a `"memory_id"` (`many=False`) or `"memory_ids"` key, gets through
    `: "h"` or `: ["h1", "h2", ...]` over `handles`, each once and two at least in a list, the call going on
    after it (`,` or `}`): DONE once it has, OPEN while it can still, None once it cannot."""
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
            return _goes_on(tail[i + 1 :], ",}") if len(chosen) >= 2 else None
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
            return _goes_on(tail[end + 1 :], ",}")
        chosen.append(name)
        i = end + 1


class HandleConstraint:
    """A `generate` logits processor: while the reply is inside a `"memory_id(s)"` or `"superseded_by"`
    value, every token that would make the value name anything but live, distinct handles (a
    supersession's: those its reason names, `named_by_reason`), or inside a supersession's reason would make
    its words begin fewer than two live lines (`reason_state`), is masked out. The best `top` tokens are
    tried first, then more; where none fits (fewer live handles than the list needs, or the value went
    wrong before its key was complete) the model is left free and the tool's error tells it. `handles`
    maps each live handle to its text (`live_handles`); `datable` holds those a dating update may name
    (`to_date`)."""

    def __init__(
        self, tokenizer: Any, prompt_length: int, handles: Mapping[str, str], top: Sequence[int] = (64, 4096),
        *, datable: frozenset[str] = frozenset(),
    ):
        self.tokenizer, self.prompt_length, self.texts, self.top = tokenizer, prompt_length, handles, top
        self.handles, self.datable = frozenset(handles), datable & frozenset(handles)
        self._pieces: dict[int, str] = {}

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        import torch

        for row in range(input_ids.shape[0]):
            text = self.tokenizer.decode(input_ids[row, self.prompt_length :], skip_special_tokens=True)
            reason, keys = _open_reason(text), list(_KEY.finditer(text))
            if reason is not None:
                value, last = reason
                if reason_state(value, self.texts, last) != OPEN:
                    continue
                allowed = self._allowed(lambda piece, v=value, e=last: reason_state(v + piece, self.texts, e) is not None, scores[row])
            elif keys:
                key = keys[-1]
                tail, many = text[key.end() :], key.group(1) == "memory_ids"
                handles = self._choices(text[: key.start()], key.group(1))
                if scan(tail, handles, many) != OPEN:
                    continue
                allowed = self._allowed(lambda piece, t=tail, h=handles, m=many: scan(t + piece, h, m) is not None, scores[row])
            else:
                continue
            if allowed:
                keep = torch.zeros_like(scores[row], dtype=torch.bool)
                keep[allowed] = True
                scores[row] = scores[row].masked_fill(~keep, float("-inf"))
        return scores

    def _choices(self, before: str, key: str) -> frozenset[str]:
        """The handles a value of `key` may name, given the call written `before` it: in a supersession,
        those its reason names (when it names two or more), less the other handle of the pair; in an
        update with no content yet, those to date (when there are any)."""
        calls = list(_CALL.finditer(before))
        if key == "memory_ids" or not calls:
            return self.handles
        call = before[calls[-1].end() :]
        if calls[-1].group(1) == "manage_memory":
            dating = key == "memory_id" and _DATING.search(call) and '"content"' not in call
            return self.datable if dating and self.datable else self.handles
        if calls[-1].group(1) != "delete_memory":
            return self.handles
        other = _VALUE[key].search(call)
        return (named_by_reason(call, self.texts) or self.handles).difference([other.group(1)] if other else [])

    def _allowed(self, fits_after: Callable[[str], bool], scores: Any) -> list[int]:
        """The best-scored tokens after which the value can still be one (`fits_after` the token's text)."""
        order = scores.argsort(descending=True)
        for top in self.top:
            fits = [i for i in order[:top].tolist() if fits_after(self._piece(i))]
            if fits:
                return fits
        return []

    def _piece(self, token: int) -> str:
        if token not in self._pieces:
            self._pieces[token] = self.tokenizer.decode([token])
        return self._pieces[token]
