"""Stage output manifests and task cache keys."""

from __future__ import annotations

from pathlib import Path

import pytest

from artifacts.refs import StageOutputs
from davinci.errors import InputNotFound, MalformedInput
from tasks.caching import code_hash, params_hash, task_key, work_dir


def test_outputs_round_trip_and_exists(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("x")
    out = StageOutputs("data", str(tmp_path), {"a": "a.txt"}, {"n": 1}).write()
    again = StageOutputs.read(tmp_path)
    assert again == out and again.exists()
    (tmp_path / "a.txt").unlink()
    assert not again.exists()


def test_outputs_errors_name_the_fix(tmp_path: Path) -> None:
    out = StageOutputs("sft", str(tmp_path), {"checkpoint": "ckpt"})
    with pytest.raises(InputNotFound, match="no 'loss'"):
        out.path("loss")
    with pytest.raises(MalformedInput):
        StageOutputs.from_dict({"dir": "x"})
    with pytest.raises(InputNotFound):
        StageOutputs.read(tmp_path / "missing")


def test_params_hash_ignores_excluded_and_order() -> None:
    a = params_hash({"x": 1, "y": [1, 2], "run_ref": {"run_id": "A"}}, exclude=("run_ref",))
    b = params_hash({"y": [1, 2], "x": 1, "run_ref": {"run_id": "B"}}, exclude=("run_ref",))
    assert a == b
    assert a != params_hash({"x": 2, "y": [1, 2]})


def test_task_key_changes_with_code_scope() -> None:
    k1 = task_key("t", {"x": 1}, ("davinci/config",))
    k2 = task_key("t", {"x": 1}, ("davinci/registry.py",))
    assert k1 != k2 and k1.startswith("t-")
    assert code_hash(("davinci/registry.py",)) == code_hash(("davinci/registry.py",))


def test_work_dir_is_deterministic(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DAVINCI_HOME", str(tmp_path))
    a = work_dir("t", {"x": 1}, ("davinci/config",))
    b = work_dir("t", {"x": 1}, ("davinci/config",))
    assert a == b and a.is_dir() and str(a).startswith(str(tmp_path))
