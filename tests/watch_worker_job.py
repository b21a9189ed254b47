"""A `memupdate watch` worker over memupdate's own banks that stops at one step of its first bank and
waits there, holding the bank, until it is killed (tests/test_watch_workers.py SIGKILLs it):

    python tests/watch_worker_job.py DATABASE_URL PATH STEP [BATCH]

PATH is a bank path (the banks under it are the pass's), STEP one of BackgroundCompactor's steps
(claimed, compact, propose, apply), BATCH its CLAIM_BATCH (2 by default: it holds its first two banks,
`claim_batches`, not all of them). It prints `holding BANK` when it gets there, then sleeps.
"""

from __future__ import annotations

import sys
import time

from memupdate.agent import background
from memupdate.agent.background import BackgroundCompactor
from memupdate.store import MemoryStore, to_namespace
from memupdate.store.database import get_engine
from memupdate.store.embeddings import get_embedder


def main(database_url: str, path: str, step: str, batch: str = "2") -> None:
    background.CLAIM_BATCH = int(batch)
    root = MemoryStore(get_engine(database_url), get_embedder(), to_namespace(path))

    def hold_at(name: str, bank: str) -> None:
        if name == step:
            print(f"holding {bank}", flush=True)
            time.sleep(600)

    BackgroundCompactor(root, path, on_step=hold_at).run_once()
    print("finished without reaching the step", flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:])
