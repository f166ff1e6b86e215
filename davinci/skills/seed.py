"""The seed library: expert skills written by the project, stored as data files, with their GPU evidence.

Layout: `davinci/skills/seed/<id>/skill.yaml` (text fields, `cpu_shapes`, claimed effect),
`before.py.txt` (reference `Model` problem) and `after.py.txt` (`ModelNew` using the skill); the code
files end in `.txt` so no tool imports or collects them as modules. `seed/evidence.json` holds the
result of admitting the seed skills through the same gate on a GPU
(`benchmarks/gpu/skills_admit_seed.py`). A seed skill is `admitted` only when that file has an
admitted decision for it, measured on a GPU (timing label `cuda`), for the same example content (the
example hash must match, so editing an example invalidates its evidence); otherwise it is a `candidate`.

    skills = seed_skills()                       # sorted by id
    admitted = [s for s in skills if s.status == "admitted"]
"""

from __future__ import annotations

import json
from dataclasses import replace
from importlib import resources
from pathlib import Path
from typing import Any, Mapping

import yaml

from davinci.errors import MalformedInput
from davinci.skills.schema import AppliesTo, Effect, Example, Preconditions, Skill, SkillProvenance, evidence_from_dict, measurement_from_dict

SEED_DIR = Path(str(resources.files("davinci.skills").joinpath("seed")))
EVIDENCE_FILE = SEED_DIR / "evidence.json"


def _as_tuple(values: Any) -> tuple[str, ...]:
    return tuple(str(v) for v in (values or ()))


def load_seed_skill(folder: Path) -> Skill:
    """One seed skill from its folder (status candidate, no evidence attached)."""
    try:
        meta = yaml.safe_load((folder / "skill.yaml").read_text())
        before = (folder / "before.py.txt").read_text()
        after = (folder / "after.py.txt").read_text()
    except (OSError, yaml.YAMLError) as exc:
        raise MalformedInput(f"seed skill folder {folder} is incomplete or unreadable: {exc}", "it needs skill.yaml, before.py.txt and after.py.txt") from None
    if meta.get("id", folder.name) != folder.name:
        raise MalformedInput(f"seed skill {folder} declares id {meta.get('id')!r}", f"the id must equal the folder name {folder.name!r}")
    applies, pre, effect = meta.get("applies_to") or {}, meta.get("preconditions") or {}, meta.get("effect") or {}
    return Skill(
        id=folder.name,
        title=meta["title"],
        intent=meta["intent"].strip(),
        applies_to=AppliesTo(_as_tuple(applies.get("ops")), _as_tuple(applies.get("patterns"))),
        preconditions=Preconditions(_as_tuple(pre.get("dtypes")), pre.get("shapes", ""), pre.get("layout", ""), pre.get("hardware", "")),
        guidance=meta["guidance"].strip(),
        backend=meta["backend"],
        example=Example(before, after, tuple((str(k), int(v)) for k, v in (meta.get("cpu_shapes") or {}).items())),
        effect=Effect(summary=str(effect.get("summary", "")).strip(), claimed_speedup=effect.get("claimed_speedup")),
        failure_modes=_as_tuple(meta.get("failure_modes")),
        provenance=SkillProvenance(kind="seed", author=meta.get("author", "daVinci-kernel project")),
        status="candidate",
    )


def attach_evidence(skill: Skill, entry: Mapping[str, Any] | None) -> Skill:
    """`skill` with its GPU admission evidence (admitted only for a matching, GPU-measured admission)."""
    if not entry or entry.get("example_hash") != skill.example.content_hash:
        return skill
    evidence = evidence_from_dict(entry["evidence"]) if entry.get("evidence") else None
    measured_on_gpu = evidence is not None and dict(evidence.environment).get("timing_label") == "cuda"
    if entry.get("outcome") == "admitted" and measured_on_gpu:
        measurements = tuple(measurement_from_dict(m) for m in entry.get("measurements") or ())
        return replace(skill, effect=replace(skill.effect, measurements=measurements)).with_status("admitted", evidence)
    return skill.with_status("candidate", evidence) if evidence else skill


def read_evidence(path: Path = EVIDENCE_FILE) -> dict[str, Any]:
    """The `skills` mapping of an evidence file ({} when the file does not exist)."""
    if not path.exists():
        return {}
    try:
        doc = json.loads(path.read_text())
    except ValueError as exc:
        raise MalformedInput(f"seed evidence file {path} is not valid JSON: {exc}", "replace it with the file the seed admission script wrote") from None
    return dict(doc.get("skills") or {})


def seed_skills(evidence_path: Path | None = EVIDENCE_FILE, seed_dir: Path = SEED_DIR) -> list[Skill]:
    """All seed skills sorted by id, with GPU evidence attached (`evidence_path=None`: none)."""
    evidence = read_evidence(evidence_path) if evidence_path is not None else {}
    folders = sorted(p for p in seed_dir.iterdir() if (p / "skill.yaml").is_file())
    return [attach_evidence(load_seed_skill(f), evidence.get(f.name)) for f in folders]
