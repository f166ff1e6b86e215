"""Worker process for `data_prep.verify.check_solutions`: runs a batch of solution checks in a fresh
interpreter (started with TRITON_INTERPRET=1 for interpreter checks) and writes the verdicts as JSON.

    python -m data_prep.verify_worker JOB.json RESULT.json
JOB: {"items": [[problem_code, solution_code], ...], "seeds", "tol", "distributions", "interpret", "device"}.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from data_prep.verify import Tolerance, check_in_process


def main(job_path: str, result_path: str) -> int:
    job = json.loads(Path(job_path).read_text())
    tol = Tolerance(**job["tol"])
    verdicts = [
        check_in_process(problem, solution, job["seeds"], tol, distributions=job["distributions"],
                         interpret=job["interpret"], device=job["device"]).to_dict()
        for problem, solution in job["items"]
    ]
    Path(result_path).write_text(json.dumps(verdicts))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(*sys.argv[1:3]))
