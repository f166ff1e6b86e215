"""One evaluation lane: a trusted reference worker, a zygote and its candidate processes, for one device.

The supervisor (this process) owns the sockets. `Lane.start()` spawns the reference worker and the zygote
in parallel (each imports torch once); afterwards a candidate process costs one fork. With
`spare_workers` the lane keeps one forked, device-initialised child waiting, so a new evaluation starts
without waiting for process start or CUDA context creation.

Candidates run as the evaluator's user under CUDA IPC, so they can signal its processes: `freeze_children`
stops every process below the zygote but the reference twin while a baseline is timed, and `wake` sends
SIGCONT to the reference worker, the zygote and a warm spare before each use.

Failures are typed: `WorkerDied` (the reference worker or zygote is gone: the lane restarts it and the
evaluation in flight is reported as an internal error), channel errors of a candidate (its verdict).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import stat
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from davinci.errors import DavinciError
from davinci.kernelgym.builddirs import BuildLedger
from davinci.kernelgym.config import GymConfig
from davinci.kernelgym.protocol import Channel, ChannelError
from davinci.kernelgym.sandbox import kill_group, resolve_user, scrubbed_env, socketpair, spawn_worker

START_TIMEOUT_S = 180.0
CHILD_FRAME_BYTES = 16 << 20  # payload bound on a candidate channel's frames unless a request sets its own


def runtime_dir() -> Path:
    """/tmp/kernelgym-<uid> (mode 0711, ours, not a symlink): folders a switched-user candidate can reach."""
    path = Path(tempfile.gettempdir()) / f"kernelgym-{os.getuid()}"
    try:
        path.mkdir(mode=0o711, exist_ok=True)
        st = os.lstat(path)
        if stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid():
            os.chmod(path, 0o711)
            return path
    except OSError:
        pass
    fallback = Path(tempfile.mkdtemp(prefix="kernelgym-"))
    os.chmod(fallback, 0o711)
    return fallback


def wake(pid: int) -> None:
    """SIGCONT a process of ours: a candidate (same user) may have stopped it to stall the evaluator."""
    try:
        os.kill(pid, signal.SIGCONT)
    except OSError:
        pass


def _usable(child: ChildHandle) -> bool:
    """A warm spare still alive and running (SIGCONT first: a candidate may have stopped it)."""
    try:
        proc = psutil.Process(child.pid)
        proc.send_signal(signal.SIGCONT)
        return proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _descendants(pid: int) -> list[int]:
    """Every descendant of `pid`, read from /proc/<pid>/task/<tid>/children (psutil's full scan where the
    kernel has no such file)."""
    if not os.path.exists(f"/proc/{pid}/task/{pid}/children"):
        try:
            return [c.pid for c in psutil.Process(pid).children(recursive=True)]
        except psutil.Error:
            return []
    out: list[int] = []
    todo = [pid]
    while todo:
        p = todo.pop()
        try:
            tids = os.listdir(f"/proc/{p}/task")
        except OSError:
            continue  # exited meanwhile
        for tid in tids:
            try:
                with open(f"/proc/{p}/task/{tid}/children") as f:
                    kids = [int(x) for x in f.read().split()]
            except (OSError, ValueError):
                continue
            out += kids
            todo += kids
    return out


class WorkerDied(RuntimeError):
    """A trusted worker (reference worker or zygote) died or stopped answering."""


class EnvironmentBroken(DavinciError):
    """A lane's worker found that this installation cannot evaluate (e.g. a Triton interpreter that cannot run a
    known-good kernel): the message says what, the hint how to fix it. Restarting the lane would not help."""


@dataclass
class ChildHandle:
    pid: int
    sock: socket.socket
    chan: Channel
    ready: dict[str, Any] | None = None
    started: float = field(default_factory=time.monotonic)
    inner: int | None = None    # the process running the harness (below `pid`, the waiter, in its PID namespace)

    @property
    def pids(self) -> set[int]:
        return {self.pid} | ({self.inner} if self.inner else set())


@dataclass
class _Proc:
    popen: Any
    chan: Channel


def physical_device(index: int, parent_mask: str | None) -> str:
    """The CUDA_VISIBLE_DEVICES entry for our visible GPU `index`, to hand to a child process.

    The child's variable replaces ours, so the index is translated through our own mask: with "2,3", GPU 1
    is "3" (GPU UUIDs and MIG ids pass through as written); without a mask it is the index itself.
    """
    if parent_mask is None or not parent_mask.strip():
        return str(index)
    entries = [e.strip() for e in parent_mask.split(",") if e.strip()]
    if not 0 <= index < len(entries):
        raise ValueError(f"GPU {index} is not among CUDA_VISIBLE_DEVICES={parent_mask!r}; "
                         "set gym.workers to at most the number of visible GPUs per lane")
    return entries[index]


class Lane:
    """`prebuild=True`: a zygote only (no reference worker, no GPU), forking CPU children that import
    load_inline candidates so their CUDA builds land in the persistent build cache ahead of the GPU lanes."""

    def __init__(self, index: int, device: str, gpu: int | None, cfg: GymConfig, cache_root: Path,
                 prebuild: bool = False, arch_list: str = "") -> None:
        self.index, self.device, self.gpu, self.cfg, self.prebuild = index, device, gpu, cfg, prebuild
        self.cuda = device.startswith("cuda")
        # The GPU as the child must name it (its CUDA_VISIBLE_DEVICES replaces ours); also the GPU gate's key.
        self.gpu_id = physical_device(gpu, os.environ.get("CUDA_VISIBLE_DEVICES")) if self.cuda and gpu is not None else None
        self.arch_list = arch_list
        self._zlock = threading.Lock()
        # CUDA IPC needs the candidate under our own user; pre-builds run nvcc, kept under our user too.
        # The candidate's own user (a switched-user candidate keeps CUDA IPC on the H100: the Evaluator's IPC
        # probe falls back to host copies where a driver refuses it). Pre-builds run nvcc under our user.
        self.user = resolve_user(cfg.sandbox_user) if not prebuild else None
        # A switched-user candidate must be able to reach its folders: they live in a traversable runtime
        # folder; otherwise under the cache folder.
        self.cache_root = cache_root
        base = runtime_dir() if self.user else cache_root
        self.root = base / "lanes" / f"lane{index}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        self.build_root = base / "builds"
        self.build_ledger = BuildLedger()  # when this lane lists the build cache (`builddirs.evict_when_due`)
        self.transport = "ipc" if self.cuda and cfg.transport != "host" else "host"
        self.transport_note = ""
        self.marker = uuid.uuid4().hex
        extra = {"CUDA_VISIBLE_DEVICES": self.gpu_id or "", "KERNELGYM_CPU_THREADS": str(cfg.cpu_threads),
                 "KERNELGYM_LANE": self.marker,
                 "HOME": str(self.root), "TMPDIR": str(self.root / "tmp")}
        if not self.cuda and not prebuild:
            extra["TRITON_INTERPRET"] = "1"
        self.env = scrubbed_env(extra)
        self.ref: _Proc | None = None
        self.zygote: _Proc | None = None
        self.spare: ChildHandle | None = None
        self.info: dict[str, Any] = {}
        self.zygote_versions: dict[str, str] = {}
        self.problems: dict[str, dict[str, Any]] = {}
        self.live_children: set[int] = set()
        self.triton_template: Path | None = None

    # --- trusted processes ---
    def _spawn(self, module: str, opts: dict[str, Any], env: dict[str, str] | None = None) -> _Proc:
        mine, theirs = socketpair()
        popen = spawn_worker(module, theirs.fileno(), env or self.env, self.root / f"{module.rsplit('.', 1)[-1]}.log",
                             [json.dumps({**opts, "parent_pid": os.getpid()})])
        theirs.close()
        return _Proc(popen, Channel(mine, max_blob_bytes=None))  # a trusted worker

    def _ref_opts(self) -> dict[str, Any]:
        c = self.cfg
        return {"device": self.device, "folder": str(self.root / "ref"), "tol_fp32": c.tol_fp32, "tol_half": c.tol_half,
                "near_zero_rel_norm": c.near_zero_rel_norm, "l2_flush_mb": c.l2_flush_mb, "cpu_threads": c.cpu_threads}

    def start(self) -> None:
        for d in (self.root.parent, self.root, self.root / "tmp", self.build_root):
            d.mkdir(parents=True, exist_ok=True)
            if self.user:
                os.chmod(d, 0o711)
        if self.user:
            os.chown(self.root / "tmp", *self.user)
        if self.ref is None and not self.prebuild:
            # The reference worker's own persistent compile caches (torch.compile baselines), trusted only.
            ref_env = dict(self.env, TRITON_CACHE_DIR=str(self.cache_root / "reference" / "triton"),
                           TORCHINDUCTOR_CACHE_DIR=str(self.cache_root / "reference" / "inductor"))
            self.ref = self._spawn("davinci.kernelgym.refworker", self._ref_opts(), ref_env)
            self.ref.chan.send({"op": "hello"})
        if self.zygote is None:
            self.zygote = self._spawn("davinci.kernelgym.zygote", {"interpret": not self.cuda and not self.prebuild})
            self._await_zygote()
        if not self.info and not self.prebuild:
            self.info = self._ref_reply(time.monotonic() + START_TIMEOUT_S)
            self.problems.clear()
            self.arch_list = self.arch_list or str(self.info.get("capability", ""))
            if self.cuda and self.triton_template is None:
                self._warm_triton()

    def _warm_triton(self) -> None:
        """A Triton cache holding the driver utilities, copied into every candidate's own cache (saves ~1 s)."""
        folder = self.build_root / "_triton_template"
        try:
            reply, _ = self.ref_call({"op": "warm_triton", "dir": str(folder)}, timeout=120.0)
        except WorkerDied:
            return
        if reply.get("ok"):
            self.triton_template = folder

    def _await_zygote(self) -> None:
        try:
            ready, _ = self.zygote.chan.recv(time.monotonic() + START_TIMEOUT_S)
        except ChannelError as exc:
            ready = {"error": f"{exc}; see {self.root / 'zygote.log'}"}
        if ready.get("error"):
            self._drop(self.zygote)
            self.zygote = None
            if ready.get("environment") and not self.zygote_versions:  # the first start: the installation's
                raise EnvironmentBroken(ready["error"], ready.get("hint", ""))  # problem; a restart is a dead worker
            raise WorkerDied(f"zygote failed to start: {ready['error']}")
        self.zygote_versions = ready.get("versions", {})

    def _ref_reply(self, deadline: float | None) -> dict[str, Any]:
        """The hello reply; a worker that dies while starting is an error, never a restart loop."""
        try:
            reply, _ = self.ref.chan.recv(deadline)
        except ChannelError as exc:
            self._drop(self.ref)
            self.ref = None
            raise WorkerDied(f"reference worker failed to start ({exc}); see {self.root / 'refworker.log'}") from None
        return reply

    @staticmethod
    def _drop(proc: _Proc | None) -> None:
        if proc is None:
            return
        if proc.popen.poll() is None:  # never signal a reaped (recyclable) pid
            kill_group(proc.popen.pid)
        proc.popen.wait()
        proc.chan.close()

    def ref_call(self, header: dict[str, Any], blobs=(), timeout: float | None = None) -> tuple[dict[str, Any], list]:
        """One request to the reference worker; `WorkerDied` (after a restart) if it fails to answer."""
        deadline = time.monotonic() + timeout if timeout else None
        wake(self.ref.popen.pid)
        try:
            self.ref.chan.send(header, blobs, deadline)
            return self.ref.chan.recv(deadline)
        except ChannelError as exc:
            self.restart_ref()
            raise WorkerDied(f"reference worker failed during {header.get('op')!r}: {exc}") from None

    def restart_ref(self) -> None:
        self._drop(self.ref)
        self.ref, self.info = None, {}
        self.start()

    # --- candidate processes ---
    def child_opts(self) -> dict[str, Any]:
        opts: dict[str, Any] = {"device": self.device, "network_isolation": self.cfg.network_isolation,
                                "fsize_bytes": 4 << 30, "drop_caps": True}
        if self.user:
            opts.update(user=self.cfg.sandbox_user, nproc=256)
        if not self.cuda and self.cfg.cpu_memory_limit_gb > 0:
            opts["as_bytes"] = int(self.cfg.cpu_memory_limit_gb * (1 << 30))
        return opts

    def _zygote_call(self, header: dict[str, Any], fd: int | None = None, timeout: float = 30.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        with self._zlock:
            wake(self.zygote.popen.pid)
            try:
                self.zygote.chan.send(header, (), deadline)
                if fd is not None:
                    socket.send_fds(self.zygote.chan.sock, [b"F"], [fd])
                reply, _ = self.zygote.chan.recv(deadline)
                return reply
            except (ChannelError, OSError, AttributeError) as exc:
                failure = exc
        self._restart_zygote()
        raise WorkerDied(f"zygote failed during {header.get('op')!r}: {failure}")

    def _restart_zygote(self) -> None:
        self._drop(self.zygote)
        self.zygote, self.spare = None, None
        self.live_children.clear()
        self.kill_marked()
        self.start()

    def kill_marked(self) -> list[int]:
        """Kill every process still carrying this lane's marker in its environment, except the trusted
        workers: candidates and their escaped descendants, even those no longer below the zygote."""
        keep = {p.popen.pid for p in (self.ref, self.zygote) if p is not None}
        killed = []
        for proc in psutil.process_iter():
            try:
                if proc.pid in keep or proc.environ().get("KERNELGYM_LANE") != self.marker:
                    continue
                proc.kill()
                killed.append(proc.pid)
            except psutil.Error:
                continue
        return killed

    def fork_child(self) -> ChildHandle:
        mine, theirs = socketpair()
        try:
            reply = self._zygote_call({"op": "fork", "opts": self.child_opts()}, fd=theirs.fileno())
        finally:
            theirs.close()
        if "pid" not in reply:
            mine.close()
            raise WorkerDied(f"zygote could not fork: {reply.get('error')}")
        self.live_children.add(int(reply["pid"]))
        # its first frames (ready, the build reply) carry no payload: nothing to allocate for them
        return ChildHandle(int(reply["pid"]), mine, Channel(mine, max_blob_bytes=CHILD_FRAME_BYTES))

    def take_child(self) -> ChildHandle:
        if self.zygote is None or self.zygote.popen.poll() is not None:
            self._restart_zygote()
        child = self.spare if self.spare is not None and _usable(self.spare) else self.fork_child()
        if self.spare is not None and child is not self.spare:
            self.spare.chan.close()  # killed or broken by an earlier candidate: the zygote reaps it on sweep
            self.live_children.discard(self.spare.pid)
        self.spare = None
        if self.cfg.spare_workers:
            try:
                self.spare = self.fork_child()
            except WorkerDied:
                self.spare = None
        return child

    def end_child(self, child: ChildHandle, grace: float = 0.0) -> dict[str, Any]:
        """SIGKILL a candidate process's group (through the zygote, which owns its pid) and return its exit
        status. `grace`: a process that already died (its channel closed) gets that long to report its own
        status first (the waiter above the candidate re-raises the candidate's signal)."""
        child.chan.close()
        try:
            reply = self._zygote_call({"op": "reap", "pid": child.pid, "kill": True, "timeout": 5.0, "grace": grace})
        except WorkerDied:
            reply = {"exited": False}
        self.live_children.discard(child.pid)
        return reply

    def freeze_children(self, keep: set[int]) -> list[psutil.Process]:
        """SIGSTOP every process below the zygote except `keep` (the reference twin): candidates and whatever
        they spawned (escaped ones are reparented to the zygote, a subreaper). Walks again until a pass finds
        nothing new, so a child forked during the walk is caught once its parent is stopped. `thaw` undoes it."""
        if self.zygote is None:
            return []
        stopped: dict[int, psutil.Process] = {}
        for _ in range(4):
            found = [pid for pid in _descendants(self.zygote.popen.pid) if pid not in keep and pid not in stopped]
            if not found:
                break
            for pid in found:
                try:
                    proc = psutil.Process(pid)
                    proc.send_signal(signal.SIGSTOP)
                    stopped[pid] = proc
                except psutil.Error:
                    continue
        return list(stopped.values())

    @staticmethod
    def thaw(procs: list[psutil.Process]) -> None:
        for proc in procs:
            try:
                proc.send_signal(signal.SIGCONT)  # psutil checks the pid still names the process we stopped
            except psutil.Error:
                continue

    def owned_pids(self) -> set[int]:
        """The trusted workers, the live candidate processes (each a waiter and, below it, the process that
        is PID 1 of its namespace) and their descendants: everything of this lane that should be alive."""
        pids = {p.popen.pid for p in (self.ref, self.zygote) if p is not None}
        for pid in self.live_children:
            pids |= {pid, *_descendants(pid)}
        return pids

    def sweep(self) -> list[int]:
        keep = sorted(self.live_children)
        try:
            return self._zygote_call({"op": "sweep", "keep": keep}).get("killed", [])
        except WorkerDied:
            return []

    def close(self) -> None:
        if self.spare is not None:  # the zygote kills its children when it exits
            self.spare.chan.close()
            self.spare = None
        for proc in (self.zygote, self.ref):
            if proc is None:
                continue
            try:
                proc.chan.send({"op": "exit"}, (), time.monotonic() + 1.0)
            except ChannelError:
                pass
            try:
                proc.popen.wait(timeout=3)
            except Exception:
                kill_group(proc.popen.pid)
                proc.popen.wait()
            proc.chan.close()
        self.zygote = self.ref = None
        self.kill_marked()
        shutil.rmtree(self.root, ignore_errors=True)
