"""The memory store: PostgreSQL + pgvector, one namespace per memory bank. Knows nothing of agents or RL.

    from memupdate.store import MemoryStore
    store = MemoryStore.connect(("locomo", "conv-26"))
    store.create("Melanie ran a charity race on 20 May 2023")
    store.search("When did Melanie run a race?")
"""

from memupdate.store.errors import (
    DatabaseError,
    EmbeddingDimensionMismatch,
    InvalidMemory,
    InvalidNamespace,
    MemoryNotFound,
    MemupdateError,
)
from memupdate.store.fork_diff import NamespaceChanges
from memupdate.store.memory_store import MemoryStore, drop_fork
from memupdate.store.records import (
    MemoryEventRecord,
    MemoryRecord,
    Namespace,
    NamespaceDiff,
    NamespaceVersion,
    NewEvent,
    NewMemory,
    ScoredMemory,
    to_namespace,
)


def as_langgraph_store(store: MemoryStore | None = None, **kwargs):
    """A `langgraph.store.base.BaseStore` over the same tables (see `memupdate.store.langgraph_store`)."""
    from memupdate.store.langgraph_store import PostgresMemoryStore

    return PostgresMemoryStore.from_memory_store(store, **kwargs) if store else PostgresMemoryStore.connect(**kwargs)


__all__ = [
    "DatabaseError",
    "EmbeddingDimensionMismatch",
    "InvalidMemory",
    "InvalidNamespace",
    "MemoryEventRecord",
    "MemoryNotFound",
    "MemoryRecord",
    "MemoryStore",
    "MemupdateError",
    "Namespace",
    "NamespaceChanges",
    "NamespaceDiff",
    "NamespaceVersion",
    "NewEvent",
    "NewMemory",
    "ScoredMemory",
    "as_langgraph_store",
    "drop_fork",
    "to_namespace",
]
