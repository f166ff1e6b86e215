"""Build and job folders of an evaluation: made, locked, scrubbed, measured and evicted by the supervisor.

Every folder a candidate can write is treated as planted: it is walked without following a link, its files
are removed relative to their parent's descriptor, and a log is read only through the descriptor made with
the file (`create_log`), never by name again. Per-code build folders (content-hashed, shared by lanes and by
evaluator processes on the host) are taken in turn under an flock (`lock_build_folder`), scrubbed before use,
measured after every evaluation (`bound_build`: emptied past `gym.build_dir_max_mb`) and evicted least
recently used past `gym.build_cache_max_mb` (`evict_builds`). Listing the cache costs a stat and a read per
folder, and an RL epoch adds a folder per distinct candidate, so a lane lists it only when its `BuildLedger` says
the cap may be near (or every `RESCAN_EVERY` evaluations, for what other lanes added): once per evaluation, the
listing grew with the cache and took over a second per evaluation after ~1,000 candidates on a GPU host.

    fd = lock_build_folder(lane.build_root, candidate.code_hash, wait_s=60)
    job_dir, paths, log_fd = prepare_dirs(lane, candidate)
"""

from __future__ import annotations

import fcntl
import os
import shutil
import stat
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from davinci.kernelgym.config import GymConfig
from davinci.types import Candidate

if TYPE_CHECKING:
    from davinci.kernelgym.lane import Lane

# A lane lists the build cache at least this often (in its own evaluations), so that folders other lanes and
# evaluator processes added are counted; and whenever its own additions since the last listing pass 1/16 of the
# cap. With L lanes on one cache, the cache can pass the cap by at most about L/16 of it before one lists it.
RESCAN_EVERY = 64


class BuildBusy(Exception):
    """The code's build folder stayed locked by another evaluation past the wait (an evaluator problem)."""


def lock_build_folder(build_root: Path, code_hash: str, wait_s: float) -> int:
    """The descriptor holding the flock on `<build_root>/<code_hash>.lock`; BuildBusy after wait_s."""
    build_root.mkdir(parents=True, exist_ok=True)
    fd = os.open(build_root / f"{code_hash}.lock", os.O_RDWR | os.O_CREAT, 0o600)
    deadline = time.monotonic() + wait_s
    try:
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return fd
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise BuildBusy(f"another evaluation of this same code held its build folder for more than "
                                    f"{wait_s:.0f} s; evaluate it again") from None
                time.sleep(0.02)
    except BaseException:
        os.close(fd)
        raise


def prepare_dirs(lane: Lane, candidate: Candidate) -> tuple[Path, dict[str, Any], int]:
    """A fresh job folder plus the candidate's persistent, content-hashed build folders; the job's paths/env
    and our descriptor on the candidate's log file (`log_tail` reads through it, never through the name)."""
    job_dir = lane.root / "jobs" / uuid.uuid4().hex[:12]
    build_dir = lane.build_root / candidate.code_hash
    job_dir.parent.mkdir(parents=True, exist_ok=True)  # ours: the lane's root, never writable by a candidate
    job_dir.mkdir()  # fresh: never a folder (or a link) someone else made
    (job_dir / "tmp").mkdir()
    build_dir.mkdir(parents=True, exist_ok=True)  # the builds folder is ours; `<hash>` itself is made by us
    # A build folder is written by earlier candidates of this code: drop every link, FIFO, device or hard link
    # they left before anything of ours walks it, and torch's stale `lock` files (we hold this code's build
    # lock, so no live build owns one). Done without following a link (scrub_build_dir).
    scrub_build_dir(build_dir, stale_locks=True)
    for sub in ("ext", "triton", "inductor"):
        _real_dir(build_dir, sub)
    if lane.triton_template is not None:  # Triton's driver utilities, built once by the reference worker
        shutil.copytree(lane.triton_template, build_dir / "triton", dirs_exist_ok=True,
                        ignore=lambda d, names: [n for n in names if os.path.lexists(
                            build_dir / "triton" / Path(d).relative_to(lane.triton_template) / n)])
    log_fd = create_log(job_dir / "log.txt", lane.user)
    try:
        if lane.user:
            os.chmod(job_dir.parent, 0o711)
            os.chown(job_dir, *lane.user)
            os.chown(job_dir / "tmp", *lane.user)
            _chown_tree(build_dir, lane.user)  # a reused build: the same code may rewrite its own folder (torch's lock)
        path = job_dir / f"candidate_{candidate.code_hash}.py"
        path.write_text(candidate.code)
        os.chmod(path, 0o644)
    except BaseException:
        os.close(log_fd)
        raise
    env = {"TRITON_CACHE_DIR": str(build_dir / "triton"), "TORCH_EXTENSIONS_DIR": str(build_dir / "ext"),
           "TORCHINDUCTOR_CACHE_DIR": str(build_dir / "inductor"), "HOME": str(job_dir),
           "TMPDIR": str(job_dir / "tmp"), "MAX_JOBS": str(max(1, (os.cpu_count() or 2) // 2))}
    if lane.arch_list:
        env["TORCH_CUDA_ARCH_LIST"] = lane.arch_list
    paths = {"path": str(path), "log": str(job_dir / "log.txt"), "env": env,
             "module": f"candidate_{candidate.code_hash}", "confine": confine_paths(lane, [job_dir, build_dir])}
    return job_dir, paths, log_fd


def create_log(path: Path, user: tuple[int, int] | None) -> int:
    """Create a worker's log file ourselves (never one that exists: O_EXCL, no link followed) and return our
    descriptor on it. The worker opens the same inode by name before any candidate code runs; whatever the
    candidate later does to the name (a symlink to a root-only file or /proc/self/environ, a FIFO), we read
    only the regular file we made, through this descriptor."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    if user:
        os.fchown(fd, *user)
    return fd


def _real_dir(parent: Path, name: str) -> None:
    """`parent/name` as a real folder: whatever else an earlier candidate left under that name goes."""
    path = parent / name
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        path.mkdir()
        return
    if not stat.S_ISDIR(st.st_mode):
        path.unlink()
        path.mkdir()


def scrub_build_dir(top: Path, stale_locks: bool = False) -> int:
    """Remove from a candidate-written build folder everything that is not a regular file or a folder (links,
    FIFOs, sockets, devices) and every regular file with more than one hard link; with `stale_locks`, torch's
    `lock` files too. Walks without following links (`fwalk`, entries removed relative to their parent's
    descriptor), so nothing outside `top` is ever touched. Returns the bytes the remaining files hold."""
    total = 0
    try:
        walker = os.fwalk(top, topdown=True, follow_symlinks=False)
        for _root, dirs, files, root_fd in walker:
            for name in list(dirs) + files:
                try:
                    st = os.stat(name, dir_fd=root_fd, follow_symlinks=False)
                except OSError:
                    continue
                if stat.S_ISDIR(st.st_mode):
                    continue
                stale = stale_locks and name == "lock" and Path(_root).parent == top / "ext"  # ext/<name>/lock
                keep = stat.S_ISREG(st.st_mode) and st.st_nlink == 1 and not stale
                if keep:
                    total += st.st_blocks * 512
                    continue
                try:
                    os.unlink(name, dir_fd=root_fd)
                except OSError:
                    pass
                if name in dirs:
                    dirs.remove(name)
    except OSError:
        pass
    return total


def confine_paths(lane: Lane, writable: list[Path]) -> dict[str, Any]:
    """What stage 2 of the sandbox (isolation.confine) needs: the only folders the process may write, the
    evaluator's state folders to hide (every lane's jobs and every build), and the user to switch to."""
    hide = sorted({str(lane.build_root.parent), str(getattr(lane, "cache_root", lane.build_root.parent))})
    user = lane.cfg.sandbox_user if lane.user else ""
    return {"writable": [str(w) for w in writable], "hide": hide, "user": user}


def release_build_dir(lane: Lane, candidate: Candidate) -> None:
    """Give a switched-user candidate's build folder back to us, so no later candidate can write into it."""
    if lane.user:
        _chown_tree(lane.build_root / candidate.code_hash, (os.getuid(), os.getgid()))


def _chown_tree(top: Path, owner: tuple[int, int]) -> None:
    """Chown `top` and everything under it without following a link a sandboxed candidate may have planted.

    Runs as root over a folder a candidate could write to: every entry is changed relative to its parent's
    descriptor (`fwalk`) and never through a symlink; a file with more than one hard link may be a link to a
    file outside the tree, so it is skipped. Handing over (owner is not us) changes the top folder last and
    taking back changes it first, so the candidate never owns the top while entries below still move.
    """
    ours = owner == (os.getuid(), os.getgid())
    if ours:
        _lchown(top, owner)
    for _root, dirs, files, root_fd in os.fwalk(top, topdown=False, follow_symlinks=False):
        for name in files + dirs:
            try:
                st = os.stat(name, dir_fd=root_fd, follow_symlinks=False)
                if not stat.S_ISDIR(st.st_mode) and st.st_nlink > 1:
                    continue
                os.chown(name, *owner, dir_fd=root_fd, follow_symlinks=False)
            except OSError:
                pass
    if not ours:
        _lchown(top, owner)


def _lchown(path: Path, owner: tuple[int, int]) -> None:
    try:
        os.lchown(path, *owner)
    except OSError:
        pass


def bound_build(lane: Lane, code_hash: str, cfg: GymConfig) -> int:
    """After the candidate's processes are gone (we hold its build lock): scrub its build folder (no link,
    FIFO, device or hard link stays), measure it without following links, empty it when it holds more than
    `build_dir_max_mb`, and record the size beside its lock (`<hash>.size`, in the builds folder no candidate
    can write) for `evict_builds`. Returns the bytes kept."""
    build_dir = lane.build_root / code_hash
    size = scrub_build_dir(build_dir)
    if size > cfg.build_dir_max_mb << 20:
        shutil.rmtree(build_dir, ignore_errors=True)  # fd-based: never follows a link out of the folder
        build_dir.mkdir(exist_ok=True)
        size = 0
    try:
        (lane.build_root / f"{code_hash}.size").write_text(str(size))
    except OSError:
        pass
    return size


@dataclass
class BuildLedger:
    """One lane's estimate of the build cache's size between listings (`due`, `listed`)."""

    listed_bytes: int = -1  # the total at the last listing; -1: never listed
    added_bytes: int = 0  # what this lane recorded since
    evaluations: int = 0  # this lane's evaluations since

    def due(self, kept_bytes: int, cap_bytes: int) -> bool:
        """Record one evaluation that kept `kept_bytes`; True when the cache must be listed now."""
        self.added_bytes += kept_bytes
        self.evaluations += 1
        return (self.listed_bytes < 0 or self.evaluations >= RESCAN_EVERY or self.added_bytes > cap_bytes // 16
                or self.listed_bytes + self.added_bytes > cap_bytes)

    def listed(self, total_bytes: int) -> None:
        self.listed_bytes, self.added_bytes, self.evaluations = total_bytes, 0, 0


def evict_when_due(lane: Lane, code_hash: str, kept_bytes: int, cap_bytes: int) -> list[str]:
    """After an evaluation that kept `kept_bytes` in its build folder: `evict_builds` when the lane's ledger
    says the cap may be near; else nothing (no listing)."""
    if not lane.build_ledger.due(kept_bytes, cap_bytes):
        return []
    evicted, total = _evict(lane.build_root, cap_bytes, code_hash)
    lane.build_ledger.listed(total)
    return evicted


def evict_builds(build_root: Path, cap_bytes: int, keep: str = "") -> list[str]:
    """Evict the least recently evaluated build folders (by their `<hash>.size` record's mtime) while all
    recorded folders hold more than `cap_bytes`; a folder whose build lock another evaluation holds, and
    `keep`, stay. Returns the evicted hashes."""
    return _evict(build_root, cap_bytes, keep)[0]


def _evict(build_root: Path, cap_bytes: int, keep: str) -> tuple[list[str], int]:
    """`evict_builds`, and the bytes the recorded folders hold afterwards."""
    records = []
    for rec in build_root.glob("*.size"):
        try:
            records.append((rec.stat().st_mtime, rec.name[:-5], int(rec.read_text() or 0)))
        except (OSError, ValueError):
            continue
    total = sum(r[2] for r in records)
    evicted: list[str] = []
    for _mtime, code_hash, size in sorted(records):
        if total <= cap_bytes:
            break
        if code_hash == keep:
            continue
        try:
            fd = os.open(build_root / f"{code_hash}.lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue  # in use: another evaluation of that code holds it
        try:
            shutil.rmtree(build_root / code_hash, ignore_errors=True)
            (build_root / f"{code_hash}.size").unlink(missing_ok=True)
            total -= size
            evicted.append(code_hash)
        finally:
            os.close(fd)
    return evicted, total
