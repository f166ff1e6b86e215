"""A full KernelBench level-1 baseline pass (eager and torch.compile, timed live) in upstream's JSON format,
compared with KernelBench's own H100 JSONs (baselines/H100_Modal).

Timing is kernelgym's (timing.DeviceTimer): L2 flushed and persisting-L2 reset before every call, device-wide
synchronize inside the timed region, fresh inputs drawn on the GPU every round, repetitions until the
median's CI is within 1% (at least 20, at most 200 calls, at most --max-s seconds per program). The model is
built under seed 42 as upstream does. Phase 1 compiles every problem whose inputs fit in parallel processes
(`--workers`) into a shared inductor / Triton cache; phase 2 times the problems one by one in this process
(its torch.compile calls then hit the cache). A problem that fails is reported and skipped.

    PYTHONPATH=. python benchmarks/gpu/kernelgym_baselines_l1.py                       # all 100, ~7-8 min
    PYTHONPATH=. python benchmarks/gpu/kernelgym_baselines_l1.py --start 0 --stop 50   # two halves, ~4 min each
    PYTHONPATH=. python benchmarks/gpu/kernelgym_baselines_l1.py --start 50 --stop 100
    PYTHONPATH=. python benchmarks/gpu/kernelgym_baselines_l1.py --merge part1.json part2.json   # no GPU needed
    PYTHONPATH=. python benchmarks/gpu/kernelgym_baselines_l1.py --device cpu --small --stop 4 --skip-compile  # CPU smoke

Outputs in $OUT: baseline_time_torch.json, baseline_time_torch_compile_inductor_default.json (upstream format,
ms; "median" added), kernelgym_baselines_l1_<start>-<stop>.json (the part, for --merge) and
kernelgym_baselines_l1.txt (ratio table vs H100_Modal: median ratio, spread, outliers).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

# Outside $OUT: only a few result files may come back from there.
_CACHE = Path(os.environ.get("KERNELGYM_BENCH_CACHE") or "/tmp/kernelgym-bench-cache") / "inductor-cache"
os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(_CACHE / "inductor"))  # before torch is imported
os.environ.setdefault("TRITON_CACHE_DIR", str(_CACHE / "triton"))
os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "2")  # several compiling processes share 16 cores
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import argparse  # noqa: E402
import json  # noqa: E402
import multiprocessing as mp  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402
import traceback  # noqa: E402

from benchmarks.gpu.kernelgym_common import (Clock, kernelbench_root, level_files, log, out_dir,  # noqa: E402
                                             small_overrides, table, write_json)
from davinci.kernelgym import load_problem_file  # noqa: E402
from davinci.kernelgym.problem import apply_shape_overrides  # noqa: E402

# Phase-1 groups by input size (GPU memory: a compiling process holds ~3x its inputs): (max bytes, processes).
COMPILE_GROUPS = ((3 << 30, None), (9 << 30, 2))  # None = --workers; bigger problems compile in phase 2


def _load(path: Path, small: bool, device: str):
    import torch

    problem = load_problem_file(path)
    code = apply_shape_overrides(problem.code, small_overrides(problem)) if small else problem.code
    ns: dict = {"__name__": f"kb_{path.stem}"}
    exec(compile(code, str(path), "exec"), ns)
    torch.manual_seed(42)
    init = ns["get_init_inputs"]()
    torch.manual_seed(42)
    model = ns["Model"](*init).to(device)
    return ns, model


def _input_bytes(ns: dict) -> int:
    import torch

    with torch.device("meta"):
        values = ns["get_inputs"]()
    return sum(v.numel() * v.element_size() for v in values if isinstance(v, torch.Tensor))


def _precompile(task: tuple[str, bool, str]) -> tuple[str, float, str]:
    """Worker: compile one problem once (fills the shared caches). Returns (file, seconds, error)."""
    import torch

    from davinci.kernelgym.inputs import native_inputs

    path, small, device = Path(task[0]), task[1], task[2]
    t0 = time.monotonic()
    try:
        torch.set_grad_enabled(False)
        ns, model = _load(path, small, device)
        compiled = torch.compile(model)
        compiled(*native_inputs(ns["get_inputs"], 1, device))
        if device == "cuda":
            torch.cuda.synchronize()
        return path.name, time.monotonic() - t0, ""
    except Exception as exc:
        return path.name, time.monotonic() - t0, f"{type(exc).__name__}: {str(exc)[:200]}"
    finally:
        torch._dynamo.reset()


def _stats(samples: list[float], device_name: str) -> dict:
    return {"mean": statistics.fmean(samples), "std": statistics.stdev(samples) if len(samples) > 1 else 0.0,
            "min": min(samples), "max": max(samples), "median": statistics.median(samples),
            "num_trials": len(samples), "hardware": device_name, "device": "cuda:0"}


def _time_problem(path: Path, args: argparse.Namespace, timer) -> dict:
    import torch

    from davinci.kernelgym.baselines import measure_program
    from davinci.kernelgym.inputs import native_inputs

    ns, model = _load(path, args.small, args.device)
    per_set = 3 * max(1, _input_bytes(ns))
    total = torch.cuda.get_device_properties(0).total_memory if args.device == "cuda" else 8 << 30
    rotation = max(1, min(4, int(0.25 * total // per_set)))
    rule = {"min_reps": args.min_reps, "max_reps": 200, "ci_rel": 0.01, "max_s": args.max_s}
    out = {}
    programs = {"eager": model} if args.skip_compile else {"eager": model, "compile": torch.compile(model)}
    for name, fn in programs.items():
        res = measure_program(fn, lambda s: native_inputs(ns["get_inputs"], s, args.device), timer,
                              rotation=rotation, seed=42, warmup=3, rule=rule)
        out[name] = res["samples"]
    del model, programs
    torch._dynamo.reset()
    if args.device == "cuda":
        torch.cuda.empty_cache()
    return out


def run(args: argparse.Namespace) -> dict:
    import torch

    from davinci.kernelgym.timing import DeviceTimer

    files = level_files(1)[args.start:args.stop]
    clock = Clock()
    device_name = torch.cuda.get_device_name(0) if args.device == "cuda" else "cpu"
    if not args.skip_compile and args.workers > 0:
        sizes = {f: _size(f, args) for f in files}
        low = -1
        for high, workers in COMPILE_GROUPS:
            group = [str(f) for f in files if low < sizes[f] <= high]
            low = high
            if not group:
                continue
            n = min(workers or args.workers, len(group))
            log(f"phase 1: compiling {len(group)} problems (inputs <= {high >> 30} GiB) in {n} processes")
            with mp.get_context("spawn").Pool(n) as pool:
                for name, secs, err in pool.imap_unordered(_precompile, [(f, args.small, args.device) for f in group]):
                    log(f"  compiled {name} in {secs:.1f} s" + (f"  ERROR {err}" if err else ""))
        log(f"phase 1 done at {clock():.0f} s")
    torch.set_grad_enabled(False)
    timer = DeviceTimer(args.device, 256)
    part = {"eager": {}, "compile": {}, "errors": {}, "device": device_name, "torch": torch.__version__,
            "start": args.start, "stop": args.start + len(files), "l2_reset": timer.l2_reset}
    for i, path in enumerate(files):
        if clock() > args.budget_s:
            part["stop"] = args.start + i
            log(f"budget reached: rerun with --start {args.start + i}")
            break
        t0 = time.monotonic()
        try:
            samples = _time_problem(path, args, timer)
            for name, s in samples.items():
                part[name][path.name] = _stats(s, device_name)
            log(f"[{i + 1}/{len(files)}] {path.name}: " + ", ".join(
                f"{k} {statistics.median(v):.3f} ms ({len(v)})" for k, v in samples.items()) + f"  [{time.monotonic() - t0:.1f} s]")
        except Exception as exc:
            part["errors"][path.name] = f"{type(exc).__name__}: {str(exc)[:300]}"
            log(f"[{i + 1}/{len(files)}] {path.name}: FAILED {part['errors'][path.name]}\n{traceback.format_exc()[-800:]}")
            if args.device == "cuda":
                torch.cuda.empty_cache()
    part["seconds"] = clock()
    return part


def _size(path: Path, args: argparse.Namespace) -> int:
    """Input bytes of a problem (huge on failure, so it is compiled in the timing phase)."""
    try:
        ns: dict = {}
        problem = load_problem_file(path)
        code = apply_shape_overrides(problem.code, small_overrides(problem)) if args.small else problem.code
        exec(compile(code, str(path), "exec"), ns)
        return _input_bytes(ns)
    except Exception:
        return 1 << 62


def compare(merged: dict) -> str:
    """Ratio table: ours / H100_Modal per program (means, as upstream's files hold means)."""
    base = kernelbench_root() / "baselines" / "H100_Modal"
    files = {"eager": "baseline_time_torch.json", "compile": "baseline_time_torch_compile_inductor_default.json"}
    rows, notes = [], []
    for name, fname in files.items():
        try:
            theirs = json.loads((base / fname).read_text())["level1"]
        except OSError:
            notes.append(f"{base / fname} missing: no comparison for {name}")
            continue
        ours = merged.get(name, {})
        ratios = {k: ours[k]["mean"] / theirs[k]["mean"] for k in ours if k in theirs and theirs[k]["mean"] > 0}
        if not ratios:
            continue
        vals = sorted(ratios.values())
        q = statistics.quantiles(vals, n=4) if len(vals) >= 4 else [vals[0], statistics.median(vals), vals[-1]]
        outliers = sorted(((r, k) for k, r in ratios.items() if r > 1.5 or r < 1 / 1.5), reverse=True)
        rows.append([name, len(ratios), statistics.median(vals), f"{q[0]:.3f}-{q[-1]:.3f}", f"{vals[0]:.3f}-{vals[-1]:.3f}",
                     len(outliers)])
        notes += [f"  {name} outlier {k}: ours/theirs = {r:.2f}" for r, k in outliers[:12]]
    text = table(rows, ["baseline", "problems", "median ratio ours/H100_Modal", "IQR", "range", "outliers (>1.5x)"])
    return text + ("\n" + "\n".join(notes) if notes else "")


def write_outputs(merged: dict) -> None:
    hw = merged.get("device", "")
    for name, fname in (("eager", "baseline_time_torch.json"), ("compile", "baseline_time_torch_compile_inductor_default.json")):
        if merged.get(name):
            (out_dir() / fname).write_text(json.dumps({"level1": merged[name], "hardware": hw, "torch": merged.get("torch")},
                                                      indent=1))
    text = compare(merged)
    done = len(merged.get("eager", {}))
    text += f"\n\n{done} problems timed; errors: {len(merged.get('errors', {}))} {sorted(merged.get('errors', {}))[:10]}"
    print("\n" + text)
    (out_dir() / "kernelgym_baselines_l1.txt").write_text(text + "\n")


def merge(paths: list[str]) -> dict:
    merged: dict = {"eager": {}, "compile": {}, "errors": {}}
    for p in paths:
        part = json.loads(Path(p).read_text())
        for key in ("eager", "compile", "errors"):
            merged[key].update(part.get(key, {}))
        merged.setdefault("device", part.get("device"))
        merged.setdefault("torch", part.get("torch"))
    return merged


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--start", type=int, default=0)
    ap.add_argument("--stop", type=int, default=100)
    ap.add_argument("--workers", type=int, default=6, help="parallel compile processes (phase 1)")
    ap.add_argument("--max-s", type=float, default=1.5, help="timing seconds per program at most")
    ap.add_argument("--min-reps", type=int, default=20)
    ap.add_argument("--budget-s", type=float, default=400.0, help="start no new problem after this many seconds")
    ap.add_argument("--skip-compile", action="store_true")
    ap.add_argument("--small", action="store_true", help="shrink problems (CPU smoke run)")
    ap.add_argument("--merge", nargs="*", help="merge part files written by earlier runs; no timing")
    args = ap.parse_args()
    if args.merge:
        write_outputs(merge(args.merge))
        return 0
    part = run(args)
    write_json(f"kernelgym_baselines_l1_{part['start']}-{part['stop']}.json", part)
    write_outputs(part)
    log(f"done in {part['seconds']:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
