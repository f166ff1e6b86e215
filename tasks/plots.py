"""Small matplotlib plots that tasks write as PNG files (logged to MLflow by the flows). Agg backend, no display.

- `line_plot`: series over steps or epochs; `integer_x=True` keeps ticks on whole numbers (epochs).
- `bar_plot`: one bar per named item (per-problem speedups), labels on the axis, a reference line.
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
