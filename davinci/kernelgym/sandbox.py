"""Processes: the scrubbed environment, stage 1 of the candidate's sandbox, spawning trusted workers, killing trees.

Process layout per evaluation lane (one lane per GPU, or `workers` lanes on the CPU):

    supervisor (the caller) ──socket── reference worker   (trusted: problem, inputs, reference, verdicts)
              └──socket── zygote (torch + triton imported, CUDA untouched; a child subreaper)
                              └── fork ──> waiter ──> candidate process (PID 1 of its own PID namespace),
                                           one per candidate (plus one warm spare), and the reference twin
                                           of an evaluation that times eager live

Candidate processes are forked from the zygote (10-30 ms instead of a 3 s `import torch`) and enter the
sandbox before any candidate code exists in the process: here (`enter_sandbox`, at fork) their own session
and process group (the supervisor kills the group), a parent-death signal, every inherited descriptor
closed but their channel, RLIMIT_CORE=0, RLIMIT_FSIZE, RLIMIT_NPROC, RLIMIT_AS on the CPU only (CUDA maps
huge virtual ranges), and new mount, PID and network namespaces; then, when the job arrives,
`isolation.confine` (read-only file system, private /tmp and /dev/shm, hidden evaluator state, the `nobody`
user, no capabilities, landlock, seccomp). isolation.py lists the layers and how each is applied. The
trusted reference worker marks itself non-dumpable.
"""

from __future__ import annotations

import ctypes
import os
import pwd
import resource
import signal
import socket
import queue
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import psutil

PR_SET_PDEATHSIG = 1
PR_SET_DUMPABLE = 4
PR_SET_CHILD_SUBREAPER = 36
# The only variables a worker inherits; everything else (tokens, secrets, proxies) is dropped.
ENV_ALLOW = ("PATH", "LANG", "LC_ALL", "CUDA_HOME", "CUDA_PATH", "LD_LIBRARY_PATH", "NVIDIA_VISIBLE_DEVICES",
             "NVIDIA_DRIVER_CAPABILITIES", "TORCH_CUDA_ARCH_LIST", "CC", "CXX")


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def prctl(option: int, value: int) -> bool:
    try:
        return _libc().prctl(option, ctypes.c_ulong(value), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def scrubbed_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The allow-listed environment plus `extra`; PYTHONPATH points at this package's root only."""
    env = {k: os.environ[k] for k in ENV_ALLOW if k in os.environ}
    env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[2])
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env["PYTHONUNBUFFERED"] = "1"
    # Answer `torch.cuda.is_available()` through NVML so no import initialises the CUDA driver before a fork
    # (see zygote._preload).
    env["PYTORCH_NVML_BASED_CUDA_CHECK"] = "1"
    env.update(extra or {})
    return env


def spawn_worker(module: str, fd: int, env: dict[str, str], log_path: Path, args: list[str] = ()) -> subprocess.Popen:
    """Start `python -m module <fd> ...` in its own session with `fd` inherited and output to `log_path`.

    Forked by the spawner thread (`in_spawner_thread`), so the worker's parent-death signal (`die_with_parent`)
    fires when this process dies, not when the lane-start thread that asked for it exits."""
    log_path.parent.mkdir(parents=True, exist_ok=True)

    def start() -> subprocess.Popen:
        with open(log_path, "ab") as log:
            return subprocess.Popen(
                [sys.executable, "-m", module, str(fd), *args], pass_fds=(fd,), env=env, cwd=str(log_path.parent),
                stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True, close_fds=True,
            )
    return in_spawner_thread(start)


_spawner: tuple[int, "queue.Queue[Any]", threading.Thread] | None = None
_spawner_lock = threading.Lock()


def _spawner_loop(q: "queue.Queue[Any]") -> None:
    while True:
        fn, box, done = q.get()
        try:
            box.append((True, fn()))
        except BaseException as exc:  # handed back to the caller
            box.append((False, exc))
        done.set()


def in_spawner_thread(fn: Any) -> Any:
    """Run `fn` (which forks) on this process's one long-lived spawner thread and return its result.

    Linux's parent-death signal belongs to the *thread* that forked the child: a worker forked by a short-lived
    thread (lanes start in parallel threads) would be killed when that thread ends. The spawner thread lives as
    long as the process (daemon), so the signal fires only when the supervisor itself dies."""
    global _spawner
    with _spawner_lock:
        if _spawner is None or _spawner[0] != os.getpid() or not _spawner[2].is_alive():
            q: queue.Queue[Any] = queue.Queue()
            thread = threading.Thread(target=_spawner_loop, args=(q,), name="kernelgym-spawner", daemon=True)
            thread.start()
            _spawner = (os.getpid(), q, thread)
        q = _spawner[1]
    box: list[tuple[bool, Any]] = []
    done = threading.Event()
    q.put((fn, box, done))
    done.wait()
    ok, value = box[0]
    if not ok:
        raise value
    return value


def die_with_parent(parent_pid: int | None) -> None:
    """In a trusted worker (reference worker, zygote): SIGKILL when the supervisor dies, even while stopped
    (a same-user candidate can SIGSTOP it, and a stopped process never reads its channel's end of file);
    exit now if the supervisor is already gone. `parent_pid`: the supervisor's pid, from the worker's options."""
    if not parent_pid:
        return
    prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent_pid:
        os._exit(70)


def socketpair() -> tuple[socket.socket, socket.socket]:
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    return a, b


def kill_group(pid: int) -> None:
    """SIGKILL the process group led by `pid` (a sandboxed child leads its own), then the pid itself."""
    for fn, target in ((os.killpg, pid), (os.kill, pid)):
        try:
            fn(target, signal.SIGKILL)
        except (ProcessLookupError, PermissionError, OSError):
            pass


def kill_tree(root: psutil.Process, include_root: bool = True) -> list[int]:
    """SIGKILL every descendant of `root` (and `root`); returns the pids signalled."""
    try:
        procs = root.children(recursive=True) + ([root] if include_root else [])
    except psutil.Error:
        return []
    killed = []
    for p in procs:
        try:
            p.kill()
            killed.append(p.pid)
        except psutil.Error:
            pass
    psutil.wait_procs(procs, timeout=3)
    return killed


# --------------------------------------------------------------------------------------------------
# Child side: runs in the freshly forked candidate process, before any candidate code is loaded.
# --------------------------------------------------------------------------------------------------

def _close_fds_except(keep: set[int]) -> None:
    try:
        fds = [int(x) for x in os.listdir("/proc/self/fd")]
    except OSError:
        fds = list(range(3, 1024))
    for fd in fds:
        if fd > 2 and fd not in keep:
            try:
                os.close(fd)
            except OSError:
                pass


def _set_limits(opts: dict[str, Any]) -> None:
    limits = [(resource.RLIMIT_CORE, 0), (resource.RLIMIT_FSIZE, int(opts.get("fsize_bytes", 4 << 30)))]
    if opts.get("nproc"):
        limits.append((resource.RLIMIT_NPROC, int(opts["nproc"])))
    if opts.get("as_bytes"):
        limits.append((resource.RLIMIT_AS, int(opts["as_bytes"])))
    for which, value in limits:
        try:
            soft, hard = resource.getrlimit(which)
            value = value if hard == resource.RLIM_INFINITY else min(value, hard)
            resource.setrlimit(which, (value, value))
        except (ValueError, OSError):
            pass


def enter_sandbox(channel_fd: int, opts: dict[str, Any], parent_pid: int) -> dict[str, Any]:
    """Stage 1 of the candidate's confinement (stage 2, `isolation.confine`, runs when its job arrives).

    Own session, parent-death signal, every inherited descriptor closed but its channel, resource limits,
    then new mount, PID, IPC and network namespaces (`isolation.enter_namespaces`) and one more fork: this
    process stays behind as a waiter that exits with its child's status, and the child, PID 1 of the new
    namespace, returns here to become the candidate's process. Returns the layers that took effect."""
    from davinci.kernelgym import isolation

    os.setsid()
    prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent_pid:  # the zygote died between fork and prctl
        os._exit(70)
    _close_fds_except({channel_fd})
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    _set_limits(opts)
    applied = isolation.enter_namespaces(bool(opts.get("network_isolation")))
    if applied.get("pidns"):
        _become_pid1(channel_fd)
        applied["pid"] = isolation.outer_pid()
        isolation.private_proc(applied)
    else:
        applied["pid"] = os.getpid()
    return applied


def _become_pid1(channel_fd: int) -> None:
    """Fork after unshare(CLONE_NEWPID): the child (PID 1 inside) returns; the parent waits for it and exits
    with its status (re-raising its signal), so the zygote sees the candidate's own exit."""
    pid = os.fork()
    if pid == 0:
        # (getppid() is 0 here: the waiter lives outside the new namespace, so its death cannot be checked
        # by pid; the death signal covers it from now on)
        prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        return
    os.close(channel_fd)
    while True:
        try:
            _, status = os.waitpid(pid, 0)
            break
        except InterruptedError:
            continue
        except ChildProcessError:
            os._exit(71)
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)
    os._exit(os.waitstatus_to_exitcode(status) & 0xFF)


def others_can_read(path: Path) -> bool:
    """Whether any user can reach and read `path` (o+x on every ancestor folder, o+r on the path)."""
    import stat

    path = Path(path).resolve()
    try:
        if not os.stat(path).st_mode & stat.S_IROTH:
            return False
        return all(os.stat(parent).st_mode & stat.S_IXOTH for parent in path.parents)
    except OSError:
        return False


def resolve_user(name: str) -> tuple[int, int] | None:
    """(uid, gid) of `name` when we are root and it exists, and the switched user can import lazily: the
    candidate's mount namespace opens the way to the interpreter (CAP_SYS_ADMIN), or everything needed is
    readable by others already; else None (no user switch; `details.sandbox.user` says so)."""
    from davinci.kernelgym.isolation import CAP_SYS_ADMIN, has_cap

    if not name or os.geteuid() != 0:
        return None
    try:
        pw = pwd.getpwnam(name)
    except KeyError:
        return None
    import torch

    needed = [Path(sys.executable), Path(torch.__file__).parent, Path(__file__).parent]
    if not has_cap(CAP_SYS_ADMIN) and not all(others_can_read(p) for p in needed):
        return None
    return pw.pw_uid, pw.pw_gid


def mark_trusted_process() -> None:
    """Called by the trusted reference worker: not dumpable (no same-user ptrace or /proc/<pid>/mem reads)."""
    prctl(PR_SET_DUMPABLE, 0)
