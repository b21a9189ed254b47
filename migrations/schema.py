"""The schema's revision, driven from Python: `memupdate db upgrade|downgrade|status` and the tests use these.

    from memupdate.migrations.schema import upgrade, status, drift
    upgrade(engine)            # CREATE EXTENSION vector; tables; indexes
    status(engine)             # {"revision": "0001", "server_version": "18.4", "pgvector_version": "0.8.5",
                               #  "vector_operations": "ok", ...}
    drift(engine)              # [] when every layer's tables match the live schema (`alembic check`)

It lives with the migrations, above every layer that declares tables (store, bank, scoring): running
them and checking drift needs all of those tables, and the store must not import upward.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.config import Config
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine, func, select

from memupdate.migrations.models import metadata
from memupdate.store.database import require_pgvector, server_info
from memupdate.store.embedded import check_vector_operations
from memupdate.store.errors import DatabaseError
from memupdate.store.models import Memory

MIGRATIONS_DIR = Path(__file__).parent


def alembic_config(connection=None) -> Config:
    """An Alembic config pointing at the packaged migrations, optionally bound to an open connection."""
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    config.attributes["connection"] = connection
    return config


def upgrade(engine: Engine, revision: str = "head") -> None:
    """Migrate up to `revision`; DatabaseError naming the fix when the server has no pgvector, or when a
    newer memupdate migrated it past the revisions this one knows."""
    require_pgvector(engine)
    require_known_revision(engine)
    with engine.begin() as conn:
        command.upgrade(alembic_config(conn), revision)


def require_known_revision(engine: Engine) -> None:
    """DatabaseError when the database is at a revision this memupdate has no migration for."""
    current = current_revision(engine)
    scripts = ScriptDirectory.from_config(alembic_config())
    if current is not None and current not in {s.revision for s in scripts.walk_revisions()}:
        where = engine.url.render_as_string(hide_password=True)
        raise DatabaseError(
            f"the database at {where} is at schema revision {current}, which a newer memupdate wrote (this one "
            f"knows up to {scripts.get_current_head()}): upgrade memupdate, or point MEMUPDATE_DATABASE_URL "
            "(or MEMUPDATE_DATA_DIR) at another database"
        )


def downgrade(engine: Engine, revision: str = "-1") -> None:
    """Migrate down to `revision` (`-1` = one step, `base` = drop everything memupdate made)."""
    with engine.begin() as conn:
        command.downgrade(alembic_config(conn), revision)


def current_revision(engine: Engine) -> str | None:
    with engine.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()


def head_revision() -> str | None:
    return ScriptDirectory.from_config(alembic_config()).get_current_head()


def drift(engine: Engine) -> list[Any]:
    """Differences between the models and the live schema (what `alembic check` reports); [] = none."""
    with engine.connect() as conn:
        return compare_metadata(MigrationContext.configure(conn), metadata)


def status(engine: Engine) -> dict[str, Any]:
    """Revision (current and head), server and pgvector versions, whether pgvector's operations run on
    that server ("ok", or what failed and the fix), namespace and memory counts."""
    info: dict[str, Any] = {"url": engine.url.render_as_string(hide_password=True), **server_info(engine)}
    info["revision"], info["head"] = current_revision(engine), head_revision()
    info["vector_operations"] = check_vector_operations(engine) or "ok"
    info["namespaces"] = info["memories"] = None
    if info["revision"] is not None:
        with engine.connect() as conn:
            row = conn.execute(select(func.count(func.distinct(Memory.namespace)), func.count()).select_from(Memory)).one()
        info["namespaces"], info["memories"] = row
    return info
