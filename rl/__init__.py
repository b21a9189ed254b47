"""Evaluation and training. Inside it, imports point one way (`tests/test_layers.py`): `data/` at the
bottom, this folder's own modules above it, the learning pipeline (`distill/`) and verl's adapters (`verl/`)
on top.

Here: evaluation (`evaluate`, `memupdate eval`), one scored episode (`episode`), the forks crashed runs
left (`leftover_forks`), and the relation judge downstream: banks of labelled pairs compacted
(`relation_banks`), people's stores through one `watch --once` pass (`watch_eval`).
"""
