"""The per-GPU gate: shared runs overlap, a timer runs alone, a waiting timer goes before newcomers, a dead
holder frees the GPU, and the wait is reported (it is added to the candidate's deadline)."""

from __future__ import annotations

import subprocess
import sys
import threading
import time

import pytest

from davinci.kernelgym.gpugate import GateBusy, gpu_gate


def test_shared_holders_overlap(tmp_path):
    with gpu_gate(tmp_path, 0, "shared", wait_s=1.0), gpu_gate(tmp_path, 0, "shared", wait_s=1.0) as waited:
        assert waited < 0.5


def test_a_timer_excludes_shared_runs_and_other_timers(tmp_path):
    with gpu_gate(tmp_path, 0, "exclusive", wait_s=1.0):
        for mode in ("shared", "exclusive"):
            with pytest.raises(GateBusy, match="GPU 0"):
                with gpu_gate(tmp_path, 0, mode, wait_s=0.1):
                    pass
        with gpu_gate(tmp_path, 1, "exclusive", wait_s=0.1):  # another GPU is another gate
            pass


def test_a_waiting_timer_goes_before_new_shared_runs(tmp_path):
    order: list[str] = []
    inside = threading.Event()

    def timer() -> None:
        with gpu_gate(tmp_path, 0, "exclusive", wait_s=5.0) as waited:
            order.append(f"timer after {waited:.1f}s")

    with gpu_gate(tmp_path, 0, "shared", wait_s=1.0):
        t = threading.Thread(target=timer)
        t.start()
        time.sleep(0.3)  # the timer now waits for us, holding the queue
        with pytest.raises(GateBusy):
            with gpu_gate(tmp_path, 0, "shared", wait_s=0.2):
                inside.set()
    t.join(5)
    assert not inside.is_set() and order and order[0].startswith("timer after 0.")
    assert float(order[0].split()[2][:-1]) >= 0.4  # it waited for the shared holder (0.3 s + 0.2 s)


def test_a_dead_holder_frees_the_gpu(tmp_path):
    code = ("import sys, time; from pathlib import Path; from davinci.kernelgym.gpugate import gpu_gate\n"
            "with gpu_gate(Path(sys.argv[1]), 0, 'exclusive', wait_s=5):\n"
            "    print('held', flush=True); time.sleep(60)\n")
    proc = subprocess.Popen([sys.executable, "-c", code, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "held"
        with pytest.raises(GateBusy):
            with gpu_gate(tmp_path, 0, "shared", wait_s=0.1):
                pass
        proc.kill()
        proc.wait(10)
        with gpu_gate(tmp_path, 0, "exclusive", wait_s=2.0) as waited:
            assert waited < 2.0
    finally:
        proc.kill()
        proc.wait(10)


def test_no_gpu_no_gate_and_unknown_modes_raise(tmp_path):
    with gpu_gate(tmp_path / "never", None, "exclusive", wait_s=0.0) as waited:
        assert waited == 0.0
    assert not (tmp_path / "never").exists()
    with pytest.raises(ValueError, match="shared, exclusive"):
        with gpu_gate(tmp_path, 0, "exclusiv", wait_s=0.0):  # type: ignore[arg-type]
            pass


def test_lanes_name_the_physical_gpu_through_the_parent_mask():
    from davinci.kernelgym.lane import physical_device

    assert physical_device(1, None) == "1" and physical_device(0, "") == "0"
    assert physical_device(1, "2,3") == "3"  # the child's mask replaces ours: "1" would be the wrong GPU
    assert physical_device(0, " GPU-8a1f,GPU-77c2 ") == "GPU-8a1f"
    with pytest.raises(ValueError, match="not among"):
        physical_device(2, "2,3")


def test_gates_are_keyed_by_physical_gpu_names(tmp_path):
    with gpu_gate(tmp_path, "MIG-GPU-8a1f/1/0", "exclusive", wait_s=1.0):
        with pytest.raises(GateBusy):
            with gpu_gate(tmp_path, "MIG-GPU-8a1f/1/0", "shared", wait_s=0.1):
                pass
        with gpu_gate(tmp_path, "3", "exclusive", wait_s=0.1):
            pass
    assert sorted(p.name for p in tmp_path.iterdir()) == ["gpu3.turn", "gpu3.use", "gpuMIG-GPU-8a1f_1_0.turn", "gpuMIG-GPU-8a1f_1_0.use"]
