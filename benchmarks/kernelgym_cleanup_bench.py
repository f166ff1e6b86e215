"""The cleanup phase of an evaluation against the size of the build cache: listing on every evaluation vs the ledger.

Every distinct candidate leaves a build folder and a `<hash>.size` record in the shared build cache; an RL epoch
adds one per distinct sample. On a 4 x H200 host the median cleanup phase of the learning demonstration's CPU lanes
grew from 0.07 s to 1.08 s per evaluation over four epochs (~1,000 candidates;
benchmarks/results/h200x4/session_2026-11-27d/learning), because `evict_builds` listed the whole cache (a stat and a
read per folder) after every evaluation. `builddirs.BuildLedger` lists it only when the cap may be near, or every
`RESCAN_EVERY` evaluations.

This script fills a fresh build cache with --folders records (as a long run leaves it), then evaluates --evals
distinct honest ReLU candidates on CPU lanes (Triton interpreter), once with the cache listed after every evaluation
(the previous behaviour, by making the ledger always due) and once with the ledger, and prints the median and p90
cleanup seconds (`details.phase_s.cleanup`), the listings made and the wall per evaluation. Ratios are what to read:
absolute times depend on the file system (gVisor's stat/read are several times slower than a plain kernel's).

    PYTHONPATH=. python benchmarks/kernelgym_cleanup_bench.py --folders 2000 --evals 24
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from davinci.kernelgym import Evaluator, GymConfig, builddirs, load_problem_file  # noqa: E402
from davinci.types import Candidate  # noqa: E402

FIXTURES = Path(__file__).resolve().parents[1] / "tests" / "kernelgym" / "fixtures"


def fill_cache(build_root: Path, folders: int) -> None:
    """`folders` build folders of 1 KiB with their size records, as evaluations of distinct candidates leave them."""
    build_root.mkdir(parents=True, exist_ok=True)
    for i in range(folders):
        d = build_root / f"{i:064x}"
        d.mkdir(exist_ok=True)
        (d / "kernel.py").write_bytes(b"#" * 1024)
        (build_root / f"{i:064x}.size").write_text("1024")


def run(mode: str, folders: int, evals: int) -> dict[str, float]:
    """Evaluate `evals` distinct candidates on a cache of `folders` records; `mode` "every" or "ledger"."""
    problem = load_problem_file(FIXTURES / "problems" / "relu.py")
    code = (FIXTURES / "candidates" / "honest_relu.py").read_text()
    listings = []
    real_evict = builddirs._evict
    builddirs._evict = lambda *a: listings.append(1) or real_evict(*a)  # count listings (restored below)
    real_due = builddirs.BuildLedger.due
    if mode == "every":
        builddirs.BuildLedger.due = lambda self, kept, cap: True  # the previous behaviour: list after each one
    try:
        with tempfile.TemporaryDirectory() as cache:
            ev = Evaluator(GymConfig(device="cpu", cache_dir=cache, workers=1, checks="strict", measure_performance=False))
            try:
                ev.ensure_lanes(1)
                fill_cache(ev.lanes[0].build_root, folders)
                cleanup, walls = [], []
                for i in range(evals):
                    cand = Candidate(problem_id=problem.id, code=code + f"\n# variant {mode} {i}\n", backend="triton")
                    t = time.perf_counter()
                    r = ev.evaluate(problem, cand, seed=i)
                    walls.append(time.perf_counter() - t)
                    assert r.correct, (r.error_kind, r.error)
                    cleanup.append(r.details["phase_s"]["cleanup"])
            finally:
                ev.close()
    finally:
        builddirs._evict, builddirs.BuildLedger.due = real_evict, real_due
    q = statistics.quantiles(cleanup, n=10)
    return {"cleanup_median_s": statistics.median(cleanup), "cleanup_p90_s": q[-1], "listings": len(listings),
            "wall_median_s": statistics.median(walls)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--folders", type=int, default=2000, help="build records in the cache before the first evaluation")
    ap.add_argument("--evals", type=int, default=24, help="distinct candidates evaluated per mode")
    args = ap.parse_args()
    rows = {mode: run(mode, args.folders, args.evals) for mode in ("every", "ledger")}
    print(f"build cache of {args.folders} folders, {args.evals} distinct ReLU candidates per mode, CPU lane")
    print(f"{'mode':<8} {'cleanup median s':>17} {'cleanup p90 s':>14} {'listings':>9} {'wall median s':>14}")
    for mode, r in rows.items():
        print(f"{mode:<8} {r['cleanup_median_s']:>17.4f} {r['cleanup_p90_s']:>14.4f} {r['listings']:>9d} {r['wall_median_s']:>14.3f}")
    e, l_ = rows["every"], rows["ledger"]
    print(f"cleanup median ratio every/ledger: {e['cleanup_median_s'] / max(l_['cleanup_median_s'], 1e-9):.1f}x")


if __name__ == "__main__":
    main()
