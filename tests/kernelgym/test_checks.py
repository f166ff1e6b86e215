"""Static checks on small sources (one capability each), presets, and unknown names that must raise."""

from __future__ import annotations

import pytest

from davinci.errors import UnknownName
from davinci.kernelgym.backend import detect_backend, kernel_matches
from davinci.kernelgym.checks import PRESETS, Evidence, resolve_checks, runtime_findings, static_findings

PROBLEM = """import torch
import torch.nn as nn
class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3)
    def forward(self, x):
        return torch.relu(self.conv(x))
def get_inputs(): return []
def get_init_inputs(): return []
"""
HONEST = """import torch
import torch.nn as nn
import triton
import triton.language as tl
@triton.jit
def k(x_ptr, n, BLOCK: tl.constexpr):
    pass
class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3)
    def forward(self, x):
        y = self.conv(x)
        out = torch.empty_like(y)
        k[(1,)](out, out.numel(), BLOCK=128)
        return out
"""


def flags(code: str, preset: str = "strict") -> set[str]:
    return {f.check for f in static_findings(resolve_checks(preset), code, PROBLEM, detect_backend(code))}


def test_honest_partial_replacement_is_not_flagged():
    assert flags(HONEST) == set()


@pytest.mark.parametrize("snippet, check", [
    ("import threading", "threads_processes"),
    ("from concurrent.futures import ThreadPoolExecutor", "threads_processes"),
    ("import os\nos.fork()", "threads_processes"),
    ("import gc", "introspection"),
    ("import sys\nf = sys._getframe(0)", "introspection"),
    ("g = (lambda: 0).__globals__", "introspection"),
    ("x = open('/tmp/x').read()", "io_access"),
    ("import socket", "io_access"),
    ("p = '/proc/self/fd'", "io_access"),
    ("import sys\nsys.exit(0)", "process_exit"),
    ("import ctypes", "native_escape"),
    ("import time\ntime.perf_counter = lambda: 0.0", "monkeypatch"),
    ("setattr(torch.cuda, 'synchronize', lambda: None)", "monkeypatch"),
    ("torch.backends.cuda.matmul.allow_tf32 = True", "global_flags"),
    ("s = torch.cuda.Stream()", "streams"),
    ("src = 'cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);'", "streams"),
    ("src = 'attr.accessPolicyWindow.hitProp = cudaAccessPropertyPersisting;'", "cache_control"),
    ("class L(torch.Tensor):\n    pass", "tensor_subclass"),
    ("y = torch.Tensor._make_subclass(torch.Tensor, torch.zeros(1))", "tensor_subclass"),
    ("y = torch.zeros(2).half()", "precision_downgrade"),
    ("y = tl.dot(a, b, input_precision='tf32')", "precision_downgrade"),
])
def test_each_static_check_fires_on_its_capability(snippet, check):
    assert check in flags(HONEST + "\n" + snippet + "\n")


def test_exact_dot_products_are_not_a_downgrade():
    assert "precision_downgrade" not in flags(HONEST + "\ny = tl.dot(a, b, input_precision='ieee')\n")


def test_torch_fallback_needs_every_reference_op_in_torch():
    both = HONEST.replace("y = self.conv(x)", "y = torch.relu(self.conv(x))")
    assert "torch_fallback" in flags(both)
    assert "torch_fallback" not in flags(HONEST)  # conv kept, relu replaced: a partial kernel, allowed


def test_reference_reuse_and_try_fallbacks():
    inherit = HONEST.replace("class ModelNew(nn.Module):", "class ModelNew(Model):")
    assert "reference_fallback" in flags(inherit)
    guarded = HONEST.replace("        return out\n", "        try:\n            return out\n        except Exception:\n"
                                                   "            return torch.relu(y)\n")
    assert {"try_fallback", "try_except_any"} <= flags(guarded)
    assert "try_except_any" not in flags(guarded, "default") and "try_fallback" in flags(guarded, "default")


def test_no_kernel_backend_and_kernel_names():
    plain = "import torch.nn as nn\nclass ModelNew(nn.Module):\n    def forward(self, x):\n        return x\n"
    assert "no_custom_kernel" in flags(plain)
    cuda = ('from torch.utils.cpp_extension import load_inline\nsrc = "__global__ void relu_kernel(float* x) {}"\n'
            'ext = load_inline("relu", cpp_sources="", cuda_sources=src)\n')
    info = detect_backend(cuda)
    assert info.backend == "cuda" and info.cuda_kernels == ("relu_kernel",)
    assert kernel_matches("relu_kernel(float*)", info.kernel_names)
    assert kernel_matches("_Z11relu_kernelPf", info.kernel_names)
    assert not kernel_matches("my_relu_kernel2", info.kernel_names)


def test_presets_and_unknown_names():
    assert PRESETS["none"] == () and set(PRESETS["default"]) < set(PRESETS["strict"])
    assert resolve_checks("streams, decoy_kernel") == ("streams", "decoy_kernel")
    with pytest.raises(UnknownName) as e:
        resolve_checks("strickt")
    assert "strict" in e.value.hint
    with pytest.raises(UnknownName):
        resolve_checks("streams,not_a_check")


def test_runtime_checks_read_evidence():
    ev = Evidence(backend="triton", kernel_names=("relu_kernel",), cuda=True, launched=set(),
                  cand_event_ms=[0.1] * 5, cand_host_ms=[2.0] * 5, overhead_ms=0.02)
    got = {f.check for f in runtime_findings(resolve_checks("runtime"), ev)}
    assert {"decoy_kernel", "timing_escape"} <= got
    ev.launched, ev.cand_host_ms = {"relu_kernel"}, [0.13] * 5
    assert runtime_findings(resolve_checks("runtime"), ev) == []
    ev.reported_ms, ev.wall_estimate_ms, ev.timing_rounds = 0.1, 5.0, 3
    assert [f.check for f in runtime_findings(resolve_checks("runtime"), ev)] == ["wall_clock_mismatch"]


def _timed(event_ms: float, host_ms: float, after_ms: float) -> Evidence:
    return Evidence(backend="triton", kernel_names=("swish_kernel",), cuda=True, launched={"swish_kernel"},
                    cand_event_ms=[event_ms] * 5, cand_host_ms=[host_ms] * 5, cand_after_ms=[after_ms] * 5,
                    overhead_ms=0.02)


def test_timing_escape_ignores_launch_cost_before_the_return():
    # Seen on the H100: an honest 64k-element Triton swish, 0.006 ms of events behind 0.19 ms of host time,
    # nearly all of it Python and the launcher before the call returned (the sync after it waited 0.03 ms).
    assert runtime_findings(("timing_escape",), _timed(0.006, 0.19, 0.03)) == []


def test_timing_escape_flags_work_still_running_after_the_return():
    # A side stream: nothing on the timed stream (events 0.01 ms), 1.9 ms of GPU work waited for after return.
    got = runtime_findings(("timing_escape",), _timed(0.01, 2.0, 1.9))
    assert [f.check for f in got] == ["timing_escape"] and "after the call returned" in got[0].reason


def test_timing_escape_threshold_hand_computed():
    # waited = after - overhead = 0.16 - 0.02 = 0.14; events 0.08; allowed gap max(0.04, 0.05) = 0.05.
    assert runtime_findings(("timing_escape",), _timed(0.08, 0.3, 0.16))  # 0.14 - 0.08 = 0.06 > 0.05
    assert not runtime_findings(("timing_escape",), _timed(0.08, 0.3, 0.14))  # 0.12 - 0.08 = 0.04


def test_decoy_kernel_needs_a_forward_that_returned():
    # Seen on the H100: `relu_kernel[grid](...)` with no relu_kernel defined raises NameError before any
    # launch; that is a runtime error, not a decoy (a flag would turn it into the hack penalty).
    ev = Evidence(backend="triton", kernel_names=("swish_kernel",), cuda=True, launched=set(), forwards_returned=0)
    assert runtime_findings(("decoy_kernel",), ev) == []
    ev.forwards_returned = 2  # it returned twice without launching its kernel: a decoy
    assert [f.check for f in runtime_findings(("decoy_kernel",), ev)] == ["decoy_kernel"]


def test_gpu_not_idle_reports_the_probe_of_a_busy_gpu():
    from davinci.kernelgym.checks.runtime import gpu_not_idle

    assert gpu_not_idle(Evidence()) is None
    assert gpu_not_idle(Evidence(gpu_busy="probe took 2.00 ms")) == "probe took 2.00 ms"


def test_busy_probe_is_recorded_only_past_its_limit():
    from types import SimpleNamespace

    from davinci.kernelgym.perf import _note_busy, canary_limit

    def job(canary_ms: float, cuda: bool = True):
        return SimpleNamespace(lane=SimpleNamespace(info={"canary_ms": canary_ms}, cuda=cuda), evidence=Evidence())

    j = job(0.15)
    assert canary_limit(j) == pytest.approx(0.95)  # 3 x 0.15 + 0.5
    _note_busy(j, "eager", {"canary_ms": 0.9, "canary_probes": 1})
    assert j.evidence.gpu_busy is None
    _note_busy(j, "eager", {"canary_ms": 2.0, "canary_probes": 40})
    assert "2.00 ms" in j.evidence.gpu_busy and "limit 0.95 ms" in j.evidence.gpu_busy
    assert canary_limit(job(0.15, cuda=False)) is None and canary_limit(job(0.0)) is None
