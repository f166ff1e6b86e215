"""Problem sources: validation, file loading errors with their fix, shape overrides and variants."""

from __future__ import annotations

import pytest

from davinci.errors import InputNotFound, MalformedInput
from davinci.kernelgym.problem import (apply_shape_overrides, load_problem_file, shape_variants, size_constants,
                                       validate_problem_code)

CODE = """import torch
import torch.nn as nn
class Model(nn.Module):
    def forward(self, x):
        return x
batch_size = 16
h = w = 128
N = 2048 * 2
kernel_size = 3
def get_inputs():
    return [torch.rand(batch_size, h, w)]
def get_init_inputs():
    return []
"""


def test_size_constants_reads_expressions_and_chained_targets():
    assert size_constants(CODE) == {"batch_size": 16, "h": 128, "w": 128, "N": 4096, "kernel_size": 3}


def test_overrides_rewrite_only_the_named_constants():
    out = apply_shape_overrides(CODE, {"batch_size": 4, "w": 64})
    ns: dict = {}
    exec(out, ns)
    assert (ns["batch_size"], ns["h"], ns["w"], ns["N"]) == (4, 128, 64, 4096)


def test_unknown_override_lists_the_known_names():
    with pytest.raises(MalformedInput) as e:
        apply_shape_overrides(CODE, {"batchsize": 4})
    assert "batch_size" in e.value.hint


def test_variants_are_seeded_distinct_and_leave_structure_alone():
    a, b = shape_variants(CODE, 3, seed=7), shape_variants(CODE, 3, seed=7)
    assert a == b and len(a) == 3 and len({tuple(sorted(v.items())) for v in a}) == 3
    assert all("kernel_size" not in v for v in a)
    small = shape_variants(CODE, 2, seed=1, max_elements=4096)
    assert small and all(v["batch_size"] * v["h"] * v["w"] * v["N"] <= 4096 for v in small)


def test_validation_and_file_errors(tmp_path):
    assert validate_problem_code(CODE) == []
    assert validate_problem_code("class Model: pass") == ["get_inputs", "get_init_inputs"]
    with pytest.raises(InputNotFound):
        load_problem_file(tmp_path / "missing.py")
    bad = tmp_path / "bad.py"
    bad.write_text("def get_inputs(): return []")
    with pytest.raises(MalformedInput) as e:
        load_problem_file(bad)
    assert "Model" in str(e.value)
    lvl = tmp_path / "level2"
    lvl.mkdir()
    (lvl / "7_Thing.py").write_text(CODE)
    p = load_problem_file(lvl / "7_Thing.py")
    assert (p.level, p.source, p.id) == (2, "kernelbench", "kernelbench/L2/7_Thing")
