"""Small matplotlib plots that tasks write as PNG files (logged to MLflow by the flows). Agg backend, no display."""

from __future__ import annotations

from pathlib import Path
from typing import Mapping, Sequence


def line_plot(path: Path, series: Mapping[str, Sequence[tuple[float, float]]], title: str, xlabel: str, ylabel: str) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5), dpi=120)
    for name, points in series.items():
        if points:
            xs, ys = zip(*points)
            ax.plot(xs, ys, label=name, linewidth=1.5)
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    if len(series) > 1:
        ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path
