"""The six memory tools: plain functions over a namespace-scoped `MemoryStore`.

    from memupdate.agent.tools import run_tool
    result = run_tool(store, "search_memory", {"query": "When did Caroline go hiking?"})
    result.text        # "[f0012] 0.71 (2023-05-08) Caroline went hiking yesterday ..."
    result.ok          # False when the arguments were bad; the store is then unchanged

Each tool has a pydantic argument model; the OpenAI function schemas (`tool_schemas()`), the
LangChain tools of the graph and verl's `BaseTool`s are all made from `MEMORY_TOOLS`, so there is
one definition of every tool. Memories are shown by their key, a short handle such as `f0012`
(ingested facts) or `m3fa9c1e0` (made by a tool). Results are compact text capped at
`MAX_RESULT_CHARS`. Bad arguments come back as an `error: ...` result naming the fix; they count
against the operation budget like any call, and change nothing.
"""

from __future__ import annotations

import copy
import functools
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationError, field_validator

from memupdate.errors import MemupdateError
from memupdate.store import (
    MAX_CONTENT_CHARS,
    MemoryKind,
    MemoryNotFound,
    MemoryRecord,
    MemoryStore,
    NewMemory,
    SampleStrategy,
)
from memupdate.text import strategies as text_strategies
from memupdate.text.dates import anchored, datable
from memupdate.text.facts import is_newer, shown_time

MAX_RESULT_CHARS = 2000
MAX_TOP_K = 20


def new_key() -> str:
    """A short handle for a memory a tool creates (32 random bits: collisions in a bank are negligible)."""
    return "m" + uuid.uuid4().hex[:8]


class ToolError(Exception):
    """A bad call that the model can fix; its message becomes the tool result."""


# -- argument models (their JSON schemas are what the model sees) --------------------------------


class SearchMemoryArgs(BaseModel):
    """Find the memories most similar to a query."""

    query: str = Field(min_length=1, description="What to look for, in plain words.")
    top_k: int = Field(5, ge=1, le=MAX_TOP_K, description="How many memories to return.")


class ManageMemoryArgs(BaseModel):
    """Create a new memory, or rewrite an existing one."""

    action: Literal["create", "update"] = Field(description="`create` a new memory or `update` memory_id.")
    content: str | None = Field(
        None,
        min_length=1,
        max_length=MAX_CONTENT_CHARS,
        description="The full text of the memory; leave it out on update to date its relative time from its own day.",
    )
    memory_id: str | None = Field(None, description="The memory to update (required for update).")
    kind: MemoryKind | None = Field(None, description="episodic (an event), semantic (a fact) or procedural.")


class DeleteMemoryArgs(BaseModel):
    """Delete a memory that is wrong, redundant or useless, or that a newer memory supersedes."""

    memory_id: str = Field(min_length=1, description="The memory to delete.")
    reason: str | None = Field(None, description="Why (kept in the event log).")
    superseded_by: str | None = Field(
        None, description="The newer memory stating the same fact's current value; the deleted one is kept as history."
    )


class SampleMemoryArgs(BaseModel):
    """Look at some memories to find what needs fixing."""

    strategy: SampleStrategy = Field(
        "random", description="random, diverse (spread over topics) or recent (latest sessions first)."
    )
    k: int = Field(5, ge=1, le=MAX_TOP_K, description="How many memories to return.")


class MergeMemoryArgs(BaseModel):
    """Merge two or more memories into one (the sources are deleted)."""

    memory_ids: list[str] = Field(description="The memories to merge, at least two.")
    strategy: Literal["summarize", "concatenate", "extract_common", "keep_fullest"] = Field(
        "concatenate",
        description=(
            "How to build the text when `content` is not given; concatenate keeps every sentence and its date, "
            "keep_fullest keeps the longest memory's words (duplicates)."
        ),
    )
    content: str | None = Field(
        None, max_length=MAX_CONTENT_CHARS, description="The merged text, written by you; leave it out to keep the memories' own words."
    )

    @field_validator("memory_ids")
    @classmethod
    def _two_distinct(cls, ids: list[str]) -> list[str]:
        if len(set(ids)) < 2:
            raise ValueError("merge needs at least two different memory ids")
        if len(set(ids)) != len(ids):
            raise ValueError("memory_ids lists the same memory twice")
        return ids


class SplitMemoryArgs(BaseModel):
    """Split a memory that packs several facts into one memory per fact (the source is deleted)."""

    memory_id: str = Field(min_length=1, description="The memory to split.")
    strategy: Literal["temporal", "thematic", "speaker"] = Field(
        "thematic", description="Split by time expressions, by topic, or by speaker, when `parts` is not given."
    )
    parts: list[str] | None = Field(None, description="The new memories' texts, written by you (two or more).")

    @field_validator("parts")
    @classmethod
    def _parts(cls, parts: list[str] | None) -> list[str] | None:
        if parts is not None and (len(parts) < 2 or any(not p.strip() for p in parts)):
            raise ValueError("parts must hold two or more non-empty texts")
        return parts


# -- rendering -------------------------------------------------------------------------------------


RELATIVE_MARK = "; relative time"
TO_DATE = "to date (relative time): "


def show(memory: MemoryRecord, score: float | None = None) -> str:
    """One memory as the model sees it: `[handle] score (date) content`, the date to the second where the
    statement's time is known (what orders two statements of one fact); a merge of several days shows
    its range, `(first..last)`. A memory whose relative time an update without content would date shows
    `(date; relative time)`: a policy chooses which memories to date, and need not spot "last Friday"
    in the text itself."""
    dates = memory.metadata.get("dates") or []
    date = shown_time(memory) or (f"{dates[0]}..{dates[-1]}" if dates else None)
    parts = [f"[{memory.key}]"]
    if score is not None:
        parts.append(f"{score:.2f}")
    if date:
        parts.append(f"({date}{RELATIVE_MARK if datable(memory) else ''})")
    parts.append(memory.content)
    return " ".join(parts)


def cap(text: str) -> str:
    if len(text) <= MAX_RESULT_CHARS:
        return text
    return text[: MAX_RESULT_CHARS - 20].rstrip() + " ... [truncated]"


# -- the tools ---------------------------------------------------------------------------------------


def listing(memories: Sequence[MemoryRecord], scores: Sequence[float | None] | None = None) -> str:
    """Memories as a look shows them, one a line; when some hold relative time an update without content
    would date, a first line names them (`to date (relative time): [f0240] [f0164]`), in the order shown:
    a handle written as in the lines below it is one a small model copies."""
    lines = [show(m, s) for m, s in zip(memories, scores or [None] * len(memories), strict=True)]
    dated = [m.key for m in memories if datable(m)]
    return "\n".join(([to_date_line(dated)] if dated else []) + lines)


def to_date_line(keys: Sequence[str]) -> str:
    return TO_DATE + " ".join(f"[{key}]" for key in keys)


def search_memory(store: MemoryStore, args: SearchMemoryArgs) -> str:
    hits = store.search(args.query, args.top_k)
    if not hits:
        return "no memories in this bank"
    return listing([hit.memory for hit in hits], [hit.score for hit in hits])


def manage_memory(store: MemoryStore, args: ManageMemoryArgs) -> str:
    if args.action == "create":
        if args.memory_id:
            raise ToolError("create makes a new memory: leave memory_id out, or use action=update")
        if args.content is None:
            raise ToolError("create needs content: the full text of the new memory")
        memory = store.create(args.content, kind=args.kind or "semantic", metadata={"source": "agent"}, key=new_key())
        return f"created {show(memory)}"
    if not args.memory_id:
        raise ToolError("update needs memory_id: the handle of the memory to rewrite, e.g. f0012")
    content = args.content if args.content is not None else _dated(store, args.memory_id)
    with _unknown_ids():  # the write itself finds the memory: no read before it
        memory = store.update(args.memory_id, content=content, kind=args.kind)
    return f"updated {show(memory)}" + (still_to_date(store) if args.content is None else "")


def still_to_date(store: MemoryStore) -> str:
    """After a dating update, in a bank a look shows whole (a compaction episode's neighbourhood): a line
    naming the memories still to date, newest first as `sample_memory(recent)` lists them, so the next
    handle to date is in the last result a policy read. Empty when none is left, or the bank is larger."""
    recent = store.sample("recent", MAX_TOP_K + 1)  # one more than a look shows: is the bank larger?
    dated = [m.key for m in recent if datable(m)] if len(recent) <= MAX_TOP_K else []
    return "\n" + to_date_line(dated) if dated else ""


def _dated(store: MemoryStore, key: str) -> str:
    """An update without content: the memory's relative time anchored to its own day (the tool does the
    date arithmetic, so a policy only chooses which memory)."""
    memory = _known(store, [key])[0]
    text = anchored(memory)
    if text == memory.content:
        raise ToolError(f"[{key}] has no relative time to date: give content to rewrite it")
    return text


def delete_memory(store: MemoryStore, args: DeleteMemoryArgs) -> str:
    if args.superseded_by is not None:
        return _supersede(store, args.memory_id, args.superseded_by)
    with _unknown_ids():
        memory = store.delete(args.memory_id)
    return f"deleted [{memory.key}]"


def _supersede(store: MemoryStore, key: str, newer_key: str) -> str:
    """The mechanics of a supersession: the stale memory leaves the bank with `superseded_by` in its
    last record (an apply keeps it as a superseded row naming the newer one). Which memory is stale is
    the caller's judgement; the tool only refuses what no fact allows: a memory superseded by itself,
    or by one stated before it."""
    if key == newer_key:
        raise ToolError("a memory cannot supersede itself: superseded_by names the newer memory")
    stale, newer = _known(store, [key, newer_key])
    if is_newer(stale, newer):
        raise ToolError(
            f"[{newer.key}] ({shown_time(newer)}) was stated before [{stale.key}] ({shown_time(stale)}): "
            "a memory is superseded only by a newer one"
        )
    store.delete(stale.key, final_metadata={**stale.metadata, "superseded_by": newer.key})
    return f"[{stale.key}] superseded by [{newer.key}]"


def sample_memory(store: MemoryStore, args: SampleMemoryArgs) -> str:
    memories = store.sample(args.strategy, args.k)
    if not memories:
        return "no memories in this bank"
    return listing(memories)


def merge_memory(store: MemoryStore, args: MergeMemoryArgs) -> str:
    sources = _known(store, args.memory_ids)
    contents = [m.content for m in sources]
    if args.content is not None:
        content = args.content
    elif args.strategy == "concatenate":
        content = text_strategies.concatenate_memories(sources)
    elif args.strategy == "summarize":
        content = text_strategies.summarize(contents)
    elif args.strategy == "keep_fullest":
        content = anchored(max(sources, key=lambda m: len(m.content)))
    else:
        content = text_strategies.extract_common(contents)
        if content is None:
            raise ToolError("these memories share no fact: use strategy=concatenate or summarize, or give content")
    if len(content) > MAX_CONTENT_CHARS:
        raise ToolError(f"the merged text would have {len(content)} characters (limit {MAX_CONTENT_CHARS}): merge fewer")
    merged = NewMemory(content, kind=sources[0].kind, metadata=merged_provenance(sources), key=new_key())
    created = store.replace([m.key for m in sources], [merged])[0]
    return f"merged {len(sources)} memories into {show(created)}"


def split_memory(store: MemoryStore, args: SplitMemoryArgs) -> str:
    source = _known(store, [args.memory_id])[0]
    if args.parts is not None:
        parts = args.parts
    elif args.strategy == "temporal":
        parts = text_strategies.split_temporal(source.content)
    elif args.strategy == "speaker":
        parts = text_strategies.split_speaker(source.content, _speakers(store, source))
    else:
        parts = text_strategies.split_thematic(source.content)
    if len(parts) < 2:
        raise ToolError(
            f"[{source.key}] holds one {args.strategy} unit, nothing to split: try another strategy or give parts"
        )
    metadata = {**source.metadata, "source": "split", "split_from": source.key}
    created = store.replace([source.key], [NewMemory(p, kind=source.kind, metadata=metadata, key=new_key()) for p in parts])
    return f"split [{source.key}] into:\n" + "\n".join(show(m) for m in created)


def merged_provenance(sources: Sequence[MemoryRecord]) -> dict[str, Any]:
    """Provenance of a merge: dia_ids and sessions unioned in order, every source's date (`dates`; `date`
    only when they agree, so a merge never carries one wrong date), and in `merged_from` the keys it came
    from: each source's, after those its source came from (a merge of a merge names the first merge's
    sources too, so the reward's faithfulness check finds the bank's memories behind every word)."""
    dia_ids = list(dict.fromkeys(d for m in sources for d in m.metadata.get("dia_ids", [])))
    sessions = sorted({m.metadata["session"] for m in sources if m.metadata.get("session") is not None})
    dates = sorted({d for m in sources for d in (m.metadata.get("dates") or [m.metadata.get("date")]) if d})
    speakers = {m.metadata.get("speaker") for m in sources}
    return {
        "dia_ids": dia_ids,
        "sessions": sessions,
        "session": sessions[0] if sessions else None,
        "date": dates[0] if len(dates) == 1 else None,
        "dates": dates,
        "speaker": speakers.pop() if len(speakers) == 1 else None,
        "source": "merge",
        "merged_from": list(dict.fromkeys(key for m in sources for key in _lineage(m))),
    }


def _lineage(memory: MemoryRecord) -> list[str]:
    meta = memory.metadata
    return [*meta.get("merged_from", []), *([meta["split_from"]] if meta.get("split_from") else []), memory.key]


def _known(store: MemoryStore, ids: Sequence[str]) -> list[MemoryRecord]:
    with _unknown_ids():
        return store.get_many(list(ids))


@contextmanager
def _unknown_ids() -> Iterator[None]:
    """A MemoryNotFound of the block as the tool's error naming the id and the fix."""
    try:
        yield
    except MemoryNotFound as exc:
        raise ToolError(
            f"unknown memory id {exc.key!r} in this bank: use a handle shown by search_memory or sample_memory"
        ) from None


def _speakers(store: MemoryStore, memory: MemoryRecord) -> list[str]:
    """Every speaker named in the bank's provenance (a bank holds a few hundred memories)."""
    names = {m.metadata.get("speaker") for m in store.list()} | {memory.metadata.get("speaker")}
    return sorted(n for n in names if n)


# -- registry ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class MemoryTool:
    name: str
    args_model: type[BaseModel]
    fn: Callable[[MemoryStore, Any], str]
    writes: bool

    @property
    def description(self) -> str:
        return (self.args_model.__doc__ or self.name).strip()

    def schema(self) -> dict[str, Any]:
        """The OpenAI function-calling schema of this tool."""
        parameters = self.args_model.model_json_schema()
        parameters.pop("title", None)
        parameters.pop("description", None)
        for prop in parameters.get("properties", {}).values():
            prop.pop("title", None)
            # `X | None` -> plain X (not required): the flat form verl's and most servers' parsers expect.
            options = prop.pop("anyOf", None)
            if options:
                prop.update(next(o for o in options if o.get("type") != "null"))
                if prop.get("default", ...) is None:
                    del prop["default"]
        return {"type": "function", "function": {"name": self.name, "description": self.description, "parameters": parameters}}


MEMORY_TOOLS: dict[str, MemoryTool] = {
    tool.name: tool
    for tool in (
        MemoryTool("search_memory", SearchMemoryArgs, search_memory, writes=False),
        MemoryTool("manage_memory", ManageMemoryArgs, manage_memory, writes=True),
        MemoryTool("delete_memory", DeleteMemoryArgs, delete_memory, writes=True),
        MemoryTool("sample_memory", SampleMemoryArgs, sample_memory, writes=False),
        MemoryTool("merge_memory", MergeMemoryArgs, merge_memory, writes=True),
        MemoryTool("split_memory", SplitMemoryArgs, split_memory, writes=True),
    )
}


def tool_schemas() -> list[dict[str, Any]]:
    """The OpenAI function schemas of all six tools, in a fixed order (a copy each call: callers may edit it)."""
    return copy.deepcopy(_schemas())


@functools.cache
def _schemas() -> list[dict[str, Any]]:
    # Built once a process: pydantic's JSON schemas cost ~4 ms a graph, and a compaction builds one an episode.
    return [tool.schema() for tool in MEMORY_TOOLS.values()]


@dataclass(frozen=True)
class ToolResult:
    text: str
    ok: bool
    name: str


def run_tool(store: MemoryStore, name: str, arguments: dict[str, Any] | str | None) -> ToolResult:
    """Validate `arguments` and run tool `name` on `store`; bad calls return `ok=False` and change nothing."""
    tool = MEMORY_TOOLS.get(name)
    if tool is None:
        return ToolResult(f"error: unknown tool {name!r}; the tools are {', '.join(MEMORY_TOOLS)}", False, name)
    try:
        args = (
            tool.args_model.model_validate_json(arguments)
            if isinstance(arguments, str)
            else tool.args_model.model_validate(arguments or {})
        )
        return ToolResult(cap(tool.fn(store, args)), True, name)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'arguments'}: {e['msg']}" for e in exc.errors())
        return ToolResult(f"error: bad arguments for {name}: {problems}", False, name)
    except (ToolError, MemupdateError) as exc:
        return ToolResult(f"error: {exc}", False, name)


def langchain_tools(store: MemoryStore) -> list:
    """The six tools as LangChain `StructuredTool`s bound to `store` (for `create_react_agent` or any
    LangChain agent); same argument models, same functions, same error results as `run_tool`."""
    from langchain_core.tools import StructuredTool

    def make(tool: MemoryTool) -> StructuredTool:
        def call(**arguments: Any) -> str:
            return run_tool(store, tool.name, arguments).text

        async def acall(**arguments: Any) -> str:
            return (await arun_tool(store, tool.name, arguments)).text

        return StructuredTool.from_function(
            func=call, coroutine=acall, name=tool.name, description=tool.description, args_schema=tool.args_model
        )

    return [make(tool) for tool in MEMORY_TOOLS.values()]


async def arun_tool(store: MemoryStore, name: str, arguments: dict[str, Any] | str | None) -> ToolResult:
    """Async twin of `run_tool` (verl's tools are async): runs on a worker thread."""
    import asyncio

    return await asyncio.to_thread(run_tool, store, name, arguments)
