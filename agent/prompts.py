"""The prompts the policy sees: one definition, used by the graph and by verl's preprocessing.

The task message has a fixed first block (`Memory bank:` / `Target question:` lines) so that a
rule-based policy, and a person reading a transcript, can tell which bank and question an episode is
about; `parse_task` reads it back.
"""

from __future__ import annotations

import re

from memupdate.llm.chat import BANK_LINE
from memupdate.settings import DEFAULT_CONTEXT_TOKENS, DEFAULT_MAX_OPERATIONS, DEFAULT_MAX_TURNS

SYSTEM_PROMPT = """You maintain a long-term memory bank of facts about people, drawn from their conversations. \
Questions will later be answered from the memories most similar to the question, read in order of \
similarity up to a fixed length (about {context_tokens} words in all). Edit the bank so those future questions are answered better:
- anchor relative time ("yesterday", "last week", "two weekends ago") to absolute dates, using the memory's date \
(manage_memory update with memory_id and no content does it for you);
- when two memories state the same subject and attribute with different values, the one stated later is current: delete the older with superseded_by set to the newer (it is kept as history, out of what questions read); never merge them;
- merge memories that say the same thing; split memories that pack unrelated facts;
- fix or delete memories that are wrong or useless; keep each memory short and self-contained, naming who it is about;
- write only what the memories you edit (and their dates) support: invented words cost, and so does losing what other questions need.
Tools: search_memory, manage_memory (create/update), delete_memory, sample_memory, merge_memory, split_memory. \
Memories are shown as [handle] (date or time stated) text; refer to them by handle. \
(date; relative time) marks a memory whose relative time an update with no content dates, and a \
"to date" line lists them (first in a look, and after each dating update the ones left).
Budget: at most {max_turns} turns and {max_operations} tool calls. Stop calling tools when the bank is good."""

_QUESTION = re.compile(r"^Target question: (?P<question>.+)$", re.M)


def system_prompt(
    max_turns: int = DEFAULT_MAX_TURNS,
    max_operations: int = DEFAULT_MAX_OPERATIONS,
    context_tokens: int = DEFAULT_CONTEXT_TOKENS,
) -> str:
    """The system prompt with the episode's budgets and the QA context budget the reward reads with."""
    return SYSTEM_PROMPT.format(max_turns=max_turns, max_operations=max_operations, context_tokens=context_tokens)


def task_prompt(namespace: str, question: str | None = None, memory_count: int | None = None) -> str:
    """The first user message of an episode: which bank, optionally which question to prepare for."""
    lines = [f"Memory bank: {namespace}"]
    if question:
        lines.append(f"Target question: {question}")
    if memory_count is not None:
        lines.append(f"The bank holds {memory_count} memories.")
    lines.append(
        "Improve the memory so this question, and others like it, can be answered from it."
        if question
        else "Improve the memory so future questions about these people can be answered from it."
    )
    return "\n".join(lines)


def parse_task(text: str) -> tuple[str | None, str | None]:
    """(namespace, question) from a `task_prompt` message; None where a line is absent."""
    bank, question = BANK_LINE.search(text), _QUESTION.search(text)
    return (bank["namespace"] if bank else None, question["question"].strip() if question else None)

# For small students on a CPU, where each prompt token costs ~5 ms of prefill: the same task in ~90
# tokens instead of ~240 (the tools are listed by the student's chat template).
COMPACT_SYSTEM_PROMPT = f"""Edit this memory bank so questions answered later from the ~{DEFAULT_CONTEXT_TOKENS} words of memories most \
similar to them are answered better: anchor relative dates ("yesterday") to absolute ones (update a memory without content: the tool dates it); \
when a later memory gives the same fact a new value, delete the older with superseded_by the newer; \
merge duplicates; fix or delete wrong memories; keep each memory short and self-contained, naming who it is about; \
write only what the memories support. Memories show as [handle] (date or time stated) text; refer to them by handle; \
a "to date" line (first in a look; after each dating update, those left) lists those an update without content dates. \
Stop calling tools when done."""


# How the student sees its prompts (the hf policy reads them from the checkpoint, training renders with
# them): the short system prompt, and tool results cut to what an 8-memory search shows.
STUDENT_PROMPT = {"system_prompt": COMPACT_SYSTEM_PROMPT, "tool_result_chars": 1200}
