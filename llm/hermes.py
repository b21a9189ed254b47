"""The Hermes tool-call format (Qwen2.5 chat template, verl's ``format: hermes``).

A model calls a tool by writing, anywhere in its reply::

    <tool_call>
    {"name": "search_memory", "arguments": {"query": "where does Ann live"}}
    </tool_call>

This module is the single place that reads (:func:`parse_tool_calls`, :func:`to_ai_message`) and
writes (:func:`format_tool_call`) that format.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from langchain_core.messages import AIMessage
from langchain_core.messages.tool import InvalidToolCall, ToolCall, invalid_tool_call, tool_call

OPEN, CLOSE = "<tool_call>", "</tool_call>"
EXPECTED = f'{OPEN}{{"name": <tool name>, "arguments": {{...}}}}{CLOSE}'


def format_tool_call(name: str, args: dict[str, Any]) -> str:
    """Render one call as the model writes it (and as the Qwen2.5 chat template renders it)."""
    return f"{OPEN}\n{json.dumps({'name': name, 'arguments': args}, ensure_ascii=False)}\n{CLOSE}"


def _call_id(index: int, raw: str) -> str:
    # The index keeps ids unique within a message; the hash keeps them stable across reruns.
    return f"call_{index}_{hashlib.sha1(raw.encode()).hexdigest()[:8]}"


def _invalid(index: int, raw: str, problem: str, name: str | None = None) -> InvalidToolCall:
    snippet = raw if len(raw) <= 200 else raw[:200] + "..."
    error = f"Tool call {index + 1} is malformed: {problem}. Got {snippet!r}; expected {EXPECTED}."
    return invalid_tool_call(name=name, args=raw, id=_call_id(index, raw), error=error)


def _parse_block(index: int, raw: str) -> ToolCall | InvalidToolCall:
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as e:
        return _invalid(index, raw, f"invalid JSON ({e})")
    if not isinstance(data, dict):
        return _invalid(index, raw, f"the block must hold a JSON object, not {type(data).__name__}")
    name = data.get("name")
    if not isinstance(name, str) or not name:
        return _invalid(index, raw, 'missing "name" (a non-empty string)')
    args = data.get("arguments", {})  # A tool without parameters may omit "arguments".
    if not isinstance(args, dict):
        return _invalid(index, raw, f'"arguments" must be a JSON object, not {type(args).__name__}', name)
    return tool_call(name=name, args=args, id=_call_id(index, raw))


def parse_message(text: str) -> tuple[str, list[ToolCall], list[InvalidToolCall]]:
    """Split ``text`` into (text outside tool-call blocks, valid calls, malformed calls).

    Malformed calls are LangChain ``InvalidToolCall`` dicts whose ``args`` is the raw block and whose
    ``error`` tells the model what was wrong and what is expected.
    """
    outside: list[str] = []
    calls: list[ToolCall] = []
    invalid: list[InvalidToolCall] = []
    pos = index = 0
    while (start := text.find(OPEN, pos)) != -1:
        outside.append(text[pos:start])
        body_start = start + len(OPEN)
        end = text.find(CLOSE, body_start)
        if end == -1:
            # Usually generation hit max_new_tokens mid-call.
            invalid.append(_invalid(index, text[body_start:].strip(), f"unterminated, no {CLOSE}"))
            pos = len(text)
            break
        block = _parse_block(index, text[body_start:end].strip())
        (calls if block["type"] == "tool_call" else invalid).append(block)
        pos = end + len(CLOSE)
        index += 1
    outside.append(text[pos:])
    return "".join(outside).strip(), calls, invalid


def parse_tool_calls(text: str) -> tuple[str, list[ToolCall], list[str]]:
    """Return (text without tool-call blocks, stripped; valid tool calls; one error string per malformed block).

    Tool calls are LangChain dicts ``{"name", "args", "id", "type": "tool_call"}`` with ids
    ``call_<index>_<hash>``, unique within the message.
    """
    content, calls, invalid = parse_message(text)
    return content, calls, [c["error"] for c in invalid]


def to_ai_message(text: str, **kwargs: Any) -> AIMessage:
    """Parse a raw model reply into an ``AIMessage`` with ``tool_calls`` and ``invalid_tool_calls``."""
    content, calls, invalid = parse_message(text)
    return AIMessage(content=content, tool_calls=calls, invalid_tool_calls=invalid, **kwargs)
