"""The bank's life over the store: changes proposed, applied and undone (`change_log`), and memories
imported from and exported to other stores and files: each kind of source a module registered in
`source_kinds` (`langgraph_source`, `file_source`), the import and export shared (`source_import`,
`source_export`, `sources`).

Depends on `memupdate.store` only; the agent and RL build on it.
"""
