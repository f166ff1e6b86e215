"""`MetricLogger` backed by MLflow: the engine logs through it without importing MLflow.

Every call names its run id explicitly (see artifacts.store). Metrics are also appended to a JSONL file
when `mirror` is given, so a cached task can replay them into a later run (resume keeps runs complete).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping

from artifacts.store import TrackingStore


class MlflowLogger:
    def __init__(self, store: TrackingStore, run_id: str, mirror: Path | None = None, prefix: str = "") -> None:
        self.store = store
        self.run_id = run_id
        self.mirror = mirror
        self.prefix = prefix

    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None:
        named = {f"{self.prefix}{k}": float(v) for k, v in metrics.items()}
        self.store.log_metrics(self.run_id, named, step)
        if self.mirror is not None:
            with self.mirror.open("a") as fh:
                fh.write(json.dumps({"step": step, "metrics": named}) + "\n")

    def log_params(self, params: Mapping[str, Any]) -> None:
        self.store.log_params(self.run_id, {f"{self.prefix}{k}": v for k, v in params.items()})

    def log_artifact(self, local_path: str | Path, artifact_path: str | None = None) -> None:
        self.store.log_artifact(self.run_id, local_path, artifact_path)

    def log_text(self, text: str, artifact_file: str) -> None:
        self.store.log_text(self.run_id, text, artifact_file)


class JsonlLogger:
    """Writes metrics to a JSONL file only (tasks whose run id is unknown, e.g. when replaying later)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)

    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None:
        with self.path.open("a") as fh:
            fh.write(json.dumps({"step": step, "metrics": {k: float(v) for k, v in metrics.items()}}) + "\n")

    def log_params(self, params: Mapping[str, Any]) -> None:
        return None

    def log_artifact(self, local_path: str | Path, artifact_path: str | None = None) -> None:
        return None

    def log_text(self, text: str, artifact_file: str) -> None:
        (self.path.parent / Path(artifact_file).name).write_text(text)


def replay_metrics(store: TrackingStore, run_id: str, path: Path, prefix: str = "") -> int:
    """Log every line of a metrics JSONL into a run; returns the number of lines replayed."""
    if not path.exists():
        return 0
    count = 0
    for line in path.read_text().splitlines():
        if not line.strip():
            continue
        rec = json.loads(line)
        store.log_metrics(run_id, {f"{prefix}{k}": v for k, v in rec["metrics"].items()}, int(rec["step"]))
        count += 1
    return count
