"""The `davinci-kernel skills list|show` commands, as functions the lead's CLI calls.

- `list_command(store_root, version, as_json)`: one line per skill (id, status, backend, measured
  effect, title), or with `as_json` a JSON array with one object per skill: `id`, `title`, `status`,
  `backend`, `ops`, `effect` (summary, median speedup, CI lower bound, measurements), `usage` and
  `evidence` (every evidence record in full).
- `show_command(store_root, skill_id, version)`: one skill in full, as markdown.
- `version` is `"latest"`, a number, or `"seed"` for the packaged seed library (no store needed).
- Bad input (no store, unknown version, unknown id) raises a `davinci.errors.DavinciError` with the
  fix; the CLI prints it. Both return 0 on success. Output goes to `out` (stdout by default).

    davinci-kernel skills list --version latest --json
    davinci-kernel skills show fuse-elementwise-chain --version seed
"""

from __future__ import annotations

import difflib
import json
import sys
from pathlib import Path
from typing import Any, TextIO

from davinci.errors import InputNotFound
from davinci.skills.export import effect_line, render_skill_markdown
from davinci.skills.schema import Skill, record_to_dict


def _skills(store_root: str | Path, version: str | int) -> tuple[str, tuple[Skill, ...]]:
    if str(version) == "seed":
        from davinci.skills.seed import seed_skills

        return "seed", tuple(seed_skills())
    from davinci.skills.store import SkillStore

    lib = SkillStore(store_root).load(version)
    return str(lib.version), lib.skills


def skill_summary(skill: Skill) -> dict[str, Any]:
    """The JSON object `skills list --json` prints for one skill."""
    return {
        "id": skill.id,
        "title": skill.title,
        "status": skill.status,
        "backend": skill.backend,
        "ops": list(skill.applies_to.ops),
        "patterns": list(skill.applies_to.patterns),
        "provenance": record_to_dict(skill.provenance),
        "effect": {
            "summary": skill.effect.summary,
            "median_speedup": skill.effect.median_speedup,
            "ci_low": skill.effect.best_lower or None,
            "measurements": [record_to_dict(m) for m in skill.effect.measurements],
        },
        "usage": record_to_dict(skill.usage),
        "evidence": [record_to_dict(e) for e in skill.evidence],
    }


def list_command(store_root: str | Path, version: str | int = "latest", as_json: bool = False, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    label, skills = _skills(store_root, version)
    if as_json:
        json.dump([skill_summary(s) for s in skills], out, indent=1)
        out.write("\n")
        return 0
    counts = {st: sum(s.status == st for s in skills) for st in ("admitted", "candidate", "retired")}
    out.write(f"library version {label}: {len(skills)} skills ({', '.join(f'{v} {k}' for k, v in counts.items())})\n")
    width = max((len(s.id) for s in skills), default=2)
    for s in skills:
        out.write(f"{s.id:<{width}}  {s.status:<9}  {s.backend:<6}  {effect_line(s)[:60]:<60}  {s.title}\n")
    return 0


def show_command(store_root: str | Path, skill_id: str, version: str | int = "latest", out: TextIO | None = None) -> int:
    out = out or sys.stdout
    label, skills = _skills(store_root, version)
    match = next((s for s in skills if s.id == skill_id), None)
    if match is None:
        close = difflib.get_close_matches(skill_id, [s.id for s in skills], n=5, cutoff=0.3)
        raise InputNotFound(f"no skill {skill_id!r} in library version {label}", f"try one of: {', '.join(close)}" if close else "list the ids with `davinci-kernel skills list`")
    out.write(render_skill_markdown(match))
    return 0
