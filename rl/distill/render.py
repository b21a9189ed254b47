"""Trajectories as a student trains on them: the student's chat template, the tools in the Hermes
`<tool_call>` format, and a loss mask over the assistant's tokens only.

    from memupdate.rl.distill.render import render_transcript, tokenize_with_mask
    text = render_transcript(tokenizer, record.messages)          # what the student sees and writes
    ids, mask = tokenize_with_mask(tokenizer, record.messages, max_length=4096)

`record.messages` (a `task.Rollout`'s) are chat-template dicts as the `hf` policy builds them (`to_chat_dicts`): an
assistant turn's tool calls are written inline as Hermes blocks, exactly what the policy generates and
parses back, and what verl's multi-turn rollout trains. The mask is built by rendering the prefix up to
each assistant turn (Qwen2.5's template has no generation markers to ask the tokenizer for): the
characters between "prefix + generation prompt" and "prefix + the turn" are the assistant's, up to and
including its end-of-turn token; a token is trained on when it starts inside such a span.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from langchain_core.utils.function_calling import convert_to_openai_tool

from memupdate.agent.tools import tool_schemas
from memupdate.errors import MemupdateError


def student_tools() -> list[dict[str, Any]]:
    """The tools as the `hf` policy lists them in the prompt (`bind_tools` of the graph's schemas)."""
    return [convert_to_openai_tool(schema) for schema in tool_schemas()]


def as_student_saw(messages: Sequence[dict[str, str]], settings: dict[str, Any]) -> list[dict[str, str]]:
    """A logged trajectory as a student with these prompt settings (`llm.chat.prompt_settings`) saw it in its
    rollouts (`llm.chat.student_view`): training renders exactly this."""
    from memupdate.llm.chat import student_view

    return student_view(messages, settings.get("system_prompt"), settings.get("tool_result_chars"))


def render_transcript(
    tokenizer: Any, messages: Sequence[dict[str, str]], *, add_generation_prompt: bool = False, tools: list | None = None
) -> str:
    return tokenizer.apply_chat_template(
        list(messages), tools=tools or student_tools(), add_generation_prompt=add_generation_prompt, tokenize=False
    )


def assistant_spans(
    tokenizer: Any, messages: Sequence[dict[str, str]], tools: list | None = None
) -> tuple[str, list[tuple[int, int]]]:
    """The full transcript and the [start, end) character spans the assistant wrote (with its end token),
    but for turns marked `loss: False` (the student's own turns before a teacher's label, `dagger.py`)."""
    text = render_transcript(tokenizer, messages, tools=tools)
    spans = []
    for i, message in enumerate(messages):
        if message["role"] != "assistant" or message.get("loss") is False:  # `loss: False`: context only (dagger.py)
            continue
        before = render_transcript(tokenizer, messages[:i], add_generation_prompt=True, tools=tools)
        through = render_transcript(tokenizer, messages[: i + 1], tools=tools).rstrip()  # the template's newline after the turn
        if not (through.startswith(before) and text.startswith(through)):
            raise MemupdateError(
                f"the student's chat template does not render message {i} as a continuation of the ones before "
                "it, so the assistant's tokens cannot be masked; use a Qwen2.5-style (Hermes) chat template"
            )
        spans.append((len(before), len(through)))
    return text, spans


def tokenize_with_mask(
    tokenizer: Any, messages: Sequence[dict[str, str]], max_length: int | None = None, tools: list | None = None
) -> tuple[list[int], list[bool]]:
    """Token ids of the transcript and, per token, whether the loss is on it; cut to `max_length` tokens
    (the start is kept: the system prompt, task and first turns)."""
    text, spans = assistant_spans(tokenizer, messages, tools)
    encoded = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    ids = list(encoded["input_ids"])
    mask = [any(start <= s < end for start, end in spans) for s, _ in encoded["offset_mapping"]]
    if max_length is not None:
        ids, mask = ids[:max_length], mask[:max_length]
    return ids, mask
