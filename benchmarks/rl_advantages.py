"""Advantage estimators: vectorized (registered) vs loop reference, time per call on the CPU.

Prints one row per (estimator, N samples, K groups): best-of-3 milliseconds per call of each (one torch
thread) and the speed-up.
The vectorized versions are what the trainer uses; the references define the math (tests check equality).

    .venv/bin/python benchmarks/rl_advantages.py
"""

from __future__ import annotations

import time

import torch

from davinci.rl.advantages import ADVANTAGES, REFERENCES


def _time(fn, *args, reps: int = 3) -> float:
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        fn(*args)
        best = min(best, time.perf_counter() - t0)
    return best * 1e3


def main() -> None:
    torch.set_num_threads(1)  # single-threaded: comparable numbers on a shared machine
    gen = torch.Generator().manual_seed(0)
    print(f"{'estimator':<20}{'N':>8}{'K':>8}{'fast ms':>10}{'loop ms':>10}{'x':>8}")
    for name in ADVANTAGES.names():
        for n, k in ((256, 16), (4096, 256), (65536, 4096)):
            returns = torch.randn(n, generator=gen, dtype=torch.float64)
            groups = torch.randint(0, k, (n,), generator=gen)
            fast = _time(ADVANTAGES.get(name), returns, groups)
            loop = _time(REFERENCES[name], returns, groups, reps=1)
            print(f"{name:<20}{n:>8}{k:>8}{fast:>10.2f}{loop:>10.2f}{loop / fast:>8.0f}")


if __name__ == "__main__":
    main()
