"""A LangMem store written in plain English, kept true by `watch --once`: the newer statement of each
changed fact is the current one, facts that are both true both stay (two trips to one city included),
a paraphrased duplicate is merged, and the store's other facts are untouched.

Real parts: LangGraph's own PostgresStore in a database of its own on the test server, LangMem's
manage_memory tool, the embedded PostgreSQL, the packaged embedding model and the shipped local judge.
"""

from __future__ import annotations

import time

from langgraph_source import langgraph_store, remember

from memupdate.agent.background import BackgroundCompactor
from memupdate.store import MemoryStore

BEFORE = [
    "Ana lives in Paris",
    "Ana works at Acme Corp as an engineer",
    "Ana's favourite colour is blue",
    "Ana uses VS Code for her side projects",
    "Ana visited Rome in 2019",
    "Ana has a dog named Max",
    "Ana plays the piano",
]
AFTER = [
    "Ana moved to Berlin last month",
    "Ana quit Acme Corp and now works at Globex",
    "Ana's favourite colour is now green",
    "Ana switched from VS Code to Neovim",
    "Ana visited Rome in 2022",
    "Ana adopted a cat named Luna",
    "Ana is learning Japanese",
]
CHANGED = {"Ana lives in Paris": "Ana moved to Berlin last month",
           "Ana works at Acme Corp as an engineer": "Ana quit Acme Corp and now works at Globex",
           "Ana's favourite colour is blue": "Ana's favourite colour is now green",
           "Ana uses VS Code for her side projects": "Ana switched from VS Code to Neovim"}


def held(lg, user: str = "ana") -> set[str]:
    return {item.value["content"] for item in lg.search(("memories", user), limit=1000)}


def test_watch_once_keeps_a_plain_english_store_true(fresh_database, store: MemoryStore) -> None:
    with langgraph_store(fresh_database) as (url, lg):
        remember(lg, "ana", BEFORE)
        time.sleep(1.1)  # the app's write times order the statements, to the second
        remember(lg, "ana", AFTER)
        (done,) = BackgroundCompactor(store, url, prefix=("memories",), into=store.namespace).run_once()
        now = held(lg)

        def holds(text: str) -> bool:  # as written, or dated ("... last month (October 2026)")
            return any(t == text or t.startswith(text + " (") for t in now)

        for old, new in CHANGED.items():
            assert holds(new) and not holds(old), f"{old!r} -> {new!r}: the store holds {sorted(now)}"
        both_true = ["Ana visited Rome in 2019", "Ana visited Rome in 2022", "Ana has a dog named Max",
                     "Ana adopted a cat named Luna", "Ana plays the piano", "Ana is learning Japanese"]
        assert all(holds(t) for t in both_true), f"a true fact left the store: {sorted(now)}"
        assert len(now) == len(BEFORE) + len(AFTER) - len(CHANGED)
        assert done.applied, done.summary()
