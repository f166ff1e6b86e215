"""Shared helpers of the kernelgym benchmark scripts: KernelBench location, output folder, tables.

Imports only what the GPU machine has (torch, numpy, psutil; davinci.kernelgym itself). Run every script
from the repository root with PYTHONPATH=. .
"""

from __future__ import annotations

import json
import os
import re
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Sequence

from davinci.kernelgym import GymConfig, load_problem_file
from davinci.kernelgym.problem import apply_shape_overrides, shape_variants
from davinci.types import Candidate, Problem


def kernelbench_root() -> Path:
    """The KernelBench checkout: $KERNELBENCH_DIR, ./shared/kernelbench, ../shared/kernelbench or /work/shared."""
    for cand in (os.environ.get("KERNELBENCH_DIR"), "shared/kernelbench", "../shared/kernelbench",
                 "/work/shared/kernelbench"):
        if cand and (Path(cand) / "KernelBench" / "level1").is_dir():
            return Path(cand).resolve()
    sys.exit("KernelBench not found: set KERNELBENCH_DIR to the folder holding KernelBench/level1")


def level_files(level: int) -> list[Path]:
    folder = kernelbench_root() / "KernelBench" / f"level{level}"
    return sorted(folder.glob("*.py"), key=lambda p: int(p.name.split("_")[0]))


def load_level_problem(level: int, prefix: str) -> Problem:
    """Problem `level`/`<prefix>_*.py`, e.g. load_level_problem(1, "19")."""
    for path in level_files(level):
        if path.name.split("_")[0] == prefix or path.stem == prefix:
            return load_problem_file(path)
    raise SystemExit(f"no level {level} problem {prefix!r}")


def reference_as_candidate(problem: Problem) -> Candidate:
    """The reference renamed ModelNew (the self-calibration candidate: its speedup must be 1)."""
    return Candidate(problem_id=problem.id, code=re.sub(r"\bModel\b", "ModelNew", problem.code), backend="triton")


def _input_numel(code: str) -> int:
    import torch

    ns: dict = {}
    exec(compile(code, "<problem>", "exec"), ns)
    with torch.device("meta"):
        values = ns["get_inputs"]()
    return sum(v.numel() for v in values if isinstance(v, torch.Tensor))


def small_overrides(problem: Problem, max_numel: int = 1 << 16) -> dict[str, int] | None:
    """Shape overrides that shrink a KernelBench problem's inputs to <= max_numel elements (CPU smoke runs);
    None when nothing shrinks it that far."""
    for limit in (1 << 14, 1 << 10, 1 << 8, 1 << 6, 1 << 4):
        for variant in shape_variants(problem.code, 1, seed=0, max_elements=limit):
            try:
                if _input_numel(apply_shape_overrides(problem.code, variant)) <= max_numel:
                    return variant
            except Exception:
                continue
    return None


def _halve_int_tuples(code: str, times: int = 1) -> str | None:
    """The source with every module-level tuple of int sizes (input_shape = (32768,)) halved `times` times;
    None when there is none. Shape overrides rewrite only int constants, so these need a rewritten source."""
    import ast

    lines = code.splitlines(keepends=True)
    edits = []
    for node in ast.parse(code).body:
        if not (isinstance(node, ast.Assign) and isinstance(node.value, ast.Tuple) and node.value.elts
                and all(isinstance(e, ast.Constant) and type(e.value) is int for e in node.value.elts)):
            continue
        vals = [e.value for e in node.value.elts]
        if not any(v >= 8 for v in vals) or node.value.lineno != node.value.end_lineno:
            continue
        new = ", ".join(str(max(1, v >> times) if v >= 8 else v) for v in vals) + ("," if len(vals) == 1 else "")
        seg = node.value
        edits.append((seg.lineno, seg.col_offset, seg.end_col_offset, f"({new})"))
    if not edits:
        return None
    for lineno, a, b, text in sorted(edits, reverse=True):
        line = lines[lineno - 1]
        lines[lineno - 1] = line[:a] + text + line[b:]
    return "".join(lines)


def _reference_runs(code: str) -> bool:
    """Whether the (shrunk) reference builds and runs one forward on the CPU."""
    import torch

    try:
        ns: dict = {}
        exec(compile(code, "<problem>", "exec"), ns)
        with torch.no_grad():
            ns["Model"](*ns["get_init_inputs"]())(*ns["get_inputs"]())
        return True
    except Exception:
        return False


def small_problem(problem: Problem, max_numel: int = 1 << 16) -> tuple[Problem, dict[str, int] | None]:
    """(problem, shape overrides) whose inputs hold <= max_numel elements and whose reference still runs (CPU
    smoke runs). Where the int constants alone cannot get there (89_cumsum, 100_HingeLoss: input_shape =
    (32768,)), a copy of the source has its module-level int tuples halved, alone or together with the int
    size constants (100_HingeLoss needs batch_size == input_shape[0]). (problem, None) when nothing works."""
    import dataclasses

    from davinci.kernelgym.problem import size_constants

    over = small_overrides(problem, max_numel)
    if over is not None and _reference_runs(apply_shape_overrides(problem.code, over)):
        return problem, over
    consts = {k: v for k, v in size_constants(problem.code).items() if v >= 8}
    for times in range(1, 17):
        code = _halve_int_tuples(problem.code, times)
        if code is None:
            break
        cand = dataclasses.replace(problem, code=code)
        # the tuples and the int sizes scaled together (keeps sizes that must match equal) ...
        over = {k: max(1, v >> times) for k, v in consts.items()}
        try:
            shrunk = apply_shape_overrides(code, over)
            if _input_numel(shrunk) <= max_numel and _reference_runs(shrunk):
                return cand, over
        except Exception:
            pass
        # ... or the tuples halved and the int sizes shrunk by small_overrides
        over = small_overrides(cand, max_numel)
        if over is not None and _reference_runs(apply_shape_overrides(code, over)):
            return cand, over
    return problem, None


def out_dir() -> Path:
    path = Path(os.environ.get("OUT") or "kernelgym_out")
    path.mkdir(parents=True, exist_ok=True)
    return path


def write_json(name: str, data: Any) -> Path:
    path = out_dir() / name
    path.write_text(json.dumps(data, indent=1, default=str))
    return path


def gpu_timing(**kw: Any) -> dict[str, Any]:
    """GymConfig timing fields for precise GPU numbers (the h100 profile's values)."""
    base = dict(timing_ci_rel=0.01, timing_min_reps=20, timing_max_reps=200, timing_max_s=8.0, warmup_reps=3)
    base.update(kw)
    return base


def cache_dir() -> Path:
    """Persistent caches of the scripts: outside $OUT (only a few result files may come back from there)."""
    return Path(os.environ.get("KERNELGYM_BENCH_CACHE") or Path(tempfile.gettempdir()) / "kernelgym-bench-cache")


def config(device: str, cache: str | None = None, **kw: Any) -> GymConfig:
    fields = dict(device=device, cache_dir=cache or str(cache_dir()))
    if device == "cuda":
        fields.update(gpu_timing())
    fields.update(kw)
    return GymConfig(**fields)


def table(rows: Sequence[Sequence[Any]], headers: Sequence[str]) -> str:
    cells = [[str(h) for h in headers]] + [[_fmt(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)) for r in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    return "-" if v is None else str(v)


class Clock:
    def __init__(self) -> None:
        self.t0 = time.monotonic()

    def __call__(self) -> float:
        return time.monotonic() - self.t0


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)
