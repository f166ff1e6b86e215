"""Crashes, hangs, exits, segfaults and attacks on the harness are verdicts; the evaluator keeps serving
and leaves no process behind."""

from __future__ import annotations

import os

import psutil
import pytest

from davinci.kernelgym import Evaluator, GymConfig, isolation
from davinci.types import Candidate, Problem


def marked_processes(ev: Evaluator) -> list[psutil.Process]:
    """Live processes of `ev`'s lanes: every worker and candidate carries its lane's KERNELGYM_LANE marker,
    including processes that escaped the process tree."""
    markers = {lane.marker for lane in ev.lanes}
    out = []
    for proc in psutil.process_iter():
        try:
            if proc.environ().get("KERNELGYM_LANE") in markers and proc.status() != psutil.STATUS_ZOMBIE:
                out.append(proc)
        except psutil.Error:
            continue
    return out


@pytest.fixture(scope="module")
def quick(tmp_path_factory, make_config):
    ev = Evaluator(make_config(tmp_path_factory.mktemp("kg-quick"), compile_timeout_s=8.0, run_timeout_s=5.0,
                               measure_performance=False))
    yield ev
    ev.close()


@pytest.mark.parametrize("name, kind", [
    ("fail_segfault", "crash"), ("fail_hang_forward", "timeout"), ("fail_hang_import", "timeout"),
    ("fail_raise_forward", "runtime"), ("fail_syntax", "compile"), ("fail_no_modelnew", "compile"),
    ("fail_memory_bomb", "runtime"), ("fail_wrong_shape", "mismatch"), ("cheat_exit_forward", "crash"),
])
def test_failure_is_a_verdict_and_the_evaluator_keeps_serving(quick, problem, candidate, name, kind):
    p = problem("relu")
    r = quick.evaluate(p, candidate(name, p), seed=0)
    assert not r.correct and r.error_kind == kind, r.feedback
    assert r.feedback.startswith("verdict:") and "/work/" not in r.feedback
    honest = quick.evaluate(p, candidate("honest_relu", p), seed=0)
    assert honest.correct, honest.feedback


def test_feedback_points_at_the_problem(quick, problem, candidate):
    p = problem("relu")
    syntax = quick.evaluate(p, candidate("fail_syntax", p))
    assert "SyntaxError" in syntax.feedback and "class ModelNew(nn.Module)" in syntax.feedback
    crash = quick.evaluate(p, candidate("fail_segfault", p))
    assert "SIGSEGV" in crash.feedback
    wrong = quick.evaluate(p, candidate("cheat_stale_memory", p))
    assert "first at [" in wrong.feedback and "max abs err" in wrong.feedback


def test_escaped_processes_are_killed(quick, problem, candidate):
    p = problem("relu")
    r = quick.evaluate(p, candidate("cheat_orphan_process", p))
    assert not r.correct
    lane = quick.lanes[0]
    live = lane.owned_pids()
    leftovers = [proc for proc in marked_processes(quick) if proc.pid not in live]
    assert leftovers == []


def test_cuda_candidate_needs_a_gpu_and_a_broken_problem_is_not_the_candidates_fault(quick, problem):
    p = problem("relu")
    cuda_code = ('from torch.utils.cpp_extension import load_inline\nimport torch.nn as nn\n'
                 'src = "__global__ void k(float* x) {}"\next = load_inline("k", cpp_sources="", cuda_sources=src)\n'
                 'class ModelNew(nn.Module):\n    pass\n')
    r = quick.evaluate(p, Candidate(p.id, cuda_code, "cuda"))
    assert r.error_kind == "needs_gpu" and "GPU" in r.feedback
    broken = Problem(id="x/broken", source="synthetic", level=1, name="broken",
                     code=p.code.replace("def get_inputs():", "def get_inputs():\n    raise ValueError('bad problem')"))
    plain = "import torch.nn as nn\nclass ModelNew(nn.Module):\n    def forward(self, x):\n        return x.relu()\n"
    r = quick.evaluate(broken, Candidate(broken.id, plain, "triton"))
    assert r.error_kind == "reference" and "bad problem" in r.error


def test_cuda_device_without_gpu_is_a_clear_verdict(tmp_path, problem, candidate):
    p = problem("relu")
    with Evaluator(GymConfig(device="cuda", cache_dir=str(tmp_path))) as ev:
        r = ev.evaluate(p, candidate("honest_relu", p))
    assert r.error_kind == "needs_gpu" and "no GPU" in r.error


def test_close_leaves_no_process_behind(tmp_path, make_config, problem, candidate):
    p = problem("relu")
    ev = Evaluator(make_config(tmp_path, measure_performance=False))
    assert ev.evaluate(p, candidate("honest_relu", p)).correct
    lanes = list(ev.lanes)
    assert len(marked_processes(ev)) >= 3  # reference worker, zygote, the spare candidate process
    ev.close()
    ev.lanes = lanes
    assert marked_processes(ev) == []


def test_batch_keeps_order_and_seeds_reproduce_inputs(quick, problem, candidate):
    p = problem("hinge_loss")
    names = ["honest_hinge", "cheat_analytical_hinge", "honest_hinge", "cheat_analytical_hinge"]
    results = quick.evaluate_batch([(p, candidate(n, p)) for n in names], seed=5)
    assert [r.correct for r in results] == [True, False, True, False]
    # Same seed (same evaluator secret) -> same inputs -> the same values in the mismatch report.
    assert "vs reference" in results[1].feedback and results[1].feedback == results[3].feedback
    other = quick.evaluate(p, candidate("cheat_analytical_hinge", p), seed=6)
    assert other.error_kind == "mismatch" and other.feedback != results[1].feedback


@pytest.mark.skipif(os.geteuid() != 0, reason="user switch and network namespace need root")
def test_candidate_runs_sandboxed(quick, problem, candidate):
    p = problem("relu")
    r = quick.evaluate(p, candidate("honest_relu", p))
    switched = quick.lanes[0].user is not None  # root: the candidate runs as `nobody`
    layers = r.details["sandbox"]
    held = {k for k, v in layers.items() if v is True}
    assert r.correct and {"netns", "no_caps", "no_new_privs", "seccomp"} <= held, layers
    if isolation.has_cap(isolation.CAP_SYS_ADMIN):
        assert set(isolation.REQUIRED) <= held and switched, layers
    zygote = quick.lanes[0].zygote.popen.pid
    attack = quick.evaluate(p, candidate("cheat_kill_parent", p))  # kills the fork server if it can
    assert not attack.correct
    if "pidns" in held:  # its parent is outside its PID namespace: there is nothing to kill
        assert quick.lanes[0].zygote.popen.pid == zygote and quick.lanes[0].zygote.popen.poll() is None
    assert quick.evaluate(p, candidate("honest_relu", p)).correct  # a restarted fork server serves on


def test_a_forward_that_raises_before_its_kernel_is_not_flagged(quick, problem, candidate):
    # Flags turn a verdict into the hack penalty; a NameError is an ordinary runtime error.
    p = problem("relu")
    r = quick.evaluate(p, candidate("fail_triton_name_error", p), seed=0)
    assert r.error_kind == "runtime" and r.flags == (), (r.flags, r.feedback)
    assert "relu_kernel" in r.feedback


_SUPERVISOR = """
import sys, tempfile
from pathlib import Path
sys.path.insert(0, {tests!r})
from conftest import cpu_config, load_candidate, load_problem
from davinci.kernelgym import Evaluator
ev = Evaluator(cpu_config(Path(tempfile.mkdtemp()), run_timeout_s=120.0, measure_performance=False))
p = load_problem("relu")
ev.evaluate(p, load_candidate("fail_hang_forward", p))
"""


def _lane_processes(supervisor: int) -> list[psutil.Process]:
    """The live processes the supervisor started (workers and candidates carry its pid in their options)."""
    tag, out = f'"parent_pid": {supervisor}', []
    for proc in psutil.process_iter():
        try:
            if tag in " ".join(proc.cmdline()) and proc.status() != psutil.STATUS_ZOMBIE:
                out.append(proc)
        except psutil.Error:
            continue
    return out


def _hanging(supervisor: int) -> bool:
    """A candidate's process is busy in its forward: a process forked from the zygote (its command line, below
    another one of the supervisor's) on a CPU."""
    procs = _lane_processes(supervisor)
    pids = {p.pid for p in procs}
    try:
        return any(p.ppid() in pids and "zygote" in " ".join(p.cmdline()) and p.cpu_percent(0.5) > 50 for p in procs)
    except psutil.Error:
        return False


def test_a_killed_supervisor_leaves_no_candidate_running():
    """The supervisor SIGKILLed while its candidate hangs in forward: every process it started goes with it, the
    candidate too (run as another user, the switch clears its parent-death signal: it is set again)."""
    import signal
    import subprocess
    import sys
    import time
    from pathlib import Path

    sup = subprocess.Popen([sys.executable, "-c", _SUPERVISOR.format(tests=str(Path(__file__).parent))],
                           env={**os.environ, "TRITON_INTERPRET": "1"})
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and not _hanging(sup.pid):
            time.sleep(0.5)
        started = _lane_processes(sup.pid)
    finally:
        os.kill(sup.pid, signal.SIGKILL)
        sup.wait()
    deadline = time.monotonic() + 15
    while _lane_processes(sup.pid) and time.monotonic() < deadline:
        time.sleep(0.5)
    left = _lane_processes(sup.pid)
    for proc in left:
        proc.kill()
    assert len(started) >= 3 and not left, [(p.pid, p.username(), p.status()) for p in left]
