"""Where the project keeps its state, and the environment its tools need before they are imported.

Layout under the home folder (`$DAVINCI_HOME`, else the checkout this code runs from, else the cwd):

    mlruns/mlflow.db        MLflow tracking store (SQLite)      overridden by $MLFLOW_TRACKING_URI
    mlruns/artifacts/       MLflow artifact root
    .davinci/prefect/       PREFECT_HOME (ephemeral API database, persisted task results = the resume cache)
    .davinci/work/          stage and task output folders, named by their cache keys
    .davinci/skills/        the versioned skill store
    .davinci/cache/         evaluator caches (baselines, compiled kernels)
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path


def project_home() -> Path:
    env = os.environ.get("DAVINCI_HOME")
    if env:
        return Path(env).expanduser().resolve()
    checkout = Path(__file__).resolve().parents[1]
    if (checkout / "pyproject.toml").exists() and (checkout / "davinci").is_dir():
        return checkout
    return Path.cwd().resolve()


@dataclass(frozen=True)
class Home:
    root: Path

    @classmethod
    def current(cls) -> "Home":
        return cls(project_home())

    @property
    def mlruns(self) -> Path:
        return self.root / "mlruns"

    @property
    def state(self) -> Path:
        return self.root / ".davinci"

    @property
    def prefect(self) -> Path:
        return self.state / "prefect"

    @property
    def work(self) -> Path:
        return self.state / "work"

    @property
    def skills(self) -> Path:
        return self.state / "skills"

    @property
    def cache(self) -> Path:
        return self.state / "cache"

    @property
    def logs(self) -> Path:
        return self.state / "logs"


def prepare_environment(home: Home, verbose: bool = False) -> None:
    """Set the variables Prefect, MLflow and the evaluator read at import; call before importing them.

    Values already set by the user win (`setdefault`).
    """
    home.prefect.mkdir(parents=True, exist_ok=True)
    defaults = {
        "PREFECT_HOME": str(home.prefect),
        # The first ephemeral-server start migrates a fresh SQLite DB: 15-75 s on slow boxes (default 20 s).
        "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "120",
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        # Prefect's loggers stay at INFO (its API / UI keeps flow and task logs); its console handler is
        # quiet unless --verbose: the CLI prints its own progress and one line per error, and the full
        # traceback of an internal error goes to .davinci/logs/last-error.log.
        "PREFECT_LOGGING_LEVEL": "INFO",
        "PREFECT_LOGGING_HANDLERS_CONSOLE_LEVEL": "INFO" if verbose else "CRITICAL",
        "PREFECT_LOGGING_LOG_PRINTS": "false",
        "PREFECT_RESULTS_PERSIST_BY_DEFAULT": "true",
        "PREFECT_LOCAL_STORAGE_PATH": str(home.prefect / "storage"),
        "DAVINCI_CACHE_DIR": str(home.cache),
        "TOKENIZERS_PARALLELISM": "false",
        "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR": "false",
        "MLFLOW_LOGGING_LEVEL": "WARNING",
        # transformers draws its load/save progress bars through huggingface_hub's switch.
        "HF_HUB_DISABLE_PROGRESS_BARS": "1",
        "TRANSFORMERS_VERBOSITY": "error",
        "PYTHONWARNINGS": os.environ.get("PYTHONWARNINGS", "ignore::DeprecationWarning"),
    }
    for key, value in defaults.items():
        os.environ.setdefault(key, value)
    for name in ("mlflow", "alembic"):
        logging.getLogger(name).setLevel(logging.DEBUG if verbose else logging.WARNING)
