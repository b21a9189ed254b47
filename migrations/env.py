"""Alembic environment: the app's own URL and models, so `alembic check` compares like with like.

A caller may hand over an open connection in `config.attributes["connection"]` (the CLI and the
tests do); otherwise the URL is resolved exactly as the app resolves it.
"""

from alembic import context
from pgvector.sqlalchemy import Vector

from memupdate.migrations.models import metadata
from memupdate.store.database import get_engine

# Every layer's tables (the store's, the bank's, the reply cache's), declared on one Base.
target_metadata = metadata


def render_item(type_, obj, autogen_context):
    """Render pgvector columns as `Vector(n)` with its import, for hand-checked autogenerate output."""
    if type_ == "type" and isinstance(obj, Vector):
        autogen_context.imports.add("from pgvector.sqlalchemy import Vector")
        return f"Vector({obj.dim})"
    return False


def include_name(name, type_, parent_names) -> bool:
    """Compare only memupdate's own tables: the same database may hold others (LangGraph's checkpointer
    tables from `agent run --checkpoint`), which are not drift and must never be dropped."""
    return type_ != "table" or name in target_metadata.tables


def run_migrations(connection) -> None:
    context.configure(
        connection=connection, target_metadata=target_metadata, render_item=render_item, include_name=include_name
    )
    with context.begin_transaction():
        context.run_migrations()


connection = context.config.attributes.get("connection")
if connection is not None:
    run_migrations(connection)
else:
    with get_engine(context.config.get_main_option("sqlalchemy.url") or None).connect() as conn:
        run_migrations(conn)
        conn.commit()
