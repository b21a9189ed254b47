"""LoCoMo's question categories, numbered as LoCoMo's own evaluation code numbers them: the one definition
the loader, the scoring and the reports read.

    from memupdate.scoring.categories import ADVERSARIAL, category_name
    category_name(2)     # "temporal"
    category_name(9)     # "category-9"
"""

# LoCoMo's own evaluation code numbers the QA categories this way.
MULTI_HOP, TEMPORAL, OPEN_DOMAIN, SINGLE_HOP, ADVERSARIAL = 1, 2, 3, 4, 5
CATEGORY_NAMES: dict[int, str] = {
    MULTI_HOP: "multi-hop",
    TEMPORAL: "temporal",
    OPEN_DOMAIN: "open-domain",
    SINGLE_HOP: "single-hop",
    ADVERSARIAL: "adversarial",
}
def category_name(category: int) -> str:
    """Name of a QA category (``"temporal"`` for 2); unknown numbers give ``"category-N"``."""
    return CATEGORY_NAMES.get(category, f"category-{category}")
