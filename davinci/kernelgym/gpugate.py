"""One GPU, several lanes: correctness work may overlap, a timed phase has the GPU to itself.

`gym.workers` above the GPU count puts several lanes (and their candidates) on one GPU, for compile and
correctness throughput (the RL benchmark runs 8 lanes on one H100). Kernels of other processes time-slice
with ours, so while one lane times, another lane's work stretches the timed calls: the host waits in the
device-wide synchronize while our events show only our own kernels. Seen on the H100 with 8 lanes: an
honest 5 us Triton kernel whose synchronize waited 0.15-0.33 ms (flagged `timing_escape`), and one
candidate's defended median ranging from 0.004 to 0.45 ms across evaluations.

The gate is a reader-writer lock per GPU with writer preference, built from two `flock` files in the
builds folder (no candidate can write there; the kernel drops an flock when its holder dies, so nothing is
ever stale), shared by every lane and every evaluator process on the host:

- shared (candidate correctness and evidence runs): take `<gpu>.turn` exclusively, then `<gpu>.use` shared,
  then let go of `turn`;
- exclusive (the timing phase: candidate and live baselines interleaved): take `turn`, then `use`
  exclusively, and hold both to the end. New shared holders queue at `turn` behind a waiting timer, so a
  timer waits only for the runs already inside.

Time spent waiting at the gate is not the candidate's: callers extend its run deadline by it. A wait past
`wait_s` raises `GateBusy` (an evaluator-side verdict). On the CPU there is no gate.

    with gpu_gate(lane.build_root, lane.gpu_id, "exclusive", wait_s=600) as waited_s:
        job.run_deadline += waited_s
        perf.timing(job)
"""

from __future__ import annotations

import fcntl
import os
import re
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Literal

Mode = Literal["shared", "exclusive"]
MODES: tuple[Mode, ...] = ("shared", "exclusive")


class GateBusy(Exception):
    """The GPU's gate stayed closed past the wait (an evaluator problem, not the candidate's)."""


def _lock(fd: int, op: int, deadline: float, what: str) -> None:
    while True:
        try:
            fcntl.flock(fd, op | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() >= deadline:
                raise GateBusy(f"{what} stayed locked by other evaluations on this GPU past the wait; "
                               "evaluate it again, or use fewer `gym.workers` per GPU") from None
            time.sleep(0.005)


@contextmanager
def gpu_gate(root: Path, gpu: int | str | None, mode: Mode, wait_s: float) -> Iterator[float]:
    """Hold GPU `gpu`'s gate in `mode` for the block; yields the seconds spent waiting (0.0 without a GPU).

    `gpu` names the physical GPU (a lane's `gpu_id`: an index or UUID as CUDA_VISIBLE_DEVICES has it), so
    evaluators with different masks of their own still share one gate per GPU.
    """
    if mode not in MODES:
        raise ValueError(f"unknown gate mode {mode!r}; valid: {', '.join(MODES)}")
    if gpu is None:
        yield 0.0
        return
    root.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    deadline = t0 + wait_s
    name = "gpu" + re.sub(r"[^A-Za-z0-9_-]", "_", str(gpu))
    turn = os.open(root / f"{name}.turn", os.O_RDWR | os.O_CREAT, 0o600)
    use = -1
    try:
        _lock(turn, fcntl.LOCK_EX, deadline, f"GPU {gpu}'s queue")
        use = os.open(root / f"{name}.use", os.O_RDWR | os.O_CREAT, 0o600)
        _lock(use, fcntl.LOCK_SH if mode == "shared" else fcntl.LOCK_EX, deadline, f"GPU {gpu}")
        if mode == "shared":
            os.close(turn)  # a shared holder lets the queue move at once
            turn = -1
        yield time.monotonic() - t0
    finally:
        for fd in (use, turn):
            if fd >= 0:
                os.close(fd)  # closing the descriptor drops its flock


__all__ = ["GateBusy", "MODES", "Mode", "gpu_gate"]
