"""The agent that edits a memory bank.

- The six tools (`tools`: plain functions over a namespace, shared with verl), the prompts (`prompts`),
  the LangGraph graph (`graph`; served by `langgraph.json` through `served`).
- **Compaction** (`compaction`: `compact()`, the one function `memupdate compact`, the watcher and the
  learning run call).
- The background compactor (`background`) and its safety rule (`safety`).
- The policies, in `policies/`: **add a policy there** (its module and one entry of its registry,
  `POLICIES`).
"""
