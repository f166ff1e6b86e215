"""The profiled audit round's kernel table (worker._profiled_kernels): the harness's own device work (input
fills, the L2 flush, the idle probe, output copies) is left out of the coverage figure, by the profiler's
link from each device event to the CPU range it was launched in. The events are built with torch's own
FunctionEvent type, as the profiler builds them on a GPU (no CUDA profiler runs on this machine)."""

from __future__ import annotations

from torch.autograd import DeviceType
from torch.autograd.profiler_util import FunctionEvent

from davinci.kernelgym.worker import HARNESS_RANGE, _profiled_kernels


def _cpu(i: int, name: str, kernels: list[tuple[str, float]] = (), children: list[FunctionEvent] = ()) -> FunctionEvent:
    e = FunctionEvent(i, name, thread=0, start_us=0, end_us=10, use_device="cuda")
    for k, us in kernels:
        e.append_kernel(k, 0, us)
    for c in children:
        e.append_cpu_child(c)
    return e


def _dev(i: int, name: str, us: float) -> FunctionEvent:
    return FunctionEvent(i, name, thread=0, start_us=0, end_us=us, use_device="cuda", device_type=DeviceType.CUDA)


def test_harness_work_is_left_out_and_the_candidates_stays():
    # harness: a 100 us input copy under aten::copy_ and a 400 us L2 flush fill, inside its ranges;
    # candidate: its Triton kernel (30 us) and one torch fill of its own (5 us) outside them
    copy = _cpu(2, "aten::copy_", [("Memcpy HtoD (Pageable -> Device)", 100.0)])
    fill_h = _cpu(4, "aten::fill_", [("vectorized_elementwise_kernel", 400.0)])
    events = [_cpu(1, HARNESS_RANGE, children=[copy]), copy, _cpu(3, HARNESS_RANGE, children=[fill_h]), fill_h,
              _cpu(5, "aten::fill_", [("vectorized_elementwise_kernel", 5.0)]),
              _dev(10, "Memcpy HtoD (Pageable -> Device)", 100.0), _dev(11, "vectorized_elementwise_kernel", 400.0),
              _dev(12, "vectorized_elementwise_kernel", 5.0), _dev(13, "relu_kernel", 30.0)]
    assert _profiled_kernels(events) == [("relu_kernel", 30.0), ("vectorized_elementwise_kernel", 5.0)]


def test_a_kernel_named_like_the_harness_work_gains_nothing():
    # the candidate names its kernel after the flush's: it keeps only its own 2 us, not the harness's 400 us
    fill_h = _cpu(2, "aten::fill_", [("vectorized_elementwise_kernel", 400.0)])
    events = [_cpu(1, HARNESS_RANGE, children=[fill_h]), fill_h, _dev(10, "vectorized_elementwise_kernel", 400.0),
              _dev(11, "vectorized_elementwise_kernel", 2.0), _dev(12, "aten_mm_hidden", 900.0)]
    assert dict(_profiled_kernels(events)) == {"aten_mm_hidden": 900.0, "vectorized_elementwise_kernel": 2.0}


def test_ranges_on_the_device_timeline_are_not_work():
    # a record_function range appears on the GPU timeline too (a user annotation spanning its kernels)
    span = FunctionEvent(20, HARNESS_RANGE, thread=0, start_us=0, end_us=5000, use_device="cuda",
                         device_type=DeviceType.CUDA, is_user_annotation=True)
    events = [span, _dev(10, "relu_kernel", 30.0)]
    assert _profiled_kernels(events) == [("relu_kernel", 30.0)]
