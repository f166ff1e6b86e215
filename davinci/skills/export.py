"""Readable exports of a library version: markdown, standalone HTML, and flat rows for an MLflow table.

- `render_skill_markdown(skill)`: one skill in full (the `skills show` output): intent, where it
  applies, preconditions, guidance, failure modes, measured effect, evidence, usage, the example code.
- `render_markdown(library)` / `render_html(library)`: a summary table then every skill; the HTML is
  self-contained (no scripts, no external CSS) so it opens from an MLflow artifact view.
- `to_rows(library)`: one flat dict per skill with scalar values only, for `mlflow.log_table`.

    export_markdown(store.load("latest"), "library.md")
    rows = to_rows(store.load(3))
"""

from __future__ import annotations

import html
from pathlib import Path
from typing import TYPE_CHECKING, Any

from davinci.skills.schema import EvidenceRecord, Skill

if TYPE_CHECKING:
    from davinci.skills.store import LibraryVersion


def _fmt(x: float | None, digits: int = 2) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def effect_line(skill: Skill) -> str:
    """`1.84x [1.79, 1.90] on NVIDIA H100 (cuda, 3 runs)` or `no GPU measurement`."""
    gpu = [m for m in skill.effect.measurements if m.timing_label == "cuda" and m.speedup is not None]
    if not gpu:
        cpu = len(skill.effect.measurements)
        return f"no GPU measurement ({cpu} CPU run(s): correctness only)" if cpu else "no measurement"
    lows = [m.ci_low for m in gpu if m.ci_low is not None]
    highs = [m.ci_high for m in gpu if m.ci_high is not None]
    return f"{_fmt(skill.effect.median_speedup)}x [{_fmt(min(lows) if lows else None)}, {_fmt(max(highs) if highs else None)}] on {gpu[0].device or 'GPU'} ({len(gpu)} run(s), torch {gpu[0].torch_version or '?'}, triton {gpu[0].triton_version or '?'})"


def _evidence_md(record: EvidenceRecord) -> list[str]:
    lines = [f"- **{record.kind}: {record.decision}** {record.created_at}"]
    lines += [f"  - {r}" for r in record.reasons]
    for c in record.checks:
        shape = ", ".join(f"{k}={v}" for k, v in c.shape_overrides) or "default shapes"
        lines.append(
            f"  - check {c.kind} `{c.problem_id}` seed={c.seed} ({shape}): "
            f"{'pass' if c.passed else 'FAIL'}, correct={c.correct}, speedup {_fmt(c.speedup)} [{_fmt(c.ci_low)}, {_fmt(c.ci_high)}] "
            f"{c.timing_label}{' flags=' + ','.join(c.flags) if c.flags else ''}{' error: ' + c.error[:200] if c.error else ''}"
        )
    if record.stats:
        lines.append("  - stats: " + ", ".join(f"{k}={v:.4g}" for k, v in record.stats))
    return lines


def render_skill_markdown(skill: Skill) -> str:
    pre, use, prov = skill.preconditions, skill.usage, skill.provenance
    origin = "seed (written by the project)" if prov.kind == "seed" else f"{prov.kind}: episode {prov.episode_id or '?'} epoch {prov.epoch} problem {prov.problem_id or '?'}"
    lines = [
        f"## {skill.title}",
        "",
        f"`{skill.id}` · backend **{skill.backend}** · status **{skill.status}** · {origin}",
        "",
        f"**Intent.** {skill.intent}",
        "",
        f"**Applies to.** ops: {', '.join(skill.applies_to.ops)}; patterns: {', '.join(skill.applies_to.patterns) or '-'}",
        "",
        f"**Preconditions.** dtypes: {', '.join(pre.dtypes) or 'any'}; shapes: {pre.shapes or '-'}; layout: {pre.layout or '-'}; hardware: {pre.hardware or '-'}",
        "",
        "**Guidance.**",
        "",
        skill.guidance,
        "",
        "**Failure modes avoided.**",
        "",
        *(f"- {f}" for f in skill.failure_modes),
        "",
        f"**Effect.** {skill.effect.summary or '-'} Measured: {effect_line(skill)}",
        "",
        f"**Usage.** selected {use.times_selected}, succeeded {use.times_succeeded}, mean reward with {_fmt(use.mean_with, 3)} vs without {_fmt(use.mean_without, 3)} (n={use.times_without})",
        "",
        "**Evidence.**",
        "",
        *(line for rec in skill.evidence for line in _evidence_md(rec)),
        *([] if skill.evidence else ["- none yet"]),
        "",
        "<details><summary>Example: before (reference)</summary>",
        "",
        "```python",
        skill.example.before.rstrip(),
        "```",
        "</details>",
        "",
        "<details><summary>Example: after (uses the skill)</summary>",
        "",
        "```python",
        skill.example.after.rstrip(),
        "```",
        "</details>",
        "",
    ]
    return "\n".join(lines)


def render_markdown(library: "LibraryVersion") -> str:
    head = [
        f"# Skill library version {library.version or '(uncommitted)'}",
        "",
        f"parent: {library.parent}; note: {library.note or '-'}; created: {library.created_at}; content hash: `{library.content_hash[:16]}`",
        "",
        "| id | status | backend | title | measured effect |",
        "|---|---|---|---|---|",
    ]
    head += [f"| `{s.id}` | {s.status} | {s.backend} | {s.title} | {effect_line(s)} |" for s in library.skills]
    return "\n".join(head + [""] + [render_skill_markdown(s) for s in library.skills])


def render_html(library: "LibraryVersion") -> str:
    rows = "".join(
        f"<tr><td><a href='#{html.escape(s.id)}'>{html.escape(s.id)}</a></td><td>{s.status}</td><td>{s.backend}</td>"
        f"<td>{html.escape(s.title)}</td><td>{html.escape(effect_line(s))}</td></tr>"
        for s in library.skills
    )
    bodies = "".join(f"<section id='{html.escape(s.id)}'><pre>{html.escape(render_skill_markdown(s))}</pre></section>" for s in library.skills)
    style = "body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:4px}pre{white-space:pre-wrap;background:#f7f7f7;padding:1em}"
    title = f"Skill library version {library.version or '(uncommitted)'}"
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{title}</title><style>{style}</style></head><body>"
        f"<h1>{title}</h1><p>parent {library.parent}; {html.escape(library.note)}; {library.created_at}</p>"
        f"<table><tr><th>id</th><th>status</th><th>backend</th><th>title</th><th>measured effect</th></tr>{rows}</table>{bodies}</body></html>"
    )


def export_markdown(library: "LibraryVersion", path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render_markdown(library))
    return path


def export_html(library: "LibraryVersion", path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render_html(library))
    return path


def to_rows(library: "LibraryVersion") -> list[dict[str, Any]]:
    """One flat row per skill (strings and numbers only) for `mlflow.log_table` / a DataFrame."""
    rows = []
    for s in library.skills:
        gpu = [m for m in s.effect.measurements if m.timing_label == "cuda"]
        last = s.evidence[-1] if s.evidence else None
        rows.append(
            {
                "version": library.version,
                "id": s.id,
                "title": s.title,
                "status": s.status,
                "backend": s.backend,
                "ops": ", ".join(s.applies_to.ops),
                "patterns": ", ".join(s.applies_to.patterns),
                "dtypes": ", ".join(s.preconditions.dtypes),
                "speedup_median": s.effect.median_speedup,
                "speedup_ci_low": s.effect.best_lower if gpu else None,
                "device": gpu[0].device if gpu else "",
                "n_measurements": len(s.effect.measurements),
                "provenance": s.provenance.kind if s.provenance.kind == "seed" else f"{s.provenance.kind}:{s.provenance.episode_id}@{s.provenance.epoch}",
                "times_selected": s.usage.times_selected,
                "success_rate": s.usage.success_rate,
                "reward_with": s.usage.mean_with,
                "reward_without": s.usage.mean_without,
                "last_decision": f"{last.kind}:{last.decision}" if last else "",
                "n_evidence": len(s.evidence),
            }
        )
    return rows
