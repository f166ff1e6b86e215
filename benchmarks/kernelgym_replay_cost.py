"""What the launch replay (`gym.launch_replay`, replay.py) costs per evaluation: the same honest programs
evaluated with it on and off, alternately in one process (so load drifts hit both), wall seconds per
evaluation and the ratio of medians. The replay adds one unwatched timed request on a GPU lane and, on any
lane, two re-runs of the kernels of two requests' calls.

    TRITON_INTERPRET=1 python benchmarks/kernelgym_replay_cost.py [--device cpu] [--reps 2] [--out FILE]

Programs: the honest red-team corpus (tests/kernelgym/fixtures/honest_v2), under the `strict` preset.
"""

from __future__ import annotations

import argparse
import re
import statistics
import tempfile
import time
from pathlib import Path

from davinci.kernelgym import Evaluator, GymConfig, load_problem_file
from davinci.types import Candidate

FIX = Path(__file__).resolve().parents[1] / "tests" / "kernelgym" / "fixtures"


def _problem(code: str):
    name = re.search(r"Problem:\s*`?(\w+)", code).group(1)
    for folder in ("problems", "problems_v2"):
        if (FIX / folder / f"{name}.py").exists():
            return load_problem_file(FIX / folder / f"{name}.py")
    raise FileNotFoundError(name)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="kg-replay-cost-"))
    gyms = {mode: Evaluator(GymConfig(device=args.device, checks="strict", launch_replay=mode, workers=1,
                                      cache_dir=str(root / mode)))
            for mode in ("off", "always")}
    walls: dict[str, list[float]] = {"off": [], "always": []}
    wrong: list[str] = []
    files = sorted((FIX / "honest_v2").glob("honest_v2_*.py"))
    try:
        for rep in range(args.reps):
            for i, path in enumerate(files):
                code = path.read_text()
                problem = _problem(code)
                for mode in (("off", "always") if (i + rep) % 2 == 0 else ("always", "off")):
                    t0 = time.monotonic()
                    r = gyms[mode].evaluate(problem, Candidate(problem_id=problem.id, code=code, backend="triton"),
                                            seed=rep)
                    walls[mode].append(time.monotonic() - t0)
                    if not r.correct or r.flags:
                        wrong.append(f"{mode} {path.stem}: correct={r.correct} flags={list(r.flags)}")
                print(f"rep {rep} {path.stem}: off {walls['off'][-1]:.2f} s, always {walls['always'][-1]:.2f} s",
                      flush=True)
    finally:
        for ev in gyms.values():
            ev.close()
    off, on = statistics.median(walls["off"]), statistics.median(walls["always"])
    lines = [f"device {args.device}; {len(files)} honest programs x {args.reps}, strict, alternating order",
             f"{'launch_replay':14s} {'evaluations':>11s} {'median s':>9s} {'total s':>8s}",
             f"{'off':14s} {len(walls['off']):11d} {off:9.2f} {sum(walls['off']):8.1f}",
             f"{'always':14s} {len(walls['always']):11d} {on:9.2f} {sum(walls['always']):8.1f}",
             f"ratio of medians always/off: {on / off:.3f}; of totals: {sum(walls['always']) / sum(walls['off']):.3f}",
             f"not correct or flagged: {len(wrong)}", *wrong]
    print("\n".join(lines))
    if args.out:
        Path(args.out).write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
