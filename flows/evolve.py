"""The `evolve` flow: evolutionary search per problem, logged to one MLflow run (tag `stage=evolve`).

    davinci-kernel evolve --profile tiny --problem builtin/relu --generations 3
    davinci-kernel evolve --problem relu --mutator replay --replay edits.jsonl --kernel slow_start.py

Choices:
- The run is keyed by `run_key` = hash of the profile, the problems, the given kernels, the replay file and
  the checkpoint (not the budgets: more generations continue the same folders). The same command again finds the newest unfinished run with that key and reopens it; its
  per-problem folders (`.davinci/work/evolve/<run_key>/<problem>`) hold the per-generation state, so the
  resumed run evaluates nothing twice. A finished run is not reopened: a new run replays the folders (no
  new evaluations) and logs the same results.
- Logged per problem (artifact folder `evolve/<problem>/`): the archive (also as a table), the best kernel,
  the lineage graph as JSON, SVG and PNG (also under `lineage/`), the kept revisions, the state files;
  metrics `<problem>/best_speedup|best_ci_low|best_ci_high|evaluations`. Across problems: `summary` table,
  `fast_p` of the best-of-evolution programs (metrics `fast_<p>`), and `revisions.jsonl` (every kept
  revision: a `data.sources=[..., evolution]` source).
"""

from __future__ import annotations

import re
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, Sequence

from prefect import flow

from artifacts.home import Home
from davinci.config import config_hash, flatten, to_dict
from davinci.jsonl import file_digest, read_jsonl, write_jsonl
from flows.console import say
from flows.context import ProfileRef, open_store, prefect_ids
from flows.interrupt import tracked_status

STAGE = "evolve"


def _slug(problem_id: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", problem_id)


BUDGETS = ("generations", "max_evaluations", "wall_time_s")


def run_key(profile: Any, problems: Sequence[Any], kernels: Sequence[str], replay: str, checkpoint: str) -> str:
    """Hash of what decides the programs; the budgets are left out, so `--generations 5` after a 3-generation
    run continues in the same folders and evaluates only the new generations."""
    cfg = to_dict(profile)
    cfg["evolve"] = {k: v for k, v in cfg["evolve"].items() if k not in BUDGETS}
    return config_hash({"profile": cfg, "problems": [p.id + ":" + p.code_hash for p in problems],
                        "kernels": [config_hash({"k": k}) for k in kernels],
                        "replay": file_digest(replay) if replay else "", "checkpoint": checkpoint})


@contextmanager
def evolve_run(store: Any, profile: Any, key: str, label: str) -> Iterator[str]:
    """Reopen the newest unfinished evolve run with `key`, else create one; FINISHED / KILLED / FAILED at exit."""
    previous = [r for r in store.search(f"tags.stage = '{STAGE}' and tags.run_key = '{key}'") if r.info.status != "FINISHED"]
    if previous:
        run_id = previous[0].info.run_id
        store.set_status(run_id, "RUNNING")
        store.set_tags(run_id, {"resumes": int(previous[0].data.tags.get("resumes", "0")) + 1})
        say(STAGE, f"resuming evolve run {run_id}")
    else:
        run_id = store.create_run(label, {"stage": STAGE, "run_key": key, "profile": profile.name, **prefect_ids()})
        store.log_params(run_id, {k: v for k, v in flatten(profile).items() if k.split(".")[0] in ("seed", "evolve", "gym")})
    with tracked_status(store, run_id, STAGE, prefect_ids().get("prefect.flow_run_id", "")):
        yield run_id


def _log_problem(store: Any, run_id: str, out: dict[str, Any]) -> None:
    folder, files, summary = Path(out["dir"]), out["files"], out["summary"]
    slug = _slug(summary["problem_id"])
    rows = [{k: v for k, v in r.items() if k not in ("code", "features", "feedback")} | {"parents": ",".join(r["parents"])}
            for r in read_jsonl(folder / files["archive"])]
    if rows:
        store.log_table(run_id, rows, f"evolve/{slug}/archive_table.json")
    store.log_artifact(run_id, folder, f"evolve/{slug}")
    for name in ("lineage", "lineage_svg", "lineage_png"):
        store.log_artifact(run_id, folder / files[name], f"lineage/{slug}")
    metrics = {f"{slug}/{k}": float(summary[s]) for k, s in (("best_speedup", "speedup"), ("best_ci_low", "ci_low"),
                                                              ("best_ci_high", "ci_high"), ("evaluations", "evaluations"))
               if summary[s] is not None}
    store.log_metrics(run_id, metrics, step=summary["generations"])


@flow(name="evolve")
def evolve_flow(profile: str = "tiny", overrides: Sequence[str] = (), problems: Sequence[str] = (),
                kernels: Sequence[str] = (), replay: str = "", checkpoint: str = "") -> dict[str, Any]:
    from data_prep.resolve import read_kernel, resolve_problem
    from davinci.evolve.outputs import fast_p_of_best
    from tasks.evolve import evolve_problem

    prof = ProfileRef(profile, tuple(overrides)).load()
    probs = [resolve_problem(p) for p in problems]
    codes = [read_kernel(k) for k in kernels]
    key = run_key(prof, probs, codes, replay, checkpoint)
    store, home = open_store(prof), Home.current()
    root = home.work / "evolve" / key
    label = f"evolve {' '.join(p.id for p in probs)} {' '.join(overrides)} {time.strftime('%m-%d %H:%M')}".strip()
    with evolve_run(store, prof, key, label) as run_id:
        outs = []
        for prob in probs:
            say(STAGE, f"{prob.id}: evolving in {root / _slug(prob.id)}")
            out = evolve_problem(prob.to_dict(), to_dict(prof), str(root / _slug(prob.id)), codes, replay, checkpoint)
            _log_problem(store, run_id, out)
            s = out["summary"]
            say(STAGE, f"{prob.id}: best speedup {s['speedup']} CI [{s['ci_low']}, {s['ci_high']}] after "
                       f"{s['generations']} generations, {s['evaluations']} evaluations ({s['new_evaluations']} new), stopped by {s['stopped_by']}")
            outs.append(out)
        summaries = [o["summary"] for o in outs]
        fast = fast_p_of_best(summaries, prof.eval.p_values)
        store.log_table(run_id, summaries, "summary.json")
        store.log_dict(run_id, fast, "fast_p.json")
        store.log_metrics(run_id, {k.replace(".", "_"): v for k, v in fast.items()}, step=0)
        revisions = [r for o in outs for r in read_jsonl(Path(o["dir"]) / o["files"]["revisions"])]
        write_jsonl(root / "revisions.jsonl", revisions)
        store.log_artifact(run_id, root / "revisions.jsonl")
        store.set_tags(run_id, {"outputs_dir": str(root)})
    return {"run_id": run_id, "dir": str(root), "summaries": summaries, "fast_p": fast,
            "revisions": str(root / "revisions.jsonl")}
