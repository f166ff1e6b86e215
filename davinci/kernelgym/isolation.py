"""Kernel-level isolation of a candidate process: namespaces, a read-only file system, a uid switch, landlock
and seccomp. Every layer is applied with the kernel's own primitives (ctypes over libc; no helper binary)
and reported by name, so a result says which layers held (`EvalResult.details["sandbox"]`).

Two stages, because a candidate process is forked (and its device initialised) before its job is known:

    stage 1, at fork (`enter_namespaces`, single-threaded, before CUDA):
        new mount, PID, IPC and network namespaces (as root directly; otherwise inside a new user namespace
        where the kernel allows one); the caller then forks once more, so the candidate is PID 1 of its own
        PID namespace: it cannot see, signal, ptrace, renice or prlimit any process outside it, and every
        process it starts dies with it. A fresh /proc shows only that namespace.
    stage 2, at job start, before the candidate's code is imported (`confine`):
        - the evaluator's own state folder (every lane, job and build folder) hidden under an empty tmpfs,
          with only this job's scratch and build folders bound back;
        - the whole file system read-only (`mount_setattr(AT_RECURSIVE)`) except those two folders;
        - private tmpfs on /tmp and /dev/shm;
        - folders on the way to the Python installation that others cannot traverse (a root-owned
          /root/.pyenv) covered by a tmpfs with only the needed entries bound back, so the switched user can
          import lazily without reading anything else there;
        - the `nobody` user (or `GymConfig.sandbox_user`), no capabilities, no_new_privs;
        - landlock: writes only below the scratch, build, /tmp and /dev/shm folders and the GPU device files;
        - seccomp: no ptrace or cross-process memory access, no mounts or new namespaces, no kernel keyring,
          modules, BPF or clock setting, no inet/packet sockets, and, where the PID namespace did not hold,
          no signals, priorities, limits or affinities aimed at another process.

Layer names: netns, pidns, ipcns, mountns, proc, readonly_fs, private_tmp, hidden_state, user, no_caps,
no_new_privs, landlock, seccomp (plus userns when the namespaces came from an unprivileged user namespace).
`required_layers()` lists those `GymConfig.require_isolation` insists on. A candidate's result also names
audit_hook: the CPython audit hook that refuses the candidate's code frames, gc scans, tracing and ctypes memory
in its own process (pyaudit.py); it is added by the harness, not the kernel, so the isolation probe (which runs no
candidate) does not report it and `require_isolation` does not ask for it.
"""

from __future__ import annotations

import ctypes
import os
import pwd
import signal
import struct
from pathlib import Path
from typing import Any

from davinci.kernelgym.seccomp import install_filter

CLONE_NEWNS, CLONE_NEWPID, CLONE_NEWNET, CLONE_NEWUSER = 0x00020000, 0x20000000, 0x40000000, 0x10000000
CLONE_NEWIPC = 0x08000000
MS_NOSUID, MS_NODEV, MS_NOEXEC = 2, 4, 8
MS_BIND, MS_REC, MS_PRIVATE = 4096, 16384, 1 << 18
AT_FDCWD, AT_RECURSIVE = -100, 0x8000
MOUNT_ATTR_RDONLY = 0x1
SYS_MOUNT_SETATTR = 442
PR_SET_NO_NEW_PRIVS, PR_CAPBSET_DROP, PR_SET_PDEATHSIG = 38, 24, 1
CAP_SYS_ADMIN = 21

# The layers a GPU profile's `require_isolation` insists on; a CPU-only or unprivileged box may lack some.
REQUIRED = ("netns", "pidns", "ipcns", "mountns", "readonly_fs", "private_tmp", "hidden_state", "user", "no_caps",
            "no_new_privs", "seccomp")


def _libc() -> ctypes.CDLL:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_void_p]
    libc.syscall.restype = ctypes.c_long
    return libc


def _err() -> str:
    e = ctypes.get_errno()
    return f"{os.strerror(e)} (errno {e})"


def has_cap(cap: int) -> bool:
    """Whether this process has `cap` in its effective set (root in a container may lack CAP_SYS_ADMIN)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("CapEff:"):
                return bool(int(line.split()[1], 16) >> cap & 1)
    except OSError:
        pass
    return False


# --- stage 1 ----------------------------------------------------------------------------------------------

def enter_namespaces(net: bool) -> dict[str, Any]:
    """Unshare the mount, PID, IPC (and network) namespaces; the caller must fork next (the child is PID 1).
    The IPC namespace holds the SysV shared memory, semaphores and message queues the candidate makes: they end
    with it (in the host's, a segment outlived the evaluation and every later one could read it: red team).

    Root with CAP_SYS_ADMIN unshares them directly; anyone else tries a new user namespace first (uid 0
    inside maps to the caller outside). Returns the layers that took effect and, under `errors`, why
    others did not."""
    libc = _libc()
    flags = CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWIPC | (CLONE_NEWNET if net else 0)
    applied: dict[str, Any] = {"errors": {}}
    extra = 0 if has_cap(CAP_SYS_ADMIN) else CLONE_NEWUSER
    ipc = libc.unshare(flags | extra) == 0
    # a host that forbids IPC namespaces alone (user.max_ipc_namespaces=0) still gets the others
    ok = ipc or libc.unshare((flags & ~CLONE_NEWIPC) | extra) == 0
    if ok and not ipc:
        applied["errors"]["ipcns"] = f"unshare(CLONE_NEWIPC): {_err()}"
    if extra:
        uid, gid = os.getuid(), os.getgid()
        if ok:
            try:
                Path("/proc/self/setgroups").write_text("deny")
                Path("/proc/self/uid_map").write_text(f"0 {uid} 1")
                Path("/proc/self/gid_map").write_text(f"0 {gid} 1")
            except OSError as exc:
                ok, applied["errors"]["userns"] = False, f"uid map: {exc}"
        applied["userns"] = ok
    if not ok:
        applied["errors"]["namespaces"] = applied["errors"].get("userns") or f"unshare: {_err()}"
        # no namespaces at all: try the network one alone (root without CAP_SYS_ADMIN cannot either)
        applied["netns"] = bool(net) and libc.unshare(CLONE_NEWNET) == 0
        applied["pidns"] = applied["mountns"] = applied["ipcns"] = False
        return applied
    applied.update(netns=bool(net), pidns=True, mountns=True, ipcns=ipc)
    return applied


def outer_pid() -> int:
    """This process's pid in the evaluator's PID namespace (read before the fresh /proc hides it)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("NSpid:"):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return os.getpid()


def private_proc(applied: dict[str, Any]) -> None:
    """In the new PID namespace's first process: stop mount events propagating, mount a fresh /proc."""
    libc = _libc()
    if not applied.get("mountns"):
        applied["proc"] = False
        return
    if libc.mount(b"none", b"/", None, MS_REC | MS_PRIVATE, None) != 0:
        applied["errors"]["mountns"] = f"make-rprivate: {_err()}"
        applied["mountns"] = applied["proc"] = False
        return
    ok = applied.get("pidns") and libc.mount(b"proc", b"/proc", b"proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, None) == 0
    if not ok and applied.get("pidns"):
        applied["errors"]["proc"] = f"mount proc: {_err()}"
    applied["proc"] = bool(ok)


# --- stage 2 ----------------------------------------------------------------------------------------------

def _mount_setattr(path: str, set_: int, clear: int, recursive: bool) -> bool:
    attr = struct.pack("QQQQ", set_, clear, 0, 0)
    buf = ctypes.create_string_buffer(attr, len(attr))
    flags = AT_RECURSIVE if recursive else 0
    return _libc().syscall(SYS_MOUNT_SETATTR, AT_FDCWD, path.encode(), flags, buf, len(attr)) == 0


def _bind_from_fd(fd: int, target: Path) -> bool:
    return _libc().mount(f"/proc/self/fd/{fd}".encode(), str(target).encode(), None, MS_BIND | MS_REC, None) == 0


def _tmpfs(target: str, mode: str = "1777", size: str = "4g") -> bool:
    opts = f"mode={mode},size={size}".encode()
    return _libc().mount(b"tmpfs", target.encode(), b"tmpfs", MS_NOSUID | MS_NODEV, opts) == 0


def _bind_back(fds: dict[Path, int]) -> bool:
    """Bind each saved folder (an O_PATH descriptor) back at its own path, creating the mount point where
    a tmpfs now covers it."""
    ok = True
    for path, fd in fds.items():
        if os.path.isdir(f"/proc/self/fd/{fd}"):
            path.mkdir(parents=True, exist_ok=True)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.touch()
        ok = _bind_from_fd(fd, path) and ok
    return ok


def _cover_keeping(top: Path, keep: list[Path]) -> bool:
    """An empty tmpfs over `top` with each path in `keep` (below `top`) bound back at the same place."""
    fds = {path: os.open(path, os.O_PATH | os.O_CLOEXEC) for path in keep}
    try:
        return _tmpfs(str(top), mode="0755", size="1m") and _bind_back(fds)
    finally:
        for fd in fds.values():
            os.close(fd)


def _others_traverse(path: Path) -> bool:
    try:
        return bool(os.stat(path).st_mode & 0o001)
    except OSError:
        return True  # missing: nothing to open up


def needed_read_paths() -> list[Path]:
    """What a switched-user candidate imports from lazily: the interpreter, the stdlib, site-packages and
    this package's root (existing folders of sys.path)."""
    import sys

    paths = {Path(sys.executable).resolve().parent, Path(sys.prefix), Path(sys.base_prefix),
             Path(__file__).resolve().parents[2]}
    paths.update(Path(p) for p in sys.path if p and os.path.isdir(p))
    return sorted({p.resolve() for p in paths})


def _open_paths_to_others(needed: list[Path]) -> bool:
    """Cover every folder on the way to `needed` that others cannot traverse with a tmpfs that binds back
    only the next step towards each needed path; repeated, so nested closed folders open one by one."""
    for _ in range(8):
        closed: dict[Path, set[Path]] = {}
        for path in needed:
            for depth in range(1, len(path.parts)):
                folder = Path(*path.parts[:depth])
                if folder != Path("/") and not _others_traverse(folder):
                    closed.setdefault(folder, set()).add(Path(*path.parts[:depth + 1]))
                    break
        if not closed:
            return True
        for folder, steps in closed.items():
            if not _cover_keeping(folder, sorted(steps)):
                return False
    return False


def confine(paths: dict[str, Any], applied: dict[str, Any]) -> dict[str, Any]:
    """Stage 2 (see the module docstring). `paths`: `writable` folders, `hide` folders (the evaluator's
    state), `user` (name or ""), `restrict_pids` (add pid checks to seccomp). Updates and returns `applied`."""
    errors = applied.setdefault("errors", {})
    writable = [Path(p) for p in paths.get("writable", [])]
    if applied.get("mountns"):
        _filesystem(paths, writable, applied, errors)
    else:
        applied.update(readonly_fs=False, private_tmp=False, hidden_state=False)
    user = str(paths.get("user") or "")
    applied["user"] = _switch_user(user, writable, errors) if user and not applied.get("userns") else False
    applied["no_caps"] = _drop_capabilities()
    # a change of user clears the parent-death signal (prctl(2)): without it again a candidate outlives a killed
    # supervisor (its waiter dies with the zygote, the candidate ran on: test_a_killed_supervisor_leaves_no_...)
    _libc().prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    applied["no_new_privs"] = _libc().prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0
    applied["landlock"] = landlock([*writable, *_device_files(), Path("/tmp"), Path("/dev/shm")], errors)
    applied["seccomp"] = install_filter(os.getpid(), restrict_pids=not applied.get("pidns"), errors=errors)
    if not errors:
        applied.pop("errors", None)
    return applied


def _filesystem(paths: dict[str, Any], writable: list[Path], applied: dict[str, Any], errors: dict[str, str]) -> None:
    """Private /tmp and /dev/shm, the evaluator's folders hidden, the way to the interpreter opened for the
    switched user, everything read-only but the writable folders (bound back from saved descriptors, so a
    writable folder under /tmp or a hidden folder stays reachable)."""
    tmps = ["/tmp"] + (["/dev/shm"] if os.path.isdir("/dev/shm") else [])
    hide = [Path(p) for p in paths.get("hide", []) if os.path.isdir(p)]
    covered = [Path(t) for t in tmps] + hide
    # what the process still imports from (the project or its venv may live under /tmp) stays visible, read-only
    keep = [p for p in needed_read_paths() if any(c == p or c in p.parents for c in covered)]
    # descriptors first (every path still reachable), then the covers, then the binds: what is read from
    # first (a project under /tmp), then the writable folders inside it or under the hidden state
    fds = {p: os.open(p, os.O_PATH | os.O_CLOEXEC) for p in [*keep, *writable] if os.path.exists(p)}
    try:
        hidden = all(_tmpfs(str(top), mode="0755", size="1m") for top in hide)
        if not hidden:
            errors["hidden_state"] = f"tmpfs over the evaluator's folders: {_err()}"
        tmp = all(_tmpfs(t) for t in tmps)
        if not tmp:
            errors["private_tmp"] = f"tmpfs on /tmp, /dev/shm: {_err()}"
        if not _bind_back(fds):
            errors["writable"] = f"bind the scratch folders back: {_err()}"
    finally:
        for fd in fds.values():
            os.close(fd)
    applied["hidden_state"] = hidden  # (a folder already gone under the private /tmp is hidden too)
    if paths.get("user") and not applied.get("userns") and not _open_paths_to_others(needed_read_paths()):
        errors["user_paths"] = f"could not open the way to the Python installation: {_err()}"
    ro = _mount_setattr("/", MOUNT_ATTR_RDONLY, 0, recursive=True)
    if not ro:
        errors["readonly_fs"] = f"mount_setattr: {_err()}"
    for w in [*writable, *(Path(t) for t in tmps if tmp)]:
        ro = _mount_setattr(str(w), 0, MOUNT_ATTR_RDONLY, recursive=False) and ro
    applied["readonly_fs"] = ro
    applied["private_tmp"] = tmp


def _switch_user(name: str, writable: list[Path], errors: dict[str, str]) -> bool:
    try:
        pw = pwd.getpwnam(name)
    except KeyError:
        errors["user"] = f"no user {name!r} on this machine"
        return False
    if os.geteuid() != 0 or not has_cap(7):  # CAP_SETUID
        errors["user"] = "the evaluator is not root: the candidate keeps the evaluator's user"
        return False
    try:
        for w in writable:
            os.chown(w, pw.pw_uid, pw.pw_gid)
        os.setgroups([])
        os.setgid(pw.pw_gid)
        os.setuid(pw.pw_uid)
    except OSError as exc:
        errors["user"] = f"switch to {name}: {exc}"
        return False
    return os.getuid() == pw.pw_uid


def _drop_capabilities() -> bool:
    """Empty the bounding set, then clear effective, permitted and inheritable sets (capset v3)."""
    class Header(ctypes.Structure):
        _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]

    class Data(ctypes.Structure):
        _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]

    try:
        libc = _libc()
        for cap in range(64):
            libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0)  # fails harmlessly past the last cap, or without CAP_SETPCAP
        if libc.capset(ctypes.byref(Header(0x20080522, 0)), (Data * 2)()) != 0:
            return False
        return not has_cap(CAP_SYS_ADMIN) and not has_cap(0)
    except (OSError, AttributeError):
        return False


def _device_files() -> list[Path]:
    """Device files a kernel needs to write (the GPU's, /dev/null and friends)."""
    names = [p for p in Path("/dev").glob("nvidia*")] + [Path("/dev/dri")]
    names += [Path(f"/dev/{n}") for n in ("null", "zero", "full", "random", "urandom", "tty")]
    return [p for p in names if p.exists()]


# --- landlock ---------------------------------------------------------------------------------------------

_LL_WRITE = [1 << 1, 1 << 4, 1 << 5, 1 << 6, 1 << 7, 1 << 8, 1 << 9, 1 << 10, 1 << 11, 1 << 12]
# WRITE_FILE, REMOVE_DIR, REMOVE_FILE, MAKE_CHAR, MAKE_DIR, MAKE_REG, MAKE_SOCK, MAKE_FIFO, MAKE_BLOCK, MAKE_SYM
_LL_REFER, _LL_TRUNCATE = 1 << 13, 1 << 14


def landlock(writable: list[Path], errors: dict[str, str]) -> bool:
    """Forbid every write to the file system outside `writable` (files or folders), for this thread and
    every thread or process it starts. False where the kernel has no landlock."""
    libc = _libc()
    abi = libc.syscall(444, None, 0, 1)  # LANDLOCK_CREATE_RULESET_VERSION
    if abi < 1:
        errors["landlock"] = "the kernel has no landlock"
        return False
    handled = sum(_LL_WRITE) | (_LL_REFER if abi >= 2 else 0) | (_LL_TRUNCATE if abi >= 3 else 0)
    attr = struct.pack("QQ", handled, 0) if abi >= 4 else struct.pack("Q", handled)
    ruleset = libc.syscall(444, ctypes.create_string_buffer(attr, len(attr)), len(attr), 0)
    if ruleset < 0:
        errors["landlock"] = f"create_ruleset: {_err()}"
        return False
    try:
        file_rights = (1 << 1) | (_LL_TRUNCATE if abi >= 3 else 0)
        for path in writable:
            try:
                fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            except OSError:
                continue
            rights = handled if os.path.isdir(path) else file_rights
            rule = struct.pack("=Qi", rights, fd)  # landlock_path_beneath_attr (packed)
            buf = ctypes.create_string_buffer(rule, len(rule))
            libc.syscall(445, ruleset, 1, buf, 0)  # LANDLOCK_RULE_PATH_BENEATH
            os.close(fd)
        libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
        if libc.syscall(446, ruleset, 0) != 0:
            errors["landlock"] = f"restrict_self: {_err()}"
            return False
        return True
    finally:
        os.close(ruleset)


def summary(layers: dict[str, Any] | None) -> dict[str, Any]:
    """{"held": [...], "missing": [...], "errors": {...}} of a result's `details["sandbox"]`, over REQUIRED
    plus the optional layers (landlock, proc, userns, audit_hook) that appear in it."""
    layers = dict(layers or {})
    names = list(REQUIRED) + [k for k in ("landlock", "proc", "userns", "audit_hook") if k in layers]
    return {"held": [n for n in names if layers.get(n)], "missing": [n for n in names if not layers.get(n)],
            "errors": dict(layers.get("errors") or {})}
