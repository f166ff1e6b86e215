"""The files an evolution run leaves per problem (next to its state files), and the summary across problems.

    archive.jsonl     the final archive, best first (`ArchiveEntry.to_dict()` per line)
    best_kernel.py    the best program (absent when nothing was correct)
    lineage.json      `lineage.lineage_graph`; lineage.svg its picture
    revisions.jsonl   kept revisions (`revisions.write_revisions`): SFT examples / RL start states
    summary.json      best speedup with CI, evaluations, generations, why it stopped

`fast_p_of_best(results, ps)` is KernelBench's fast_p over the best-of-evolution program per problem (a
problem with nothing correct counts as a failure).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Sequence

from davinci.evolve.archive import score
from davinci.evolve.lineage import lineage_graph, render_svg
from davinci.evolve.revisions import write_revisions
from davinci.evolve.search import EvolveResult
from davinci.jsonl import write_jsonl

FILES = {"archive": "archive.jsonl", "best_kernel": "best_kernel.py", "lineage": "lineage.json",
         "lineage_svg": "lineage.svg", "revisions": "revisions.jsonl", "summary": "summary.json"}


def summary_of(result: EvolveResult) -> dict[str, Any]:
    b = result.best
    return {"problem_id": result.problem.id, "level": result.problem.level, "correct": b is not None,
            "best_hash": b.code_hash if b else None, "speedup": b.speedup if b else None,
            "ci_low": b.ci_low if b else None, "ci_high": b.ci_high if b else None,
            "archive_size": len(result.archive), "programs": len(result.entries), "evaluations": result.evaluations,
            "new_evaluations": result.new_evaluations, "generations": result.generations_done,
            "stopped_by": result.stopped_by, "revisions": len(result.revisions)}


def write_outputs(result: EvolveResult, out_dir: str | Path) -> dict[str, str]:
    """Write the files above into `out_dir`; returns {name: file name} of those written."""
    out = Path(out_dir)
    archive = sorted(result.archive, key=score, reverse=True)
    write_jsonl(out / FILES["archive"], [e.to_dict() for e in archive])
    files = dict(FILES)
    if result.best is not None:
        (out / FILES["best_kernel"]).write_text(result.best.code)
    else:
        files.pop("best_kernel")
        (out / FILES["best_kernel"]).unlink(missing_ok=True)
    graph = lineage_graph(result.problem.id, result.entries, result.archive, result.best.code_hash if result.best else None)
    (out / FILES["lineage"]).write_text(json.dumps(graph, indent=2))
    (out / FILES["lineage_svg"]).write_text(render_svg(graph))
    write_revisions(out / FILES["revisions"], result.revisions)
    (out / FILES["summary"]).write_text(json.dumps(summary_of(result), indent=2))
    return files


def fast_p_of_best(summaries: Sequence[dict[str, Any]], ps: Sequence[float] = (0.0, 0.5, 0.8, 1.0, 1.5, 2.0)) -> dict[str, float]:
    """{"fast_1.0": share of problems whose best program is correct with speedup > 1.0, ...} (strict >)."""
    n = len(summaries)
    out = {}
    for p in ps:
        hits = sum(1 for s in summaries if s["correct"] and s["speedup"] is not None and s["speedup"] > p)
        out[f"fast_{p:g}"] = hits / n if n else 0.0
    return out
