"""The trust boundary on a GPU (or the CPU): which sandbox layers hold, every new cheat, and the honest corpus.

Evaluates, under each preset (`strict`, `runtime`):
- every cheat under tests/kernelgym/fixtures/cheats_v2/ (and its gpu/ folder on a GPU): acceptance is
  "not correct, or flagged";
- the honest corpus: tests/kernelgym/fixtures/honest_v2/, the honest_* fixtures, and the reference Triton
  solutions of the built-in suite (data_prep/builtin): acceptance is "correct with no flag".
Each cheat names its problem in its docstring (`Problem: <name>`: a fixture under tests/kernelgym/fixtures/
problems or problems_v2). Prints the isolation layers from the evaluator's probe and one table; writes
$OUT/kernelgym_trust_<device>.{json,txt}.

    PYTHONPATH=. python benchmarks/gpu/kernelgym_trust_gpu.py                  # GPU, ~5 min
    PYTHONPATH=. python benchmarks/gpu/kernelgym_trust_gpu.py --device cpu --presets strict
    PYTHONPATH=. python benchmarks/gpu/kernelgym_trust_gpu.py --presets runtime --kinds honest
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks.gpu.kernelgym_common import config, log, out_dir, table, write_json  # noqa: E402
from davinci.kernelgym import Evaluator  # noqa: E402
from davinci.types import Candidate, Problem  # noqa: E402

FIX = Path(__file__).resolve().parents[2] / "tests" / "kernelgym" / "fixtures"
HONEST_PROBLEMS = {"honest_relu": "relu", "honest_softmax": "softmax_wide", "honest_row_sum": "row_sum",
                   "honest_hinge": "hinge_loss", "honest_scale_bias": "scale_bias"}


def _problem(name: str) -> Problem:
    for folder in ("problems", "problems_v2"):
        path = FIX / folder / f"{name}.py"
        if path.exists():
            return Problem(id=name, source="fixture", level=1, name=name, code=path.read_text())
    raise FileNotFoundError(f"no problem fixture {name!r}")


def _named(path: Path) -> tuple[Problem, Candidate]:
    code = path.read_text()
    found = re.search(r"Problem:\s*`?(\w+)", code)
    p = _problem(found.group(1) if found else HONEST_PROBLEMS.get(path.stem, "relu"))
    return p, Candidate(problem_id=p.id, code=code, backend="cuda" if "load_inline" in code else "triton")


def corpus(cuda: bool) -> list[tuple[str, str, Problem, Candidate]]:
    """(kind, name, problem, candidate) for every cheat and honest program that runs on this device."""
    from data_prep.builtin import builtin_problems

    # a cheat caught on the CPU only says "Open on: cuda": on a GPU it is counted with the open gaps; one that
    # cheats on the CPU only ("Cheat on: cpu": on a GPU it runs an honest kernel) is not run there
    items = [("open" if cuda and "Open on: cuda" in f.read_text() else "cheat", f.stem, *_named(f))
             for f in sorted((FIX / "cheats_v2").glob("c2_*.py")) if not (cuda and "Cheat on: cpu" in f.read_text())]
    if cuda:
        items += [("cheat", f.stem, *_named(f)) for f in sorted((FIX / "cheats_v2" / "gpu").glob("*.py"))]
    # known gaps (red team of 2026-11-26, third session; cheats_open/README.md): judged like cheats, counted apart
    items += [("open", f.stem, *_named(f)) for f in sorted((FIX / "cheats_open").glob("c3_*.py"))]
    items += [("honest", f.stem, *_named(f)) for f in sorted((FIX / "honest_v2").glob("*.py"))]
    items += [("honest", n, *_named(FIX / "candidates" / f"{n}.py")) for n in HONEST_PROBLEMS]
    for p in builtin_problems():
        if p.reference_solution:
            items.append(("honest", f"builtin:{p.id}", p, Candidate(problem_id=p.id, code=p.reference_solution,
                                                                    backend="triton")))
    return items


def _leaks(cache: Path) -> list[str]:
    """What a cross-evaluation cheat left behind: its `c2_marker*` files anywhere it might write, and a
    changed nice value or CPU affinity of this process (the evaluator's own)."""
    import glob
    import os

    import torch

    roots = ["/tmp", "/dev/shm", str(FIX.parents[2]), str(Path(torch.__file__).parents[1]), str(cache)]
    found = [p for r in roots for p in glob.glob(f"{r}/**/c2_marker*", recursive=True)]
    if os.getpriority(os.PRIO_PROCESS, 0) != NICE0 or os.sched_getaffinity(0) != AFFINITY0:
        found.append("nice or affinity of the evaluator's process")
    return found


NICE0, AFFINITY0 = None, None


def run(device: str, presets: list[str], kinds: set[str], only: str = "", run_timeout_s: float = 0.0) -> list[dict]:
    rows = []
    extra = {"run_timeout_s": run_timeout_s} if run_timeout_s > 0 else {}
    for preset in presets:
        with Evaluator(config(device, checks=preset, workers=1, **extra)) as ev:
            items = [item for item in corpus(ev.device == "cuda") if item[0] in kinds and re.search(only, item[1])]
            ev.ensure_lanes(1)
            log(f"{preset}: sandbox layers {ev.layers}; transport {ev.lanes[0].transport} {ev.lanes[0].transport_note}")
            for kind, name, p, c in items:
                t0 = time.monotonic()
                r = ev.evaluate(p, c, seed=7)
                ok = (r.correct and not r.flags) if kind == "honest" else (not r.correct or bool(r.flags))
                error = r.error or ""
                neutral = re.search(r"Neutralised:\s*(\w+)", c.code)
                if kind == "cheat" and neutral and not ok:  # honest in every scored request (its docstring says how)
                    share = r.details.get(neutral.group(1))
                    ok = share is not None and share >= 0.99
                    error = error or f"{neutral.group(1)} {share}"
                if kind == "cheat" and "Class: cross_eval" in c.code:  # honest outputs; the property is "nothing leaked"
                    leaks = _leaks(Path(ev.cfg.cache_dir))
                    ok, error = not leaks, (f"leaked: {leaks[:3]}" if leaks else error)
                rows.append({"preset": preset, "kind": kind, "name": name, "ok": ok, "correct": r.correct,
                             "flags": list(r.flags), "error_kind": r.error_kind, "speedup": r.speedup,
                             "wall_s": round(time.monotonic() - t0, 2), "error": error[-600:],
                             "layers": {k: v for k, v in (r.details.get("sandbox") or {}).items() if k != "errors"},
                             "coverage": r.kernel_coverage, "kernels": r.details.get("kernels"),
                             "wall": {k: r.details.get(k) for k in ("wall_floor_ratios", "wall_excess_ms", "timing_sources")}})
                log(f"{preset} {kind} {name}: {'ok' if ok else 'FAIL'} correct={r.correct} flags={r.flags} "
                    f"kind={r.error_kind} speedup={r.speedup}")
                if not ok:  # what the verdict rests on, in the log too (a job stopped at its limit writes no table)
                    log(f"    error: {error[-400:]!r}; coverage {r.kernel_coverage}; wall {rows[-1]['wall']}")
                write_json(f"kernelgym_trust_{ev.device}_partial.json", rows)
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--presets", default="strict,runtime")
    ap.add_argument("--kinds", default="cheat,open,honest", help="which of cheat, open, honest to run")
    ap.add_argument("--only", default="", help="a regular expression the names run must match")
    ap.add_argument("--run-timeout-s", type=float, default=0.0,
                    help="gym.run_timeout_s (0: the default); a cheat that stalls a timed round waits this long")
    args = ap.parse_args()
    import os

    global NICE0, AFFINITY0
    NICE0, AFFINITY0 = os.getpriority(os.PRIO_PROCESS, 0), os.sched_getaffinity(0)
    rows = run(args.device, args.presets.split(","), set(args.kinds.split(",")), args.only, args.run_timeout_s)
    text = table([[r["preset"], r["kind"], r["name"], "ok" if r["ok"] else "FAIL", r["correct"], ",".join(r["flags"]),
                   r["error_kind"], r["speedup"]] for r in rows],
                 ["preset", "kind", "name", "verdict", "correct", "flags", "error_kind", "speedup"])
    bad = [r for r in rows if not r["ok"] and r["kind"] != "open"]
    judged = [r for r in rows if r["kind"] != "open"]
    opened = [r for r in rows if r["kind"] == "open"]
    summary = (f"\n{len(judged) - len(bad)}/{len(judged)} as required; cheats through: "
               f"{sum(1 for r in bad if r['kind'] == 'cheat')}, honest flagged or wrong: "
               f"{sum(1 for r in bad if r['kind'] == 'honest')}; known open gaps caught here: "
               f"{sum(1 for r in opened if r['ok'])}/{len(opened)}")
    print(text + summary)
    write_json(f"kernelgym_trust_{args.device}.json", rows)
    (out_dir() / f"kernelgym_trust_{args.device}.txt").write_text(text + summary + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
