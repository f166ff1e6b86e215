"""Configuration of the kernel evaluator (kernelgym): one frozen dataclass, defaults = the tiny CPU profile.

The h100 / paper-14b profiles override the timing fields (more repetitions, tighter CI) and turn on the
torch.compile baseline; see the comments above each field. Secrets (the input-seed salt) never live here:
they would end up in MLflow params. Set `DAVINCI_GYM_SECRET` in the environment for a stable salt.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from davinci.errors import ConfigError

CLUSTER_FORMS = ('"local"', '"local-dask:N" (N >= 1 worker processes on this machine)',
                 '"tcp://HOST:PORT" (a running Dask scheduler, e.g. tcp://10.0.0.5:8786)')
_LOCAL_DASK = re.compile(r"local-dask:(\d+)")
_ADDRESS = re.compile(r"(tcp|tls|ucx|inproc)://[^\s/]+(:\d+)?")


def parse_cluster(value: str) -> tuple[Literal["local", "local-dask", "address"], int | str]:
    """`gym.cluster` -> ("local", 0) | ("local-dask", N) | ("address", "tcp://host:8786"); else ConfigError.

    >>> parse_cluster("local-dask:2")
    ('local-dask', 2)
    """
    text = str(value).strip()
    if text == "local":
        return "local", 0
    m = _LOCAL_DASK.fullmatch(text)
    if m and int(m.group(1)) >= 1:
        return "local-dask", int(m.group(1))
    if _ADDRESS.fullmatch(text):
        return "address", text
    raise ConfigError(f"gym.cluster = {value!r} is not a cluster setting",
                      f"use one of: {'; '.join(CLUSTER_FORMS)}")


@dataclass(frozen=True)
class GymConfig:
    # "auto" = cuda when a GPU is visible, else cpu (Triton interpreter; timings labelled CPU).
    device: Literal["auto", "cpu", "cuda"] = "auto"
    # Wall-clock limit for importing the candidate and building ModelNew (load_inline / Triton builds included).
    compile_timeout_s: float = 180.0
    # Wall-clock limit for everything after the build: correctness trials, checks and timing.
    run_timeout_s: float = 120.0
    # Correctness trials, each with fresh inputs; trial i uses distributions[i % len(distributions)].
    correctness_trials: int = 5
    # Baselines timed live next to the candidate: eager and/or torch.compile.
    baselines: tuple[Literal["eager", "compile"], ...] = ("eager", "compile")
    measure_performance: bool = True
    # Named preset of hack checks ("strict", "default", "runtime", "none") or a comma list of check names
    # (see kernelgym.checks; an unknown name raises and lists the valid ones).
    checks: str = "strict"
    # Parallel evaluation lanes (0 = one per visible GPU, or 2 on CPU).
    workers: int = 0
    # `evaluate_batch` evaluates each distinct (problem, source, backend) once and gives its copies the same
    # result (`details["copy_of"]`): an RL group repeats the same completion often, and the copies would take
    # turns on one build folder. Off for benchmarks that repeat a candidate on purpose.
    dedup_batch: bool = True

    # --- correctness ---
    # Input distributions cycled over the trials (kernelgym.inputs.DISTRIBUTIONS).
    # Timing rounds cycle through them too, and each round's spot-checked output is compared on them.
    distributions: tuple[str, ...] = ("native", "scaled", "heavy_tail", "spikes", "reshaped")
    # Elementwise tolerance |out-ref| <= tol*max(1, rms(ref)) + tol*|ref| for fp32 (KernelBench's 1e-4) ...
    tol_fp32: float = 1e-4
    # ... and for fp16 / bf16 (KernelBench's 1e-2).
    tol_half: float = 1e-2
    # Where zeros (or a constant) would pass the elementwise test, also require ||out-ref|| <= this * ||ref||
    # (or this * ||ref - mean(ref)||): trivial outputs score 1.0 here, honest kernels ~1e-6.
    near_zero_rel_norm: float = 0.01
    # Run trial 0 twice on differently poisoned memory; the two outputs must agree.
    determinism_check: bool = True

    # --- timing ---
    # Warm-up calls before timing (each process, candidate and baselines alike).
    warmup_reps: int = 2
    # Stop when the 95% CI of every median is within this relative half-width ...
    timing_ci_rel: float = 0.02
    # ... with at least this many and at most this many timed calls per program ...
    timing_min_reps: int = 5
    timing_max_reps: int = 40
    # ... or when the timing phase has used this many seconds (h100 profile: 0.01, 20, 200, 8.0).
    timing_max_s: float = 2.0
    # Input sets rotated through the timed calls (refreshed in place every round); 0 = as many as fit in
    # a quarter of device memory, at most 4.
    rotation_sets: int = 0
    # Baselines timed interleaved with the candidate (A/B/A/B); the others come from the on-disk cache.
    live_baselines: tuple[Literal["eager", "compile"], ...] = ("eager",)
    # Where live eager is timed: "twin" = a fresh sandboxed process forked like the candidate's and running
    # the problem's Model through the same harness (both sides of the A/B are the same kind of process);
    # "reference" = the long-lived reference worker (one process less; its H100 self-speedup was biased
    # 0.1-0.5% against the candidate, see perf.py).
    eager_timer: Literal["twin", "reference"] = "twin"
    # torch.compile on the CPU needs a C++ toolchain and ~10 s per problem: off unless asked for.
    cpu_compile_baseline: bool = False
    # L2 flush buffer written before every timed call (MiB).
    l2_flush_mb: int = 256
    # Run the candidate once under torch.profiler (GPU) to measure kernel time coverage and find decoys.
    profile_coverage: bool = True
    # Flag (`low_coverage`) a candidate whose own kernels carry less than this share of the forward's time
    # (GPU: profiled device time incl. copies; CPU: the forward's wall time). KernelGYM's threshold.
    min_kernel_coverage: float = 0.3
    # Run the Triton launches of an unwatched timed request and of audit A again once each has returned, and
    # compare what they write and how it depends on the inputs (replay.py, audit.py): "always"; "gpu" (GPU lanes
    # only: there it is the one record a candidate cannot dodge by asking torch whether a profiler or dispatch
    # mode is on; CPU lanes keep their store record, which misses a copy kernel that also loads the input);
    # "off" (neither: the token switch gets through on a GPU).
    launch_replay: Literal["always", "gpu", "off"] = "always"

    # --- sandbox ---
    # "auto": CUDA IPC on the GPU (fallback to host copies if a probe fails), host copies on the CPU.
    transport: Literal["auto", "ipc", "host"] = "auto"
    # Run the candidate as this user when the evaluator runs as root, the transport is "host" (CUDA IPC needs
    # the same user) and this user can read the Python installation. "" = never switch user.
    sandbox_user: str = "nobody"
    # New network namespace for the candidate (root, or an unprivileged user namespace where the kernel
    # allows one; `details.sandbox` says whether it held).
    network_isolation: bool = True
    # Refuse to evaluate unless every layer in isolation.REQUIRED holds (probed once per evaluator, before
    # any candidate runs); the error names the missing layers and the fix. On for the GPU profiles.
    require_isolation: bool = False
    # Address-space limit of the candidate on the CPU (GiB; never applied with CUDA, which maps huge VA).
    cpu_memory_limit_gb: float = 8.0
    # Torch intra-op threads in the CPU workers (candidate and reference alike, for fair CPU timings).
    cpu_threads: int = 1
    # Keep a forked, initialised spare candidate process ready per lane.
    spare_workers: bool = True
    # Parallel CPU processes that pre-build load_inline candidates of a batch (0 = cores // 2, at most 8).
    compile_workers: int = 0
    # Folder for persistent caches (baselines, device ceilings, content-hashed builds);
    # "" = $DAVINCI_HOME/kernelgym or ./.davinci/kernelgym.
    cache_dir: str = ""
    # Content-hashed build folders (a candidate's Triton / extension / Inductor caches) are measured after every
    # evaluation, without following links: one holding more than build_dir_max_mb is emptied (its next
    # evaluation builds again), and the least recently evaluated folders are evicted while all of them together
    # hold more than build_cache_max_mb (MiB).
    build_dir_max_mb: int = 256
    build_cache_max_mb: int = 8192

    # --- speed of light ---
    # Flag a candidate whose implied bandwidth or FLOP rate exceeds the measured ceiling by this factor.
    roofline_margin: float = 1.5

    # --- cluster (kernelgym.cluster) ---
    # Where evaluate / evaluate_batch run: "local" = lanes in this process; "local-dask:N" = a Dask cluster of
    # N worker processes started on this machine (one GPU each when there are GPUs); "tcp://host:8786" = a
    # running Dask scheduler (one worker per GPU: `python -m davinci.kernelgym.cluster worker ADDRESS`).
    cluster: str = "local"
    # Evaluations per Dask task (0 = about four tasks per worker, at most 16 evaluations each).
    cluster_chunk: int = 0

    def __post_init__(self) -> None:
        parse_cluster(self.cluster)
        if self.cluster_chunk < 0:
            raise ConfigError(f"gym.cluster_chunk = {self.cluster_chunk} is negative",
                              "set 0 (auto) or a positive chunk size")
        for name in ("build_dir_max_mb", "build_cache_max_mb"):  # the schema's words (config.schema.RANGES)
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"gym.{name} = {value!r} is out of range: it must be >= 1",
                                  f"set gym.{name} to a whole number of MiB, at least 1")
        if self.build_dir_max_mb > self.build_cache_max_mb:
            raise ConfigError("gym.build_dir_max_mb must be <= gym.build_cache_max_mb",
                              "lower gym.build_dir_max_mb or raise gym.build_cache_max_mb (the cache must hold one "
                              "build folder)")
