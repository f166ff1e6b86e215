"""Which sandbox layer (if any) breaks GPU work: one child per prefix of the layer list, each applying the
layers in the order the candidate process does (namespaces at fork, CUDA initialised as a warm spare
would, then `isolation.confine`'s steps one by one), then compiling and launching a fresh Triton kernel and
a torch op. Also prints the whole error of one honest evaluation. Diagnostic, for a GPU machine:

    PYTHONPATH=. python benchmarks/gpu/sandbox_layers_gpu.py
"""

from __future__ import annotations

import os
import sys
import tempfile
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

KERNEL = '''
import triton, triton.language as tl
@triton.jit
def k(x, y, n, B: tl.constexpr):
    o = tl.program_id(0) * B + tl.arange(0, B)
    m = o < n
    tl.store(y + o, tl.load(x + o, mask=m) * 2 + SEED, mask=m)
'''


def work(tag: str, scratch: Path) -> str:
    import torch
    import importlib.util
    src = scratch / "k.py"  # Triton reads a kernel's source from its file
    src.write_text(KERNEL.replace("SEED", str(abs(hash(tag)) % 997)))
    spec = importlib.util.spec_from_file_location("k", src)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    ns = vars(mod)
    x = torch.randn(1000, device="cuda")
    y = torch.empty_like(x)
    ns["k"][(4,)](x, y, 1000, B=256)
    torch.cuda.synchronize()
    return f"ok sum={float((y - 2 * x).mean()):.1f}"


def child(steps: list[str], scratch: Path, cuda_first: bool) -> None:
    from davinci.kernelgym import isolation, sandbox
    from davinci.kernelgym.seccomp import install_filter
    applied = {"errors": {}}
    if "ns" in steps:
        applied = isolation.enter_namespaces(True)
        if applied.get("pidns"):
            pid = os.fork()
            if pid:
                _, st = os.waitpid(pid, 0)
                os._exit(os.waitstatus_to_exitcode(st) & 0xFF)
            isolation.private_proc(applied)
    os.environ.update(TRITON_CACHE_DIR=str(scratch / "triton"), HOME=str(scratch), TMPDIR=str(scratch))
    if cuda_first:
        import torch
        torch.zeros(1, device="cuda")
    writable = [scratch]
    errors = applied.setdefault("errors", {})
    if "fs" in steps and applied.get("mountns"):
        isolation._filesystem({"writable": [str(scratch)], "hide": [], "user": "nobody" if "user" in steps else ""},
                              writable, applied, errors)
    if "user" in steps:
        applied["user"] = isolation._switch_user("nobody", writable, errors)
    if "caps" in steps:
        applied["no_caps"] = isolation._drop_capabilities()
    if "landlock" in steps:
        applied["landlock"] = isolation.landlock([*writable, *isolation._device_files(), Path("/tmp"), Path("/dev/shm")], errors)
    if "seccomp" in steps:
        applied["seccomp"] = install_filter(os.getpid(), restrict_pids=not applied.get("pidns"), errors=errors)
    try:
        msg = work("+".join(steps) + str(cuda_first), scratch)
    except BaseException:
        msg = "FAIL " + traceback.format_exc()[-1500:]
    print(f"{'+'.join(steps) or '(none)':<40} cuda_first={cuda_first!s:<5} {msg}  errors={errors}", flush=True)
    os._exit(0)


def honest_error() -> None:
    from benchmarks.gpu.kernelgym_common import config
    from benchmarks.gpu.kernelgym_trust_gpu import FIX, _named
    from davinci.kernelgym import Evaluator
    p, c = _named(FIX / "candidates" / "honest_relu.py")
    with Evaluator(config("cuda", checks="strict", workers=1)) as ev:
        r = ev.evaluate(p, c)
    print("honest_relu correct", r.correct, "flags", r.flags)
    print("ERROR:", (r.error or "")[-4000:])
    print("FEEDBACK:", r.feedback[:1500]); print("DETAILS:", str(r.details)[:2500])


def main() -> None:
    order = ["ns", "fs", "user", "caps", "landlock", "seccomp"]
    for cuda_first in (True, False):
        for k in range(len(order) + 1):
            scratch = Path(tempfile.mkdtemp(prefix="layers-"))
            os.chmod(scratch, 0o777)
            pid = os.fork()
            if pid == 0:
                child(order[:k], scratch, cuda_first)
            os.waitpid(pid, 0)
    for drop in order[1:]:
        scratch = Path(tempfile.mkdtemp(prefix="layers-"))
        os.chmod(scratch, 0o777)
        pid = os.fork()
        if pid == 0:
            child([s for s in order if s != drop], scratch, True)
        os.waitpid(pid, 0)
    honest_error()


if __name__ == "__main__":
    main()
