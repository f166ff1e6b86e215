"""Helpers shared by tasks: JSONL I/O, loading problems, building config sections, live metric logging."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Mapping

from davinci.config.loader import build
from davinci.jsonl import read_jsonl  # the engine's one JSONL helper; tasks read through it too
from davinci.tracking import MetricLogger
from davinci.types import Problem


def load_problems(path: str | Path) -> list[Problem]:
    if not Path(path).exists():
        raise FileNotFoundError(f"no problems file {path}")
    return [Problem.from_dict(d) for d in read_jsonl(path)]


def section(cls: type, raw: Mapping[str, Any], name: str) -> Any:
    return build(cls, dict(raw), name)


def task_logger(run_ref: Mapping[str, str] | None, mirror: Path, prefix: str = "") -> MetricLogger:
    """Live MLflow logging into the flow's run when `run_ref` is given; always mirrored to `mirror`."""
    from artifacts.mlflow_logger import JsonlLogger, MlflowLogger
    from artifacts.store import StoreLocation, TrackingStore

    if not run_ref:
        return JsonlLogger(mirror)
    store = TrackingStore(StoreLocation(run_ref["tracking_uri"], None), run_ref["experiment"])
    mirror.parent.mkdir(parents=True, exist_ok=True)
    return MlflowLogger(store, run_ref["run_id"], mirror=mirror, prefix=prefix)


def busy_elsewhere() -> int:
    """Cores other processes keep busy now: the 1-minute load average minus this process's own share (1)."""
    return max(0, round(os.getloadavg()[0]) - 1)


def thread_budget(busy_workers: int | None = None, cores: int | None = None) -> int:
    """Torch intra-op threads for the trainer: the cores not held by other busy processes (other jobs, by the
    load average), always leaving one core to the evaluator's workers and the rest of the box; at least 1.
    Torch's OpenMP threads wait for each other at every op, so one thread more than there are free cores
    makes every op wait for a descheduled thread: 0.40 vs 3.0 steps/s on a busy 2-core box
    (benchmarks/sft_threads.py, results/cpu/README.md)."""
    cores = cores or len(os.sched_getaffinity(0))
    busy = busy_elsewhere() if busy_workers is None else busy_workers
    return max(1, min(cores - 1, cores - busy))


def configure_threads() -> int:
    """Set torch's intra-op threads to `thread_budget()` (or `$DAVINCI_TORCH_THREADS`); returns the count."""
    import torch

    wanted = os.environ.get("DAVINCI_TORCH_THREADS", "")
    threads = int(wanted) if wanted.isdigit() and int(wanted) > 0 else thread_budget()
    torch.set_num_threads(threads)
    return threads
