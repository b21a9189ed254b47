"""The bank's life over the store: changes proposed, applied and undone (`change_log`), and memories
imported from and exported to other stores and files (`sources`, `source_import`, `source_export`).

Depends on `memupdate.store` only; the agent and RL build on it.
"""
