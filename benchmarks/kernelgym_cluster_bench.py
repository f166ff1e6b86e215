"""kernelgym throughput in process vs on a local Dask cluster: evaluations/min for each `gym.cluster`.

The batch: built-in problems' reference solutions (data_prep.builtin, Triton kernels that are correct by
construction), each problem `--reps` times. Every mode gets the same GymConfig with one lane per Evaluator
(`gym.workers=1`), so "local" is one lane in this process, "local-dask:N" is N worker processes with one
lane each; "local/2 lanes" (`gym.workers=2` in process) is the in-process way to use two lanes, for
comparison. Per mode: the cold batch (lane starts, and the cluster's start for local-dask) and then the
same batch again on the warm lanes; evaluations/min is of the warm batch. The last column says whether
the mode's verdicts (correct, flags, error_kind) equal the first mode's, item by item.

Issue 14's one-GPU throughput target (>= 120 evaluations/min on the 23 built-in solutions x 3, next to the
code of 2b81f5a): `--problems all --reps 3 --cold-reps 1 --modes local "local/2 lanes" "local/4 lanes"`,
once with this tree and once with `--tree .gpu/old` (any tree with `evaluate_batch` and
`data_prep.builtin`; the cluster modes need this tree's `gym.cluster`). `--cold-reps 1` makes the cold
pass one copy of each problem (lane starts, compiles, baselines), so the timed warm batch is the one that
counts and the run stays short.

    PYTHONPATH=. python benchmarks/kernelgym_cluster_bench.py                    # CPU, ~5 min on 2 cores
    PYTHONPATH=. python benchmarks/kernelgym_cluster_bench.py --device cuda --modes local local-dask:8
    ... --out benchmarks/results/cpu/kernelgym_cluster/kernelgym_cluster_bench.txt
    ... --device cuda --problems all --reps 3 --cold-reps 1 --modes local "local/4 lanes" --tree .gpu/old
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import platform
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

PROBLEMS = ["relu", "gelu_tanh", "swish", "sum_dim", "softmax", "silu_mul"]
MODES = ["local", "local/2 lanes", "local-dask:1", "local-dask:2"]
LANES = re.compile(r"local/(\d+) lanes?")


def batch(names: list[str], reps: int) -> list[tuple[Any, Any]]:
    """(Problem, Candidate) pairs: each named built-in problem's reference solution, `reps` copies ("all": every one)."""
    from data_prep.builtin import builtin_problems
    from davinci.types import Candidate

    by_name = {p.name: p for p in builtin_problems()}
    names = sorted(by_name) if names == ["all"] else names
    missing = sorted(set(names) - set(by_name))
    if missing:
        raise SystemExit(f"unknown built-in problem(s) {missing}; choose from {sorted(by_name)}")
    chosen = [by_name[n] for n in names]
    return [(p, Candidate(problem_id=p.id, code=p.reference_solution or "", backend="triton"))
            for _ in range(reps) for p in chosen]


def base_config(device: str, cache_dir: str) -> Any:
    """Short CPU timing (the tests' settings); the GPU keeps the default timing rule."""
    from davinci.kernelgym import GymConfig

    fast = dict(timing_min_reps=3, timing_max_reps=8, timing_max_s=0.5) if device == "cpu" else {}
    if "dedup_batch" in {f.name for f in dataclasses.fields(GymConfig)}:  # (an older --tree has no such field)
        fast["dedup_batch"] = False  # the batch repeats each problem on purpose: every copy is evaluated
    return GymConfig(device=device, workers=1, cache_dir=cache_dir, **fast)  # type: ignore[arg-type]


def mode_config(base: Any, mode: str) -> Any:
    """"local" and "local/N lanes" set only `workers` (so older trees without `gym.cluster` run them too)."""
    lanes = LANES.fullmatch(mode)
    if mode == "local" or lanes:
        return dataclasses.replace(base, workers=int(lanes.group(1)) if lanes else 1)
    return dataclasses.replace(base, cluster=mode)


def run_mode(items: list[tuple[Any, Any]], config: Any, cold_items: list[tuple[Any, Any]]) -> dict:
    """The cold pass (`cold_items`: lane starts, compiles, baselines), then the timed warm batch `items`."""
    from davinci.kernelgym import close_shared, evaluate_batch

    cluster = getattr(config, "cluster", "local")
    t0 = time.monotonic()
    evaluate_batch(cold_items, config, seed=0)
    cold = time.monotonic() - t0
    t0 = time.monotonic()
    results = evaluate_batch(items, config, seed=1)
    warm = time.monotonic() - t0
    close_shared()
    if cluster != "local":
        from davinci.kernelgym.cluster import close_clients

        close_clients(cluster)
    phases: dict[str, list[float]] = {}
    for r in results:  # where the seconds of the warm batch went (details.phase_s), summed over its evaluations
        for name, sec in (r.details.get("phase_s") or {}).items():
            phases.setdefault(name, []).append(sec)
    if phases:
        total = sum(r.wall_s for r in results) or 1.0
        print("  seconds by phase (sum over the batch, share of evaluation wall): " + ", ".join(
            f"{k} {sum(v):.1f} ({100 * sum(v) / total:.0f}%)" for k, v in sorted(phases.items(), key=lambda kv: -sum(kv[1]))),
            flush=True)
    trips: dict[str, list[float]] = {}
    for r in results:  # inside the phases: the round trips to the candidate, the twin and the reference worker
        for name, (n, sec) in (r.details.get("round_trips") or {}).items():
            acc = trips.setdefault(name, [0, 0.0])
            acc[0], acc[1] = acc[0] + n, acc[1] + sec
    if trips:
        top = sorted(trips.items(), key=lambda kv: -kv[1][1])[:12]
        print("  round trips (requests, seconds summed over the batch, ms each): " + ", ".join(
            f"{k} {int(n)} {sec:.1f}s {1000 * sec / max(1, n):.0f}ms" for k, (n, sec) in top), flush=True)
    by_call: dict[int, list[list[float]]] = {}
    for r in results:  # each correctness call: its round trip against the forward inside it (details.runs_ms)
        for i, (trip, fwd, *_flags) in enumerate(r.details.get("runs_ms") or []):
            by_call.setdefault(i, []).append([trip, fwd])
    if by_call:
        print("  correctness calls, median ms (round trip / forward) by call index: " + ", ".join(
            f"#{i} {statistics.median(t for t, _ in v):.0f}/{statistics.median(f for _, f in v):.0f}"
            for i, v in sorted(by_call.items())), flush=True)
    for (problem, _), r in zip(items, results):
        if not r.correct or r.flags:  # reference solutions: every one should pass; say which did not and why
            print(f"  not passed: {problem.name}: {r.error_kind} {list(r.flags)} {(r.error or '')[-300:]!r}", flush=True)
    return {"cold_s": cold, "warm_s": warm, "per_min": 60 * len(items) / warm,
            "verdicts": [(r.correct, r.flags, r.error_kind) for r in results],
            "correct": sum(r.correct for r in results)}


def table(rows: list[list[object]], header: list[str]) -> str:
    cells = [header] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    lines = ["| " + " | ".join(c.ljust(w) for c, w in zip(r, widths)) + " |" for r in cells]
    lines.insert(1, "|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return "\n".join(lines)


def commit(tree: Path) -> str:
    """The tree's git commit, or "no git" (a `git archive` copy such as .gpu/old has none of its own)."""
    done = subprocess.run(["git", "-C", str(tree), "rev-parse", "--show-toplevel", "--short", "HEAD"],
                          capture_output=True, text=True)
    lines = done.stdout.split()
    own = done.returncode == 0 and len(lines) == 2 and Path(lines[0]).resolve() == tree
    return lines[1] if own else "no git"


def device_name(device: str) -> str:
    import torch

    return torch.cuda.get_device_name(0) if device == "cuda" and torch.cuda.is_available() else device


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--problems", nargs="*", default=PROBLEMS, help="built-in problem names")
    ap.add_argument("--reps", type=int, default=2, help="copies of each problem in the batch")
    ap.add_argument("--modes", nargs="*", default=MODES, help="gym.cluster values, or 'local/2 lanes'")
    ap.add_argument("--cache-dir", default="/tmp/kernelgym-cluster-bench", help="gym.cache_dir of every mode")
    ap.add_argument("--cold-reps", type=int, default=0, help="copies of each problem in the cold pass (0: --reps)")
    ap.add_argument("--tree", default=str(Path(__file__).resolve().parents[1]),
                    help="the project tree whose kernelgym runs (e.g. .gpu/old for side-by-side runs)")
    ap.add_argument("--out", default="", help="also write the table to this file")
    args = ap.parse_args()
    tree = Path(args.tree).resolve()
    sys.path.insert(0, str(tree))
    items = batch(args.problems, args.reps)
    cold_items = batch(args.problems, args.cold_reps) if args.cold_reps else items
    base = base_config(args.device, args.cache_dir)
    rows, first = [], None
    for mode in args.modes:
        res = run_mode(items, mode_config(base, mode), cold_items)
        first = first or res["verdicts"]
        rows.append([mode, len(items), f"{res['cold_s']:.1f}", f"{res['warm_s']:.1f}", f"{res['per_min']:.1f}",
                     f"{res['correct']}/{len(items)}", "yes" if res["verdicts"] == first else "NO"])
        print(f"{mode}: {rows[-1]}", flush=True)
    import davinci

    head = (f"kernelgym_cluster_bench: tree {tree} ({commit(tree)}; davinci from {Path(davinci.__file__).parent}), device {device_name(args.device)}, "
            f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores; problems "
            f"{', '.join(args.problems)} x {args.reps} (cold pass x {args.cold_reps or args.reps}); "
            "gym.workers=1 per Evaluator unless the mode names lanes")
    text = head + "\n\n" + table(rows, ["mode", "evals", "cold batch s", "warm batch s", "evals/min (warm)",
                                        "correct", "same verdicts"])
    print("\n" + text)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
