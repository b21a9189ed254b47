"""An app writing its memories through LangMem's tool into LangGraph's PostgresStore, from a process of
its own (tests/test_watch_live.py runs it beside the compactor):

    python tests/langmem_app_job.py URL USER '[{"action": "update", "id": "...", "content": "..."}, ...]'
    python tests/langmem_app_job.py URL USER --loop 40 OUT.json    # 40 writes, the final state to OUT.json

Prints (or writes) JSON: the keys it created, and with --loop what each of its items should hold at the
end (`null`: deleted).
"""

from __future__ import annotations

import json
import random
import sys
import time
from pathlib import Path

from langgraph.store.postgres import PostgresStore
from langgraph_source import langmem_tool  # beside this file: on sys.path when run as a script


def run(store, user: str, actions: list[dict]) -> list[str]:
    created = []
    for action in actions:
        reply = langmem_tool(store, action.pop("action"), user, **action)
        if reply.startswith("created"):
            created.append(reply.rsplit(" ", 1)[-1])
    return created


def loop(store, user: str, n: int, out: Path) -> None:
    """Creates (some near-duplicates, so the compactor has merges to make), updates and deletes of its
    own items, at random, with short pauses: what a chat app does while a compaction runs."""
    rng = random.Random(7)
    final: dict[str, str | None] = {}
    for i in range(n):
        live = [k for k, v in final.items() if v is not None]
        roll = rng.random()
        if live and roll < 0.2:
            key = rng.choice(live)
            final[key] = f"Alice changed her mind about thing {i}"
            langmem_tool(store, "update", user, id=key, content=final[key])
        elif live and roll < 0.3:
            key = rng.choice(live)
            langmem_tool(store, "delete", user, id=key)
            final[key] = None
        else:
            text = f"Alice visited museum number {i // 2} in Porto" + ("." if i % 2 else "")
            key = langmem_tool(store, "create", user, content=text).rsplit(" ", 1)[-1]
            final[key] = text
        time.sleep(rng.uniform(0.0, 0.05))
    out.write_text(json.dumps(final))


if __name__ == "__main__":
    url, user = sys.argv[1], sys.argv[2]
    with PostgresStore.from_conn_string(url) as store:
        if sys.argv[3] == "--loop":
            loop(store, user, int(sys.argv[4]), Path(sys.argv[5]))
        else:
            print(json.dumps(run(store, user, json.loads(sys.argv[3]))))
