"""The per-code build lock: evaluations of the same code take turns on its shared build folder.

Found on the H100 survival run: four lanes evaluating the same `load_inline` candidate at once rebuilt it in
the same folder (each removed the others' torch lock file as "stale"), costing ~65 s per evaluation and
failing 4 of 10 builds with verdicts blamed on the candidate. These tests pin the lock's behaviour without a
compiler; `benchmarks/gpu/kernelgym_survival_gpu.py` checks the whole path on a GPU.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from davinci.kernelgym.builddirs import BuildBusy, _chown_tree, lock_build_folder, prepare_dirs
from davinci.kernelgym.job import acquire_build_lock, release_build_lock


def _job(root: Path, code_hash: str = "abc123", compile_s: float = 5.0, run_s: float = 1.0) -> SimpleNamespace:
    lane = SimpleNamespace(build_root=root / "builds", root=root / "lane", user=None, triton_template=None,
                           arch_list="")
    return SimpleNamespace(lane=lane, candidate=SimpleNamespace(code_hash=code_hash, code="x = 1\n"),
                           cfg=SimpleNamespace(compile_timeout_s=compile_s, run_timeout_s=run_s), build_lock=None)


def test_same_code_waits_until_the_first_evaluation_releases(tmp_path: Path) -> None:
    first, second = _job(tmp_path), _job(tmp_path)
    acquire_build_lock(first)
    got: list[float] = []
    t0 = time.monotonic()
    waiter = threading.Thread(target=lambda: (acquire_build_lock(second), got.append(time.monotonic() - t0)))
    waiter.start()
    time.sleep(0.3)
    assert not got, "the second evaluation of the same code must wait while the first holds the folder"
    release_build_lock(first)
    waiter.join(5)
    assert got and got[0] >= 0.3
    release_build_lock(second)


def test_different_code_does_not_wait(tmp_path: Path) -> None:
    a, b = _job(tmp_path, "aaa"), _job(tmp_path, "bbb")
    acquire_build_lock(a)
    t0 = time.monotonic()
    acquire_build_lock(b)
    assert time.monotonic() - t0 < 0.2
    release_build_lock(a)
    release_build_lock(b)


def test_a_lock_held_by_a_killed_process_is_not_stale(tmp_path: Path) -> None:
    lock = tmp_path / "builds" / "abc123.lock"
    lock.parent.mkdir(parents=True)
    holder = subprocess.Popen([sys.executable, "-c", (
        "import fcntl, os, sys, time\n"
        f"fd = os.open({str(lock)!r}, os.O_RDWR | os.O_CREAT)\n"
        "fcntl.flock(fd, fcntl.LOCK_EX)\nprint('held', flush=True)\ntime.sleep(60)\n")],
        stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    holder.kill()  # a supervisor that crashed mid-build: the kernel drops its flock with it
    holder.wait()
    job = _job(tmp_path)
    t0 = time.monotonic()
    acquire_build_lock(job)
    assert time.monotonic() - t0 < 0.5
    release_build_lock(job)


def test_waiting_too_long_is_an_evaluator_error_not_the_candidates(tmp_path: Path) -> None:
    holder = _job(tmp_path)
    acquire_build_lock(holder)
    with pytest.raises(BuildBusy, match="same code"):  # the evaluator maps BuildBusy to error_kind "internal"
        lock_build_folder(holder.lane.build_root, "abc123", wait_s=0.2)
    release_build_lock(holder)
    fd = lock_build_folder(holder.lane.build_root, "abc123", wait_s=0.2)  # the failed wait left no fd holding it
    os.close(fd)


def test_prepare_dirs_clears_a_torch_lock_left_by_a_killed_build(tmp_path: Path) -> None:
    job = _job(tmp_path)
    stale = job.lane.build_root / "abc123" / "ext" / "my_ext" / "lock"
    stale.parent.mkdir(parents=True)
    stale.write_text("")
    acquire_build_lock(job)
    prepare_dirs(job.lane, job.candidate)
    assert not stale.exists()
    release_build_lock(job)


@pytest.mark.skipif(os.geteuid() != 0, reason="chown to another user needs root")
def test_handing_the_tree_over_never_follows_a_planted_symlink(tmp_path: Path) -> None:
    outside = tmp_path / "outside.txt"  # stands for a root-owned file elsewhere (/etc/...)
    outside.write_text("x")
    tree = tmp_path / "builds" / "abc123"
    (tree / "ext").mkdir(parents=True)
    (tree / "ext" / "lib.so").write_text("so")
    (tree / "ext" / "escape").symlink_to(outside)
    os.link(outside, tree / "ext" / "hardlink")
    _chown_tree(tree, (65534, 65534))
    assert (tree / "ext" / "lib.so").stat().st_uid == 65534 and tree.stat().st_uid == 65534
    assert outside.stat().st_uid == 0, "neither the symlink nor the hard link may carry the chown outside"
    _chown_tree(tree, (0, 0))
    assert (tree / "ext" / "lib.so").stat().st_uid == 0 and tree.stat().st_uid == 0
