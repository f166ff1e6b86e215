"""200 candidates in a row through `evaluate_batch` on two lanes: honest ones mixed with hangs, segfaults,
exits at import and in forward, exceptions, escaped daemons and attacks on the fork server. Every verdict
must be right and no process may be left behind (checked with psutil, by each lane's process marker).
The GPU version (illegal memory accesses too) is benchmarks/gpu/kernelgym_survival_gpu.py."""

from __future__ import annotations

import random
import time

import psutil
import pytest

from davinci.kernelgym import Evaluator

MIX = [  # (fixture, count, expected error kind or None for correct)
    ("honest_relu", 118, None), ("fail_hang_forward", 12, "timeout"), ("fail_segfault", 15, "crash"),
    ("cheat_exit_forward", 15, "crash"), ("cheat_exit_import", 10, "compile"), ("fail_raise_forward", 10, "runtime"),
    ("cheat_orphan_process", 12, "hack"), ("cheat_kill_parent", 8, {"runtime", "crash", "mismatch"}),
]


def lane_processes(markers: set[str]) -> list[psutil.Process]:
    out = []
    for proc in psutil.process_iter():
        try:
            if proc.environ().get("KERNELGYM_LANE") in markers and proc.status() != psutil.STATUS_ZOMBIE:
                out.append(proc)
        except psutil.Error:
            continue
    return out


@pytest.mark.slow
def test_two_hundred_candidates_in_a_row(tmp_path, make_config, problem, candidate):
    p = problem("relu")
    items, expected = [], []
    for name, count, kind in MIX:
        base = candidate(name, p)
        for i in range(count):  # distinct sources: distinct build folders, as 200 real candidates would have
            items.append((p, type(base)(p.id, base.code + f"\n# variant {i}\n", "triton")))
            expected.append((name, kind))
    order = list(range(len(items)))
    random.Random(0).shuffle(order)
    items, expected = [items[i] for i in order], [expected[i] for i in order]
    # An honest ReLU's correctness phase takes about 1 s on an idle 2-core box under TRITON_INTERPRET and twice that
    # under load: the deadline leaves it five times over, so a timeout here is a verdict on the candidate, never on
    # the machine. (Wall time is the survival benchmark's to report, not this test's.)
    cfg = make_config(tmp_path, workers=2, compile_timeout_s=10.0, run_timeout_s=5.0, measure_performance=False,
                      checks="default")
    ev = Evaluator(cfg)
    t0 = time.monotonic()
    try:
        results = ev.evaluate_batch(items)
        markers = {lane.marker for lane in ev.lanes}
        live = set()
        for lane in ev.lanes:
            live |= lane.owned_pids()
        stray = [proc for proc in lane_processes(markers) if proc.pid not in live]
    finally:
        ev.close()
    wall = time.monotonic() - t0
    wrong = []
    for (name, kind), r in zip(expected, results):
        ok = r.correct if kind is None else (not r.correct and (r.error_kind in kind if isinstance(kind, set) else r.error_kind == kind))
        if not ok:
            wrong.append((name, r.error_kind, r.error[:200]))
    assert len(results) == 200 and wrong == [], wrong[:5]
    assert stray == [], stray
    assert lane_processes(markers) == []
    print(f"200 candidates on two lanes in {wall:.0f} s")
