"""kernelgym throughput in process vs on a local Dask cluster: evaluations/min for each `gym.cluster`.

The batch: built-in problems' reference solutions (data_prep.builtin, Triton kernels that are correct by
construction), each problem `--reps` times. Every mode gets the same GymConfig with one lane per Evaluator
(`gym.workers=1`), so "local" is one lane in this process, "local-dask:N" is N worker processes with one
lane each; "local/2 lanes" (`gym.workers=2` in process) is the in-process way to use two lanes, for
comparison. Per mode: the cold batch (lane starts, and the cluster's start for local-dask) and then the
same batch again on the warm lanes; evaluations/min is of the warm batch. The last column says whether
the mode's verdicts (correct, flags, error_kind) equal the first mode's, item by item.

    PYTHONPATH=. python benchmarks/kernelgym_cluster_bench.py                    # CPU, ~5 min on 2 cores
    PYTHONPATH=. python benchmarks/kernelgym_cluster_bench.py --device cuda --modes local local-dask:8
    ... --out benchmarks/results/cpu/kernelgym_cluster/kernelgym_cluster_bench.txt
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import platform
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from davinci.kernelgym import GymConfig, close_shared, evaluate_batch  # noqa: E402
from davinci.types import Candidate, Problem  # noqa: E402

PROBLEMS = ["relu", "gelu_tanh", "swish", "sum_dim", "softmax", "silu_mul"]
MODES = ["local", "local/2 lanes", "local-dask:1", "local-dask:2"]


def batch(names: list[str], reps: int) -> list[tuple[Problem, Candidate]]:
    from data_prep.builtin import builtin_problems

    by_name = {p.name: p for p in builtin_problems()}
    missing = sorted(set(names) - set(by_name))
    if missing:
        raise SystemExit(f"unknown built-in problem(s) {missing}; choose from {sorted(by_name)}")
    chosen = [by_name[n] for n in names]
    return [(p, Candidate(problem_id=p.id, code=p.reference_solution or "", backend="triton"))
            for _ in range(reps) for p in chosen]


def base_config(device: str, cache_dir: str) -> GymConfig:
    """Short CPU timing (the tests' settings); the GPU keeps the default timing rule."""
    fast = dict(timing_min_reps=3, timing_max_reps=8, timing_max_s=0.5) if device == "cpu" else {}
    return GymConfig(device=device, workers=1, cache_dir=cache_dir, **fast)  # type: ignore[arg-type]


def mode_config(base: GymConfig, mode: str) -> GymConfig:
    if mode == "local/2 lanes":
        return dataclasses.replace(base, workers=2)
    return dataclasses.replace(base, cluster=mode)


def run_mode(items: list[tuple[Problem, Candidate]], config: GymConfig) -> dict:
    from davinci.kernelgym.cluster import close_clients

    t0 = time.monotonic()
    evaluate_batch(items, config, seed=0)
    cold = time.monotonic() - t0
    t0 = time.monotonic()
    results = evaluate_batch(items, config, seed=1)
    warm = time.monotonic() - t0
    close_shared()
    if config.cluster != "local":
        close_clients(config.cluster)
    return {"cold_s": cold, "warm_s": warm, "per_min": 60 * len(items) / warm,
            "verdicts": [(r.correct, r.flags, r.error_kind) for r in results],
            "correct": sum(r.correct for r in results)}


def table(rows: list[list[object]], header: list[str]) -> str:
    cells = [header] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    lines = ["| " + " | ".join(c.ljust(w) for c, w in zip(r, widths)) + " |" for r in cells]
    lines.insert(1, "|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--problems", nargs="*", default=PROBLEMS, help="built-in problem names")
    ap.add_argument("--reps", type=int, default=2, help="copies of each problem in the batch")
    ap.add_argument("--modes", nargs="*", default=MODES, help="gym.cluster values, or 'local/2 lanes'")
    ap.add_argument("--cache-dir", default="/tmp/kernelgym-cluster-bench", help="gym.cache_dir of every mode")
    ap.add_argument("--out", default="", help="also write the table to this file")
    args = ap.parse_args()
    items = batch(args.problems, args.reps)
    base = base_config(args.device, args.cache_dir)
    rows, first = [], None
    for mode in args.modes:
        res = run_mode(items, mode_config(base, mode))
        first = first or res["verdicts"]
        rows.append([mode, len(items), f"{res['cold_s']:.1f}", f"{res['warm_s']:.1f}", f"{res['per_min']:.1f}",
                     f"{res['correct']}/{len(items)}", "yes" if res["verdicts"] == first else "NO"])
        print(f"{mode}: {rows[-1]}", flush=True)
    head = (f"kernelgym_cluster_bench: device {args.device}, {platform.processor() or platform.machine()}, "
            f"{os.cpu_count()} cores; problems {', '.join(args.problems)} x {args.reps}; gym.workers=1 per Evaluator")
    text = head + "\n\n" + table(rows, ["mode", "evals", "cold batch s", "warm batch s", "evals/min (warm)",
                                        "correct", "same verdicts"])
    print("\n" + text)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
