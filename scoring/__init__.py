"""How an edit is scored, below its users (the agent, evaluation and training).

- The QA proxy (`qa_proxy`) and its before -> after on a bank (`qa_change`); what the reward computes
  from a base, kept while its version holds (`base_cache`).
- The reward (`reward`), restated plainly in its executable specification (`reward_spec`). **Add a reward
  term here.**
- Faithfulness (`faithfulness`); LoCoMo's metrics and the benchmark's exact match (`metrics`); questions
  and categories (`questions`, `categories`); the means every report takes (`summaries`).
- The reader/answerer and judge (`answerer`, `readers`, `hf_reader`, `answer_prompts`, `answer_report`)
  and their reply cache (`llm_cache`).

How an episode is scored: docs/scoring.md.
"""
