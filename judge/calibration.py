"""How far the local judge's confidence can be trusted: its reliability on held-out pairs, the softmax
temperature that fits it, and the auto-apply threshold a supersession must reach.

    from memupdate.judge.calibration import reliability, plot_reliability
    bins = reliability(confidences, correct)         # [(low, high, pairs, mean confidence, accuracy), ...]
    plot_reliability(bins, "docs/relations-reliability.png", threshold=0.93)
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

EDGES = (0.0, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.99, 1.0001)


def reliability(confidences: Sequence[float], correct: Sequence[bool], edges: Sequence[float] = EDGES) -> list[tuple]:
    """Per confidence bin: (low, high, pairs, mean confidence, accuracy); empty bins left out."""
    rows = []
    for low, high in zip(edges, edges[1:], strict=False):
        inside = [(c, ok) for c, ok in zip(confidences, correct, strict=True) if low <= c < high]
        if inside:
            rows.append((low, min(high, 1.0), len(inside), sum(c for c, _ in inside) / len(inside),
                         sum(ok for _, ok in inside) / len(inside)))
    return rows


def plot_reliability(rows: Sequence[tuple], out: str | Path, *, threshold: float | None = None, title: str = "") -> Path:
    """The reliability curve (accuracy against confidence, the diagonal for reference) as a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(5, 4.2))
    axis.plot([0, 1], [0, 1], color="grey", linestyle=":", label="perfect calibration")
    axis.plot([r[3] for r in rows], [r[4] for r in rows], marker="o", label="local judge")
    for r in rows:
        axis.annotate(str(r[2]), (r[3], r[4]), textcoords="offset points", xytext=(4, -10), fontsize=7)
    if threshold is not None:
        axis.axvline(threshold, color="tab:red", linestyle="--", label=f"auto-apply threshold {threshold:.2f}")
    axis.set(xlabel="confidence of the verdict", ylabel="share right", xlim=(0.3, 1.0), ylim=(0.0, 1.02), title=title)
    axis.legend(loc="lower right", fontsize=8)
    figure.tight_layout()
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(out, dpi=110)
    plt.close(figure)
    return out
