"""The lineage graph of an evolution run: which child came from which parent, as JSON and as an SVG picture.

`lineage_graph(result)` -> {"problem_id", "nodes": [...], "edges": [...]}: a node per evaluated program
(hash, generation, kind, correct, speedup with CI, in_archive, best), an edge per parent link (kind mutation
or crossover). `render_svg(graph)` draws it without Graphviz: one column per generation, nodes coloured by
verdict (red incorrect, grey correct, blue in the archive, gold the best) and labelled with their speedup.

    graph = lineage_graph(result); Path("lineage.svg").write_text(render_svg(graph))
"""

from __future__ import annotations

from html import escape
from typing import Any

from davinci.evolve.archive import ArchiveEntry

_W, _H, _R = 150, 56, 16


def lineage_graph(problem_id: str, entries: tuple[ArchiveEntry, ...], archive: tuple[ArchiveEntry, ...],
                  best_hash: str | None) -> dict[str, Any]:
    in_archive = {e.code_hash for e in archive}
    known = {e.code_hash for e in entries}
    nodes = [{"id": e.code_hash, "generation": e.generation, "kind": e.kind, "correct": e.correct,
              "speedup": e.speedup, "ci_low": e.ci_low, "ci_high": e.ci_high,
              "in_archive": e.code_hash in in_archive, "best": e.code_hash == best_hash} for e in entries]
    edges = [{"source": p, "target": e.code_hash, "kind": e.kind} for e in entries for p in e.parents if p in known]
    return {"problem_id": problem_id, "nodes": nodes, "edges": edges}


def node_colour(node: dict[str, Any]) -> str:
    if node["best"]:
        return "#f2c14e"
    if node["in_archive"]:
        return "#7fb3e0"
    return "#cccccc" if node["correct"] else "#e38d8d"


def node_positions(nodes: list[dict[str, Any]]) -> dict[str, tuple[float, float]]:
    rows: dict[int, int] = {}
    out = {}
    for n in nodes:
        g = int(n["generation"])
        out[n["id"]] = (40 + g * _W, 50 + rows.get(g, 0) * _H)
        rows[g] = rows.get(g, 0) + 1
    return out


def render_svg(graph: dict[str, Any]) -> str:
    nodes = graph["nodes"]
    pos = node_positions(nodes)
    width = 80 + _W * (1 + max((int(n["generation"]) for n in nodes), default=0))
    height = 80 + _H * max([sum(1 for n in nodes if n["generation"] == g) for g in {n["generation"] for n in nodes}] or [1])
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" font-size="10">',
             f'<text x="10" y="18" font-size="12">lineage of {escape(graph["problem_id"])} (columns = generations)</text>']
    for e in graph["edges"]:
        (x1, y1), (x2, y2) = pos[e["source"]], pos[e["target"]]
        dash = ' stroke-dasharray="4 3"' if e["kind"] == "crossover" else ""
        parts.append(f'<line x1="{x1}" y1="{y1}" x2="{x2}" y2="{y2}" stroke="#555"{dash}/>')
    for n in nodes:
        x, y = pos[n["id"]]
        label = "x" if not n["correct"] else (f'{n["speedup"]:.3g}' if n["speedup"] is not None else "ok")
        parts.append(f'<circle cx="{x}" cy="{y}" r="{_R}" fill="{node_colour(n)}" stroke="#333"><title>{n["id"]} '
                     f'{escape(n["kind"])} speedup {n["speedup"]} CI [{n["ci_low"]}, {n["ci_high"]}]</title></circle>')
        parts.append(f'<text x="{x}" y="{y + 3}" text-anchor="middle">{escape(label)}</text>')
        parts.append(f'<text x="{x}" y="{y + _R + 10}" text-anchor="middle" fill="#666">{n["id"][:7]}</text>')
    parts.append("</svg>")
    return "\n".join(parts)
