"""Checks of trusted problems and reference solutions on the CPU (Triton interpreter) or a GPU.

What it is: the data stage's own quality gate for code the project wrote or generated itself (the built-in
suite, synthesized problems and their generated solutions). It is NOT a sandbox and never runs model output:
candidates from the policy go through `davinci.kernelgym` in fresh processes.

Choices:
- Where it runs: Triton's interpreter only works when TRITON_INTERPRET=1 was set before `triton` was first
  imported (the library's own `@jit` helpers such as `tl.sum` are built at import). `check_solutions`
  therefore runs in this process only when Triton is (or will be, on first import) in interpreter mode,
  and otherwise in one fresh worker process (`python -m data_prep.verify_worker`) for the whole batch, so
  it never switches the caller's Triton into interpreter mode. Compiled checks (`interpret=False`, a GPU)
  run in this process.
- Sources are written to a temporary `.py` file and imported (Triton's `@jit` reads the kernel's source from
  a real file, which is also how KernelBench loads Triton candidates).
- KernelBench's seeding protocol: seed before `get_init_inputs()`, before `Model(...)` and again before
  `ModelNew(...)`, so a `ModelNew` that creates its parameters with the same RNG draws holds the same
  weights; then a per-seed `get_inputs()`; the reference runs first, the solution gets clones.
- Comparison: |out - ref| <= atol * max(1, rms(ref)) + rtol * |ref| elementwise (KernelBench's 1e-4, made
  scale-aware as kernelgym does) plus a relative L2 error bound; integer outputs (argmax) must be equal.
- Stress inputs: seed i draws its inputs from `distributions[i % len]`: "native" (the problem's own),
  "scaled" (x 2**U(1,3)) or "heavy_tail" (a Pareto-like map with rare values ~100x typical), the same
  structure-preserving maps kernelgym's correctness trials use, so a solution that passes here does not
  fail there for numerical reasons (overflowing exp, catastrophic cancellation).
- Informativeness: a problem whose outputs a trivial answer can match is useless for RL (KernelBench issue
  #165: zeros pass on four level-1 problems). `informativeness` fails a problem when all zeros, a constant
  (the output's mean) or another draw's output pass a loose tolerance (1e-2, bf16's), or when the output is
  not finite.

    from data_prep.verify import check_solution
    check = check_solution(problem.code, problem.reference_solution, seeds=(0, 1, 2))
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, Iterator, Sequence


DISTRIBUTIONS = ("native", "scaled", "heavy_tail")
# A whole batch of interpreter checks in one worker process must finish within this (trusted code).
WORKER_TIMEOUT_S = 1800


@dataclass(frozen=True)
class Tolerance:
    """Correctness bounds: `allclose(out, ref, atol, rtol)` and ||out - ref|| / ||ref|| <= max_rel_l2."""

    atol: float = 1e-4
    rtol: float = 1e-4
    max_rel_l2: float = 1e-5


@dataclass(frozen=True)
class SeedResult:
    seed: int
    ok: bool
    max_abs_err: float
    rel_l2_err: float
    seconds: float
    message: str = ""


@dataclass(frozen=True)
class SolutionCheck:
    """Verdict of one reference solution against its problem over several seeds."""

    ok: bool
    params_match: bool
    seeds: tuple[SeedResult, ...]
    message: str = ""

    @property
    def max_seconds(self) -> float:
        return max((s.seconds for s in self.seeds), default=0.0)

    def to_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "params_match": self.params_match, "message": self.message,
                "seeds": [s.__dict__ for s in self.seeds]}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "SolutionCheck":
        seeds = tuple(SeedResult(**s) for s in d.get("seeds", ()))
        return cls(ok=d["ok"], params_match=d["params_match"], seeds=seeds, message=d.get("message", ""))

    @classmethod
    def failed(cls, message: str) -> "SolutionCheck":
        return cls(ok=False, params_match=False, seeds=(), message=message)


@dataclass(frozen=True)
class Informativeness:
    """Whether a problem's outputs defeat trivial answers; `reasons` lists every failed property."""

    ok: bool
    reasons: tuple[str, ...]
    output_shape: tuple[int, ...]


@contextlib.contextmanager
def interpreter_env(enabled: bool = True) -> Iterator[None]:
    """Set TRITON_INTERPRET=1 while sources are imported (Triton reads it when `@jit` decorates)."""
    old = os.environ.get("TRITON_INTERPRET")
    if enabled:
        os.environ["TRITON_INTERPRET"] = "1"
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("TRITON_INTERPRET", None)
        else:
            os.environ["TRITON_INTERPRET"] = old


@contextlib.contextmanager
def load_source_module(source: str, stem: str) -> Iterator[ModuleType]:
    """Import `source` from a temporary file; the module is unregistered and the file removed on exit."""
    digest = hashlib.sha256(source.encode()).hexdigest()[:12]
    name = f"_davinci_dp_{stem}_{digest}_{time.monotonic_ns()}"
    with tempfile.TemporaryDirectory(prefix="davinci_dp_") as tmp:
        path = Path(tmp) / f"{name}.py"
        path.write_text(source)
        spec = importlib.util.spec_from_file_location(name, path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        try:
            spec.loader.exec_module(module)
            yield module
        finally:
            sys.modules.pop(name, None)


def _seeded(seed: int) -> None:
    import torch

    torch.manual_seed(seed)


def build_models(problem: ModuleType, solution: ModuleType | None, seed: int) -> tuple[Any, Any]:
    """KernelBench protocol: seed, init inputs, seed, Model; seed, ModelNew (None without a solution)."""
    _seeded(seed)
    init_inputs = problem.get_init_inputs()
    _seeded(seed)
    model = problem.Model(*init_inputs)
    new = None
    if solution is not None:
        _seeded(seed)
        new = solution.ModelNew(*init_inputs)
    return model, new


def draw_inputs(problem: ModuleType, seed: int) -> list[Any]:
    _seeded(seed + 10_000)
    return list(problem.get_inputs())


def _continuous(x: Any) -> bool:
    import torch

    if not isinstance(x, torch.Tensor) or not x.dtype.is_floating_point or x.numel() < 16:
        return False
    return int(torch.unique(x.reshape(-1)[:4096]).numel()) >= 16


def stress_inputs(values: Sequence[Any], distribution: str, seed: int) -> list[Any]:
    """Apply an input distribution ("native", "scaled", "heavy_tail") to every continuous float input."""
    import torch

    if distribution not in DISTRIBUTIONS:
        raise ValueError(f"unknown input distribution {distribution!r}; use one of {', '.join(DISTRIBUTIONS)}")
    out = []
    for i, x in enumerate(values):
        if distribution != "native" and _continuous(x):
            gen = torch.Generator().manual_seed(seed * 1009 + i)
            if distribution == "scaled":
                x = x * 2.0 ** (1.0 + 2.0 * float(torch.rand((), generator=gen)))
            else:
                m = x.abs().max()
                t = (x.abs() / m).clamp(max=1.0)
                x = (torch.sign(x) * m * ((1.0 - 0.999 * t) ** (-2.0 / 3.0) - 1.0)).to(x.dtype)
        out.append(x)
    return out


def _clone(values: Sequence[Any]) -> list[Any]:
    import torch

    return [v.clone() if isinstance(v, torch.Tensor) else v for v in values]


def compare_outputs(ref: Any, out: Any, tol: Tolerance) -> tuple[bool, float, float, str]:
    """(ok, max_abs_err, rel_l2_err, message) of a solution output `out` against the reference `ref`."""
    import torch

    if not isinstance(ref, torch.Tensor) or not isinstance(out, torch.Tensor):
        kinds = f"{type(ref).__name__} and {type(out).__name__}"
        return False, float("inf"), float("inf"), f"outputs must be tensors, got {kinds}"
    if tuple(ref.shape) != tuple(out.shape):
        return False, float("inf"), float("inf"), f"shape {tuple(out.shape)} != reference {tuple(ref.shape)}"
    if not ref.is_floating_point():
        equal = torch.equal(ref, out.to(ref.dtype))
        mismatches = int((ref != out.to(ref.dtype)).sum())
        return equal, float(mismatches), float(mismatches), "" if equal else f"{mismatches} integer outputs differ"
    ref64, out64 = ref.double(), out.double()
    if not torch.isfinite(out64).all():
        return False, float("inf"), float("inf"), "solution output has non-finite values"
    diff = (out64 - ref64).abs()
    max_abs = float(diff.max()) if diff.numel() else 0.0
    rel_l2 = float(diff.norm() / ref64.norm().clamp_min(1e-30))
    scale = max(1.0, float(ref64.pow(2).mean().sqrt())) if ref64.numel() else 1.0
    close = bool((diff <= tol.atol * scale + tol.rtol * ref64.abs()).all())
    ok = close and rel_l2 <= tol.max_rel_l2
    message = "" if ok else f"max |diff| {max_abs:.3g}, relative L2 error {rel_l2:.3g} (tolerance {tol})"
    return ok, max_abs, rel_l2, message


def _params_match(model: Any, new: Any) -> bool:
    import torch

    ref_state, new_state = model.state_dict(), new.state_dict()
    if set(ref_state) != set(new_state):
        return False
    return all(torch.equal(ref_state[k], new_state[k]) for k in ref_state)


def interpreter_ready() -> bool:
    """True when Triton kernels can run in the interpreter in this process (see module docstring)."""
    standard = sys.modules.get("triton.language.standard")
    if standard is None:
        return os.environ.get("TRITON_INTERPRET") == "1"
    from triton.runtime.interpreter import InterpretedFunction

    return isinstance(getattr(standard, "sum", None), InterpretedFunction)


def check_solutions(
    items: Sequence[tuple[str, str]],
    seeds: Sequence[int] = (0, 1, 2),
    tol: Tolerance = Tolerance(),
    *,
    distributions: Sequence[str] = DISTRIBUTIONS,
    interpret: bool = True,
    device: str = "cpu",
    isolate: bool | None = None,
) -> list[SolutionCheck]:
    """`check_solution` for each (problem_code, solution_code), in order. `isolate=None` decides where they
    run (module docstring); True forces one worker process, False this process."""
    if isolate is None:
        isolate = interpret and not interpreter_ready()
    if isolate:
        return _check_in_worker(items, seeds, tol, distributions, interpret, device)
    return [check_in_process(p, s, seeds, tol, distributions=distributions, interpret=interpret, device=device)
            for p, s in items]


def check_solution(
    problem_code: str,
    solution_code: str,
    seeds: Sequence[int] = (0, 1, 2),
    tol: Tolerance = Tolerance(),
    *,
    distributions: Sequence[str] = DISTRIBUTIONS,
    interpret: bool = True,
    device: str = "cpu",
    isolate: bool | None = None,
) -> SolutionCheck:
    """Run `Model` and `ModelNew` on several seeded inputs and compare their outputs; seed i's inputs come
    from `distributions[i % len(distributions)]`. On a GPU pass `device="cuda", interpret=False` (models
    are built on the host under the seed, then moved, as KernelBench does). Never raises for a broken
    solution: the failure is the verdict's message."""
    return check_solutions([(problem_code, solution_code)], seeds, tol, distributions=distributions,
                           interpret=interpret, device=device, isolate=isolate)[0]


def _check_in_worker(items, seeds, tol, distributions, interpret, device) -> list[SolutionCheck]:  # noqa: ANN001
    job = {"items": [list(i) for i in items], "seeds": list(seeds), "tol": tol.__dict__,
           "distributions": list(distributions), "interpret": interpret, "device": device}
    env = {**os.environ, "TRITON_INTERPRET": "1"} if interpret else dict(os.environ)
    with tempfile.TemporaryDirectory(prefix="davinci_dp_job_") as tmp:
        job_path, result_path = Path(tmp) / "job.json", Path(tmp) / "result.json"
        job_path.write_text(json.dumps(job))
        proc = subprocess.run(
            [sys.executable, "-m", "data_prep.verify_worker", str(job_path), str(result_path)],
            env=env, cwd=str(Path(__file__).resolve().parents[1]), capture_output=True, text=True,
            timeout=WORKER_TIMEOUT_S,
        )
        if proc.returncode != 0 or not result_path.exists():
            why = f"check worker exited with {proc.returncode}: {(proc.stderr or proc.stdout)[-1500:]}"
            return [SolutionCheck.failed(why) for _ in items]
        return [SolutionCheck.from_dict(d) for d in json.loads(result_path.read_text())]


def check_in_process(
    problem_code: str,
    solution_code: str,
    seeds: Sequence[int],
    tol: Tolerance,
    *,
    distributions: Sequence[str] = DISTRIBUTIONS,
    interpret: bool = True,
    device: str = "cpu",
) -> SolutionCheck:
    """One check in this process; an exception from either source becomes a failed verdict."""
    try:
        return _compare_models(problem_code, solution_code, seeds, tol, distributions, interpret, device)
    except Exception as exc:  # trusted-but-generated code: any failure is the verdict, not a crash
        return SolutionCheck.failed(f"{type(exc).__name__}: {exc}")


def _compare_models(  # noqa: ANN001 - check_in_process's arguments
    problem_code, solution_code, seeds, tol, distributions, interpret, device
) -> SolutionCheck:
    import numpy as np
    import torch

    results: list[SeedResult] = []
    params_ok = True
    # np.errstate: the interpreter evaluates tl.exp/tl.sigmoid with numpy, which warns on harmless overflow
    # (exp(-x) -> inf inside a sigmoid); the output comparison is what judges the solution.
    with (
        np.errstate(all="ignore"),
        interpreter_env(interpret),
        load_source_module(problem_code, "problem") as prob,
        load_source_module(solution_code, "solution") as sol,
    ):
        for i, seed in enumerate(seeds):
            model, new = build_models(prob, sol, seed)
            params_ok = params_ok and _params_match(model, new)
            model, new = model.to(device), new.to(device)
            inputs = stress_inputs(draw_inputs(prob, seed), distributions[i % len(distributions)], seed)
            inputs = [v.to(device) if isinstance(v, torch.Tensor) else v for v in inputs]
            with torch.no_grad():
                ref = model(*_clone(inputs))
                start = time.perf_counter()
                out = new(*_clone(inputs))
                if device != "cpu":
                    torch.cuda.synchronize()
                seconds = time.perf_counter() - start
            ok, max_abs, rel_l2, message = compare_outputs(ref, out, tol)
            results.append(SeedResult(seed, ok, max_abs, rel_l2, seconds, message))
    ok = all(r.ok for r in results)
    failed = [f"seed {r.seed}: {r.message}" for r in results if not r.ok]
    return SolutionCheck(ok=ok, params_match=params_ok, seeds=tuple(results), message="; ".join(failed))


def reference_outputs(problem_code: str, seeds: Sequence[int]) -> list[Any]:
    """The reference `Model`'s output for each seed (KernelBench seeding, no gradients)."""
    import torch

    outputs = []
    with load_source_module(problem_code, "problem") as prob:
        for seed in seeds:
            model, _ = build_models(prob, None, seed)
            with torch.no_grad():
                outputs.append(model(*draw_inputs(prob, seed)))
    return outputs


def trivial_answer_reasons(outputs: Sequence[Any], atol: float = 1e-2, rtol: float = 1e-2) -> list[str]:
    """Which trivial answers pass `allclose(answer, output, atol, rtol)`; empty when none does."""
    import torch

    reasons: list[str] = []
    floats = []
    for out in outputs:
        if not isinstance(out, torch.Tensor):
            return [f"output is a {type(out).__name__}, not a tensor"]
        floats.append(out.double())
    for i, out in enumerate(floats):
        if not torch.isfinite(out).all():
            reasons.append(f"draw {i}: output has non-finite values")
            continue
        if torch.allclose(torch.zeros_like(out), out, atol=atol, rtol=rtol):
            reasons.append(f"draw {i}: all zeros pass (max |out| {float(out.abs().max()):.3g})")
        if out.numel() > 1 and torch.allclose(torch.full_like(out, float(out.mean())), out, atol=atol, rtol=rtol):
            reasons.append(f"draw {i}: the constant {float(out.mean()):.4g} passes (std {float(out.std()):.3g})")
    for i in range(1, len(floats)):
        a, b = floats[0], floats[i]
        if a.shape == b.shape and torch.isfinite(a).all() and torch.allclose(a, b, atol=atol, rtol=rtol):
            reasons.append(f"draws 0 and {i} give the same output: it does not depend on the inputs")
    return reasons


def informativeness(
    problem_code: str, seeds: Sequence[int] = (0, 1), atol: float = 1e-2, rtol: float = 1e-2
) -> Informativeness:
    """Run the reference on each seed and report which trivial answers would pass (see module docstring)."""
    outputs = reference_outputs(problem_code, seeds)
    reasons = trivial_answer_reasons(outputs, atol, rtol)
    shape = tuple(getattr(outputs[0], "shape", ())) if outputs else ()
    return Informativeness(ok=not reasons, reasons=tuple(reasons), output_shape=shape)
