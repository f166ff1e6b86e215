"""Does device memory a candidate exported over CUDA IPC come back once it is released? (GPU check)

A child plays the candidate: its own mount namespace with a private tmpfs on /dev/shm (as `isolation`
gives it), it exports `--count` tensors of `--gib` GiB each with the transport's "ipc" descriptors, the
parent (the reference worker) opens each, reads it and lets go, and the child then frees its tensors,
calls `torch.cuda.ipc_collect()` and `empty_cache()`, and reports the device memory it still holds. Run
once as torch leaves it (the receiver's decrement cannot find the counter file behind the private
/dev/shm) and once with the exporter releasing its own counts (`transport.Exports`). Prints a table.

    PYTHONPATH=. python benchmarks/gpu/ipc_release_check.py [--count 8 --gib 1]
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

CLONE_NEWNS, MS_REC, MS_PRIVATE = 0x00020000, 0x4000, 0x40000


def child(count: int, gib: float, release: bool) -> None:
    """The candidate's side, in its own process (stdin: the parent's acks; stdout: JSON lines)."""
    libc = ctypes.CDLL(None, use_errno=True)
    out = sys.stdout
    if libc.unshare(CLONE_NEWNS) != 0:
        print(json.dumps({"fail": f"unshare errno {ctypes.get_errno()}"}), file=out, flush=True)
        return
    libc.mount(b"none", b"/", None, MS_REC | MS_PRIVATE, None)
    private = libc.mount(b"tmpfs", b"/dev/shm", b"tmpfs", 0, b"size=64m") == 0
    import torch
    from davinci.kernelgym import transport

    exports = transport.Exports()
    n = int(gib * (1 << 30)) // 4
    for i in range(count):
        x = torch.full((n,), float(i), device="cuda")
        descs = transport.encode([x], "ipc", [])
        exports.add(f"t{i}", descs)
        print(json.dumps({"descs": descs}), file=out, flush=True)
        sys.stdin.readline()  # the parent has read it and let go
        del x
        if release:
            exports.release(f"t{i}")
        torch.cuda.ipc_collect()
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    torch.cuda.ipc_collect()
    print(json.dumps({"private_shm": private, "reserved_gib": torch.cuda.memory_reserved() / (1 << 30),
                      "allocated_gib": torch.cuda.memory_allocated() / (1 << 30)}), file=out, flush=True)


def trial(count: int, gib: float, release: bool) -> dict:
    import torch
    from davinci.kernelgym import transport

    proc = subprocess.Popen([sys.executable, __file__, "--child", "--count", str(count), "--gib", str(gib)]
                            + (["--release"] if release else []), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    seen = []
    for _ in range(count):
        msg = json.loads(proc.stdout.readline())
        if "fail" in msg:
            return msg
        (t,) = transport.decode(msg["descs"], [], "cuda")
        seen.append(float(t[-1]))
        del t
        torch.cuda.synchronize()
        proc.stdin.write("ok\n")
        proc.stdin.flush()
    res = json.loads(proc.stdout.readline())
    proc.wait(timeout=60)
    return {**res, "values_ok": seen == [float(i) for i in range(count)]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--count", type=int, default=8)
    ap.add_argument("--gib", type=float, default=1.0)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--release", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.count, args.gib, args.release)
        return 0
    print(f"{'exporter releases its counts':30} {'private /dev/shm':17} {'child still holds GiB':22} values ok")
    for release in (False, True):
        res = trial(args.count, args.gib, release)
        if "fail" in res:
            print(f"{str(release):30} child failed: {res['fail']}")
            continue
        print(f"{str(release):30} {str(res.get('private_shm')):17} {res.get('reserved_gib', float('nan')):<22.2f} "
              f"{res.get('values_ok')}")
    print(f"({args.count} exports of {args.gib} GiB each; 'holds' after free + ipc_collect + empty_cache)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
