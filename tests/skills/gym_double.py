"""A small local double of `davinci.kernelgym.evaluate` / `shape_variants` for the skills tests.

Why it exists: kernelgym is built concurrently by another engineer; the skills tests switch to the real
evaluator through the contract (`evaluate(problem, candidate, config, *, seed, shape_overrides)`) as soon
as it is importable (see `conftest.py::evaluate_fn`). Until then this double really runs the code:

- Each `evaluate` call runs a fresh Python process (this file as a script) with `TRITON_INTERPRET=1`
  set before anything imports Triton; requests and results travel as JSON files, not stdout.
- The problem source is rewritten with the shape overrides (`davinci.skills.codeinfo`), both modules
  are imported from files (Triton's `@jit` needs real source files), `Model` and `ModelNew` are built
  under the same seed, inputs drawn under the request seed, outputs compared with `allclose`
  (atol = rtol = 1e-4 for fp32, 1e-2 for fp16/bf16 as KernelBench; shapes and dtypes must match).
- Timing (when `measure_performance`): reference and candidate alternate for `reps` calls; the
  speedup is the median of the paired ratios and its CI the 10th-90th percentile of those ratios.
  Labelled "cpu". No hack checks: that is kernelgym's job, not this double's.
- `evaluate_many` runs several requests in one process (the seed-example test uses it to keep the
  suite fast).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

REPO = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class DoubleResult:
    compiled: bool
    correct: bool
    flags: tuple[str, ...] = ()
    error_kind: str = ""
    error: str = ""
    speedup: float | None = None
    speedup_ci: tuple[float, float] | None = None
    runtime: dict = field(default_factory=dict)
    device: str = "cpu"
    timing_label: str = "cpu"
    max_abs_diff: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _request(problem_code: str, candidate_code: str, seed: int | None, overrides: Mapping[str, int] | None, timed: bool, reps: int) -> dict:
    return {"problem": problem_code, "candidate": candidate_code, "seed": 0 if seed is None else int(seed), "overrides": dict(overrides or {}), "timed": timed, "reps": reps}


def _run_worker(requests: list[dict], timeout: float) -> list[DoubleResult]:
    with tempfile.TemporaryDirectory(prefix="gymdouble-") as tmp:
        req, res = Path(tmp) / "req.json", Path(tmp) / "res.json"
        req.write_text(json.dumps(requests))
        env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(REPO), "CUDA_VISIBLE_DEVICES": "", "TRITON_CACHE_DIR": str(Path(tmp) / "triton")}
        try:
            proc = subprocess.run([sys.executable, __file__, str(req), str(res)], env=env, cwd=tmp, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return [DoubleResult(False, False, error_kind="timeout", error=f"no result within {timeout} s") for _ in requests]
        if not res.exists():
            return [DoubleResult(False, False, error_kind="crash", error=proc.stderr[-2000:]) for _ in requests]
        out = json.loads(res.read_text())
    return [DoubleResult(**{**r, "flags": tuple(r["flags"]), "speedup_ci": tuple(r["speedup_ci"]) if r["speedup_ci"] else None}) for r in out]


def evaluate(problem: Any, candidate: Any, config: Any = None, *, seed: int | None = None, shape_overrides: Mapping[str, int] | None = None) -> DoubleResult:
    timed = bool(getattr(config, "measure_performance", True))
    return _run_worker([_request(problem.code, candidate.code, seed, shape_overrides, timed, 7)], timeout=300)[0]


def evaluate_many(items: Sequence[tuple[str, str, Mapping[str, int] | None]], seed: int = 0, timeout: float = 900) -> list[DoubleResult]:
    """Correctness of several (problem code, candidate code, overrides) in one process."""
    return _run_worker([_request(p, c, seed, o, False, 0) for p, c, o in items], timeout)


def shape_variants(problem_code: str, n: int, seed: int) -> list[dict[str, int]]:
    """Scale each size constant >= 4 by a seeded factor (0.5-1.5, never the same value)."""
    import random

    from davinci.skills.codeinfo import module_constants

    rng = random.Random(seed)
    base = {k: v for k, v in module_constants(problem_code).items() if v >= 4}
    out = []
    for _ in range(n):
        variant = {k: max(1, int(v * rng.choice((0.5, 0.75, 1.25, 1.5))) + rng.choice((0, 1))) for k, v in base.items()}
        if variant and variant != base:
            out.append(variant)
    return out


# --- worker (runs in the fresh process) ---------------------------------------------------------


def _load(path: Path, name: str):
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


def _compare(ref: Any, out: Any) -> tuple[bool, float | None, str]:
    import torch

    if not isinstance(out, torch.Tensor) or out.shape != ref.shape:
        return False, None, f"output {type(out).__name__} {getattr(out, 'shape', None)} vs reference {tuple(ref.shape)}"
    if out.dtype != ref.dtype:
        return False, None, f"dtype {out.dtype} vs {ref.dtype}"
    diff = (out.double() - ref.double()).abs()
    max_diff = float(diff.nan_to_num(float("inf")).max()) if diff.numel() else 0.0
    tol = 1e-2 if ref.dtype in (torch.float16, torch.bfloat16) else 1e-4  # KernelBench's tolerances
    ok = bool(torch.allclose(out.float(), ref.float(), atol=tol, rtol=tol))
    return ok, max_diff, "" if ok else f"max abs diff {max_diff:.3g}"


def _time_pair(ref_model: Any, new_model: Any, inputs: list, reps: int) -> tuple[float, tuple[float, float], dict]:
    import statistics
    import time

    ratios, t_ref, t_new = [], [], []
    for _ in range(reps):
        t0 = time.perf_counter()
        ref_model(*inputs)
        t1 = time.perf_counter()
        new_model(*inputs)
        t2 = time.perf_counter()
        t_ref.append(t1 - t0)
        t_new.append(t2 - t1)
        ratios.append((t1 - t0) / max(t2 - t1, 1e-9))
    ratios.sort()
    lo, hi = ratios[int(0.1 * (len(ratios) - 1))], ratios[int(round(0.9 * (len(ratios) - 1)))]
    return statistics.median(ratios), (lo, hi), {"median_ms": 1e3 * statistics.median(t_new), "eager_median_ms": 1e3 * statistics.median(t_ref)}


def _one(req: dict, tmp: Path, index: int) -> dict:
    import torch

    from davinci.skills.codeinfo import apply_shape_overrides

    result: dict[str, Any] = {"compiled": False, "correct": False, "flags": [], "error_kind": "", "error": "", "speedup": None, "speedup_ci": None, "runtime": {}, "device": "cpu", "timing_label": "cpu", "max_abs_diff": None}
    try:
        (tmp / f"problem_{index}.py").write_text(apply_shape_overrides(req["problem"], req["overrides"]))
        (tmp / f"candidate_{index}.py").write_text(req["candidate"])
        ref_mod = _load(tmp / f"problem_{index}.py", f"problem_{index}")
        new_mod = _load(tmp / f"candidate_{index}.py", f"candidate_{index}")
        init = ref_mod.get_init_inputs()
        torch.manual_seed(req["seed"])
        ref_model = ref_mod.Model(*init)
        torch.manual_seed(req["seed"])
        new_model = new_mod.ModelNew(*init)
    except Exception as exc:  # noqa: BLE001
        result.update(error_kind="compile", error=f"{type(exc).__name__}: {exc}"[:2000])
        return result
    result["compiled"] = True
    try:
        torch.manual_seed(req["seed"] + 1)
        inputs = ref_mod.get_inputs()
        with torch.no_grad():
            ref = ref_model(*inputs)
            out = new_model(*inputs)
        ok, max_diff, why = _compare(ref, out)
        result.update(correct=ok, max_abs_diff=max_diff, error_kind="" if ok else "mismatch", error=why)
        if ok and req["timed"]:
            with torch.no_grad():
                speedup, ci, runtime = _time_pair(ref_model, new_model, inputs, req["reps"])
            result.update(speedup=speedup, speedup_ci=list(ci), runtime=runtime)
    except Exception as exc:  # noqa: BLE001
        result.update(error_kind="runtime", error=f"{type(exc).__name__}: {exc}"[:2000])
    return result


def _worker(req_path: str, res_path: str) -> None:
    requests = json.loads(Path(req_path).read_text())
    tmp = Path.cwd()  # the parent's temporary folder (removed by the parent afterwards)
    results = [_one(r, tmp, i) for i, r in enumerate(requests)]
    Path(res_path).write_text(json.dumps(results))


if __name__ == "__main__":
    _worker(sys.argv[1], sys.argv[2])
