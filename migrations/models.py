"""Every table memupdate's migrations create, on one metadata: each layer declares its own tables on
the store's `Base` where it uses them, and importing this module loads them all.

    from memupdate.migrations.models import metadata
    metadata.tables.keys()   # memories, memory_events, memory_sources, memory_changes, superseded_memories, watch_claims, llm_replies

`migrations/env.py` (`alembic check`, autogenerate) and `memupdate.migrations.schema.drift` compare this
metadata with the database: a table left out here would be neither checked nor created by autogenerate.
"""

from memupdate.bank import models as bank_models
from memupdate.scoring import llm_cache
from memupdate.store.models import Base

metadata = Base.metadata
# The modules that declare tables on `Base`, named so importing them is not an unused import.
TABLE_MODULES = (bank_models, llm_cache)
