"""`davinci-kernel runs`: one line per pipeline run that a person can scan: when, how long, status, what.

Columns: start time (local), duration, status, stages finished, headline metric (fast_1 vs eager, the
KernelBench number, from the parent run's metrics), run id, then the profile and its `--set` overrides.
A run still RUNNING shows its elapsed time with a trailing `+`.

    davinci-kernel runs --limit 5
"""

from __future__ import annotations

import json
import time
from typing import Any, Sequence

HEADLINE = "fast_1"


def _started(run: Any) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(run.info.start_time / 1000))


def _duration(run: Any) -> str:
    end = run.info.end_time or int(time.time() * 1000)
    seconds = max(0, (end - run.info.start_time) // 1000)
    text = f"{seconds // 3600}h{seconds // 60 % 60:02d}m" if seconds >= 3600 else f"{seconds // 60}m{seconds % 60:02d}s"
    return text + ("+" if run.info.status == "RUNNING" else "")


def headline(metrics: dict[str, float]) -> str:
    """fast_1 vs eager of the run's eval (best turn), or '-' when the eval has not finished."""
    names = sorted(k for k in metrics if k.startswith(HEADLINE) and k.endswith("_eager") and not k.startswith("first"))
    return f"{metrics[names[0]]:.2f}" if names else "-"


def what(tags: dict[str, str]) -> str:
    overrides = json.loads(tags.get("overrides", "[]") or "[]")
    return " ".join([tags.get("profile", "?"), *(f"--set {o}" for o in overrides)])


def format_runs(runs: Sequence[Any]) -> str:
    header = f"{'started':16s}  {'took':8s}  {'status':8s}  {HEADLINE:>6s}  {'run id':32s}  profile and overrides"
    lines = [header]
    for run in runs:
        lines.append(f"{_started(run):16s}  {_duration(run):8s}  {run.info.status:8s}  {headline(run.data.metrics):>6s}  "
                     f"{run.info.run_id:32s}  {what(run.data.tags)}")
    return "\n".join(lines)
