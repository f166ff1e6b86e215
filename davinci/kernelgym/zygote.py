"""The fork server: a process with torch, triton and the harness imported (CUDA untouched) that forks
candidate processes on request. Never runs candidate code itself.

    python -m davinci.kernelgym.zygote <control fd> <json options>      (started by the supervisor)

Requests on the control channel (JSON frames, see protocol.py):
- {"op": "fork", "opts": {...}} followed by one byte carrying the child's channel fd (SCM_RIGHTS)
  -> {"pid": N}; the child enters the sandbox and runs `worker.child_main`;
- {"op": "reap", "pid": N, "kill": bool, "timeout": s} -> {"pid", "exited", "code", "signal"}: kills the
  child's process group first when asked (the zygote knows the pid is not yet reaped, so never recycled),
  then waits up to `timeout`;
- {"op": "sweep", "keep": [pids]} -> {"killed": [...]}: kills every other child, including escaped
  grandchildren reparented here (the zygote is a child subreaper);
- end of file on the control channel: kill every child and exit.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
import time


def _preload(opts: dict) -> dict[str, str]:
    if opts.get("interpret"):
        os.environ["TRITON_INTERPRET"] = "1"
    # `torch.cuda.is_available()` calls cudaGetDeviceCount, which initialises the driver and poisons fork;
    # torch 2.11's `import torch.utils.cpp_extension` (and Triton's driver probe) call it at import. The NVML
    # based check answers without touching the CUDA driver, so the children forked from here can use CUDA.
    os.environ["PYTORCH_NVML_BASED_CUDA_CHECK"] = "1"
    import numpy  # noqa: F401
    import torch
    import torch.nn.functional  # noqa: F401
    import torch.utils.cpp_extension  # noqa: F401

    from davinci.kernelgym import extcache, seals

    extcache.install()  # a JIT extension already built from the same content is loaded, not rebuilt
    seals.settle()  # NumPy's lazy submodules in its dict before any fork: the harness seals that dict (seals.py)

    # torch._dynamo rebinds `torch.manual_seed` when first imported (wrapping it to disable itself); import it
    # here so that happens before the harness captures the identities it later checks (patched_functions).
    import torch._dynamo  # noqa: F401

    versions = {"torch": torch.__version__, "python": sys.version.split()[0]}
    try:
        import triton
        import triton.language  # noqa: F401
        import triton.runtime.interpreter  # noqa: F401  (the harness wraps its launch entry point)
        import triton.runtime.jit  # noqa: F401

        versions["triton"] = triton.__version__
    except Exception as exc:  # a CPU box without triton still evaluates torch-only candidates
        versions["triton"] = f"unavailable ({type(exc).__name__})"
    if not opts.get("interpret") and not versions["triton"].startswith("unavailable"):
        _warm_triton()
    if opts.get("interpret") and not versions["triton"].startswith("unavailable"):
        from davinci.kernelgym.interpcheck import check_interpreter

        check_interpreter()  # a Triton/NumPy pair whose interpreter cannot run ordinary kernels stops the lane here
    try:
        import torch.profiler  # noqa: F401
    except Exception:
        pass
    from davinci.kernelgym import worker  # noqa: F401  (the harness, imported before any fork)

    if torch.cuda.is_initialized():
        raise RuntimeError("CUDA was initialised in the zygote; forked children would be broken")
    if _fork_poisoned():
        raise RuntimeError("an import in the zygote touched the CUDA driver (torch marks forked children as "
                           "unable to use CUDA); set PYTORCH_NVML_BASED_CUDA_CHECK=1 and check the preloaded imports")
    return versions


def _warm_triton() -> None:
    """Work that every candidate's first compiled Triton launch would repeat, done once here and inherited by each
    fork: the hash of Triton's own files and libtriton that keys its cache (`triton_key`, cached per process; 392 ms
    of a 567 ms warm-cache first launch on an H200, benchmarks/results/h200/session_2026-11-29). It reads files only
    and never touches the CUDA driver (`_fork_poisoned` below checks). Interpreted launches compile nothing."""
    try:
        from triton.runtime.cache import triton_key
    except ImportError:  # a Triton that keys its cache elsewhere: each candidate computes the key itself
        return
    triton_key()


def _fork_poisoned() -> bool:
    """Fork a throwaway child and ask torch whether it considers that child a bad fork (CUDA unusable)."""
    import torch

    probe = getattr(torch._C, "_cuda_isInBadFork", None)
    if probe is None:  # a CPU-only build has no CUDA to poison
        return False
    pid = os.fork()
    if pid == 0:
        os._exit(1 if probe() else 0)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status) != 0


class Zygote:
    def __init__(self, ctl_fd: int, opts: dict) -> None:
        from davinci.kernelgym.protocol import Channel, socket_from_fd

        self.ctl = Channel(socket_from_fd(ctl_fd), max_blob_bytes=None)  # from the supervisor
        self.opts = opts
        self.exited: dict[int, int] = {}
        self.children: set[int] = set()

    def _collect(self) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            self.exited[pid] = status
            self.children.discard(pid)

    def _fork(self, header: dict) -> dict:
        _, fds, _, _ = socket.recv_fds(self.ctl.sock, 1, 1)
        if len(fds) != 1:
            return {"error": "no channel fd received"}
        fd = fds[0]
        parent = os.getpid()
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                from davinci.kernelgym import worker

                code = worker.child_main(fd, header.get("opts", {}), parent)
            except BaseException:  # the harness itself failed: leave the reason in zygote.log
                import traceback

                traceback.print_exc()
            finally:
                os._exit(code)
        os.close(fd)
        self.children.add(pid)
        return {"pid": pid}

    def _reap(self, header: dict) -> dict:
        """Optionally SIGKILL a child's process group (only while it is unreaped, so its pid cannot have
        been recycled), then wait for its exit status."""
        pid = int(header["pid"])
        self._collect()
        grace_end = time.monotonic() + float(header.get("grace", 0.0))
        while pid in self.children and time.monotonic() < grace_end:  # a dying child's own status first
            time.sleep(0.005)
            self._collect()
        if header.get("kill") and pid in self.children:
            for fn in (os.killpg, os.kill):
                try:
                    fn(pid, signal.SIGKILL)
                except OSError:
                    pass
        deadline = time.monotonic() + float(header.get("timeout", 5.0))
        while pid not in self.exited and time.monotonic() < deadline:
            self._collect()
            if pid not in self.exited:
                time.sleep(0.005)
        status = self.exited.pop(pid, None)
        if status is None:
            return {"pid": pid, "exited": False}
        code = os.waitstatus_to_exitcode(status)
        return {"pid": pid, "exited": True, "code": code if code >= 0 else None, "signal": -code if code < 0 else None}

    def _sweep(self, header: dict) -> dict:
        import psutil

        keep = set(header.get("keep", []))
        for pid in list(keep):  # a live job's own subprocesses (ninja, nvcc, ...) stay
            try:
                keep.update(p.pid for p in psutil.Process(pid).children(recursive=True))
            except psutil.Error:
                pass
        killed = []
        for child in psutil.Process().children(recursive=True):
            if child.pid in keep:
                continue
            try:
                child.kill()
                killed.append(child.pid)
            except psutil.Error:
                pass
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline and any(p not in self.exited for p in killed if p in self.children):
            self._collect()
            time.sleep(0.005)
        self._collect()
        for pid in killed:
            self.exited.pop(pid, None)
        return {"killed": killed}

    def serve(self) -> None:
        from davinci.kernelgym.protocol import ChannelError

        handlers = {"fork": self._fork, "reap": self._reap, "sweep": self._sweep}
        while True:
            try:
                header, _ = self.ctl.recv()
            except ChannelError:
                break
            op = header.get("op")
            if op == "exit":
                break
            reply = handlers[op](header) if op in handlers else {"error": f"unknown op {op!r}"}
            try:
                self.ctl.send(reply)
            except ChannelError:
                break
        self._sweep({"keep": []})


def main(argv: list[str]) -> int:
    from davinci.errors import DavinciError
    from davinci.kernelgym.sandbox import PR_SET_CHILD_SUBREAPER, die_with_parent, prctl

    fd, opts = int(argv[0]), json.loads(argv[1]) if len(argv) > 1 else {}
    # The end of file on the control channel (the supervisor closed it) shuts the zygote down; the parent-death
    # signal (the supervisor forks us from its long-lived spawner thread) also ends a zygote a candidate stopped.
    die_with_parent(opts.get("parent_pid"))
    prctl(PR_SET_CHILD_SUBREAPER, 1)
    z = Zygote(fd, opts)
    try:
        versions = _preload(opts)
    except DavinciError as exc:  # the installation cannot evaluate (message and fix for the user, not a crash)
        z.ctl.send({"op": "ready", "error": exc.message, "hint": exc.hint, "environment": True})
        return 1
    except Exception as exc:
        z.ctl.send({"op": "ready", "error": f"{type(exc).__name__}: {exc}"})
        return 1
    z.ctl.send({"op": "ready", "pid": os.getpid(), "versions": versions})
    z.serve()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
