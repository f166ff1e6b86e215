"""`davinci-kernel eval --problem P --candidate C [--device cpu|cuda] [--timeout S] [--json]`.

The lead's CLI parses the arguments and calls `eval_command`. It prints one JSON object (`--json`: the
whole `EvalResult.to_dict()`, whose keys include compiled, correct, flags, error, runtime, speedup and
feedback) or a short verdict, and returns 0 whatever the verdict. A missing or unreadable file raises
`InputNotFound` / `MalformedInput` (the CLI prints the message and its fix and exits 2). The candidate's
backend is read from its source (Triton or CUDA); `--timeout` bounds both the build and the run.
"""

from __future__ import annotations

import json
from dataclasses import replace

from davinci.kernelgym.backend import detect_backend
from davinci.kernelgym.batch import evaluate
from davinci.kernelgym.config import GymConfig
from davinci.kernelgym.isolation import summary as isolation_summary
from davinci.kernelgym.problem import load_problem_file, read_source
from davinci.kernelgym.result import EvalResult
from davinci.types import Candidate


def _human(r: EvalResult) -> str:
    head = "correct" if r.correct else f"not correct ({r.error_kind})"
    lines = [f"{r.problem_id}: {head}   [{r.backend}, {r.device}, {r.wall_s:.1f} s]"]
    if r.speedup is not None:
        ci = f" [{r.speedup_ci[0]:.3g}, {r.speedup_ci[1]:.3g}]" if r.speedup_ci else ""
        lines.append(f"speedup vs eager: {r.speedup:.3g}x{ci}" +
                     (f"   vs torch.compile: {r.speedup_compile:.3g}x" if r.speedup_compile else ""))
    if r.flags:
        lines.append("flags: " + ", ".join(r.flags))
    iso = isolation_summary(r.details.get("sandbox"))
    if iso["held"] or iso["missing"]:
        lines.append(f"isolation: held {', '.join(iso['held']) or 'none'}"
                     + (f"; missing {', '.join(iso['missing'])}" if iso["missing"] else ""))
    lines.append("")
    lines.append(r.feedback)
    return "\n".join(lines)


def eval_command(problem_path: str, candidate_path: str, device: str = "auto", timeout: float | None = None,
                 as_json: bool = False, config: GymConfig | None = None) -> int:
    problem = load_problem_file(problem_path)
    code = read_source(candidate_path, "candidate")
    backend = detect_backend(code).backend
    candidate = Candidate(problem_id=problem.id, code=code, backend="cuda" if backend == "cuda" else "triton")
    cfg = config or GymConfig()
    cfg = replace(cfg, device=device if device in ("cpu", "cuda") else "auto")
    if timeout is not None:
        cfg = replace(cfg, compile_timeout_s=float(timeout), run_timeout_s=float(timeout))
    result = evaluate(problem, candidate, cfg)
    if as_json:
        out = result.to_dict()
        out["isolation"] = isolation_summary(result.details.get("sandbox"))  # which sandbox layers held
        print(json.dumps(out, indent=None, default=str))
    else:
        print(_human(result))
    return 0
