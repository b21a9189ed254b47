"""Shared fixtures: one real embedded PostgreSQL + pgvector per test session, migrated once, and the
real packaged embedding model. Each test works in its own namespace, so tests never see each other.

Set MEMUPDATE_TEST_DATABASE_URL to run the suite against another server instead.
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
from collections.abc import Iterator
from dataclasses import replace

import pytest
from hypothesis import settings
from sqlalchemy import text

from memupdate.migrations.schema import upgrade
from memupdate.rl.data.locomo import load_sample
from memupdate.store import MemoryStore
from memupdate.store.database import get_engine
from memupdate.store.embedded import start_embedded_server, temporary_data_dir
from memupdate.store.embeddings import get_embedder

# CI replays the same examples every run (a failure there reproduces); locally, new examples each run.
settings.register_profile("ci", derandomize=True)
if os.environ.get("CI"):
    settings.load_profile("ci")


@pytest.fixture(scope="session")
def data_dir():
    # Not pytest's tmp_path: that is private to root, and the embedded server runs as its own user.
    path = temporary_data_dir("memupdate-test-")
    os.environ["MEMUPDATE_DATA_DIR"] = str(path)  # subprocesses (CLI tests) share the embedded server
    return path


@pytest.fixture(scope="session")
def database_url(data_dir) -> str:
    url = os.environ.get("MEMUPDATE_TEST_DATABASE_URL")
    resolved = start_embedded_server(data_dir) if not url else None
    engine = get_engine(url or resolved)
    upgrade(engine)
    return engine.url.render_as_string(hide_password=False)


@pytest.fixture(scope="session")
def engine(database_url):
    return get_engine(database_url)


@pytest.fixture(scope="session")
def embedder():
    return get_embedder()


@pytest.fixture
def namespace() -> tuple[str, ...]:
    return ("test", uuid.uuid4().hex[:12])


@pytest.fixture
def store(engine, embedder, namespace) -> Iterator[MemoryStore]:
    store = MemoryStore(engine, embedder, namespace)
    yield store
    for ns in store.list_namespaces(prefix=namespace):
        store.scoped(ns).drop()


@pytest.fixture
def sample(store: MemoryStore):
    """The shipped sample conversation, renamed per test so tests never share a base namespace."""
    conversation = replace(load_sample()[0], sample_id=f"sample-{store.namespace[-1]}")
    yield conversation
    for ns in store.list_namespaces(prefix=("locomo", conversation.sample_id)):
        store.scoped(ns).drop()


@pytest.fixture
def fresh_database(engine):
    """An empty database on the test server, dropped afterwards: for migrating up and down."""
    name = f"mu_{uuid.uuid4().hex[:10]}"
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    url = engine.url.set(database=name)
    yield url
    get_engine(url).dispose()
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(text(f'DROP DATABASE "{name}" WITH (FORCE)'))


@pytest.fixture
def worker_root(engine, embedder) -> Iterator[MemoryStore]:
    """This process's rollout-worker store is the test database (what `worker_store()` gives a Ray
    worker), reset after the test even when it or a fixture built on this one fails."""
    from memupdate.rl.verl import worker_db

    root = MemoryStore(engine, embedder, ("memupdate",))
    worker_db.use_worker_store(root)
    try:
        yield root
    finally:
        worker_db.use_worker_store(None)


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory):
    """A tiny Qwen2 checkpoint (random weights, a locally trained tokenizer, Qwen2.5's chat template), built
    once a session by the package's builder: no pretrained LLM weights can be downloaded here. Read-only:
    a test that changes it copies it first."""
    from memupdate.rl.distill.tiny_student import build_tiny_checkpoint

    return build_tiny_checkpoint(tmp_path_factory.mktemp("tiny-qwen2"))


@pytest.fixture
def tiny_model_without_chat_template(tiny_model, tmp_path):
    """A copy of `tiny_model` whose tokenizer has no chat template (neither the file nor the config key)."""
    path = shutil.copytree(tiny_model, tmp_path / "no-chat-template")
    (path / "chat_template.jinja").unlink(missing_ok=True)
    config = json.loads((path / "tokenizer_config.json").read_text())
    config.pop("chat_template", None)
    (path / "tokenizer_config.json").write_text(json.dumps(config))
    return path
