"""Constrained decoding of memory handles: a model writing a tool call names only memories it was shown.

A small student copies handles badly: SmolLM2 after RL wrote `merge_memory` with the same handle twice
(`["f0197", "f0197"]`) or a handle no tool result held (`"f0013333"`), and the tool refused 38% of its
calls. Inside the value of a `"memory_id"` / `"memory_ids"` key, `HandleConstraint` lets through only tokens
that keep the value naming live handles (shown by a tool result of this episode and not since merged,
split or deleted), each at most once, at least two in a list, as grammar-constrained decoding
(vLLM's guided decoding, Outlines) does for a whole JSON schema. Everything else the model writes is free.

A supersession's handles follow its own reason. The student wrote `delete_memory(reason="update: Thomas Kyd
was born in the city of", memory_id=..., superseded_by=...)` naming a fact that changed in its look in half
its calls, and then handles of both that fact's lines in 8%: a look prints the handle before the text, so
going from the words it has just written to their handle is copying backwards. Inside a supersession's
`"memory_id"` and `"superseded_by"`, where the call's reason (less its `update:` label) begins the text of
two live memories or more, only those are let through, the two distinct. The policy still judges which fact
changed (its reason) and which statement is stale (which handle it writes first); the decoder only keeps the
handles it writes to the lines its words name. No tool result changes.

A supersession's reason names two live lines. Inside the reason of a `delete_memory` call once it begins
with the `update:` label, only tokens that keep the words after it beginning the text of two live memories
or more are let through, and the reason closes only on a whole word (what `named_by_reason` reads). After a
right supersession the student wrote the same reason again in half its FactConsolidation supersessions:
one live line begins with it now, so its handles went free and named another fact's lines. A reason that
names one line is a call at odds with its own words, as a handle never shown is; which shared words to
write (which fact changed, and whether two lines that begin alike are one fact at all) is still the
policy's, and so is stopping. Held off the words it meant, a student wrote a raw newline into the reason, or
closed it and wrote them after the quote (`"update: The chairperson of "s000001", ...`): the reason stays a
JSON string, and once closed the call goes on (`,` or `}`). It writes its words as they are, escaping only
`"` and a backslash: each of the eleventh run's student's 14 malformed calls was a unicode escape begun in
a reason (`"update: CH` then `u002a`, `u002b`, ... each after a backslash), whose fourth digit no token
could give that kept the words on two lines, so the model, left free, wrote escapes to its token budget.
Held off those, it wrote a backslash no escape of the lines goes on from (`"update: Canada` then
`s000132`), so a backslash is let through only where one does. After a handle's value the call goes on
(`,` or `}`): an RL candidate wrote `"superseded_by": "s000452"` and then, with no comma, the same key
again until its token budget ran out.

A dating names a memory with relative time. Inside an update call's `"memory_id"` with no `"content"`
before it (an update that dates: the tool does the arithmetic), only the live handles last shown with the
tool's `(date; relative time)` mark are let through, where there are any: the student wrote an unmarked
neighbour (`f0001` under `to date (relative time): [f0207] [f0002]`) and then repeated the refused call,
in about half its LoCoMo calls. Any other handle is one the tool refuses, so this masks invalid actions
only (as action masking does in RL); which memories to date, and when to stop, are still the policy's.
A rewrite that writes its `"content"` after its `"memory_id"` is held to the marked handles too, where
there are any.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, ToolMessage

from memupdate.agent.tools import RELATIVE_MARK
from memupdate.store.records import KEY_PATTERN

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
_LABEL = "update:"
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
    if not reason or not reason.group(1).startswith(_LABEL):
        return frozenset()
    try:
        words = _words(json.loads(f'"{reason.group(1)}"').removeprefix(_LABEL))
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
    if not raw.startswith(_LABEL):
        return OPEN if after is None and _LABEL.startswith(raw) else DONE
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
        written = json.loads(f'"{raw}"').removeprefix(_LABEL)
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
