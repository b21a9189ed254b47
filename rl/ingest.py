"""Ingestion: a LoCoMo conversation's observation facts become the memories of its base namespace.

    from memupdate.rl.ingest import ingest_conversation
    base = ingest_conversation(store, conversation)     # namespace ("locomo", "conv-26"), idempotent

Each fact keeps its provenance in metadata: dia_ids, session, session_date (LoCoMo's text),
date (ISO, for sorting and date arithmetic), speaker, source, and `turns`: the text of the
dialogue turns it was drawn from (what an edit may restate). Keys are `f0000`, `f0001`, ...
in file order, so loading twice adds nothing and every fork of the base shares them.
"""

from __future__ import annotations

from memupdate.rl.locomo import Conversation, Fact, Turn
from memupdate.store import MemoryStore, NewMemory

BASE_PREFIX = "locomo"


def base_namespace(sample_id: str) -> tuple[str, str]:
    return (BASE_PREFIX, sample_id)


def fact_metadata(fact: Fact, turns: dict[str, Turn] | None = None) -> dict:
    """Provenance of a fact; `turns` (dia_id -> turn) adds the text of the turns it came from, which
    the reward's faithfulness check accepts as support for what an edit writes."""
    day = fact.session_day
    said = {d: _turn_text(turns[d]) for d in fact.dia_ids if turns and d in turns}
    return {
        "dia_ids": list(fact.dia_ids),
        "session": fact.session,
        "session_date": fact.session_date,
        "date": day.isoformat() if day else None,
        "speaker": fact.speaker,
        "source": "locomo:observation",
        "turns": said,
    }


def _turn_text(turn: Turn) -> str:
    return f"{turn.speaker}: {turn.text}" + (f" [shares {turn.blip_caption}]" if turn.blip_caption else "")


def ingest_conversation(store: MemoryStore, conversation: Conversation) -> MemoryStore:
    """Write the conversation's facts into its base namespace (only the ones not there yet)."""
    base = store.scoped(base_namespace(conversation.sample_id))
    present = set(base.snapshot())
    turns = {turn.dia_id: turn for turn in conversation.turns}
    new = [
        NewMemory(fact.text, kind="episodic", metadata=fact_metadata(fact, turns), key=f"f{index:04d}")
        for index, fact in enumerate(conversation.facts)
        if f"f{index:04d}" not in present
    ]
    if new:
        base.create_many(new)
    return base
