"""Which sandbox layer stops torch's CUDA IPC from a confined process to a trusted one (GPU diagnostic).

For each set of layers, a child applies them as a candidate process does, exports a CUDA tensor with the
transport's own "ipc" descriptor, and the parent (root, unconfined, as the reference worker) opens it and
checks the values. Prints one line per set.

    PYTHONPATH=. python benchmarks/gpu/ipc_layers_gpu.py
"""

from __future__ import annotations

import ctypes
import json
import os
import sys
import tempfile
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

FULL = ["net", "mnt", "pid", "fs", "user", "caps", "landlock", "seccomp"]
# "late": the exported tensor is allocated after the layers (as a candidate's outputs are); "init": CUDA
# itself starts after them (no warm spare)
# ("pid" always with "mnt": the fresh /proc must land in the child's own mount namespace; mounted in the
# machine's, it hid every process but the child's and no later process could start CUDA)
SETS = [["mnt", "pid"], ["mnt", "pid", "user"], ["mnt", "pid", "user", "late"], FULL, FULL + ["late"], FULL + ["init"]]


def child(steps: list[str], w: int, r: int) -> None:
    from davinci.kernelgym import isolation
    from davinci.kernelgym.seccomp import install_filter
    libc = ctypes.CDLL(None, use_errno=True)
    flags = (0x40000000 if "net" in steps else 0) | (0x00020000 if "mnt" in steps else 0) | (0x20000000 if "pid" in steps else 0)
    if flags and libc.unshare(flags) != 0:
        os.write(w, f"unshare failed {ctypes.get_errno()}\n".encode())
        os._exit(1)
    if "pid" in steps:
        assert "mnt" in steps, "a PID namespace's /proc needs its own mount namespace"
        if os.fork():
            os.wait()
            os._exit(0)
        libc.mount(b"none", b"/", None, 0x4000 | 0x40000, None)  # MS_REC | MS_PRIVATE
        libc.mount(b"proc", b"/proc", b"proc", 0, None)  # a fresh /proc of the new namespace
    scratch = Path(tempfile.mkdtemp())
    os.chmod(scratch, 0o777)
    import torch
    from davinci.kernelgym import transport
    try:
        if "init" not in steps:
            torch.zeros(1, device="cuda")
        x = None if ("late" in steps or "init" in steps) else torch.arange(1024, device="cuda", dtype=torch.float32)
    except BaseException:
        os.write(w, (json.dumps({"fail": traceback.format_exc()[-300:]}) + "\n").encode())
        os._exit(1)
    applied, errors = {"mountns": "mnt" in steps, "pidns": "pid" in steps}, {}
    if "fs" in steps:
        libc.mount(b"none", b"/", None, 0x4000 | 0x40000, None)  # MS_REC | MS_PRIVATE
        isolation._filesystem({"writable": [str(scratch)], "hide": [], "user": ""}, [scratch], applied, errors)
    if "user" in steps:
        isolation._switch_user("nobody", [scratch], errors)
    if "caps" in steps:
        isolation._drop_capabilities()
    if "landlock" in steps:
        isolation.landlock([scratch, *isolation._device_files(), Path("/tmp"), Path("/dev/shm")], errors)
    if "seccomp" in steps:
        install_filter(os.getpid(), restrict_pids="pid" not in steps, errors=errors)
    try:
        if x is None:
            x = torch.arange(1024, device="cuda", dtype=torch.float32)
        desc = transport.encode([x], "ipc", [])
        os.write(w, (json.dumps({"desc": desc, "errors": errors}) + "\n").encode())
    except BaseException:
        os.write(w, (json.dumps({"fail": traceback.format_exc()[-400:]}) + "\n").encode())
    os.read(r, 1)  # keep the memory alive until the parent has read it
    os._exit(0)


def opener(line: str) -> None:
    """A fresh unconfined process (as the reference worker) opens the exported tensor and checks it."""
    import torch
    from davinci.kernelgym import transport
    try:
        got = json.loads(line)
        if "desc" in got:
            t = transport.decode(got["desc"], [], "cuda")[0]
            ok = bool((t == torch.arange(1024, device="cuda", dtype=torch.float32)).all())
            msg = f"ipc ok={ok} errors={got['errors']}"
        else:
            msg = f"export failed: {got.get('fail')}"
    except BaseException as exc:
        msg = f"open failed: {str(exc)[:200]}"
    print(msg, flush=True)
    os._exit(0)


def main() -> None:
    # (no CUDA in this process: every child initialises its own, as the zygote's children do)
    for steps in SETS:
        r1, w1 = os.pipe()
        r2, w2 = os.pipe()
        pid = os.fork()
        if pid == 0:
            child(steps, w1, r2)
        line = os.fdopen(r1).readline()
        print(f"{'+'.join(steps) or '(none)':<50} ", end="", flush=True)
        op = os.fork()
        if op == 0:
            opener(line)
        os.waitpid(op, 0)
        os.write(w2, b"x")
        os.waitpid(pid, 0)


if __name__ == "__main__":
    main()
