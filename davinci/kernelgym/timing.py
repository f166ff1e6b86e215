"""The timed-call loop shared by the candidate's harness and the trusted reference worker.

One `DeviceTimer` per process, built before any candidate code is imported: it keeps its own references
to the clock, event and synchronize functions, so a candidate that monkeypatches `torch.cuda.Event`,
`torch.cuda.synchronize` or `time.perf_counter` changes nothing here (the patch is also reported by the
harness's identity check).

Per timed call (GPU):
  outside the timed region: write the L2 flush buffer, reset the persisting-L2 carve-out
  (cudaDeviceSetLimit(cudaLimitPersistingL2CacheSize, 0) + cudaCtxResetPersistingL2Cache), synchronize;
  timed: host t0, start event, fn(*args), host t_ret, end event, device-wide synchronize, host t1.
The event time, the host time (which includes work on every stream, because the synchronize is
device-wide) and the host time until the call returned are reported; the supervisor defends the number as
the longest of the event time, the launch path and the host time beyond the reference's own host-minus-event
gap (`stats.defended`). `after` (t1 - t_ret) is the part of the host time spent
after the call returned: with every kernel on the timed stream it is at most the event time plus the
synchronize's latency, so a large `after` means work still running elsewhere (side streams, threads) and is
flagged. The host time before the return is the call's own launch cost (Python, launchers): it counts in
the defended time but is not suspicious (CUDA submits the start event with the first launch, so a 5 us
kernel behind 200 us of Python shows a 5 us event time).
On the CPU there are no events: the host time is the measurement.
"""

from __future__ import annotations

import ctypes
import time
from contextlib import nullcontext
from typing import Any, Callable, Sequence

import torch


def _persisting_l2_resetter() -> tuple[Callable[[], None] | None, str]:
    """A function resetting the persisting-L2 carve-out through the CUDA runtime, and how it was found."""
    try:
        from cuda.bindings import runtime as cudart  # cuda-python

        limit = cudart.cudaLimit.cudaLimitPersistingL2CacheSize

        def reset_cp() -> None:
            cudart.cudaDeviceSetLimit(limit, 0)
            cudart.cudaCtxResetPersistingL2Cache()

        reset_cp()
        return reset_cp, "cuda-python"
    except Exception:
        pass
    paths = []
    try:
        with open("/proc/self/maps") as f:
            paths = sorted({line.split()[-1] for line in f if "libcudart" in line})
    except OSError:
        pass
    for name in paths + ["libcudart.so", "libcudart.so.13", "libcudart.so.12", "/usr/local/cuda/lib64/libcudart.so"]:
        try:
            lib = ctypes.CDLL(name)
            set_limit, reset = lib.cudaDeviceSetLimit, lib.cudaCtxResetPersistingL2Cache
            set_limit.argtypes = [ctypes.c_int, ctypes.c_size_t]

            def reset_ct() -> None:
                set_limit(0x06, 0)  # cudaLimitPersistingL2CacheSize
                reset()

            if set_limit(0x06, 0) == 0:
                return reset_ct, f"ctypes:{name}"
        except (OSError, AttributeError):
            continue
    return None, "unavailable"


# One spinning block for ~0.1 ms at H100 clocks: the idle probe run before a program is timed.
CANARY_CYCLES = 200_000


class DeviceTimer:
    """Times calls on one device (see the module docstring). `device` is "cpu" or "cuda[:i]"."""

    def __init__(self, device: str, flush_mb: int = 256) -> None:
        self.device = device
        self.cuda = device.startswith("cuda")
        self._perf = time.perf_counter
        self.overhead_ms = 0.0
        self.launch_overhead_ms = 0.0
        self.l2_reset = "n/a"
        # a context around the timer's own device work (the L2 flush), so a profiled round can tell it from
        # the candidate's (worker._profiled sets it; a no-op otherwise)
        self.harness: Callable[[], Any] = nullcontext
        if self.cuda:
            self._sync = torch.cuda.synchronize
            self._Event = torch.cuda.Event
            self._record = torch.cuda.Event.record
            self._elapsed = torch.cuda.Event.elapsed_time
            self._spin = torch.cuda._sleep
            self._flush_buf = torch.empty(max(1, flush_mb) << 20, dtype=torch.uint8, device=device)
            self._reset_l2, self.l2_reset = _persisting_l2_resetter()

    def _prepare(self) -> None:
        if self.cuda:
            with self.harness():
                self._flush_buf.fill_(1)
            if self._reset_l2 is not None:
                self._reset_l2()
            self._sync()

    def _one(self, fn: Callable[..., Any], args: Sequence[Any]) -> tuple[float, float, float, Any]:
        """(event ms, host ms, host ms after fn returned, output) of one call."""
        self._prepare()
        if not self.cuda:
            h0 = self._perf()
            out = fn(*args)
            h1 = self._perf()
            return (h1 - h0) * 1e3, (h1 - h0) * 1e3, 0.0, out
        start, end = self._Event(enable_timing=True), self._Event(enable_timing=True)
        h0 = self._perf()
        self._record(start)
        out = fn(*args)
        h_ret = self._perf()
        self._record(end)
        self._sync()
        h1 = self._perf()
        return float(self._elapsed(start, end)), (h1 - h0) * 1e3, (h1 - h_ret) * 1e3, out

    def calibrate(self, reps: int = 15) -> float:
        """Median host-minus-event time of the loop around a no-op (the loop's own cost on the host clock),
        and the median host time from the loop's start to the no-op's return (`launch_overhead_ms`)."""
        gaps, launches = [], []
        for _ in range(reps):
            ev, host, after, _ = self._one(lambda: None, ())
            gaps.append(host - ev)
            launches.append(host - after)
        gaps.sort()
        launches.sort()
        self.overhead_ms = gaps[len(gaps) // 2] if self.cuda else 0.0
        self.launch_overhead_ms = launches[len(launches) // 2] if self.cuda else 0.0
        return self.overhead_ms

    def canary_ms(self, cycles: int = CANARY_CYCLES, reps: int = 3) -> float:
        """Host ms, launch to device-wide sync, of the fastest of `reps` spin kernels of `cycles` clocks (0 on
        the CPU). While another process's kernels occupy the GPU, contexts time-slice and every rep waits."""
        if not self.cuda:
            return 0.0
        best = float("inf")
        for _ in range(max(1, reps)):
            self._sync()
            h0 = self._perf()
            self._spin(cycles)
            self._sync()
            best = min(best, (self._perf() - h0) * 1e3)
        return best

    def wait_idle(self, limit_ms: float | None, budget_s: float = 0.2) -> tuple[float, int]:
        """Probe (`canary_ms`) until it is within `limit_ms` or `budget_s` has passed: (last ms, probes).
        No limit (the CPU, or no probe asked for): no probe, (0.0, 0)."""
        if limit_ms is None:
            return 0.0, 0
        t_end, tries = self._perf() + budget_s, 0
        while True:
            ms, tries = self.canary_ms(), tries + 1
            if ms <= limit_ms or self._perf() >= t_end:
                return ms, tries

    def time_calls(self, fn: Callable[..., Any], arg_sets: Sequence[Sequence[Any]], order: Sequence[int],
                   keep: bool = True, after: list[float] | None = None,
                   on_return: Callable[[Any], Any] | None = None) -> tuple[list[float], list[float], list[Any]]:
        """Time fn(*arg_sets[j]) for j in order; returns event ms, host ms and (if keep) the outputs.

        `after`, when given, receives each call's host ms from its return to the end of the synchronize.
        `on_return`, when given, sees each call's output once its clocks have stopped and before the next call
        (static_outputs.copy_outputs: an output the next call may overwrite is copied there).
        """
        events, hosts, outs = [], [], []
        for j in order:
            ev, host, post, out = self._one(fn, arg_sets[j])
            events.append(ev)
            hosts.append(host)
            if after is not None:
                after.append(post)
            if on_return is not None:
                on_return(out)
            if keep:
                outs.append(out)
            del out
        return events, hosts, outs

    def warmup(self, fn: Callable[..., Any], args: Sequence[Any], reps: int) -> None:
        for _ in range(max(0, reps)):
            fn(*args)
        if self.cuda:
            self._sync()
