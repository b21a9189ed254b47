"""`langgraph.json` serves the memory-editing graph (issue 28, item 4).

The first test loads the graph the way LangGraph's server does (the file and factory the config names,
called with a run's config) and runs an episode through it. The second starts `langgraph dev` (the
in-memory LangGraph server) and calls the graph through LangGraph's own client (`langgraph_sdk`); it
needs `langgraph-cli[inmem]`, which this project does not install (it would downgrade protobuf and
grpcio under ray and wandb), so it runs where `MEMUPDATE_LANGGRAPH_BIN` names a `langgraph` executable
that has it, or one is on PATH, and is skipped otherwise. Real database and embedding model; the
heuristic policy.
"""

from __future__ import annotations

import importlib.util
import inspect
import json
import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest

from memupdate.store import MemoryStore, NewMemory

ROOT = Path(__file__).parent.parent
FACTS = ["Alice moved to Lisbon in 2021", "Alice moved to Lisbon in 2021.", "Alice works as a nurse at the city hospital"]


def served_module():
    """The module and factory `langgraph.json` names, loaded from the file as LangGraph's server loads it."""
    config = json.loads((ROOT / "langgraph.json").read_text())
    path, name = config["graphs"]["memory_editor"].rsplit(":", 1)
    spec = importlib.util.spec_from_file_location("served_graph", ROOT / path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module, getattr(module, name)


def test_the_config_names_a_factory_whose_graph_edits_a_bank(store: MemoryStore) -> None:
    module, factory = served_module()
    assert inspect.iscoroutinefunction(factory) and list(inspect.signature(factory).parameters) == ["config"]
    bank = store.scoped((*store.namespace, "served"))
    bank.create_many([NewMemory(text) for text in FACTS])
    graph = module.build_served_graph("heuristic", root=store)  # what make_graph builds, on the test database
    assert {"prepare", "edit"} <= set(graph.get_graph().nodes)
    final = graph.invoke({"namespace": bank.path})
    assert final["stop_reason"] == "model_stopped" and final["tool_counts"].get("merge_memory") == 1
    assert bank.count() == 2


def _langgraph_bin() -> str | None:
    found = os.environ.get("MEMUPDATE_LANGGRAPH_BIN") or shutil.which("langgraph")
    if not found:
        return None
    probe = subprocess.run([found, "dev", "--help"], capture_output=True, text=True, timeout=120)
    return found if probe.returncode == 0 and "--no-browser" in probe.stdout else None


@pytest.mark.slow
def test_langgraph_dev_serves_the_graph_to_langgraphs_client(store: MemoryStore) -> None:
    binary = _langgraph_bin()
    if binary is None:
        pytest.skip("no `langgraph` with the in-memory server (pip install 'langgraph-cli[inmem]' in a venv of its own)")
    from langgraph_sdk import get_sync_client

    bank = store.scoped((*store.namespace, "served"))
    bank.create_many([NewMemory(text) for text in FACTS])
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen([binary, "dev", "--config", "langgraph.json", "--no-browser", "--no-reload", "--port", str(port)],
                              cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        client = get_sync_client(url=f"http://127.0.0.1:{port}")
        deadline = time.monotonic() + 240
        while True:
            try:
                assistants = client.assistants.search(graph_id="memory_editor")
                break
            except Exception:
                assert server.poll() is None and time.monotonic() < deadline, "langgraph dev did not start"
                time.sleep(1)
        assert assistants and assistants[0]["graph_id"] == "memory_editor"
        final = client.runs.wait(None, "memory_editor", input={"namespace": bank.path},
                                 config={"configurable": {"policy": "heuristic"}})
        assert final["stop_reason"] == "model_stopped" and final["tool_counts"]["merge_memory"] == 1
        assert bank.count() == 2
    finally:
        server.terminate()
        server.wait(30)
