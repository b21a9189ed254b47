"""Ingestion: a LoCoMo conversation's observation facts become the memories of its base namespace.

    from memupdate.rl.data.ingest import ingest, ingest_conversation
    report = ingest(store, conversation)     # IngestReport(added=167, present=0, removed_by_edit=[])
    base = ingest_conversation(store, conversation)     # the same, returning the base namespace's store

Each fact keeps its provenance in metadata: dia_ids, session, session_date (LoCoMo's text),
date (ISO, for sorting and date arithmetic), speaker, source, and `turns`: the text of the
dialogue turns it was drawn from (what an edit may restate). Keys are `f0000`, `f0001`, ...
in file order, so loading twice adds nothing and every fork of the base shares them.

Loading is safe to repeat and to run from several processes at once (a key another process adds
meanwhile is skipped, not an error), and it never resurrects a fact an edit removed: a key with a
delete event in the base's log (an in-place delete, merge or split) is left out and reported.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from memupdate.rl.data.conversation import Conversation, Fact, Turn
from memupdate.rl.data.factconsolidation import FactBank
from memupdate.rl.data.namespaces import base_namespace
from memupdate.store import MemoryStore, NewMemory


@dataclass(frozen=True)
class IngestReport:
    """What loading a conversation did to its base namespace."""

    base: MemoryStore
    added: int
    present: int
    removed_by_edit: list[str] = field(default_factory=list)

    def summary(self) -> str:
        text = f"{self.base.path}: {self.added} added, {self.present} already present"
        if self.removed_by_edit:
            shown = ", ".join(self.removed_by_edit[:5]) + (" ..." if len(self.removed_by_edit) > 5 else "")
            text += f", {len(self.removed_by_edit)} skipped as removed by an edit ({shown})"
        return text


def fact_key(index: int) -> str:
    return f"f{index:04d}"


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


def ingest(store: MemoryStore, conversation: Conversation) -> IngestReport:
    """Write the conversation's facts that its base namespace lacks, except those an edit removed."""
    base = store.scoped(base_namespace(conversation.sample_id))
    present = set(base.snapshot())
    removed = base.deleted_keys()
    keys = [fact_key(index) for index in range(len(conversation.facts))]
    turns = {turn.dia_id: turn for turn in conversation.turns}
    new = [
        NewMemory(fact.text, kind="episodic", metadata=fact_metadata(fact, turns), key=key)
        for key, fact in zip(keys, conversation.facts, strict=True)
        if key not in present and key not in removed
    ]
    created = base.create_many(new, skip_existing=True) if new else []
    return IngestReport(
        base=base,
        added=len(created),
        present=sum(key in present for key in keys) + len(new) - len(created),
        removed_by_edit=[key for key in keys if key in removed],
    )


def ingest_conversation(store: MemoryStore, conversation: Conversation) -> MemoryStore:
    """`ingest`, returning the base namespace's store."""
    return ingest(store, conversation).base


def load_bank(store: MemoryStore, bank: Conversation | FactBank) -> MemoryStore:
    """The base namespace of a bank learning trains or evaluates on: a LoCoMo conversation's facts
    (`ingest_conversation`), or FactConsolidation facts (`FactBank.load`)."""
    return bank.load(store) if isinstance(bank, FactBank) else ingest_conversation(store, bank)
