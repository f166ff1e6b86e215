"""KernelBench loaders: the real local copy (../shared/kernelbench), malformed folders, HF row conversion."""

from __future__ import annotations

from pathlib import Path

import pytest

from data_prep.kernelbench import (
    PROJECT_ROOT,
    load_kernelbench,
    load_kernelbench_hf,
    problems_from_hf_rows,
    resolve_levels_root,
)
from davinci.errors import InputNotFound, MalformedInput

SHARED = PROJECT_ROOT.parent / "shared" / "kernelbench"
needs_shared = pytest.mark.skipif(not SHARED.exists(), reason="no ../shared/kernelbench on this machine")

GOOD = """import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self):
        super().__init__()
    def forward(self, x):
        return torch.relu(x)

batch_size = 16

def get_inputs():
    return [torch.rand(batch_size, 16)]

def get_init_inputs():
    return []
"""


@needs_shared
def test_local_counts_ids_and_order():
    problems = load_kernelbench(SHARED, levels=(1, 2, 3))
    counts = {lvl: sum(p.level == lvl for p in problems) for lvl in (1, 2, 3)}
    assert counts == {1: 100, 2: 100, 3: 50}
    assert len({p.id for p in problems}) == 250
    relu = next(p for p in problems if p.id == "kernelbench/L1/19_ReLU")
    assert relu.name == "ReLU" and relu.source == "kernelbench" and "relu" in relu.tags
    level1 = [p.id for p in problems if p.level == 1]
    assert level1[:3] == [
        "kernelbench/L1/1_Square_matrix_multiplication_",
        "kernelbench/L1/2_Standard_matrix_multiplication_",
        "kernelbench/L1/3_Batched_matrix_multiplication",
    ]  # numeric order, not lexicographic (10_ would come before 2_)


@needs_shared
def test_root_or_kernelbench_folder_default_path_and_limit(monkeypatch):
    assert resolve_levels_root(SHARED) == resolve_levels_root(SHARED / "KernelBench")
    monkeypatch.delenv("DAVINCI_KERNELBENCH", raising=False)
    assert [p.id for p in load_kernelbench("", levels=(2,), limit=3)] == [
        p.id for p in load_kernelbench(SHARED / "KernelBench", levels=(2,))[:3]
    ]
    monkeypatch.setenv("DAVINCI_KERNELBENCH", str(SHARED))
    assert len(load_kernelbench("", levels=(3,))) == 50


def _folder(tmp_path: Path, files: dict[str, str]) -> Path:
    level = tmp_path / "KernelBench" / "level1"
    level.mkdir(parents=True)
    for name, code in files.items():
        (level / name).write_text(code)
    return tmp_path


def test_file_without_get_inputs_names_file_and_fix(tmp_path: Path):
    root = _folder(tmp_path, {"1_Good.py": GOOD, "2_Bad.py": GOOD.replace("def get_inputs", "def make_inputs")})
    with pytest.raises(MalformedInput) as err:
        load_kernelbench(root, levels=(1,))
    text = str(err.value)
    assert "2_Bad.py" in text and "get_inputs" in text and "fix:" in text


def test_files_are_parsed_never_executed(tmp_path: Path):
    """A file that would kill the process on import still loads: the loader only uses `ast`."""
    root = _folder(tmp_path, {"1_Exit.py": "import os\nos._exit(3)\n" + GOOD})
    [problem] = load_kernelbench(root, levels=(1,))
    assert problem.id == "kernelbench/L1/1_Exit" and "os._exit" in problem.code


def test_missing_folder_and_empty_level(tmp_path: Path, monkeypatch):
    with pytest.raises(InputNotFound, match="does not exist"):
        load_kernelbench(tmp_path / "nowhere", levels=(1,))
    root = _folder(tmp_path, {"README.md": "not a problem"})
    with pytest.raises(InputNotFound, match="holds no problem files") as err:
        load_kernelbench(root, levels=(1,))
    assert "data.kernelbench_levels" in str(err.value)
    with pytest.raises(InputNotFound, match="level 2 folder"):
        load_kernelbench(root, levels=(2,))


def test_hf_rows_convert_like_the_local_files(tmp_path: Path):
    datasets = pytest.importorskip("datasets")
    root = _folder(tmp_path, {"19_ReLU.py": GOOD, "2_Other.py": GOOD.replace("relu", "sigmoid")})
    local = load_kernelbench(root, levels=(1,))
    rows = datasets.Dataset.from_dict(
        {"problem_id": [19, 2], "name": ["19_ReLU.py", "Other"], "code": [GOOD, GOOD.replace("relu", "sigmoid")]}
    )
    converted = problems_from_hf_rows(rows, level=1)
    assert converted == local  # same ids, names, code and tags; ordered by problem_id
    assert [p.id for p in converted] == ["kernelbench/L1/2_Other", "kernelbench/L1/19_ReLU"]
    with pytest.raises(MalformedInput, match="lacks columns"):
        problems_from_hf_rows([{"problem_id": 1, "code": GOOD}], level=1)


def test_hf_offline_is_a_clear_error(monkeypatch):
    pytest.importorskip("datasets")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(InputNotFound) as err:
        load_kernelbench_hf(levels=(1,), dataset="ScalingIntelligence/KernelBench-not-cached-here")
    assert "kernelbench_hf=false" in str(err.value)
