"""Lineage skills from the seed skills' expert kernels on a GPU: simplify, keep what kernelgym finds correct,
reverse each kept step into a candidate skill, and put every candidate through the admission gate.

Acceptance: from at least five expert kernels (seed skills) the tool produces candidate skills with every
field filled and real evidence (the reverse step's measured speedup with CI), and at least three pass
admission on an H100 (h100 profile: speedup CI lower bound above 1.05x vs eager, unseen seeds and shapes).
The admission runs against an empty library, so a candidate is judged on its own evidence (against the
seed library it would mostly merge into the seed skill it came from; `--against-seeds` shows that).

    PYTHONPATH=. OUT=/tmp/lin python benchmarks/gpu/lineage_gpu.py                   # H100, ~6-10 min
    PYTHONPATH=. OUT=/tmp/lin python benchmarks/gpu/lineage_gpu.py --smoke-cpu       # 2 skills, CPU sizes

Outputs in $OUT: lineage_gpu.txt (steps table, candidates table), lineage_gpu.json, candidates.jsonl.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import argparse  # noqa: E402
import time  # noqa: E402
from dataclasses import replace  # noqa: E402

from benchmarks.gpu.kernelgym_common import config, log, out_dir, table, write_json  # noqa: E402

# Seed skills whose expert kernels carry a launch setting or tile constant a rule can simplify.
DEFAULT_SKILLS = ("triton-fuse-elementwise-chain", "triton-bias-gelu-residual", "triton-online-softmax-long-rows",
                  "triton-rmsnorm-rowwise", "triton-fused-cross-entropy", "triton-matmul-epilogue-tl-dot",
                  "triton-welford-chunked-norm", "triton-persistent-swiglu", "triton-mse-two-stage-reduction")


def missing_fields(skill) -> list[str]:
    """Fields of a candidate that are empty (the acceptance wants none)."""
    checks = {"intent": skill.intent, "applies_to.ops": skill.applies_to.ops, "applies_to.patterns": skill.applies_to.patterns,
              "preconditions.dtypes": skill.preconditions.dtypes, "preconditions.shapes": skill.preconditions.shapes,
              "preconditions.layout": skill.preconditions.layout, "preconditions.hardware": skill.preconditions.hardware,
              "guidance": skill.guidance, "effect.measurements": skill.effect.measurements, "failure_modes": skill.failure_modes,
              "example.after": skill.example.after}
    return [k for k, v in checks.items() if not v]


def _derive(ids, gym):
    from davinci.kernelgym import evaluate
    from davinci.skills import seed_skills
    from davinci.skills.lineage import derive_lineage
    from davinci.skills.rewrites import SIMPLIFICATIONS
    from tasks.lineage import resolve_expert

    seeds = {s.id: s for s in seed_skills()}
    simps = [SIMPLIFICATIONS.get(n) for n in SIMPLIFICATIONS.names()]
    results, step_rows = [], []
    for sid in ids:
        if sid not in seeds:
            log(f"{sid}: not a seed skill, skipped")
            continue
        t0 = time.monotonic()
        try:
            result = derive_lineage(resolve_expert(sid, ""), simps, evaluate, gym)
        except Exception as exc:  # noqa: BLE001 - one bad expert must not end the run; it is reported
            log(f"{sid}: {type(exc).__name__}: {str(exc)[-1500:]}")  # the whole reason; the table keeps its start
            step_rows.append([sid, "-", False, f"{type(exc).__name__}: {exc}"[:90]])
            continue
        results.append(result)
        for s in result.steps:
            step_rows.append([sid, s.name, s.kept, s.reason[:90]])
        log(f"{sid}: {len(result.candidates)} candidate(s) in {time.monotonic() - t0:.0f} s")
    return results, step_rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--smoke-cpu", action="store_true", help="two skills at CPU sizes, Triton interpreter, bar 0")
    ap.add_argument("--skills", default=",".join(DEFAULT_SKILLS))
    ap.add_argument("--against-seeds", action="store_true", help="admit against the seed library instead of an empty one")
    args = ap.parse_args()
    from davinci.config import load_profile
    from davinci.jsonl import write_jsonl
    from davinci.kernelgym import close_shared
    from davinci.skills import admit, seed_skills

    smoke = args.smoke_cpu
    ids = args.skills.split(",")[: 2 if smoke else None]
    gym = config("cpu") if smoke else replace(config("cuda"), require_isolation=False)
    skills_cfg = load_profile("tiny" if smoke else "h100").skills
    if smoke:
        skills_cfg = replace(skills_cfg, admission_reruns=1, admission_shape_variants=1)
    try:
        results, step_rows = _derive(ids, gym)
        candidates = [c for r in results for c in r.candidates]
        library = [s for s in seed_skills() if s.status == "admitted"] if args.against_seeds else []
        decisions = admit(candidates, library, [], gym, skills_cfg) if candidates else []
    finally:
        close_shared()
    cand_rows = []
    for c, d in zip(candidates, decisions):
        m = c.effect.measurements[0] if c.effect.measurements else None
        cand_rows.append([c.id[:44], m.speedup if m else None, m.ci_low if m else None, m.ci_high if m else None,
                          ",".join(missing_fields(c)) or "all filled", d.outcome, "; ".join(d.reasons)[:80]])
    experts = len({r.expert.origin for r in results if r.candidates})
    admitted = sum(d.admitted for d in decisions)
    text = (table(step_rows, ["seed skill", "simplification", "kept", "reason"]) + "\n\n"
            + table(cand_rows, ["candidate", "reverse x", "lo", "hi", "fields", "admission", "reasons"])
            + f"\n\nexpert kernels with candidates: {experts}; candidates: {len(candidates)}; admitted: {admitted}"
            + f"; device: {gym.device}; bar: {skills_cfg.min_speedup_lower}\n")
    print(text)
    (out_dir() / "lineage_gpu.txt").write_text(text)
    write_jsonl(out_dir() / "candidates.jsonl", [d.skill.to_dict() for d in decisions])
    write_json("lineage_gpu.json", {"experts": experts, "candidates": len(candidates), "admitted": admitted,
                                    "steps": step_rows, "decisions": cand_rows})
    ok = experts >= 5 and admitted >= 3 and all(r[4] == "all filled" for r in cand_rows)
    if not smoke and not ok:
        print("FAIL: want >= 5 expert kernels with candidates, every field filled, >= 3 admitted")
    return 0 if (ok or smoke) else 1


if __name__ == "__main__":
    sys.exit(main())
