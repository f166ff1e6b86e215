"""Metric logging as a protocol, so the engine logs without knowing MLflow exists.

The flow owns the tracking run; engine code (trainer, evaluator batches) receives a `MetricLogger`.
`artifacts.mlflow_logger.MlflowLogger` implements it with `MlflowClient` and an explicit run id (the
fluent API is thread-local and leaves orphan runs under Prefect's thread pool). `NullLogger` drops
everything; `MemoryLogger` keeps everything (tests, benchmarks). Always pass `step=`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Protocol, runtime_checkable


@runtime_checkable
class MetricLogger(Protocol):
    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None: ...
    def log_params(self, params: Mapping[str, Any]) -> None: ...
    def log_artifact(self, local_path: str | Path, artifact_path: str | None = None) -> None: ...
    def log_text(self, text: str, artifact_file: str) -> None: ...


class NullLogger:
    """Drops everything (same signatures as a real logger)."""

    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None:
        return None

    def log_params(self, params: Mapping[str, Any]) -> None:
        return None

    def log_artifact(self, local_path: str | Path, artifact_path: str | None = None) -> None:
        return None

    def log_text(self, text: str, artifact_file: str) -> None:
        return None


class MemoryLogger:
    """Keeps every call in lists; for tests and benchmark scripts."""

    def __init__(self) -> None:
        self.metrics: list[tuple[int, dict[str, float]]] = []
        self.params: dict[str, Any] = {}
        self.artifacts: list[tuple[str, str | None]] = []
        self.texts: dict[str, str] = {}

    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None:
        self.metrics.append((step, {k: float(v) for k, v in metrics.items()}))

    def log_params(self, params: Mapping[str, Any]) -> None:
        self.params.update(params)

    def log_artifact(self, local_path: str | Path, artifact_path: str | None = None) -> None:
        self.artifacts.append((str(local_path), artifact_path))

    def log_text(self, text: str, artifact_file: str) -> None:
        self.texts[artifact_file] = text

    def series(self, name: str) -> list[tuple[int, float]]:
        return [(s, m[name]) for s, m in self.metrics if name in m]
