"""What every report averages: the mean, and one summary per LoCoMo category.

    from memupdate.scoring.summaries import by_category, mean
    mean([1.0, 0.0, 0.5])      # 0.5
    mean([])                   # 0.0: an empty report reads 0, not a ZeroDivisionError
    interval([0.1, -0.05, 0.2])  # {"n": 3, "mean": ..., "low": ..., "high": ...}: the 95% interval of the mean
    by_category(rows, lambda row: row["category"], summarise)
    # {"multi-hop": summarise(its rows), "temporal": summarise(its rows), ...}, in category order

The eval report (`rl/evaluate.py`) and the answerer's report summarise per category with it, and
distillation's summaries average with `mean`, so they agree on what an average and a category block are.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

from memupdate.scoring.categories import category_name

Item = TypeVar("Item")


def mean(values: Sequence[float]) -> float:
    """The arithmetic mean of `values`, 0.0 when there are none."""
    return float(sum(values) / len(values)) if values else 0.0


def interval(values: Sequence[float]) -> dict[str, Any]:
    """Mean and its 95% interval (normal approximation over the per-question values)."""
    n = len(values)
    centre = mean(values)
    half = 1.96 * statistics.stdev(values) / math.sqrt(n) if n > 1 else 0.0
    return {"n": n, "mean": round(centre, 5), "low": round(centre - half, 5), "high": round(centre + half, 5)}


def by_category(
    items: Iterable[Item], category_of: Callable[[Item], int], summarise: Callable[[list[Item]], dict[str, Any]]
) -> dict[str, dict[str, Any]]:
    """`summarise` of each category's items, keyed by the category's name (`"temporal"`), in category order;
    categories with no item are left out."""
    groups: dict[int, list[Item]] = defaultdict(list)
    for item in items:
        groups[category_of(item)].append(item)
    return {category_name(number): summarise(groups[number]) for number in sorted(groups)}
