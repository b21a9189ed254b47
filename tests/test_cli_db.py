"""`memupdate db ...`, migrations and the embedded server, on real PostgreSQL processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from sqlalchemy import inspect, text
from typer.testing import CliRunner

from memupdate.cli import app
from memupdate.migrations.schema import current_revision, downgrade, drift, head_revision, upgrade
from memupdate.store.database import get_engine

runner = CliRunner()


def version_tuple(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("."))


def test_upgrade_downgrade_upgrade_is_clean_and_has_no_drift(fresh_database) -> None:
    engine = get_engine(fresh_database)
    assert current_revision(engine) is None
    upgrade(engine)
    assert current_revision(engine) == head_revision() and drift(engine) == []
    downgrade(engine, "base")
    with engine.connect() as conn:
        tables = conn.execute(text("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")).scalars().all()
    assert set(tables) <= {"alembic_version"}
    upgrade(engine)
    assert drift(engine) == []


def test_db_commands_against_a_database_url(fresh_database) -> None:
    url = fresh_database.render_as_string(hide_password=False)
    result = runner.invoke(app, ["db", "upgrade", "--url", url])
    assert result.exit_code == 0, result.output
    result = runner.invoke(app, ["db", "status", "--url", url, "--json"])
    status = json.loads(result.output)
    assert status["revision"] == head_revision() and version_tuple(status["pgvector_version"]) >= (0, 8)
    assert status["server_version"].startswith("18") and status["memories"] == 0
    assert runner.invoke(app, ["db", "downgrade", "base", "--url", url]).exit_code == 0
    status = json.loads(runner.invoke(app, ["db", "status", "--url", url, "--json"]).output)
    assert status["revision"] is None


def test_alembic_cli_check_reports_no_drift(database_url) -> None:
    """`alembic check` itself, from the repository root, reading the app's URL."""
    env = {**os.environ, "MEMUPDATE_DATABASE_URL": database_url}
    result = subprocess.run(
        [sys.executable, "-m", "alembic", "check"], env=env, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert "No new upgrade operations detected" in result.stdout + result.stderr


def test_other_apps_tables_are_not_drift(fresh_database) -> None:
    """LangGraph's checkpointer (`agent run --checkpoint`) shares the database; its tables are not ours."""
    from sqlalchemy import text

    from memupdate.migrations.schema import upgrade
    from memupdate.store.database import get_engine

    engine = get_engine(fresh_database)
    upgrade(engine)
    with engine.begin() as conn:
        conn.execute(text("CREATE TABLE checkpoint_migrations (v integer PRIMARY KEY)"))
    env = {**os.environ, "MEMUPDATE_DATABASE_URL": fresh_database.render_as_string(hide_password=False)}
    result = subprocess.run(
        [sys.executable, "-m", "alembic", "check"], env=env, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("postgresql://nobody@127.0.0.1:1/none", "cannot connect to PostgreSQL at"),
        ("mysql://root@localhost/db", "is not PostgreSQL"),
        ("not a url", "is not a URL"),
    ],
)
def test_bad_database_urls_give_one_clear_line(url: str, message: str) -> None:
    result = runner.invoke(app, ["db", "status", "--url", url])
    assert result.exit_code == 2
    assert message in result.output and "Traceback" not in result.output


def test_missing_pgvector_is_named(engine, monkeypatch) -> None:
    from memupdate.store import DatabaseError, database

    monkeypatch.setattr(
        database, "server_info", lambda _e: {"server_version": "16", "pgvector_version": None, "pgvector_available": None}
    )
    with pytest.raises(DatabaseError, match="no pgvector extension: install pgvector"):
        database.require_pgvector(engine)


def test_unmigrated_database_says_run_upgrade(fresh_database, embedder) -> None:
    from memupdate.store import DatabaseError, MemoryStore

    with pytest.raises(DatabaseError, match="memupdate db upgrade"):
        MemoryStore(get_engine(fresh_database), embedder, ("x",))


def test_a_database_a_newer_memupdate_migrated_is_one_line_and_left_alone(fresh_database) -> None:
    from memupdate.store import DatabaseError

    engine = get_engine(fresh_database)
    upgrade(engine)
    with engine.begin() as conn:
        conn.execute(text("UPDATE alembic_version SET version_num = '0099'"))
    with pytest.raises(DatabaseError, match=r"at schema revision 0099, which a newer memupdate wrote .*upgrade memupdate"):
        upgrade(engine)
    result = CliRunner().invoke(app, ["db", "upgrade", "--url", str(fresh_database.render_as_string(hide_password=False))])
    assert result.exit_code != 0 and "schema revision 0099" in result.output and "Traceback" not in result.output
    assert current_revision(engine) == "0099" and "memories" in inspect(engine).get_table_names()


def test_two_processes_share_the_embedded_server() -> None:
    """Two processes start the same embedded data dir at once and both write; a third sees both rows,
    and the server is stopped once the last process using it exits."""
    import shutil
    import tempfile

    data_dir = tempfile.mkdtemp(prefix="memupdate-two-")
    script = textwrap.dedent(
        f"""
        import sys
        from sqlalchemy import text
        from memupdate.store.database import get_engine
        from memupdate.store.embedded import start_embedded_server
        engine = get_engine(start_embedded_server({data_dir!r}))
        with engine.begin() as conn:
            conn.execute(text("SELECT pg_advisory_xact_lock(42)"))  # create the table one process at a time
            conn.execute(text("CREATE TABLE IF NOT EXISTS hits (who text)"))
            conn.execute(text("INSERT INTO hits VALUES (:w)"), {{"w": sys.argv[1]}})
        with engine.connect() as conn:
            print(sorted(conn.execute(text("SELECT who FROM hits")).scalars()))
        """
    )
    try:
        procs = [
            subprocess.Popen([sys.executable, "-c", script, name], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for name in ("a", "b")
        ]
        outputs = [p.communicate(timeout=120) for p in procs]
        assert all(p.returncode == 0 for p in procs), [err[-1500:] for _, err in outputs]  # the tracebacks' ends
        check = subprocess.run([sys.executable, "-c", script, "c"], capture_output=True, text=True, timeout=120)
        assert check.returncode == 0, check.stderr
        assert check.stdout.strip() == "['a', 'b', 'c']"
        assert not (Path(data_dir) / "pg" / "postmaster.pid").exists(), "server stopped with its last user"
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)
