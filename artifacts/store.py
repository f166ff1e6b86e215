"""The MLflow store: one experiment, parent runs per pipeline run, child runs per stage.

Choices:
- Every call goes through `MlflowClient` with an explicit run id. The fluent API keeps a thread-local
  active-run stack, and under Prefect's thread pool it silently opens orphan runs.
- Default store: SQLite + an artifact folder inside the project home; `$MLFLOW_TRACKING_URI` (or the
  profile's `tracking.tracking_uri`) overrides it.
- The experiment is tagged `mlflow.experimentKind=custom_model_development`, so the UI opens on its runs.
- Lookups that the user drives (a run id on the command line) raise `InputNotFound` with the fix.
- A local SQLite store is created whole or not at all (`ensure_sqlite_store`): MLflow migrates a fresh
  database in place without a lock, so two processes opening it at once (a pipeline and `davinci-kernel
  runs`, a poller, a Dask worker) collide mid-migration, and a Ctrl-C during the first open leaves a
  half-migrated file every later open fails on. Here the tables are built in a side file under an
  exclusive lock and renamed into place, so any opener, this module's or MLflow's own, sees no file or a
  complete one.
"""

from __future__ import annotations

import fcntl
import glob
import json
import os
import socket
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Iterator, Literal, Mapping

from artifacts.home import Home
from davinci.errors import ConfigError, InputNotFound

if TYPE_CHECKING:
    from mlflow.entities import Run
    from mlflow.tracking import MlflowClient

RunStatus = Literal["RUNNING", "FINISHED", "FAILED", "KILLED"]
Stage = Literal["data", "sft", "rl", "skills", "eval"]
STAGES: tuple[Stage, ...] = ("data", "sft", "rl", "skills", "eval")
PARENT_STAGE = "pipeline"
# MLflow 3's UI opens an experiment on its GenAI dashboard unless it is marked as model development
# ("Machine learning" in the UI); the tag and value are the ones the UI itself writes (mlflow 3.x).
EXPERIMENT_TAGS = {"mlflow.experimentKind": "custom_model_development"}


@dataclass(frozen=True)
class StoreLocation:
    tracking_uri: str
    artifact_root: str | None  # None: the tracking server decides

    @classmethod
    def resolve(cls, home: Home, configured: str = "") -> "StoreLocation":
        uri = configured or os.environ.get("MLFLOW_TRACKING_URI", "")
        if uri:
            return cls(uri, None)
        home.mlruns.mkdir(parents=True, exist_ok=True)
        db = home.mlruns / "mlflow.db"
        return cls(f"sqlite:///{db}", (home.mlruns / "artifacts").resolve().as_uri())


def sqlite_path(tracking_uri: str) -> Path | None:
    """The database file of a `sqlite:///` URI; None for any other store (a server, a SQL database)."""
    prefix = "sqlite:///"
    if not tracking_uri.startswith(prefix) or tracking_uri == f"{prefix}:memory:":
        return None
    return Path(tracking_uri[len(prefix):].split("?", 1)[0])  # four slashes: absolute; three: relative


def _created(db: Path) -> bool:
    """A store file that is there and not empty (a reader opening the URI first leaves an empty SQLite file)."""
    try:
        return db.stat().st_size > 0
    except FileNotFoundError:
        return False


def ensure_sqlite_store(db: Path, artifact_root: str | None) -> None:
    """Create the MLflow tables of `db` atomically if the file does not exist yet.

    Under an exclusive lock on `<db>.lock`: leftovers of an interrupted creation are removed, the tables
    are built in `<db>.creating-<pid>` and the finished file is renamed onto `db`.
    """
    db = db.absolute()
    if _created(db):
        return
    db.parent.mkdir(parents=True, exist_ok=True)
    with open(db.with_name(db.name + ".lock"), "a") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, also when the process dies
        except OSError as exc:
            raise ConfigError(f"cannot lock {lock.name} to create the MLflow store ({exc.strerror})",
                              "put the project home on a local disk, or set MLFLOW_TRACKING_URI to a tracking server") from None
        if _created(db):  # another process created it while this one waited
            return
        for stale in db.parent.glob(glob.escape(db.name) + ".creating-*"):
            stale.unlink(missing_ok=True)
        side = db.with_name(f"{db.name}.creating-{socket.gethostname()}-{os.getpid()}")
        from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore

        store = SqlAlchemyStore(f"sqlite:///{side}", artifact_root or db.parent.joinpath("artifacts").as_uri())
        store.engine.dispose()
        os.replace(side, db)


class TrackingStore:
    """Thin, explicit-id wrapper over `MlflowClient` for one experiment."""

    def __init__(self, location: StoreLocation, experiment: str) -> None:
        self.location = location
        self.experiment_name = experiment
        self._client: MlflowClient | None = None
        self._experiment_id: str | None = None

    @property
    def client(self) -> "MlflowClient":
        if self._client is None:
            from mlflow.tracking import MlflowClient

            db = sqlite_path(self.location.tracking_uri)
            if db is not None:
                ensure_sqlite_store(db, self.location.artifact_root)
            self._client = MlflowClient(tracking_uri=self.location.tracking_uri)
        return self._client

    @property
    def experiment_id(self) -> str:
        if self._experiment_id is None:
            exp = self.client.get_experiment_by_name(self.experiment_name)
            if exp is None:
                self._experiment_id = self.client.create_experiment(
                    self.experiment_name, artifact_location=self.location.artifact_root, tags=EXPERIMENT_TAGS
                )
            else:
                self._experiment_id = exp.experiment_id
                if any(exp.tags.get(k) != v for k, v in EXPERIMENT_TAGS.items()):
                    for key, value in EXPERIMENT_TAGS.items():
                        self.client.set_experiment_tag(self._experiment_id, key, value)
        return self._experiment_id

    # -- runs -------------------------------------------------------------------------------------------
    def create_run(self, name: str, tags: Mapping[str, str], parent_run_id: str | None = None) -> str:
        all_tags = dict(tags)
        if parent_run_id:
            all_tags["mlflow.parentRunId"] = parent_run_id
        run = self.client.create_run(self.experiment_id, run_name=name, tags=all_tags)
        return run.info.run_id

    def set_status(self, run_id: str, status: RunStatus) -> None:
        if status == "RUNNING":
            self.client.update_run(run_id, status="RUNNING")
        else:
            self.client.set_terminated(run_id, status=status)

    def set_tags(self, run_id: str, tags: Mapping[str, Any]) -> None:
        for key, value in tags.items():
            self.client.set_tag(run_id, key, str(value))

    def get_run(self, run_id: str) -> "Run":
        from mlflow.exceptions import MlflowException

        try:
            return self.client.get_run(run_id)
        except MlflowException:
            raise InputNotFound(
                f"no MLflow run with id {run_id!r} in {self.location.tracking_uri}",
                "copy the parent run id that `davinci-kernel run` printed, or list runs with `davinci-kernel runs`",
            ) from None

    def search(self, filter_string: str, max_results: int = 200) -> list["Run"]:
        return list(
            self.client.search_runs(
                [self.experiment_id], filter_string=filter_string, max_results=max_results, order_by=["attributes.start_time DESC"]
            )
        )

    def pipeline_runs(self, run_key: str | None = None) -> list["Run"]:
        flt = f"tags.stage = '{PARENT_STAGE}'"
        if run_key:
            flt += f" and tags.run_key = '{run_key}'"
        return self.search(flt)

    def child_runs(self, parent_run_id: str, stage: str | None = None) -> list["Run"]:
        flt = f"tags.`mlflow.parentRunId` = '{parent_run_id}'"
        if stage:
            flt += f" and tags.stage = '{stage}'"
        return self.search(flt)

    # -- logging ------------------------------------------------------------------------------------------
    def log_params(self, run_id: str, params: Mapping[str, Any]) -> None:
        from mlflow.entities import Param

        existing = self.client.get_run(run_id).data.params
        fresh = [Param(k, str(v)[:6000]) for k, v in params.items() if k not in existing]
        for i in range(0, len(fresh), 100):
            self.client.log_batch(run_id, params=fresh[i : i + 100])

    def log_metrics(self, run_id: str, metrics: Mapping[str, float], step: int) -> None:
        import time

        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        batch = [Metric(k, float(v), now, step) for k, v in metrics.items()]
        if batch:
            self.client.log_batch(run_id, metrics=batch)

    def log_dict(self, run_id: str, data: Any, artifact_file: str) -> None:
        self.client.log_dict(run_id, data, artifact_file)

    def log_text(self, run_id: str, text: str, artifact_file: str) -> None:
        self.client.log_text(run_id, text, artifact_file)

    def log_table(self, run_id: str, rows: list[dict[str, Any]], artifact_file: str) -> None:
        """A table the MLflow UI shows (JSON table artifact) plus an HTML rendering next to it."""
        import pandas as pd

        frame = pd.DataFrame(rows)
        self.client.log_table(run_id, data=frame, artifact_file=artifact_file)
        html_name = artifact_file.rsplit(".", 1)[0] + ".html"
        self.client.log_text(run_id, frame.to_html(index=False, border=0), html_name)

    def log_figure(self, run_id: str, figure: Any, artifact_file: str) -> None:
        self.client.log_figure(run_id, figure, artifact_file)

    def log_artifact(self, run_id: str, path: str | Path, artifact_path: str | None = None) -> None:
        path = Path(path)
        if path.is_dir():
            self.client.log_artifacts(run_id, str(path), artifact_path)
        else:
            self.client.log_artifact(run_id, str(path), artifact_path)

    def download(self, run_id: str, artifact_path: str, dst: Path) -> Path:
        dst.mkdir(parents=True, exist_ok=True)
        return Path(self.client.download_artifacts(run_id, artifact_path, str(dst)))

    def read_json_artifact(self, run_id: str, artifact_file: str) -> Any:
        with tempfile.TemporaryDirectory() as tmp:
            try:
                local = self.download(run_id, artifact_file, Path(tmp))
            except Exception:
                raise InputNotFound(
                    f"run {run_id} has no artifact {artifact_file!r}",
                    "rerun the stage that produces it, or pass the id of a pipeline run whose stages finished",
                ) from None
            return json.loads(local.read_text())

    @contextmanager
    def system_metrics(self, run_id: str, enabled: bool, interval_s: float = 10.0) -> Iterator[None]:
        """MLflow's system metrics (CPU, memory, disk, network; GPU utilisation and memory where `pynvml` finds
        a GPU, `pip install -e .[gpu]`) sampled onto `run_id` while the block runs."""
        if not enabled:
            yield
            return
        from mlflow.system_metrics.system_metrics_monitor import SystemMetricsMonitor

        monitor = SystemMetricsMonitor(run_id, sampling_interval=interval_s, resume_logging=True,
                                       tracking_uri=self.location.tracking_uri)
        monitor.start()
        try:
            yield
        finally:
            monitor.finish()

    def ui_url(self, run_id: str, base: str) -> str:
        """Link to a run in the MLflow UI at `base` (the real port: `flows.context.ui_base`)."""
        return f"{base}/#/experiments/{self.experiment_id}/runs/{run_id}"


def run_tags(run: "Run") -> dict[str, str]:
    return dict(run.data.tags)


def latest(runs: Iterable["Run"], status: RunStatus | None = None) -> "Run | None":
    for run in runs:
        if status is None or run.info.status == status:
            return run
    return None
