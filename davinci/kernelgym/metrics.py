"""Benchmark metrics over evaluation results: fast_p exactly as KernelBench defines it, tables, plots.

fast_p = (1/N) * #{i : correct_i and speedup_i > p}    (KernelBench `score.fastp`: strict >)
- N = `n_total` when given (e.g. 100 for level 1, so problems without a result count as failures),
  else the number of results;
- a result without a speedup (not timed) counts as a failure for every p: unscored is not scored;
- fast_0 is therefore the rate of correct *and timed* results.
`geomean_speedup` is the geometric mean over correct results with a speedup (KernelBench's
`geometric_mean_speed_ratio_correct_only`). Results may be `EvalResult`s or their `to_dict()` form.

    fast_p(results, 1.0)                       # vs eager
    fast_p(results, 1.0, baseline="compile")   # vs torch.compile
    rows = fast_p_table(results, n_total={1: 100, 2: 100, 3: 50}); print(format_table(rows))
    plot_fast_p(results, "fast_p.png")
"""

from __future__ import annotations

import math
from typing import Any, Iterable, Mapping, Sequence

P_VALUES = (0.0, 0.5, 0.8, 1.0, 1.5, 2.0)
BASELINE_FIELDS = {"eager": "speedup", "compile": "speedup_compile"}


def _get(r: Any, name: str) -> Any:
    return r.get(name) if isinstance(r, Mapping) else getattr(r, name, None)


def speedup_of(r: Any, baseline: str = "eager") -> float | None:
    if baseline not in BASELINE_FIELDS:
        from davinci.errors import UnknownName

        raise UnknownName("baseline", baseline, list(BASELINE_FIELDS))
    s = _get(r, BASELINE_FIELDS[baseline])
    return float(s) if s is not None else None


def fast_p(results: Sequence[Any], p: float, *, baseline: str = "eager", n_total: int | None = None) -> float:
    n = len(results) if n_total is None else n_total
    if n <= 0:
        return 0.0
    hits = 0
    for r in results:
        s = speedup_of(r, baseline)
        if _get(r, "correct") and s is not None and s > p:
            hits += 1
    return hits / n


def geomean_speedup(results: Iterable[Any], baseline: str = "eager") -> float | None:
    logs = [math.log(s) for r in results if _get(r, "correct") and (s := speedup_of(r, baseline)) and s > 0]
    return math.exp(sum(logs) / len(logs)) if logs else None


def fast_p_table(results: Sequence[Any], *, ps: Sequence[float] = P_VALUES,
                 baselines: Sequence[str] = ("eager", "compile"),
                 n_total: Mapping[int, int] | None = None) -> list[dict[str, Any]]:
    """One row per (level, baseline) plus an "all" row per baseline: N, correct, fast_p for each p, geomean."""
    levels = sorted({int(_get(r, "level") or 0) for r in results})
    groups: list[tuple[Any, list[Any], int]] = []
    for level in levels:
        rs = [r for r in results if int(_get(r, "level") or 0) == level]
        groups.append((level, rs, (n_total or {}).get(level, len(rs))))
    if len(levels) > 1:
        groups.append(("all", list(results), sum(g[2] for g in groups)))
    rows = []
    for level, rs, n in groups:
        for b in baselines:
            row: dict[str, Any] = {"level": level, "baseline": b, "n": n,
                                   "correct": sum(1 for r in rs if _get(r, "correct"))}
            for p in ps:
                row[f"fast_{p:g}"] = fast_p(rs, p, baseline=b, n_total=n)
            row["geomean_speedup"] = geomean_speedup(rs, b)
            rows.append(row)
    return rows


def format_table(rows: Sequence[Mapping[str, Any]]) -> str:
    """Markdown table of `fast_p_table` rows."""
    if not rows:
        return "(no results)"
    keys = list(rows[0].keys())
    def cell(v: Any) -> str:
        return f"{v:.3f}" if isinstance(v, float) else ("-" if v is None else str(v))
    lines = ["| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)]
    lines += ["| " + " | ".join(cell(row.get(k)) for k in keys) + " |" for row in rows]
    return "\n".join(lines)


def plot_fast_p(results: Sequence[Any], path: str | None = None, *, baselines: Sequence[str] = ("eager", "compile"),
                n_total: Mapping[int, int] | None = None, p_max: float = 3.0) -> Any:
    """fast_p as a function of p (0..p_max), one curve per level and baseline; writes a PNG if `path`."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    grid = [p_max * i / 60 for i in range(61)]
    fig, ax = plt.subplots(figsize=(6, 4))
    levels = sorted({int(_get(r, "level") or 0) for r in results})
    for level in levels:
        rs = [r for r in results if int(_get(r, "level") or 0) == level]
        n = (n_total or {}).get(level, len(rs))
        for b in baselines:
            ax.step(grid, [fast_p(rs, p, baseline=b, n_total=n) for p in grid], where="post",
                    label=f"level {level} vs {'torch.compile' if b == 'compile' else b}")
    ax.set_xlabel("speedup threshold p")
    ax.set_ylabel("fast_p")
    ax.set_ylim(0, 1.02)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    if path:
        fig.savefig(path, dpi=120)
    return fig
