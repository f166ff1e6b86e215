"""Helpers shared by tasks: JSONL I/O, loading problems, building config sections, live metric logging."""

from __future__ import annotations

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
