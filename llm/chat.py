"""Chat rendering of an agent's messages: the Hermes `<tool_call>` transcript a trajectory log keeps, and
how a local checkpoint (a student) reads it. The policy, the batcher, training and the reader share it.

    from memupdate.llm.chat import to_chat_dicts, student_view
    student_view(to_chat_dicts(messages), system_prompt, tool_result_chars=1200)
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage

from memupdate.llm import hermes

# The task message's first line names the bank (`agent.prompts.task_prompt` writes it).
BANK_LINE = re.compile(r"^Memory bank: (?P<namespace>\S+)$", re.M)


def without_bank_line(text: str) -> str:
    """A task message without its `Memory bank:` line, as a local checkpoint reads it: the tools are
    bound to the bank already, and a fork's name is random, so one checkpoint and seed make the same
    calls on every fork of a bank."""
    return BANK_LINE.sub("", text).lstrip("\n")


def _text(content: str | list) -> str:
    """Message content as plain text (LangChain allows a list of content blocks)."""
    if isinstance(content, str):
        return content
    return "".join(b if isinstance(b, str) else b.get("text", "") for b in content)


STUDENT_SETTINGS = "memupdate-student.json"


def trim_tool_result(text: str, limit: int | None) -> str:
    """A tool result as a student sees it: at most `limit` characters (None: all), cut at a line end."""
    if limit is None or len(text) <= limit:
        return text
    cut = text[:limit]
    return (cut[: cut.rfind("\n")] if "\n" in cut else cut).rstrip() + " ..."


def to_chat_dicts(messages: Sequence[BaseMessage]) -> list[dict[str, str]]:
    """Convert LangChain messages to chat-template dicts, writing past tool calls in Hermes format (what a
    trajectory log keeps; `student_view` is how a local checkpoint reads them)."""
    out = []
    for m in messages:
        if isinstance(m, SystemMessage):
            out.append({"role": "system", "content": _text(m.content)})
        elif isinstance(m, HumanMessage):
            out.append({"role": "user", "content": _text(m.content)})
        elif isinstance(m, AIMessage):
            # Re-render calls (malformed ones verbatim) so the model sees exactly what it wrote.
            blocks = [hermes.format_tool_call(c["name"], c["args"]) for c in m.tool_calls]
            blocks += [f"{hermes.OPEN}\n{c['args'] or ''}\n{hermes.CLOSE}" for c in m.invalid_tool_calls]
            content = "\n".join(part for part in [_text(m.content).strip(), *blocks] if part)
            out.append({"role": "assistant", "content": content})
        elif isinstance(m, ToolMessage):
            out.append({"role": "tool", "content": _text(m.content)})
        else:
            raise TypeError(f"cannot render {type(m).__name__} for a chat template")
    return out


def student_view(messages: Sequence[dict[str, str]], system_prompt: str | None = None, tool_result_chars: int | None = None) -> list[dict[str, str]]:
    """Chat dicts as a local checkpoint reads them: `system_prompt` in place of the system message, the
    task without its bank line, tool results cut to `tool_result_chars`. Rollouts and training both
    render through it, so a student trains on exactly what it saw."""
    out = []
    for m in messages:
        if m["role"] == "system" and system_prompt:
            m = {**m, "content": system_prompt}
        elif m["role"] == "user":
            m = {**m, "content": without_bank_line(m["content"])}
        elif m["role"] == "tool":
            m = {**m, "content": trim_tool_result(m["content"], tool_result_chars)}
        out.append(m)
    return out


def prompt_settings(path: str | Path) -> dict[str, Any]:
    """`system_prompt` and `tool_result_chars` from the checkpoint's memupdate-student.json ({} if absent):
    how a student trained here saw its prompts, so it runs with the same ones."""
    file = Path(path) / STUDENT_SETTINGS
    return json.loads(file.read_text()) if file.is_file() else {}

