"""Which evaluations stall on the GPU, and where: process states while an evaluation runs long (GPU check).

Evaluates the built-in reference solutions and KernelBench 25_Swish (6.4 GB inputs) with the reference as
the candidate, once as the evaluator runs and once with the candidate-freezing around input refreshes
switched off (`Lane.freeze_children` returning nothing), and prints each verdict with its wall time and
error. A watchdog thread prints, whenever one evaluation has run past `--watch-s`, the state of every
process below this one (R running, S sleeping, T stopped, D uninterruptible) with its wait channel: a
stalled request shows which process is not answering and why.

    PYTHONPATH=. python benchmarks/gpu/kernelgym_stall_probe.py [--watch-s 15 --run-timeout-s 40]
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks.gpu.kernelgym_common import config, load_level_problem, log, reference_as_candidate  # noqa: E402
from davinci.kernelgym import Evaluator  # noqa: E402
from davinci.kernelgym.lane import Lane  # noqa: E402
from davinci.types import Candidate  # noqa: E402


def states() -> str:
    import psutil

    rows = []
    for p in psutil.Process().children(recursive=True):
        try:
            wchan = Path(f"/proc/{p.pid}/wchan").read_text().strip()
            rows.append(f"{p.pid}:{p.status()[:4]}:{wchan[:24]}:{' '.join(p.cmdline()[1:3])[-50:]}")
        except Exception:
            continue
    return " | ".join(rows)


def watchdog(current: dict, stop: threading.Event, watch_s: float) -> None:
    while not stop.wait(5.0):
        name, t0 = current.get("name"), current.get("t0")
        if name and t0 and time.monotonic() - t0 > watch_s:
            log(f"  still in {name} after {time.monotonic() - t0:.0f} s: {states()}")


def items(device: str) -> list[tuple[str, object, Candidate]]:
    from data_prep.builtin import builtin_problems

    out = [(f"builtin/{p.name}", p, Candidate(problem_id=p.id, code=p.reference_solution or "", backend="triton"))
           for p in builtin_problems()]
    if device == "cuda":
        swish = load_level_problem(1, "25")
        out.append(("L1/25_Swish (reference)", swish, reference_as_candidate(swish)))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--watch-s", type=float, default=15.0)
    ap.add_argument("--run-timeout-s", type=float, default=40.0)
    ap.add_argument("--variants", nargs="*", default=["as is", "no freezing"])
    args = ap.parse_args()
    current: dict = {}
    stop = threading.Event()
    threading.Thread(target=watchdog, args=(current, stop, args.watch_s), daemon=True).start()
    freeze = Lane.freeze_children
    for variant in args.variants:
        Lane.freeze_children = (lambda self, keep: []) if variant == "no freezing" else freeze  # type: ignore[method-assign]
        with Evaluator(config(args.device, workers=1, run_timeout_s=args.run_timeout_s)) as ev:
            ev.ensure_lanes(1)
            log(f"{variant}: transport {ev.lanes[0].transport} {ev.lanes[0].transport_note}")
            for name, problem, cand in items(args.device):
                current.update(name=name, t0=time.monotonic())
                r = ev.evaluate(problem, cand, seed=3)
                took = time.monotonic() - current["t0"]
                current.clear()
                log(f"{variant} {name}: {took:.1f} s correct={r.correct} flags={r.flags} kind={r.error_kind} "
                    f"speedup={r.speedup} {('error: ' + (r.error or '')[-300:]) if not r.correct else ''}")
    stop.set()
    return 0


if __name__ == "__main__":
    sys.exit(main())
