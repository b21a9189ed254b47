"""The bottom of `rl/`: the data the rest of it reads (`tests/test_layers.py` checks nothing here imports above).

- LoCoMo's records (`conversation`) and file reader (`locomo`); FactConsolidation's rows and banks
  (`factconsolidation`); the banks' namespaces (`namespaces`); ingestion (`ingest`); the shipped sample.
- The relation judge's pairs and people's stores from every source (`relations`; everyday pairs written
  from templates, `generated_relations`); the relation task's banks and units (`relation_units`) and its
  reward table, one typed row a unit and its one reader (`relation_rewards`).
- verl's parquet: targeted and compaction rows (`preprocess`; which units become compaction rows is the
  learner's, `rl.distill.compaction.preprocess_compaction`), relation rows (`relation_rows`).
"""
