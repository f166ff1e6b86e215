"""GPU check of the data stage's Triton code with the real compiler (not the interpreter).

Runs every built-in reference solution, and the generated fused solutions of `--synthetic N` synthesized
problems, against the reference `Model` on CUDA: seeds 0, 1, 2 with native / scaled / heavy-tail inputs,
the reference in true fp32 (TF32 off for matmul and cuDNN), the same scale-aware 1e-4 tolerance as the
CPU tests. A second pass with torch's default TF32 flags shows which problems only agree when the
reference is computed in fp32 (convolutions: cuDNN uses TF32 by default). One failing problem is reported
and the run goes on. Writes $OUT/data_gpu_check.json (or --out) and prints a table.

    PYTHONPATH=. python -m data_prep.gpu_check --synthetic 8      # about 1-2 minutes on an H100

Imports only torch, triton, numpy, pyyaml and tqdm (all on the GPU machine).
"""

from __future__ import annotations

import argparse
import json
import os
import time
import traceback
from pathlib import Path

from data_prep.builtin import builtin_problems
from data_prep.synthesis import synthesize_with_report
from data_prep.verify import check_solution
from davinci.types import Problem


def _set_tf32(enabled: bool) -> None:
    import torch

    torch.backends.cuda.matmul.allow_tf32 = enabled
    torch.backends.cudnn.allow_tf32 = enabled


def check_one(problem: Problem, device: str = "cuda") -> dict:
    row: dict = {"id": problem.id}
    start = time.perf_counter()
    interpret = device == "cpu"  # --device cpu: a dry run of this script in the Triton interpreter
    try:
        _set_tf32(False)
        check = check_solution(problem.code, problem.reference_solution or "", seeds=(0, 1, 2),
                               interpret=interpret, device=device)
        row.update(ok=check.ok, params_match=check.params_match, message=check.message,
                   max_abs_err=max(s.max_abs_err for s in check.seeds),
                   rel_l2_err=max(s.rel_l2_err for s in check.seeds))
        _set_tf32(True)
        tf32 = check_solution(problem.code, problem.reference_solution or "", seeds=(0,), interpret=interpret,
                              device=device)
        row["ok_with_tf32_reference"] = tf32.ok
    except Exception as exc:  # one broken problem must not stop the run
        row.update(ok=False, message=f"{type(exc).__name__}: {exc}", trace=traceback.format_exc()[-2000:])
    finally:
        _set_tf32(False)
    row["seconds"] = round(time.perf_counter() - start, 2)
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--synthetic", type=int, default=8, help="synthesized problems to check as well")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=os.environ.get("OUT", "."))
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"), help="cpu = interpreter dry run")
    parser.add_argument("--limit", type=int, default=0, help="check only the first N built-in problems")
    args = parser.parse_args()
    import torch
    import triton

    if args.device == "cuda" and not torch.cuda.is_available():
        print("error: no CUDA GPU visible (use --device cpu for an interpreter dry run)")
        return 2
    problems = builtin_problems()[: args.limit or None]
    if args.synthetic > 0:  # generated on the CPU side of this process; their solutions are compiled below
        problems += list(synthesize_with_report(problems, args.synthetic, args.seed, verify_solutions=False).problems)
    rows = []
    for i, problem in enumerate(problems, 1):
        row = check_one(problem, args.device)
        rows.append(row)
        print(f"[{i}/{len(problems)}] {row['id']}: {'ok' if row['ok'] else 'FAIL ' + row['message'][:200]}", flush=True)
    name = torch.cuda.get_device_name() if args.device == "cuda" else "cpu (Triton interpreter)"
    meta = {"device": name, "torch": torch.__version__, "triton": triton.__version__}
    out = Path(args.out) / "data_gpu_check.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"meta": meta, "rows": rows}, indent=2))
    print(f"\n{'problem':44s} {'ok':>4s} {'tf32ref':>7s} {'max_abs':>9s} {'rel_l2':>9s} {'s':>6s}")
    for r in rows:
        print(f"{r['id'][:44]:44s} {str(r['ok']):>4s} {str(r.get('ok_with_tf32_reference', '-')):>7s} "
              f"{r.get('max_abs_err', float('nan')):9.2e} {r.get('rel_l2_err', float('nan')):9.2e} {r['seconds']:6.1f}")
    failed = [r["id"] for r in rows if not r["ok"]]
    print(f"\n{len(rows) - len(failed)}/{len(rows)} passed on {meta['device']} (torch {meta['torch']}, "
          f"triton {meta['triton']}); results in {out}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
