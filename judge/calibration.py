"""How far the local judge's confidence can be trusted: its reliability on held-out pairs, the softmax
temperature that fits it, and the auto-apply threshold a supersession must reach.

    from memupdate.judge.calibration import reliability, plot_reliability, bound_curve, plot_bound
    bins = reliability(confidences, correct)         # [(low, high, pairs, mean confidence, accuracy), ...]
    plot_reliability(bins, "docs/relations-reliability.png", threshold=0.93)
    rows = bound_curve(banks, verdicts, judge.auto_apply)   # what applies itself at each model-update bound
    plot_bound(rows, reports, "docs/relations-bound.png", bound=judge.auto_apply.update)

`bound_curve` is the curve behind a missed target: how many natural updates would apply themselves at a
lower bound, and which sources' true pairs would then be superseded (`eval relations --store-view --plot`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np

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
    return _saved(figure, out)


def bound_curve(banks: Sequence, verdicts: Sequence, auto, bounds: Sequence[float] | None = None) -> list[dict]:
    """At each model-update bound in `bounds` (default: `auto`'s own and 40 quantiles of the model updates
    read at 0.95 or more, where the readings crowd; `auto`'s other thresholds kept), what the decision does
    by itself to every pair that meets in `banks` (`judge.store_view.StoreBank`s, read as `verdicts`):
    natural updates resolved by themselves (of how many), wrong applies per source, and true statements
    retired."""
    from memupdate.judge.store_view import NATURAL, store_view

    if bounds is None:
        read = [v.confidence for v in verdicts if v.relation == "update" and not v.by_rule and v.confidence >= 0.95]
        bounds = sorted({auto.update, *(np.quantile(read, np.linspace(0, 1, 40)).round(5).tolist() if read else [])}, reverse=True)
    rows = []
    for bound in bounds:
        reports = store_view(None, banks, auto_apply=replace(auto, update=float(bound)), verdicts=verdicts)
        rows.append({"bound": round(float(bound), 6),
                     "natural": sum(r.updates_applied for s, r in reports.items() if s in NATURAL),
                     "natural_updates": sum(r.updates for s, r in reports.items() if s in NATURAL),
                     "wrong": {s: r.applied - r.applied_right for s, r in reports.items() if r.applied > r.applied_right},
                     "retired": sum(len(r.retired) for r in reports.values())})
    return rows


def precision_recall(scored: Sequence[tuple[float, bool]]) -> tuple[list[float], list[float]]:
    """The precision-recall curve of `scored` ((score, positive) pairs), one point per rank."""
    ranked = sorted(scored, key=lambda s: -s[0])
    positives = sum(ok for _, ok in ranked)
    recall, precision, hits = [], [], 0
    for count, (_, ok) in enumerate(ranked, 1):
        hits += ok
        recall.append(hits / max(1, positives))
        precision.append(hits / count)
    return recall, precision


def plot_bound(rows: Sequence[dict], reports: dict, out: str | Path, *, bound: float, title: str = "") -> Path:
    """Two panels as a PNG: `bound_curve`'s rows (natural updates by themselves and wrong applies per
    source against the model-update bound, the judge's own marked) and each source's precision-recall
    curve of "update" against "both true" (`reports`: `judge.store_view.store_view`'s, its area in the
    legend)."""
    import matplotlib
    import matplotlib.ticker

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (left, right) = plt.subplots(1, 2, figsize=(11, 4.4))
    x = [max(1 - r["bound"], 1e-5) for r in rows]  # a bound of 1 (the rule's) drawn at 1e-5
    total = max(1, rows[0]["natural_updates"]) if rows else 1
    left.plot(x, [r["natural"] / total for r in rows], color="tab:blue", marker=".", label=f"natural updates by themselves (of {total})")
    left.set(xscale="log", xlabel="1 - the bound a model update must reach", ylabel="share of natural updates", ylim=(0, 1), title=title)
    left.axvline(max(1 - bound, 1e-5), color="tab:red", linestyle="--", label=f"the judge's bound {bound:.4f}")
    wrong_axis = left.twinx()
    sources = sorted({s for r in rows for s in r["wrong"]}, key=lambda s: -max(r["wrong"].get(s, 0) for r in rows))[:5]
    for source in sources:
        wrong_axis.plot(x, [r["wrong"].get(source, 0) for r in rows], linestyle=":", marker=".", label=f"wrong applies: {source}")
    wrong_axis.plot(x, [r["retired"] for r in rows], color="black", linewidth=1, label="true statements retired")
    wrong_axis.set(ylabel="pairs", yscale="symlog")
    handles = left.get_legend_handles_labels()[0] + wrong_axis.get_legend_handles_labels()[0]
    left.legend(handles, [h.get_label() for h in handles], loc="lower right", fontsize=6.5)
    left.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    for source, report in sorted(reports.items()):
        if report.update_ap is None or not any(ok for _, ok in report.scored):
            continue
        recall, precision = precision_recall(report.scored)
        right.plot(recall, precision, label=f"{source} AP {report.update_ap:.2f} (base {report.base_rate:.2f})")
    right.set(xlabel="recall of updates", ylabel="precision against both-true pairs", xlim=(0, 1), ylim=(0, 1.02),
              title="update against both true, by the chance of a change")
    right.legend(loc="lower left", fontsize=7)
    return _saved(figure, out)


def _saved(figure, out: str | Path) -> Path:
    """`figure` written to `out` (a PNG; its folder made) and closed."""
    import matplotlib.pyplot as plt

    figure.tight_layout()
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(out, dpi=110)
    plt.close(figure)
    return out
