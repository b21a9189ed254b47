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
