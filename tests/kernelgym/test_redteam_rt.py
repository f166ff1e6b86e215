"""Red-team round rt (cheats written before their defences): the supervisor must never act, as root, on a
path a candidate could plant, nor let a candidate's frame make it allocate, nor let a candidate's data blame
the problem, nor keep what a candidate wrote into the shared build cache.

Fixtures: fixtures/cheats_rt/rt*.py, the red-team's cheats (/tmp/redteam/cheats) with the host path they
aim at replaced by `__TARGET__` (a file or folder of this test). One adversarial property per test.
"""

from __future__ import annotations

import os
import stat
import time
import tracemalloc
from pathlib import Path

import pytest

from davinci.kernelgym import Evaluator
from davinci.types import Candidate

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

CHEATS = Path(__file__).parent / "fixtures" / "cheats_rt"
SECRET = "TOPSECRET-ROOT-ONLY-7f3a9c"


@pytest.fixture(scope="module")
def rt_cheat():
    """rt_cheat(name, problem, target="") -> the Candidate fixtures/cheats_rt/<name>.py aimed at `target`."""
    def make(name: str, problem, target: str = "") -> Candidate:
        code = (CHEATS / f"{name}.py").read_text().replace("__TARGET__", target)
        return Candidate(problem_id=problem.id, code=code, backend="triton")
    return make


def _against_candidate(r) -> None:
    assert not r.correct
    assert r.error_kind not in (None, "reference", "internal"), (r.error_kind, r.error)


# --- rt04 / rt04b / rt11: the candidate's log -------------------------------------------------------------

def test_log_symlink_to_root_only_file_leaks_nothing(gym, problem, rt_cheat, tmp_path):
    secret = tmp_path / "secret_root_only.txt"
    secret.write_text(f"{SECRET}\napi_key=sk-live-000\n")
    os.chmod(secret, 0o600)
    r = gym.evaluate(problem("relu"), rt_cheat("rt04_log_symlink_read", problem("relu"), str(secret)), seed=7)
    _against_candidate(r)
    assert SECRET not in r.error and SECRET not in r.feedback and "api_key" not in r.feedback


def test_log_symlink_to_proc_self_environ_leaks_no_supervisor_environment(gym, problem, rt_cheat):
    entries = [e for e in Path("/proc/self/environ").read_bytes().decode(errors="replace").split("\0")
               if "=" in e and len(e) >= 16]
    r = gym.evaluate(problem("relu"), rt_cheat("rt04_log_symlink_read", problem("relu"), "/proc/self/environ"),
                     seed=7)
    _against_candidate(r)
    text = r.error + r.feedback
    assert entries and not [e for e in entries if e in text]


def test_log_fifo_does_not_hang_the_supervisor(gym, problem, rt_cheat):
    t0 = time.monotonic()
    r = gym.evaluate(problem("relu"), rt_cheat("rt11_log_fifo_hang", problem("relu")), seed=7)
    assert time.monotonic() - t0 < 180  # a hang is forever (pytest's own timeout is 240 s)
    _against_candidate(r)
    assert r.error_kind == "crash"


# --- rt05 / rt06: the reference twin's folder -------------------------------------------------------------

def test_planted_twin_symlink_changes_no_host_folder(gym, problem, rt_cheat, tmp_path):
    victim = tmp_path / "victim_dir"
    victim.mkdir()
    before = os.lstat(victim)
    r = gym.evaluate(problem("relu"), rt_cheat("rt05_twin_dir_symlink_chown", problem("relu"), str(victim)), seed=7)
    after = os.lstat(victim)
    assert (after.st_uid, after.st_gid, stat.S_IMODE(after.st_mode)) == \
        (before.st_uid, before.st_gid, stat.S_IMODE(before.st_mode))
    assert not list(victim.iterdir())  # and the twin wrote nothing there
    assert r.error_kind not in ("internal", "reference"), (r.error_kind, r.error)


def test_planted_twin_log_fifo_is_not_blamed_on_the_evaluator(gym, problem, rt_cheat):
    r = gym.evaluate(problem("relu"), rt_cheat("rt06_twin_log_fifo", problem("relu")), seed=7)
    assert r.error_kind not in ("internal", "reference"), (r.error_kind, r.error)
    assert r.correct and r.speedup is not None  # the twin started and timed eager (the forward is honest)


# --- rt08: stale build locks --------------------------------------------------------------------------------

def test_planted_ext_symlink_deletes_no_host_file_on_the_next_evaluation(gym, problem, rt_cheat, tmp_path):
    victim = tmp_path / "victim_lockdir"
    victim.mkdir()
    (victim / "lock").write_text("keep me")
    cand = rt_cheat("rt08_ext_lock_symlink_unlink", problem("relu"), str(victim))
    for _ in range(2):  # GRPO groups and re-runs evaluate the same code again, in the same build folder
        gym.evaluate(problem("relu"), cand, seed=7)
    assert (victim / "lock").read_text() == "keep me"


# --- rt03: candidate-supplied data that the reference worker cannot decode -------------------------------

def test_malformed_output_descriptor_is_a_verdict_against_the_candidate(gym, problem, rt_cheat):
    r = gym.evaluate(problem("relu"), rt_cheat("rt03_shadow_blame_reference", problem("relu")), seed=7)
    _against_candidate(r)
    assert "not your fault" not in r.feedback


# --- rt07: a forged frame length -----------------------------------------------------------------------------

def test_forged_giant_frame_costs_the_supervisor_no_memory(gym, problem, rt_cheat):
    cand = rt_cheat("rt07_giant_frame_dos", problem("relu"))  # claims a 1 GiB payload at import
    tracemalloc.start()
    try:
        r = gym.evaluate(problem("relu"), cand, seed=7)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 256 << 20, f"the supervisor allocated {peak >> 20} MiB for a forged frame"
    _against_candidate(r)


# --- rt12: the shared build cache ------------------------------------------------------------------------

def _tree_bytes(top: Path) -> int:
    total = 0
    for root, _dirs, files in os.walk(top):
        for name in files:
            total += os.lstat(os.path.join(root, name)).st_blocks * 512
    return total


def test_a_candidates_bulk_writes_do_not_stay_in_the_build_cache(tmp_path, problem, rt_cheat, make_config):
    """rt12 writes 2 x 8 MiB into its build folder at import; with a 4 MiB per-folder bound nothing of it stays
    once the evaluation is over (the verdict itself is untouched: the forward is honest)."""
    with Evaluator(make_config(tmp_path, build_dir_max_mb=4, build_cache_max_mb=64)) as ev:
        cand = rt_cheat("rt12_build_dir_disk_fill", problem("relu"))
        r = ev.evaluate(problem("relu"), cand, seed=7)
        build_dir = ev.lanes[0].build_root / cand.code_hash
        assert r.error_kind not in ("internal", "reference"), (r.error_kind, r.error)
        assert not build_dir.exists() or _tree_bytes(build_dir) <= 4 << 20
        assert not build_dir.exists() or not list(build_dir.rglob("fill*.pt"))


def test_the_build_cache_evicts_least_recently_evaluated_unlocked_folders(tmp_path):
    from davinci.kernelgym.builddirs import evict_builds, lock_build_folder
    root = tmp_path / "builds"
    root.mkdir()
    for i, name in enumerate(["old", "busy", "mid", "new"]):
        (root / name).mkdir()
        (root / name / "blob").write_bytes(b"x" * 1000)
        rec = root / f"{name}.size"
        rec.write_text("1000")
        os.utime(rec, (1000 + i, 1000 + i))
    held = lock_build_folder(root, "busy", 1.0)  # another evaluation holds this one
    try:
        evicted = evict_builds(root, 2000, keep="new")
    finally:
        os.close(held)
    assert evicted == ["old", "mid"]
    assert not (root / "old").exists() and not (root / "mid").exists()
    assert (root / "busy" / "blob").exists() and (root / "new" / "blob").exists()


@pytest.mark.parametrize("kw", [{"build_dir_max_mb": 0}, {"build_cache_max_mb": -1}, {"build_dir_max_mb": "5"},
                                {"build_dir_max_mb": 512, "build_cache_max_mb": 256}])
def test_build_cache_bounds_are_validated(kw):
    from davinci.errors import ConfigError
    from davinci.kernelgym import GymConfig
    with pytest.raises(ConfigError):
        GymConfig(**kw)


# --- side finding: trusted workers of a supervisor that died abruptly ----------------------------------------

SUPERVISOR = """
import json, os, signal, sys
from pathlib import Path
from davinci.kernelgym import Evaluator, GymConfig, load_problem_file
from davinci.types import Candidate
fixtures = Path(sys.argv[2])
cfg = GymConfig(device="cpu", cache_dir=sys.argv[1], workers=1, compile_timeout_s=20.0, run_timeout_s=8.0,
                timing_min_reps=3, timing_max_reps=8, timing_max_s=0.5, checks="strict")
ev = Evaluator(cfg)
p = load_problem_file(fixtures / "problems" / "relu.py")
r = ev.evaluate(p, Candidate(problem_id=p.id, code=(fixtures / "candidates" / "honest_relu.py").read_text(),
                             backend="triton"), seed=7)
lane = ev.lanes[0]
pids = [lane.ref.popen.pid, lane.zygote.popen.pid]
if sys.argv[3] == "stopped":  # a same-user candidate may have stopped them (lane.wake undoes it before each use)
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)
print(json.dumps({"pids": pids, "correct": r.correct}), flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


@pytest.mark.parametrize("state", ["running", "stopped"])
def test_trusted_workers_exit_when_their_supervisor_is_killed(tmp_path, state):
    """Idle workers see the end of file of their channel; stopped ones never read it, so only a parent-death
    signal (SIGKILL reaches a stopped process) ends them."""
    import json
    import subprocess
    import sys

    import psutil
    out = subprocess.run([sys.executable, "-c", SUPERVISOR, str(tmp_path), str(Path(__file__).parent / "fixtures"),
                          state], capture_output=True, text=True, timeout=200)
    info = json.loads(out.stdout.strip().splitlines()[-1])
    assert info["correct"]
    _gone, alive = psutil.wait_procs([psutil.Process(p) for p in info["pids"] if psutil.pid_exists(p)], timeout=15)
    for proc in alive:  # never leave them behind, whatever the verdict
        proc.kill()
    assert not alive, [p.pid for p in alive]
