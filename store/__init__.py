"""The memory store: PostgreSQL + pgvector, one namespace per memory bank. Knows nothing of agents or RL.

    from memupdate.store import MemoryStore
    store = MemoryStore.connect(("locomo", "conv-26"))
    store.create("Melanie ran a charity race on 20 May 2023")
    store.search("When did Melanie run a race?")

Storage only, the one code that touches its tables (`memories`, `memory_events`; `tests/test_layers.py`
checks the seal): the embedded server, `MemoryStore` (namespace CRUD, search, forks, a bank's `version()`,
`vectors()`, `fork_keys`/`fold` of part of a bank, `append_events`), a fork promoted onto its base and a
promotion undone, one operation each inside a caller's transaction (`promote_fork`, `undo_promotion`),
the fork-vs-base diff in SQL (`changes_from`), the LangGraph `BaseStore` adapter (`as_langgraph_store`),
embeddings. Callers import `__all__` from here, never a submodule.
"""

from memupdate.store.codecs import Embedding
from memupdate.store.database import get_engine, resolve_url, server_info
from memupdate.store.embedded import start_embedded_server, temporary_data_dir
from memupdate.store.embeddings import get_embedder
from memupdate.store.errors import (
    DatabaseError,
    EmbeddingDimensionMismatch,
    InvalidMemory,
    InvalidNamespace,
    MemoryNotFound,
    PromotionConflict,
)
from memupdate.store.fork_diff import NamespaceChanges, changes_from
from memupdate.store.inventory import (
    SinceLast,
    latest_marks,
    memory_counts,
    namespace_exists,
    namespaces_labelled,
    nearest_namespaces,
    since_last,
)
from memupdate.store.memory_store import MemoryStore, SampleStrategy, drop_fork
from memupdate.store.models import MAX_CONTENT_CHARS, MEMORY_KINDS, Base, MemoryKind
from memupdate.store.promotion import WHOLE_ROW, drop_in, keep_only, promote_fork, undo_promotion
from memupdate.store.records import (
    KEY_PATTERN,
    MAX_NAMESPACE_DEPTH,
    NAMESPACE_LABEL,
    SEPARATOR,
    MemoryEventRecord,
    MemoryRecord,
    Namespace,
    NewEvent,
    NewMemory,
    ScoredMemory,
    namespace_path,
    to_namespace,
)


def as_langgraph_store(store: MemoryStore | None = None, **kwargs):
    """A `langgraph.store.base.BaseStore` over the same tables (see `memupdate.store.langgraph_store`)."""
    from memupdate.store.langgraph_store import PostgresMemoryStore

    return PostgresMemoryStore.from_memory_store(store, **kwargs) if store else PostgresMemoryStore.connect(**kwargs)


__all__ = [
    "Base",
    "DatabaseError",
    "Embedding",
    "EmbeddingDimensionMismatch",
    "InvalidMemory",
    "InvalidNamespace",
    "KEY_PATTERN",
    "MAX_CONTENT_CHARS",
    "MAX_NAMESPACE_DEPTH",
    "MEMORY_KINDS",
    "MemoryEventRecord",
    "MemoryKind",
    "MemoryNotFound",
    "MemoryRecord",
    "MemoryStore",
    "NAMESPACE_LABEL",
    "Namespace",
    "NamespaceChanges",
    "NewEvent",
    "NewMemory",
    "PromotionConflict",
    "SEPARATOR",
    "SampleStrategy",
    "SinceLast",
    "ScoredMemory",
    "WHOLE_ROW",
    "as_langgraph_store",
    "changes_from",
    "drop_fork",
    "drop_in",
    "get_embedder",
    "get_engine",
    "keep_only",
    "latest_marks",
    "memory_counts",
    "namespace_exists",
    "namespace_path",
    "namespaces_labelled",
    "nearest_namespaces",
    "promote_fork",
    "since_last",
    "resolve_url",
    "server_info",
    "start_embedded_server",
    "temporary_data_dir",
    "to_namespace",
    "undo_promotion",
]
