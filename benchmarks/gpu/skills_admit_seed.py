"""Admit the seed skills through the real admission gate on a GPU and write their evidence.

Every seed skill goes through `davinci.skills.admission.admit` exactly as a summarized skill would:
fresh-process reruns of its example at the GPU sizes with unseen seeds (timed against eager; the lower
bound of the speedup CI must clear `--bar`), unseen shapes from `kernelgym.shape_variants` (correct
everywhere), no hack flags. The result is the seed evidence file: commit
`$OUT/seed_evidence.json` as `davinci/skills/seed/evidence.json`; `seed_skills()` then marks the
skills it admitted as `admitted` (an evidence entry only counts for the exact example it measured).

Run on the GPU machine from the repository root (kernelgym and rank-bm25 importable):
    PYTHONPATH=. python benchmarks/gpu/skills_admit_seed.py
Options: --reruns 2 --shapes 1 --bar 1.05 --workers 4 --timed-workers 1 --budget-s 390
         --skills id1,id2 (a subset)  --merge old_evidence.json (keep entries of skills not rerun)
         --device cpu --evaluator tests/skills/gym_double.py (rehearse every code path on a CPU)
Expected: 26 skills, 78 evaluations, about 4-6 minutes on one H100. kernelgym serializes evaluations
on one lane per GPU, so the CUDA examples are first built in parallel CPU processes (an untimed
`evaluate_batch` warm-up, content-hashed build cache) and every later run only loads them. Checks not
started before the budget ends are reported as "not run"; rerun those skills with
--skills ... --merge $OUT/seed_evidence.json.
Writes under $OUT: seed_evidence.json, seed_admission.md; prints one row per skill.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
WARMUP_SEED = 777
sys.path.insert(0, str(REPO))

from davinci.skills.admission import AdmissionDecision, admit, measurements_of  # noqa: E402
from davinci.skills.config import SkillsConfig  # noqa: E402
from davinci.skills.schema import record_to_dict  # noqa: E402
from davinci.skills.seed import seed_skills  # noqa: E402


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--reruns", type=int, default=2, help="timed fresh-process reruns per skill")
    p.add_argument("--shapes", type=int, default=1, help="unseen shape variants per skill (correctness)")
    p.add_argument("--bar", type=float, default=1.05, help="the speedup CI lower bound must exceed this")
    p.add_argument("--workers", type=int, default=4, help="parallel untimed evaluations (kernelgym queues them per GPU lane)")
    p.add_argument("--timed-workers", type=int, default=1, help="parallel timed evaluations (more than 1 disturbs timings on one GPU)")
    p.add_argument("--budget-s", type=float, default=390.0, help="no new check starts after this many seconds")
    p.add_argument("--skills", default="", help="comma-separated seed ids (default: all)")
    p.add_argument("--merge", default="", help="an earlier evidence file whose other entries are kept")
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"], help="cpu rehearses the script with the interpreter")
    p.add_argument("--evaluator", default="", help="a .py file defining evaluate/shape_variants (default: davinci.kernelgym)")
    p.add_argument("--out", default=os.environ.get("OUT", "out"), help="output folder (default $OUT)")
    return p.parse_args(argv)


def load_evaluator(path: str):
    """(evaluate, shape_variants) from kernelgym, or from a file implementing the same contract."""
    if not path:
        from davinci.kernelgym import evaluate, shape_variants  # type: ignore[attr-defined]

        return evaluate, shape_variants
    spec = importlib.util.spec_from_file_location("custom_evaluator", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module.evaluate, module.shape_variants


def environment(device: str) -> dict[str, str]:
    import torch

    env = {"torch": torch.__version__, "device": "cpu", "host_cpus": str(os.cpu_count())}
    try:
        import triton

        env["triton"] = triton.__version__
    except ImportError:
        env["triton"] = ""
    if device == "cuda" and torch.cuda.is_available():
        env["device"] = torch.cuda.get_device_name(0)
        env["cuda"] = str(torch.version.cuda)
    return env


def prewarm_cuda_builds(skills: list, gym, args: argparse.Namespace) -> None:
    """Build the CUDA examples in parallel before admission (kernelgym pre-builds load_inline candidates
    of a batch in CPU processes into its content-hashed cache); a failure here only costs time later."""
    cuda = [s for s in skills if s.backend == "cuda"]
    if args.evaluator or args.device != "cuda" or not cuda:
        return
    from davinci.kernelgym import evaluate_batch
    from davinci.skills.admission import example_problem, with_config_fields

    t0 = time.monotonic()
    untimed = with_config_fields(gym, measure_performance=False, baselines=("eager",))
    try:
        results = evaluate_batch([example_problem(s) for s in cuda], untimed, progress=True, seed=WARMUP_SEED)
    except Exception as exc:  # noqa: BLE001 - warm-up only
        print(f"warm-up of CUDA builds failed ({type(exc).__name__}: {exc}); builds happen during admission instead")
        return
    for s, r in zip(cuda, results):
        print(f"  warm-up {s.id}: compiled={r.compiled} correct={r.correct} {r.error_kind or ''} {r.error[:120]}")
    print(f"CUDA warm-up: {len(cuda)} builds in {time.monotonic() - t0:.0f} s", flush=True)


def entry(decision: AdmissionDecision, example_hash: str) -> dict:
    """The evidence-file record of one decision (the format `seed.attach_evidence` reads)."""
    env = dict(decision.evidence.environment)
    admitted_measurements = decision.skill.effect.measurements if decision.admitted else measurements_of(decision.evidence.checks, env)
    return {
        "example_hash": example_hash,
        "outcome": decision.outcome,
        "reasons": list(decision.reasons),
        "evidence": record_to_dict(decision.evidence),
        "measurements": [record_to_dict(m) for m in admitted_measurements],
    }


def summary_row(skill_id: str, backend: str, e: dict) -> dict:
    checks = (e.get("evidence") or {}).get("checks") or []
    timed = [c for c in checks if c.get("timed") and c.get("speedup") is not None]
    lows = [c["ci_low"] for c in timed if c["ci_low"] is not None]
    highs = [c["ci_high"] for c in timed if c["ci_high"] is not None]
    speeds = sorted(c["speedup"] for c in timed)
    reasons = e.get("reasons") or []
    return {
        "id": skill_id,
        "backend": backend,
        "outcome": e.get("outcome", "?"),
        "speedup": speeds[len(speeds) // 2] if speeds else None,
        "ci_low": min(lows) if lows else None,
        "ci_high": max(highs) if highs else None,
        "passed": f"{sum(bool(c.get('passed')) for c in checks)}/{len(checks)}",
        "why": "" if e.get("outcome") == "admitted" else (reasons[0] if reasons else "")[:110],
    }


def _fmt(x) -> str:
    return "-" if x is None else f"{x:.2f}"


def table(rows: list[dict]) -> str:
    head = "| skill | backend | outcome | speedup | CI low | CI high | checks | why not |\n|---|---|---|---|---|---|---|---|\n"
    return head + "".join(
        f"| {r['id']} | {r['backend']} | {r['outcome']} | {_fmt(r['speedup'])} | {_fmt(r['ci_low'])} | {_fmt(r['ci_high'])} | {r['passed']} | {r['why']} |\n" for r in rows
    )


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    try:
        evaluate, shape_variants = load_evaluator(args.evaluator)
    except ImportError as exc:
        print(f"error: the evaluator is not importable ({exc}); run from the repo root with PYTHONPATH=. after kernelgym is in place")
        return 2
    from davinci.kernelgym.config import GymConfig

    wanted = {s for s in args.skills.split(",") if s}
    skills = [s for s in seed_skills(evidence_path=None) if not wanted or s.id in wanted]
    env = environment(args.device)
    print(f"seed admission: {len(skills)} skills on {env['device']} (torch {env['torch']}, triton {env['triton']}); bar {args.bar}, {args.reruns} reruns, {args.shapes} shapes", flush=True)
    cfg = SkillsConfig(
        min_speedup_lower=args.bar,
        admission_reruns=args.reruns,
        admission_shape_variants=args.shapes,
        admission_workers=args.workers,
        admission_timed_workers=args.timed_workers,
    )
    gym = GymConfig(device=args.device)
    prewarm_cuda_builds(skills, gym, args)
    decisions = admit(skills, [], [], gym, cfg, evaluate_fn=evaluate, shape_variants_fn=shape_variants, progress=True, deadline=start + args.budget_s)
    entries = {s.id: entry(d, s.example.content_hash) for s, d in zip(skills, decisions)}
    if args.merge and Path(args.merge).exists():
        earlier = json.loads(Path(args.merge).read_text()).get("skills", {})
        entries = {**{k: v for k, v in earlier.items() if k not in entries}, **entries}
    doc = {
        "format": 1,
        "generated_by": "benchmarks/gpu/skills_admit_seed.py",
        "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "environment": env,
        "config": {"bar": args.bar, "reruns": args.reruns, "shapes": args.shapes, "timed_workers": args.timed_workers, "device": args.device},
        "wall_s": round(time.monotonic() - start, 1),
        "skills": dict(sorted(entries.items())),
    }
    (out / "seed_evidence.json").write_text(json.dumps(doc, indent=1))
    backends = {s.id: s.backend for s in seed_skills(evidence_path=None)}
    rows = [summary_row(k, backends.get(k, "?"), v) for k, v in sorted(entries.items())]
    n_admitted = sum(r["outcome"] == "admitted" for r in rows)
    text = table(rows) + f"\n{n_admitted}/{len(rows)} admitted on {env['device']} (torch {env['torch']}, triton {env['triton']}) in {doc['wall_s']} s\n"
    (out / "seed_admission.md").write_text(text)
    print(text, flush=True)
    print(f"evidence: {out / 'seed_evidence.json'}  (commit it as davinci/skills/seed/evidence.json)")
    unrun = sorted(k for k, v in entries.items() if any("not run" in (c.get("note") or "") for c in (v.get("evidence") or {}).get("checks") or []))
    if unrun:
        print(f"{len(unrun)} skill(s) ran out of time budget; with this file committed, continue with:\n"
              f"  PYTHONPATH=. python benchmarks/gpu/skills_admit_seed.py --skills {','.join(unrun)} --merge davinci/skills/seed/evidence.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
