"""The learning demonstration's held-out contrasts pooled over independent runs (other seeds, other problems).

Reads each run's `per_problem.jsonl` (written by `benchmarks/gpu/learning_demo.py`: per held-out problem, the
greedy score of the SFT start `before`, of RL `rl`, of continued SFT `sft`, and the sampled share of each under
`*_sampled`) and prints, per contrast and scoring, each run's paired bootstrap CI and the pooled one
(`davinci.agents.evaluation.stratified_paired_bootstrap_ci`: problems resampled within each run). The runs must
share one protocol; pooling is for runs declared as seeds of it (`benchmarks/results/h200x2/learning_300b/README.md`).

    .venv/bin/python benchmarks/learning_pool.py RUN_DIR [RUN_DIR ...]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from davinci.agents.evaluation import paired_bootstrap_ci, stratified_paired_bootstrap_ci  # noqa: E402
from davinci.errors import DavinciError, InputNotFound, MalformedInput  # noqa: E402
from davinci.jsonl import read_jsonl  # noqa: E402

# (label, before column, after column): the contrasts the demonstration reports
CONTRASTS = [("RL - before", "before", "rl"), ("continued SFT - before", "before", "sft"),
             ("RL - continued SFT", "sft", "rl")]


def load_run(folder: Path) -> list[dict]:
    path = folder / "per_problem.jsonl"
    if not path.is_file():
        raise InputNotFound(f"{path} does not exist: pass the folders of finished learning runs (each holds the "
                        "per_problem.jsonl that learning_demo.py writes)")
    rows = read_jsonl(path)
    missing = {c + s for _, b, a in CONTRASTS for c in (b, a) for s in ("", "_sampled")} - set(rows[0] if rows else {})
    if not rows or missing:
        raise MalformedInput(f"{path}: no rows, or rows without {sorted(missing)}: not a learning_demo.py per_problem.jsonl")
    return rows


def pairs(rows: list[dict], before: str, after: str) -> tuple[list[float], list[float]]:
    return [float(r[before]) for r in rows], [float(r[after]) for r in rows]


def table(runs: dict[str, list[dict]]) -> list[str]:
    lines = [f"{'contrast':<24}{'scoring':<9}" + "".join(f"{Path(name).name[:26]:>28}" for name in runs) + f"{'pooled':>28}"]
    for label, before, after in CONTRASTS:
        for scoring, suffix in (("greedy", ""), ("sampled", "_sampled")):
            strata = [pairs(rows, before + suffix, after + suffix) for rows in runs.values()]
            cells = [paired_bootstrap_ci(b, a) for b, a in strata] + [stratified_paired_bootstrap_ci(strata)]
            lines.append(f"{label:<24}{scoring:<9}" + "".join(f"{d:+.3f} [{lo:+.3f}, {hi:+.3f}]".rjust(28)
                                                               for d, lo, hi in cells))
    lines.append("held-out problems: " + ", ".join(f"{name}: {len(rows)}" for name, rows in runs.items())
                 + f"; pooled {sum(len(r) for r in runs.values())}")
    return lines


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("runs", nargs="+", type=Path, help="folders of finished runs, each with per_problem.jsonl")
    args = ap.parse_args(argv)
    try:
        runs = {str(folder): load_run(folder) for folder in args.runs}
    except DavinciError as exc:
        raise SystemExit(f"error: {exc}") from None
    print("\n".join(table(runs)))


if __name__ == "__main__":
    main()
