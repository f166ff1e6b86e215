"""The built-in problem suite: KernelBench-format problems with reference Triton solutions.

What it is: `suite.yaml` (the manifest: name, level, tags, the default held-out list), `problems/<name>.py`
(`Model`, `get_inputs`, `get_init_inputs`, module-level size constants) and `solutions/<name>.py`
(`ModelNew` launching `@triton.jit` kernels). Ids are `builtin/<name>`.

Choices:
- Problems and solutions are plain `.py` files (readable, importable by the evaluator, lintable); the
  manifest is YAML so a person can review the suite in one screen.
- Every tensor is at most 64K elements and matmuls at most 128^3, so one forward runs in well under a second
  in the Triton interpreter on a CPU (the tiny profile) while still exercising masking (odd sizes).
- The manifest is checked against the folder on every load: a listed problem without its files, a file
  not listed, a duplicate or an unknown held-out name raises `MalformedInput` naming the fix.

    from data_prep.builtin import builtin_problems, default_heldout_ids
    problems = builtin_problems()          # list[Problem], reference_solution filled
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from davinci.errors import MalformedInput
from davinci.types import Problem

SUITE_DIR = Path(__file__).resolve().parent
ID_PREFIX = "builtin/"


def _manifest(suite_dir: Path) -> dict[str, Any]:
    path = suite_dir / "suite.yaml"
    if not path.exists():
        raise MalformedInput(f"built-in suite manifest {path} is missing", "restore data_prep/builtin/suite.yaml")
    raw = yaml.safe_load(path.read_text()) or {}
    if not isinstance(raw, dict) or not isinstance(raw.get("problems"), list):
        raise MalformedInput(f"{path} must be a mapping with a `problems:` list", "see the header of suite.yaml")
    return raw


def _entry(item: Any, path: Path) -> tuple[str, int, tuple[str, ...]]:
    if not isinstance(item, dict) or not {"name", "level", "tags"} <= set(item):
        raise MalformedInput(f"entry {item!r} in {path} needs name, level and tags",
                             "write {name: x, level: 1, tags: [...]}")
    name, level, tags = str(item["name"]), item["level"], item["tags"]
    if level not in (1, 2, 3) or not isinstance(tags, list) or not tags:
        raise MalformedInput(f"entry {name!r} in {path}: level must be 1-3 and tags a non-empty list", "fix the entry")
    return name, int(level), tuple(str(t) for t in tags)


def _check_folder(names: list[str], suite_dir: Path) -> None:
    if len(set(names)) != len(names):
        dupes = sorted({n for n in names if names.count(n) > 1})
        raise MalformedInput(f"duplicate problem names in the manifest: {dupes}", "give each problem one entry")
    for sub in ("problems", "solutions"):
        on_disk = {p.stem for p in (suite_dir / sub).glob("*.py") if p.stem != "__init__"}
        missing = sorted(set(names) - on_disk)
        unlisted = sorted(on_disk - set(names))
        if missing:
            raise MalformedInput(f"manifest lists {missing} but {suite_dir / sub} has no such file",
                                 f"add {sub}/<name>.py")
        if unlisted:
            raise MalformedInput(f"{suite_dir / sub} has {unlisted} not listed in suite.yaml",
                                 "add them to the manifest")


def builtin_problems(suite_dir: Path = SUITE_DIR) -> list[Problem]:
    """Every built-in problem, in manifest order, with its reference solution and tags."""
    raw = _manifest(suite_dir)
    entries = [_entry(item, suite_dir / "suite.yaml") for item in raw["problems"]]
    _check_folder([name for name, _, _ in entries], suite_dir)
    problems = []
    for name, level, tags in entries:
        problems.append(
            Problem(
                id=ID_PREFIX + name,
                source="builtin",
                level=level,
                name=name,
                code=(suite_dir / "problems" / f"{name}.py").read_text(),
                reference_solution=(suite_dir / "solutions" / f"{name}.py").read_text(),
                tags=tags,
            )
        )
    return problems


def default_heldout_ids(suite_dir: Path = SUITE_DIR) -> tuple[str, ...]:
    """The tiny profile's default eval split: one built-in problem per category."""
    raw = _manifest(suite_dir)
    names = [str(n) for n in raw.get("heldout") or []]
    known = {str(item.get("name")) for item in raw["problems"] if isinstance(item, dict)}
    unknown = sorted(set(names) - known)
    if unknown:
        raise MalformedInput(f"held-out names {unknown} are not problems of the suite", "fix `heldout:` in suite.yaml")
    return tuple(ID_PREFIX + n for n in names)


__all__ = ["builtin_problems", "default_heldout_ids", "SUITE_DIR"]
