"""timing.replace_weights: new storage for a model's weights between timing rounds, same values."""

from __future__ import annotations

import pytest
import torch

from davinci.kernelgym.timing import replace_weights


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(8, 4), torch.nn.BatchNorm1d(4))
    m[0].weight.data = m[0].weight.data.t().contiguous().t()  # a non-contiguous weight keeps its strides
    return m


def test_weights_move_with_the_same_values_and_strides():
    m = _model()
    before = {k: (v.clone(), v.stride(), v.data_ptr()) for k, v in m.state_dict().items()}
    keep: list = []
    replace_weights(m, keep, seed=1, mode="reclone", device="cpu")
    for k, v in m.state_dict().items():
        value, stride, ptr = before[k]
        assert torch.equal(v, value) and v.stride() == stride
        if v.numel():
            assert v.data_ptr() != ptr, k


def test_first_generation_stays_alive_for_captured_pointers():
    m = _model()
    first = m[0].weight.data_ptr()
    keep: list = []
    for seed in range(3):
        replace_weights(m, keep, seed=seed, mode="reclone", device="cpu")
    assert first in {t.data_ptr() for t in keep}  # still allocated: a pointer taken at init reads valid data
    assert len(keep) == len(list(m.parameters())) + len(list(m.buffers()))  # only the first generation


def test_off_changes_nothing_and_unknown_mode_lists_the_valid_ones():
    m = _model()
    ptr = m[0].weight.data_ptr()
    assert replace_weights(m, [], seed=0, mode="off", device="cpu") is None
    assert m[0].weight.data_ptr() == ptr
    with pytest.raises(ValueError, match="off, reclone, fresh"):
        replace_weights(m, [], seed=0, mode="shuffle", device="cpu")
