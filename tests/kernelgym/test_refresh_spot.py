"""A timing refresh writes the same values into every input set whichever set is the secret spot (only the spot's
output is checked, so a set that looked different when it is not the spot could be skipped). Attack first: with
a finiteness decision made for the spot set alone, the sets whose draw overflowed the reference (exp of a
spiked input) were never the spot, and a candidate could tell them apart from the inputs (review finding on
refworker.op_refresh). Runs the reference worker's refresh in process on the CPU, host copies."""

from __future__ import annotations

from collections import OrderedDict
from pathlib import Path

import torch

from davinci.kernelgym.refworker import ProblemState, RefWorker

CODE = """
import torch
class Model(torch.nn.Module):
    def forward(self, x):
        return torch.exp(x)
def get_inputs():
    return [torch.randn(4096) * 2]
def get_init_inputs():
    return []
"""


def _worker(tmp_path: Path) -> tuple[RefWorker, ProblemState]:
    worker = RefWorker.__new__(RefWorker)  # the op handlers only, without a channel
    worker.device, worker.cuda = "cpu", False
    st = ProblemState("k", CODE, 0, "cpu", tmp_path)
    worker.problems = OrderedDict(k=st)
    st.dist_ok["spikes"] = True  # a trial's draw stayed finite
    st.sets = [[] for _ in range(4)]
    return worker, st


def test_every_set_holds_the_same_values_whichever_set_is_the_spot(tmp_path):
    worker, st = _worker(tmp_path)
    overflowed = 0
    for rnd in range(40):
        held = []
        for spot in range(4):
            worker.op_refresh({"key": "k", "seed": 1000 + rnd, "spot": spot, "host": True, "dist": "spikes"}, [])
            held.append([s[0].clone() for s in st.sets])
            assert torch.isfinite(st.model(st.sets[spot][0])).all()  # the spot reference is finite
        for other in held[1:]:
            assert all(torch.equal(a, b) for a, b in zip(held[0], other))
        overflowed += sum(not bool(torch.isfinite(torch.exp(s[0])).all()) for s in st.sets)
    assert overflowed == 0  # a set whose draw overflowed took native values, set by set
