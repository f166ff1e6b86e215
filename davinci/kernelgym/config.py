"""Configuration of the kernel evaluator (kernelgym)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True)
class GymConfig:
    # "auto" = cuda when a GPU is visible, else cpu (Triton interpreter; timings labelled CPU).
    device: Literal["auto", "cpu", "cuda"] = "auto"
    compile_timeout_s: float = 180.0
    run_timeout_s: float = 120.0
    correctness_trials: int = 3
    # Baselines timed live next to the candidate: eager and/or torch.compile.
    baselines: tuple[Literal["eager", "compile"], ...] = ("eager", "compile")
    measure_performance: bool = True
    # Named preset of hack checks (see kernelgym.checks).
    checks: str = "strict"
    # Parallel evaluation workers (0 = one per visible GPU, or 2 on CPU).
    workers: int = 0
