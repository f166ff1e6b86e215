"""The launch replay (davinci/kernelgym/replay.py) on real GPU kernels, outside the evaluator: each forward's
launches captured by the harness's launch recorder (as every timed call captures them), then re-run by
`Replay.shares`; one row per forward with the share of its output the replay rewrote and the share that changed
with the inputs, next to what that share must be. tests/kernelgym/test_replay.py checks the same on the Triton
interpreter; this checks the compiled path (JITFunction.run, autotuning, launch hooks) on a GPU.

    PYTHONPATH=. python benchmarks/gpu/replay_check.py          # ~30 s, most of it compiling
    TRITON_INTERPRET=1 PYTHONPATH=. python benchmarks/gpu/replay_check.py     # no GPU: the interpreter, smaller
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from benchmarks.gpu.kernelgym_common import out_dir, table  # noqa: E402
from davinci.kernelgym.guards import LaunchRecorder  # noqa: E402
from davinci.kernelgym.replay import Replay  # noqa: E402


@triton.jit
def _relu(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n  # the last block runs past n
    tl.store(out_ptr + offs, tl.maximum(tl.load(x_ptr + offs, mask=mask), 0.0), mask=mask)


@triton.jit
def _copy(src_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n  # the last block runs past n
    tl.store(out_ptr + offs, tl.load(src_ptr + offs, mask=mask), mask=mask)


@triton.jit
def _row_sum_atomic(x_ptr, out_ptr, cols, BLOCK: tl.constexpr):
    row, part = tl.program_id(0), tl.program_id(1)
    offs = part * BLOCK + tl.arange(0, BLOCK)
    mask = offs < cols  # the last part runs past the row
    tl.atomic_add(out_ptr + row, tl.sum(tl.load(x_ptr + row * cols + offs, mask=mask, other=0.0), axis=0))


@triton.autotune(configs=[triton.Config({"BLOCK": 256}), triton.Config({"BLOCK": 1024})], key=["n"])
@triton.jit
def _relu_tuned(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n  # the last block runs past n
    tl.store(out_ptr + offs, tl.maximum(tl.load(x_ptr + offs, mask=mask), 0.0), mask=mask)


def honest(x):
    out = torch.empty_like(x)
    _relu[(triton.cdiv(x.numel(), 1024),)](x, out, x.numel(), BLOCK=1024)
    return out


def token(x):
    out = torch.relu(x)
    _relu[(1,)](x, out, 1, BLOCK=16)
    return out


def copy_of_torch(x):
    answer = torch.relu(x)
    out = torch.empty_like(x)
    _copy[(triton.cdiv(x.numel(), 1024),)](answer, out, x.numel(), BLOCK=1024)
    return out


def autotuned(x):
    out = torch.empty_like(x)
    _relu_tuned[lambda meta: (triton.cdiv(x.numel(), meta["BLOCK"]),)](x, out, x.numel())
    return out


def row_sum(x):
    rows = x.view(256, -1)
    out = torch.zeros(256, device=x.device, dtype=x.dtype)
    _row_sum_atomic[(256, triton.cdiv(rows.shape[1], 512))](rows, out, rows.shape[1], BLOCK=512)
    return out


def torch_only(x):
    return torch.relu(x)


CASES = [  # (forward, rewrote must be, depends must be)
    (honest, "1.0", "> 0.5"), (autotuned, "1.0", "> 0.5"), (row_sum, "1.0", "> 0.5"),
    (token, "< 0.01", "< 0.01"), (copy_of_torch, "1.0", "0.0"), (torch_only, "0.0", "0.0")]


def _holds(value: float | None, want: str) -> bool:
    if value is None:
        return False
    op, bound = (want.split() + [""])[:2] if " " in want else ("==", want)
    return {"==": value == float(bound), "<": value < float(bound), ">": value > float(bound)}[op]


def main() -> int:
    cuda = torch.cuda.is_available()
    rec = LaunchRecorder()
    rec.install(cuda=cuda)
    x = torch.randn(1 << (20 if cuda else 14), device="cuda" if cuda else "cpu")
    rows, failed = [], 0
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    for forward, want_rewrote, want_depends in CASES if cuda else [c for c in CASES if c[0] is not autotuned]:
        # (Triton's autotuner benchmarks through a GPU driver: not on the interpreter)
        forward(x)  # compile and tune outside the captured call, as the warm-up calls do
        sync()
        rec.capture = []
        out = forward(x)
        captured, rec.capture = rec.capture, None
        sync()
        before = out.clone()
        t0 = time.perf_counter()
        shares = Replay().shares([captured], [[out]], [[x]], seed=0)
        took = (time.perf_counter() - t0) * 1e3
        ok = _holds(shares["rewrote_share"], want_rewrote) and _holds(shares["depends_share"], want_depends) \
            and torch.equal(out, before)
        failed += not ok
        rows.append([forward.__name__, len(captured), shares["rewrote_share"], want_rewrote, shares["depends_share"],
                     want_depends, f"{took:.1f}", "ok" if ok else "FAIL"])
    text = table(rows, ["forward", "launches", "rewrote", "must be", "depends", "must be", "replay ms", "verdict"])
    device = torch.cuda.get_device_name() if cuda else "cpu (Triton interpreter)"
    text += f"\n{device}; torch {torch.__version__}, triton {triton.__version__}; failed: {failed}"
    print(text)
    (out_dir() / "replay_check.txt").write_text(text + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
