"""The mean and the per-category summary every report uses."""

from __future__ import annotations

from memupdate.scoring.categories import ADVERSARIAL, MULTI_HOP, TEMPORAL
from memupdate.scoring.summaries import by_category, mean


def test_mean_reads_zero_for_nothing() -> None:
    assert mean([1.0, 0.0, 0.5]) == 0.5
    assert mean([]) == 0.0


def test_by_category_names_each_category_in_order_and_skips_empty_ones() -> None:
    rows = [(ADVERSARIAL, 1.0), (TEMPORAL, 0.25), (MULTI_HOP, 0.5), (TEMPORAL, 0.75), (9, 0.0)]
    summary = by_category(rows, lambda row: row[0], lambda selected: {"n": len(selected), "mean": mean([s for _, s in selected])})
    assert list(summary) == ["multi-hop", "temporal", "adversarial", "category-9"]
    assert summary["temporal"] == {"n": 2, "mean": 0.5}
    assert summary["adversarial"] == {"n": 1, "mean": 1.0}
