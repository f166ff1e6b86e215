"""Cache keys and work folders for tasks: on content, never on which run asked.

A key hashes the task name, its parameters and the source of the code packages the task runs: editing
`davinci/llm` invalidates the SFT task but not the data task. Parameters that only say *where to log*
(`RUN_SCOPED`: the MLflow run reference, a run id) never enter a key, so a second pipeline run with the
same inputs (e.g. only `rl.*` changed) reuses data and SFT instead of retraining. The work folder of a task
run is `.davinci/work/<task>/<key>`: content-addressed, so a retry or an interrupted rerun finds its partial
output there, and a run with other inputs gets another folder and never changes an earlier run's inputs.

    from tasks.caching import cache_key_fn, work_dir
    @task(cache_key_fn=cache_key_fn(SCOPES), persist_result=True)
"""

from __future__ import annotations

import functools
import hashlib
import json
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

from artifacts.home import Home

PROJECT_ROOT = Path(__file__).resolve().parents[1]
# Parameters that name the MLflow run a task logs into: never part of a key or a work folder name.
RUN_SCOPED: tuple[str, ...] = ("run_ref", "run_id")


@functools.lru_cache(maxsize=None)
def code_hash(scopes: tuple[str, ...]) -> str:
    """Hash of every .py/.txt/.json/.yaml file under the given project folders (sorted, content-based)."""
    h = hashlib.sha256()
    for scope in sorted(scopes):
        base = PROJECT_ROOT / scope
        candidates = [base] if base.is_file() else base.rglob("*")
        files = sorted(p for p in candidates if p.is_file() and p.suffix in {".py", ".txt", ".json", ".yaml"})
        for path in files:
            if "__pycache__" in path.parts:
                continue
            h.update(str(path.relative_to(PROJECT_ROOT)).encode())
            h.update(path.read_bytes())
    return h.hexdigest()[:16]


def params_hash(params: Mapping[str, Any], exclude: Iterable[str] = ()) -> str:
    """Hash of the parameters that decide a result: `RUN_SCOPED` ones and those in `exclude` are left out."""
    skip = set(exclude) | set(RUN_SCOPED)
    payload = {k: v for k, v in params.items() if k not in skip}
    blob = json.dumps(payload, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def task_key(task_name: str, params: Mapping[str, Any], scopes: tuple[str, ...], exclude: Iterable[str] = ()) -> str:
    return f"{task_name}-{params_hash(params, exclude)}-{code_hash(scopes)}"


def cache_key_fn(scopes: tuple[str, ...], exclude: tuple[str, ...] = ()) -> Callable[[Any, dict], str]:
    """A Prefect `cache_key_fn` over the task's parameters and code scopes."""

    def fn(context: Any, parameters: dict[str, Any]) -> str:
        return task_key(context.task.name, parameters, scopes, exclude)

    return fn


def work_dir(task_name: str, params: Mapping[str, Any], scopes: tuple[str, ...], exclude: Iterable[str] = ()) -> Path:
    folder = Home.current().work / task_name / task_key(task_name, params, scopes, exclude)
    folder.mkdir(parents=True, exist_ok=True)
    return folder
