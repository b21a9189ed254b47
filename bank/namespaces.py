"""Where a bank's proposed change is built: a fork under the bank, named after the change's id.

    from memupdate.bank.namespaces import bank_exists, banks_under, compaction_namespace

    compaction_namespace(("locomo", "conv-26"), 7)   # ("locomo", "conv-26", "compaction", "c7")
    bank_exists(engine, "locomo/conv-62")            # False: no memories, events or changes were ever there
    banks_under(engine, "imported/memories")         # True: a bank at or under that path exists

`memupdate compact` forks the bank there, proposes the fork as change 7, and `apply`/`discard` drop it.
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import Engine, select

from memupdate.bank.models import MemoryChange
from memupdate.store import Namespace, memory_counts, namespace_exists, to_namespace

# The label between a bank and the forks its compactions propose.
COMPACTION_LABEL = "compaction"


def compaction_namespace(bank: Sequence[str] | str, change_id: int) -> Namespace:
    """The fork a compaction of `bank` proposed as change `change_id` is built in."""
    return to_namespace((*to_namespace(bank), COMPACTION_LABEL, f"c{change_id}"))


def bank_exists(engine: Engine, path: str) -> bool:
    """Whether `path` holds memories or ever did: a row, an event or a change of its own."""
    if namespace_exists(engine, path):
        return True
    changes = MemoryChange.__table__
    with engine.connect() as conn:
        return conn.execute(select(changes.c.namespace).where(changes.c.namespace == path).limit(1)).first() is not None


def banks_under(engine: Engine, path: str) -> bool:
    """Whether a bank exists at `path` or under it (memories now, or changes of its own once)."""
    if bank_exists(engine, path):
        return True
    changes = MemoryChange.__table__
    pattern = path.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "/%"
    with engine.connect() as conn:
        if conn.execute(select(changes.c.namespace).where(changes.c.namespace.like(pattern)).limit(1)).first() is not None:
            return True
    return any(namespace.startswith(path + "/") for namespace in memory_counts(engine))
