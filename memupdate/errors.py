"""The base of memupdate's user-facing errors, at the bottom of the package so every layer (the store,
the OpenAI-compatible client, the CLI) can raise it without importing another."""


class MemupdateError(Exception):
    """Base class for memupdate's user-facing errors: each names the thing, the value and the fix."""
