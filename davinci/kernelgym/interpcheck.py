"""A self-test of the Triton interpreter, run once by each CPU lane's zygote before it forks any candidate.

On the CPU every Triton candidate runs in Triton's interpreter, whose behaviour depends on the Triton and NumPy
releases installed. Some pairs cannot run ordinary kernels: Triton 3.6's interpreter turns a loop bound into an
`int` with `int(handle.data)` on a one-element array, which recent NumPy refuses (2.4.6 and 2.5.2 do; older
releases only warned), so every kernel with a `for` over a runtime argument raised `TypeError: only 0-dimensional arrays can be converted to Python scalars` and every honest
reduction came back `runtime` (measured on the GPU machine: triton 3.6.0, numpy 2.5.2, 19 of 43 honest kernels).
Without this check that reads as 19 broken candidates; with it, the lane does not start and the error names the
installed versions and the fix.

The test kernel is trusted code with a known answer: a masked load, a loop over a runtime bound, a reduction and a
store. It runs in a forked child, so nothing it does (NumPy state, Triton's patched `triton.language` during an
interpreted launch, the torch tensors it allocates) stays in the zygote that later forks the candidates.

    TRITON_INTERPRET=1 python -c "from davinci.kernelgym.interpcheck import self_test; print(self_test())"
"""

from __future__ import annotations

import os
import time

import triton
import triton.language as tl

from davinci.errors import DavinciError

TIMEOUT_S = 60.0


class InterpreterBroken(DavinciError):
    """The installed Triton interpreter cannot run a known-good kernel: every CPU evaluation would fail."""


@triton.jit
def _strided_sum(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, n, BLOCK):  # a runtime loop bound: the case Triton 3.6 with a recent NumPy cannot run
        # mask: the last block runs past n
        acc += tl.load(x_ptr + start + offs, mask=start + offs < n, other=0.0)
    tl.store(out_ptr, tl.sum(acc, axis=0))


def _run_kernel() -> str:
    """'' when the kernel gives the hand-computed answer, else what went wrong."""
    import torch

    x = torch.arange(100, dtype=torch.float32)  # 0 + 1 + ... + 99 = 4950; small: no intra-op thread pool starts
    out = torch.zeros(1, dtype=torch.float32)
    try:
        _strided_sum[(1,)](x, out, 100, BLOCK=32)
    except Exception as exc:  # the interpreter's own error, last line first: that is what names the cause
        text = str(exc).strip().splitlines()
        return f"{type(exc).__name__}: {text[-1] if text else ''}"
    return "" if out.item() == 4950.0 else f"wrong answer: {out.item()} instead of 4950"


def self_test() -> str:
    """'' when the interpreter runs the test kernel right; else the failure. Runs in a forked child."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: run, report, exit without running the parent's exit handlers
        code = 1
        try:
            os.close(read)
            message = _run_kernel()
            os.write(write, message.encode()[:4000])
            code = 0
        finally:
            os._exit(code)
    os.close(write)
    deadline = time.monotonic() + TIMEOUT_S
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        time.sleep(0.01)
    else:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
        os.close(read)
        return f"the test kernel did not finish within {TIMEOUT_S:.0f} s"
    with os.fdopen(read, "rb") as fh:
        message = fh.read().decode(errors="replace")
    if os.waitstatus_to_exitcode(status) != 0:
        return message or f"the test process exited with status {os.waitstatus_to_exitcode(status)}"
    return message


def check_interpreter() -> None:
    """Raise `InterpreterBroken` (what failed, the versions, the fix) unless the interpreter passes `self_test`."""
    failure = self_test()
    if not failure:
        return
    import numpy

    known = "0-dimensional arrays" in failure or "Conversion of an array with ndim" in failure
    hint = ("install the Triton the project pins (pip install 'triton==3.9.0'), or keep this Triton with a NumPy it "
            "supports (Triton 3.6's interpreter needs a NumPy that still converts one-element arrays with int(); 2.4.6 "
            "and 2.5.2 do not: pip install 'numpy<2.4')") if known else (
            "check this machine's Triton and NumPy installation (the project pins triton==3.9.0) and that the lane's "
            "process is not out of memory or time (the self-test is a 100-element sum)")
    raise InterpreterBroken(
        f"the Triton interpreter (triton {triton.__version__}, numpy {numpy.__version__}) cannot run a known-good "
        f"kernel with a runtime loop bound ({failure}); every Triton candidate evaluated on the CPU would fail the "
        "same way", hint)
