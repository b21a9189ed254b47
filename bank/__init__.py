"""A bank's life over the store.

- The review of a compaction: `review` builds it (changes, kinds, coverage, how the judge reads each
  pair), its typed records, read by attribute, are in `review_records`, its page in `review_html`.
- Changes proposed, applied and undone with superseded rows (`change_log`; its tables in `models`), and
  the review queue (`review_queue`).
- Import and export through the registry of source kinds (`source_kinds`: LangGraph's store,
  `langgraph_source`; files, `file_source`), the import and export shared (`source_import`,
  `source_export`, `sources`); what a kind reports, below both, in `source_reports`. **Add a source
  here**: its module, one entry of `SOURCE_MODULES`, a migration for its name.
- A live store kept in step (`live_sync`).

Depends on the layers below it (`store`, `text`, `judge`); the scoring, the agent and RL build on it.
"""
