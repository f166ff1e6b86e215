"""Configuration of the eval stage and of tracking (the other stages' sections live with their packages)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class EvalStageConfig:
    # Policy turns per eval problem (the evaluator's feedback is appended between turns).
    turns: int = 2
    # fast_p thresholds, exactly KernelBench's list.
    p_values: tuple[float, ...] = (0.0, 0.5, 0.8, 1.0, 1.5, 2.0)
    # Evaluate at most this many eval problems (0 = all).
    limit: int = 0
    # Greedy decoding for eval (sampling is for RL rollouts).
    greedy: bool = True
    # Use the skill library at eval time (ablation switch: false = no skill injection).
    use_skills: bool = True
    # Time the torch.compile baseline even on a CPU (off for RL rollouts there: ~10-30 s per new problem),
    # so the eval stage's fast_p table has both columns everywhere.
    compile_baseline_on_cpu: bool = True


@dataclass(frozen=True)
class TrackingConfig:
    # MLflow experiment that holds pipeline runs.
    experiment: str = "davinci-kernel"
    # "" = $MLFLOW_TRACKING_URI if set, else the project's own SQLite store (mlruns/mlflow.db).
    tracking_uri: str = ""
    # Port of the MLflow UI that `davinci-kernel ui` starts and every printed link points at (`ui --port` wins).
    ui_port: int = 5000
    # Fraction of RL and eval episodes logged as MLflow traces (0 = none, 1 = every episode); sampled by
    # episode id, so a resumed epoch traces the same episodes.
    trace_sample: float = 1.0
    # Log system metrics (CPU, memory, and GPU utilisation / memory where a GPU is visible) on stage runs.
    system_metrics: bool = False
