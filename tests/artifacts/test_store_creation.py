"""A fresh local SQLite store opened by several processes at once, and after an interrupted first open.

MLflow migrates a new database in place with no lock: three processes opening one fresh file at the same
instant collide mid-migration ("duplicate column", "_alembic_tmp_experiments already exists"), which is
how a pipeline and a poller broke each other's store. `ensure_sqlite_store` builds it in a side file
under a lock and renames it into place.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from artifacts.store import ensure_sqlite_store, sqlite_path

ROOT = Path(__file__).resolve().parents[2]

# Each process waits for a common start instant, opens the fresh store through TrackingStore and creates
# a run; a second, raw MlflowClient then opens the same file as an outside reader (`mlflow ui`) would.
OPENER = """
import sys, time
from pathlib import Path
from artifacts.store import StoreLocation, TrackingStore
db, start = Path(sys.argv[1]), float(sys.argv[2])
while time.time() < start:
    time.sleep(0.002)
store = TrackingStore(StoreLocation(f"sqlite:///{db}", db.parent.joinpath("artifacts").as_uri()), "exp")
run = store.create_run("r", {"who": sys.argv[3]})
from mlflow.tracking import MlflowClient
print(MlflowClient(f"sqlite:///{db}").get_run(run).data.tags["who"])
"""


def test_concurrent_first_opens_all_succeed(tmp_path: Path) -> None:
    db = tmp_path / "mlruns" / "mlflow.db"
    start = time.time() + 6  # after every interpreter has imported mlflow
    procs = [subprocess.Popen([sys.executable, "-c", OPENER, str(db), str(start), f"p{i}"], cwd=ROOT,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in range(3)]
    outs = [p.communicate(timeout=240) for p in procs]
    for i, (proc, (out, err)) in enumerate(zip(procs, outs)):
        assert proc.returncode == 0, err[-2000:]
        assert out.strip() == f"p{i}"
    assert not list(db.parent.glob("mlflow.db.creating-*"))


def test_leftover_of_an_interrupted_creation_is_replaced(tmp_path: Path) -> None:
    db = tmp_path / "mlflow.db"
    half = tmp_path / "mlflow.db.creating-99999"
    half.write_bytes(b"SQLite format 3\x00 but cut off")  # what a kill during the first open leaves
    ensure_sqlite_store(db, None)
    assert db.exists() and not half.exists()
    from mlflow.tracking import MlflowClient

    assert [e.name for e in MlflowClient(f"sqlite:///{db}").search_experiments()] == ["Default"]


def test_sqlite_path_reads_absolute_and_relative_uris() -> None:
    assert sqlite_path("sqlite:////tmp/a/mlflow.db") == Path("/tmp/a/mlflow.db")
    assert sqlite_path("sqlite:///rel/mlflow.db") == Path("rel/mlflow.db")
    assert sqlite_path("http://127.0.0.1:5000") is None
    assert sqlite_path("sqlite:///:memory:") is None


def test_an_empty_file_left_by_an_early_reader_is_replaced_by_a_whole_store(tmp_path: Path) -> None:
    db = tmp_path / "mlflow.db"
    db.touch()  # what `sqlite3 mlflow.db` or an MLflow reader opening the URI first leaves
    ensure_sqlite_store(db, None)
    from mlflow.tracking import MlflowClient

    assert db.stat().st_size > 0
    assert [e.name for e in MlflowClient(f"sqlite:///{db}").search_experiments()] == ["Default"]


def test_a_relative_store_path_is_created(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    ensure_sqlite_store(Path("rel") / "mlflow.db", None)
    assert (tmp_path / "rel" / "mlflow.db").stat().st_size > 0
