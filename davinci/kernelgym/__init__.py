"""kernelgym: the sandboxed, hack-resistant, fast evaluator of KernelBench-format kernel candidates.

    from davinci.kernelgym import evaluate, evaluate_batch, GymConfig
    r = evaluate(problem, candidate, GymConfig(device="cpu"))      # never raises for what the candidate does
    r.correct, r.flags, r.speedup, r.speedup_ci, r.feedback
    fast_p(results, 1.0), fast_p_table(results), plot_fast_p(results, "fast_p.png")
    shape_variants(problem.code, n=3, seed=0)                         # unseen shapes for admission

How it works (one module per concern):
- problem.py   KernelBench sources: validation, files, shape overrides and variants
- backend.py   triton / cuda / torch detection and kernel names, from the AST
- sandbox.py, zygote.py, lane.py   processes: scrubbed env, fork server, sandbox, kill/sweep
- worker.py, guards.py   the candidate's process: harness, captured identities, launch records, poison
- refworker.py, inputs.py, compare.py   the trusted side: inputs on the device, references, tolerances
- protocol.py, transport.py   JSON + byte frames (HMAC from the candidate), tensors as bytes or CUDA IPC
- job.py, perf.py, evaluator.py, batch.py   one evaluation's phases, timing, assembly, batches
- builddirs.py   job and build folders: made, flocked, scrubbed without following links, measured, evicted
- checks/      named static (AST) and runtime hack checks and their presets
- timing.py, stats.py, baselines.py, sol.py   timed-call loop, CIs, cached baselines, speed of light
- metrics.py   fast_p exactly as KernelBench, tables, plots;  feedback.py  text for the next turn
- cluster.py   `gym.cluster`: batches on Dask workers, one per GPU, on any number of nodes
- cli.py       `davinci-kernel eval`
Importing the package starts nothing; the first evaluation starts the worker processes.
"""

from davinci.kernelgym.batch import close_shared, evaluate, evaluate_batch, shared_evaluator
from davinci.kernelgym.config import GymConfig
from davinci.kernelgym.evaluator import Evaluator
from davinci.kernelgym.metrics import fast_p, fast_p_table, geomean_speedup, plot_fast_p
from davinci.kernelgym.problem import apply_shape_overrides, load_problem_file, shape_variants, validate_problem_code
from davinci.kernelgym.result import ERROR_KINDS, EvalResult, TimingStats

__all__ = [
    "GymConfig", "EvalResult", "TimingStats", "ERROR_KINDS", "Evaluator",
    "evaluate", "evaluate_batch", "shared_evaluator", "close_shared",
    "fast_p", "fast_p_table", "geomean_speedup", "plot_fast_p",
    "shape_variants", "apply_shape_overrides", "load_problem_file", "validate_problem_code",
]
