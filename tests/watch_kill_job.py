"""A `memupdate watch` pass that SIGKILLs itself at one step (tests/test_watch_live.py runs it):

    python tests/watch_kill_job.py DATABASE_URL LANGGRAPH_URL ROOT STEP

ROOT is the bank root (`--into`), STEP one of BackgroundCompactor's steps (compact, propose, apply,
export, export-commit, exported). The process dies there as a killed server process would: no
`finally`, no rollback sent, no cleanup.
"""

from __future__ import annotations

import os
import signal
import sys

from memupdate.agent.background import BackgroundCompactor, CompactorSettings
from memupdate.store import MemoryStore, to_namespace
from memupdate.store.database import get_engine
from memupdate.store.embeddings import get_embedder


def main(database_url: str, langgraph_url: str, root: str, step: str) -> None:
    store = MemoryStore(get_engine(database_url), get_embedder(), to_namespace(root))

    def kill_at(name: str, bank: str) -> None:
        if name == step:
            print(f"killed at {step}", flush=True)
            os.kill(os.getpid(), signal.SIGKILL)

    BackgroundCompactor(store, langgraph_url, CompactorSettings(prefix=("memories",), into=store.namespace), on_step=kill_at).run_once()
    print("finished without reaching the step", flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:])
