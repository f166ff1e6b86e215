"""Small matplotlib plots that tasks write as PNG files (logged to MLflow by the flows). Agg backend, no display.

- `line_plot`: series over steps or epochs; `integer_x=True` keeps ticks on whole numbers (epochs).
- `bar_plot`: one bar per named item (per-problem speedups), labels on the axis, a reference line.
- `paired_bars_plot`: per metric a before and an after bar, the after bar with the 95% CI of the paired
  difference drawn around it (before + CI), and the difference written above it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Sequence


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig: Any, path: Path) -> Path:
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    _pyplot().close(fig)
    return path


def line_plot(path: Path, series: Mapping[str, Sequence[tuple[float, float]]], title: str, xlabel: str, ylabel: str,
              integer_x: bool = False) -> Path:
    from matplotlib.ticker import MaxNLocator

    fig, ax = _pyplot().subplots(figsize=(6, 3.5), dpi=120)
    for name, points in series.items():
        if points:
            xs, ys = zip(*points)
            ax.plot(xs, ys, label=name, linewidth=1.5, marker="o" if len(points) < 20 else None)
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    if integer_x:
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    if len(series) > 1:
        ax.legend(fontsize=8)
    return _save(fig, path)


def bar_plot(path: Path, bars: Sequence[tuple[str, float]], title: str, ylabel: str, reference: float | None = 1.0) -> Path:
    """One bar per (label, value); a dashed line at `reference` (speedup 1 = as fast as the baseline)."""
    fig, ax = _pyplot().subplots(figsize=(max(4.0, 0.6 * len(bars) + 1.5), 3.8), dpi=120)
    labels = [label for label, _ in bars]
    ax.bar(range(len(bars)), [value for _, value in bars], color="#4C72B0")
    ax.set_xticks(range(len(bars)), labels, rotation=45 if len(bars) > 3 else 0, ha="right" if len(bars) > 3 else "center",
                  fontsize=8)
    if reference is not None:
        ax.axhline(reference, color="gray", linestyle="--", linewidth=1)
    ax.set_title(title)
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3, axis="y")
    return _save(fig, path)


def paired_bars_plot(path: Path, scores: Sequence[tuple[str, float, float, float, float]], labels: tuple[str, str],
                     title: str) -> Path:
    """Bars per (metric, before, after, diff CI low, diff CI high); the error bar is before + the CI of the difference."""
    fig, ax = _pyplot().subplots(figsize=(max(4.0, 2.2 * len(scores) + 1.5), 3.8), dpi=120)
    for i, (metric, before, after, lo, hi) in enumerate(scores):
        ax.bar(3 * i, before, color="#8C8C8C", label=labels[0] if i == 0 else None)
        ax.bar(3 * i + 1, after, color="#4C72B0", label=labels[1] if i == 0 else None)
        ax.errorbar([3 * i + 1], [after], yerr=[[max(0.0, after - (before + lo))], [max(0.0, before + hi - after)]],
                    color="black", capsize=6)
        ax.text(3 * i + 1, min(1.02, after + 0.05), f"{after - before:+.2f} [{lo:+.2f}, {hi:+.2f}]", ha="center", fontsize=8)
    ax.set_xticks([3 * i + 0.5 for i in range(len(scores))], [s[0] for s in scores])
    ax.set_ylim(0, 1.12)
    ax.set_ylabel("share of held-out problems")
    ax.set_title(title)
    ax.grid(alpha=0.3, axis="y")
    ax.legend(fontsize=8)
    return _save(fig, path)
