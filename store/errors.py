"""Errors that reach a user: each names the thing, the value and the fix."""

from langgraph.store.base import InvalidNamespaceError

from memupdate.errors import MemupdateError


class DatabaseError(MemupdateError):
    """The database cannot be reached, lacks pgvector, or is not migrated."""


class InvalidNamespace(MemupdateError, InvalidNamespaceError):
    """A namespace label is empty, too long, or holds characters outside the allowed set (a LangGraph
    `InvalidNamespaceError`, hence a `ValueError`, so LangGraph apps catch it as they would their own)."""


class MemoryNotFound(MemupdateError, KeyError):
    """No memory with that id in that namespace."""

    def __init__(self, key: str, namespace: str):
        self.key, self.namespace = key, namespace
        super().__init__(f"no memory {key!r} in namespace {namespace!r}: list or search it for valid ids")

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0])


class InvalidMemory(MemupdateError, ValueError):
    """Content empty or over the size limit, unknown kind, or similar."""


class EmbeddingDimensionMismatch(MemupdateError, ValueError):
    """The embedder's vector size differs from the database column's."""


class PromotionConflict(MemupdateError):
    """A fork cannot be promoted onto its base, or a promotion undone, because the base was written since:
    `key` names the first memory found otherwise than the operation needs it (`expected` what it needs
    there, `found` what is there, as `MemoryRecord.as_event()` or None when absent). `key` is None when
    the fork itself is gone. Nothing was written."""

    def __init__(self, message: str, key: str | None = None, *, expected: dict | None = None, found: dict | None = None):
        super().__init__(message)
        self.key, self.expected, self.found = key, expected, found
