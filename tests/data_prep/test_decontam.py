"""Decontamination: exact, renamed and resized copies of an eval problem are dropped; unrelated ones kept."""

from __future__ import annotations

from dataclasses import replace

import pytest

from data_prep.builtin import builtin_problems
from data_prep.decontam import decontaminate
from davinci.types import Problem

BUILTIN = {p.name: p for p in builtin_problems()}
EVAL = BUILTIN["conv2d_bias_relu"]


def _train(name: str, code: str) -> Problem:
    return Problem(id=f"train/{name}", source="synthetic", level=2, name=name, code=code)


def test_copies_are_dropped_and_unrelated_kept():
    renamed = (
        EVAL.code.replace("self.conv", "self.c1").replace("self.bias", "self.shift")
        .replace("in_channels", "cin").replace("out_channels", "cout").replace("Model(nn", "Model(nn")
    )
    resized = EVAL.code.replace("batch_size = 4", "batch_size = 128").replace("height = width = 18", "height = width = 256")
    train = [
        _train("exact", EVAL.code),
        _train("renamed", renamed),
        _train("resized", resized),
        _train("unrelated", BUILTIN["cumsum"].code),
    ]
    kept, dropped = decontaminate(train, [EVAL, BUILTIN["softmax"]], threshold=0.7)
    assert [p.id for p in kept] == ["train/unrelated"]
    by_id = {d.problem_id: d for d in dropped}
    assert set(by_id) == {"train/exact", "train/renamed", "train/resized"}
    for record in dropped:
        assert record.stage == "decontamination"
        assert record.matched_id == EVAL.id
        assert record.score == pytest.approx(1.0)
        assert record.reason == "exact-copy"  # canonical tokens equal: names and sizes do not matter


def test_same_task_written_differently_is_caught_by_the_operator_signature():
    """Our swish (x * sigmoid(x)) against a differently written swish with other names and layout."""
    other = '''import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self, beta: float):
        super().__init__()
        self.beta = beta

    def forward(self, inp):
        gate = torch.sigmoid(inp)
        return inp * gate

N = 4096

def get_inputs():
    return [torch.rand(N, 512)]

def get_init_inputs():
    return [1.0]
'''
    kept, [record] = decontaminate([BUILTIN["swish"]], [_train("other_swish", other)], threshold=0.7)
    assert kept == [] and record.reason == "operator-signature" and record.score == pytest.approx(1.0)


def test_threshold_is_the_boundary():
    """relu vs linear_relu: signature similarity 2/3 (one of two ops, in order) -> kept at 0.7, dropped at 0.6."""
    train, eval_ = [BUILTIN["relu"]], [BUILTIN["linear_relu"]]
    assert decontaminate(train, eval_, threshold=0.7)[0] == train
    kept, [record] = decontaminate(train, eval_, threshold=0.6)
    assert kept == [] and record.score == pytest.approx(2 / 3)


def test_bad_threshold_and_empty_eval():
    with pytest.raises(ValueError):
        decontaminate([BUILTIN["relu"]], [BUILTIN["relu"]], threshold=0.0)
    kept, dropped = decontaminate([BUILTIN["relu"], replace(BUILTIN["relu"], id="x")], [], threshold=0.7)
    assert len(kept) == 2 and dropped == []
