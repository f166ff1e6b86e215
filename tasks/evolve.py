"""Task of the evolve flow: one problem's evolution in its own folder (resumable), its files and a PNG lineage.

The engine is `davinci.evolve` (search, archive, outputs); this task builds the mutator (loading the
backbone only for `policy`), wires kernelgym's `evaluate_batch` (eager baseline only: the speedup is vs
eager), and draws the lineage graph as a PNG beside the engine's SVG. No Prefect result cache: resume is the
folder's own per-generation state, which also skips every program already evaluated.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from prefect import task
from prefect.cache_policies import NO_CACHE

from tasks.plots import _pyplot, _save


def _mutator(profile: Any, replay_path: str, checkpoint: str) -> Any:
    from davinci.evolve.mutators import make_mutator

    backend = None
    if profile.evolve.mutator == "policy" and checkpoint:
        from davinci.llm import Backbone, make_backend

        backend = make_backend(Backbone.load(checkpoint, profile.model), profile.model)
    return make_mutator(profile.evolve, backend=backend, replay_path=replay_path)


def lineage_png(graph: dict[str, Any], path: Path) -> Path:
    """The lineage graph with matplotlib: x = generation, one row per program, colour = verdict."""
    from davinci.evolve.lineage import node_colour, node_positions

    plt = _pyplot()
    pos = node_positions(graph["nodes"])
    fig, ax = plt.subplots(figsize=(2 + 1.6 * (1 + max((n["generation"] for n in graph["nodes"]), default=0)),
                                    1.5 + 0.5 * max(1, len(graph["nodes"]) // 2)), dpi=110)
    for e in graph["edges"]:
        (x1, y1), (x2, y2) = pos[e["source"]], pos[e["target"]]
        ax.plot([x1, x2], [-y1, -y2], color="#555", linestyle="--" if e["kind"] == "crossover" else "-", zorder=1)
    for n in graph["nodes"]:
        x, y = pos[n["id"]]
        ax.scatter([x], [-y], s=500, color=node_colour(n), edgecolors="#333", zorder=2)
        label = "x" if not n["correct"] else (f"{n['speedup']:.3g}" if n["speedup"] is not None else "ok")
        ax.annotate(label, (x, -y), ha="center", va="center", fontsize=7, zorder=3)
    ax.set_title(f"lineage of {graph['problem_id']} (gold best, blue archive, red incorrect)", fontsize=8)
    ax.set_xticks(sorted({pos[n['id']][0] for n in graph["nodes"]}), [str(g) for g in sorted({n["generation"] for n in graph["nodes"]})])
    ax.set_xlabel("generation")
    ax.margins(x=0.2, y=0.35)
    ax.set_yticks([])
    return _save(fig, path)


@task(name="evolve-problem", retries=0, cache_policy=NO_CACHE, persist_result=False)
def evolve_problem(problem: dict[str, Any], profile: dict[str, Any], out_dir: str, kernels: list[str],
                   replay_path: str = "", checkpoint: str = "") -> dict[str, Any]:
    import json

    from davinci.config import profile_from_dict
    from davinci.evolve.outputs import summary_of, write_outputs
    from davinci.evolve.search import run_evolution
    from davinci.kernelgym import evaluate_batch
    from davinci.types import Problem

    prof = profile_from_dict(profile)
    prob = Problem.from_dict(problem)
    gym = replace(prof.gym, baselines=("eager",))
    mutator = _mutator(prof, replay_path, checkpoint)
    result = run_evolution(prob, prof.evolve, mutator, lambda items: evaluate_batch(items, gym), out_dir, kernels=kernels)
    files = write_outputs(result, out_dir)
    graph = json.loads((Path(out_dir) / files["lineage"]).read_text())
    lineage_png(graph, Path(out_dir) / "lineage.png")
    files["lineage_png"] = "lineage.png"
    return {"dir": out_dir, "files": files, "summary": summary_of(result)}
