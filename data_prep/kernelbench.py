"""KernelBench problem loaders: a local folder in upstream's layout, or the Hugging Face dataset.

Layout read locally: `<root>/KernelBench/level{N}/{id}_{Name}.py` (a clone of ScalingIntelligence/KernelBench
or `../shared/kernelbench` here); `path` may be the repository root or its `KernelBench` folder.

Choices:
- Files are checked with `ast` only, never executed: at their real sizes KernelBench problems allocate
  gigabytes. A file without `Model`, `get_inputs` or `get_init_inputs` (or that does not parse) is an error
  naming the file and the fix, as are a missing folder and an empty level.
- Ids are `kernelbench/L{level}/{stem}` (e.g. `kernelbench/L1/19_ReLU`), the same for the local and the
  Hugging Face source, so decontamination and reports do not depend on where the problems came from.
  `name` is the part after the numeric id; problems are ordered by that id; `limit` keeps the first N per level.
- Path resolution: `""` -> $DAVINCI_KERNELBENCH, else `../shared/kernelbench` beside the project root when it
  exists, else an error saying how to point at a copy.
- `datasets` is imported lazily (the GPU machine does not have it); being offline is a clear error.

    problems = load_kernelbench("", levels=(1, 2, 3))              # 100 + 100 + 50 problems
    problems = load_kernelbench_hf(levels=(1,), limit=10)          # needs internet
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from data_prep.source_ast import check_interface, operator_signature, signature_family
from davinci.errors import InputNotFound, MalformedInput
from davinci.types import Problem

PROJECT_ROOT = Path(__file__).resolve().parents[1]
ENV_VAR = "DAVINCI_KERNELBENCH"
HF_DATASET = "ScalingIntelligence/KernelBench"
_FILE_RE = re.compile(r"^(\d+)_(.+)\.py$")


def default_kernelbench_path() -> Path:
    """$DAVINCI_KERNELBENCH, else ../shared/kernelbench next to the project (when it exists)."""
    env = os.environ.get(ENV_VAR, "").strip()
    if env:
        return Path(env).expanduser()
    shared = PROJECT_ROOT.parent / "shared" / "kernelbench"
    if shared.exists():
        return shared
    raise InputNotFound(
        f"no KernelBench folder: ${ENV_VAR} is unset and {shared} does not exist",
        f"clone ScalingIntelligence/KernelBench and set data.kernelbench_path (or ${ENV_VAR}) to it, "
        "or set data.kernelbench_hf=true to read the Hugging Face dataset",
    )


def resolve_levels_root(path: str | Path) -> Path:
    """The folder that holds `level1/`, `level2/`, ...: `path` itself or `path/KernelBench`."""
    root = Path(path).expanduser() if str(path).strip() else default_kernelbench_path()
    if not root.exists():
        raise InputNotFound(
            f"KernelBench folder {root} does not exist",
            f"set data.kernelbench_path (or ${ENV_VAR}) to a clone of ScalingIntelligence/KernelBench",
        )
    for candidate in (root / "KernelBench", root):
        if any((candidate / f"level{n}").is_dir() for n in (1, 2, 3, 4)):
            return candidate
    raise InputNotFound(
        f"{root} has no level1/ .. level3/ folders (nor a KernelBench/ folder holding them)",
        "point data.kernelbench_path at the repository root or at its KernelBench/ folder",
    )


def problem_id(level: int, stem: str) -> str:
    return f"kernelbench/L{level}/{stem}"


def _to_problem(level: int, stem: str, code: str, origin: str) -> Problem:
    match = _FILE_RE.match(stem + ".py")
    if match is None:
        raise MalformedInput(f"{origin}: name {stem!r} is not '<id>_<Name>'", "name files like 19_ReLU.py")
    check = check_interface(code)
    if not check.ok:
        what = check.error or f"does not define {', '.join(check.missing)}"
        raise MalformedInput(
            f"KernelBench problem {origin} {what}",
            "a problem file needs `class Model(nn.Module)`, `def get_inputs()` and `def get_init_inputs()`; "
            "fix or remove the file",
        )
    signature = operator_signature(code)
    tags = ("kernelbench", f"level{level}", signature_family(signature), *dict.fromkeys(signature))
    return Problem(
        id=problem_id(level, stem),
        source="kernelbench",
        level=level,
        name=match.group(2),
        code=code,
        tags=tuple(dict.fromkeys(tags)),
    )


def _level_files(levels_root: Path, level: int) -> list[Path]:
    folder = levels_root / f"level{level}"
    if not folder.is_dir():
        raise InputNotFound(
            f"KernelBench level {level} folder {folder} does not exist",
            f"drop {level} from data.kernelbench_levels or use a complete KernelBench clone",
        )
    files = [p for p in folder.iterdir() if _FILE_RE.match(p.name)]
    if not files:
        raise InputNotFound(
            f"KernelBench level {level} folder {folder} holds no problem files (<id>_<Name>.py)",
            f"drop {level} from data.kernelbench_levels or restore the files",
        )
    return sorted(files, key=lambda p: int(_FILE_RE.match(p.name).group(1)))  # type: ignore[union-attr]


def load_kernelbench(path: str | Path = "", levels: Iterable[int] = (1, 2, 3), limit: int = 0) -> list[Problem]:
    """Problems of the given levels from a local folder in upstream's layout (see module docstring)."""
    levels_root = resolve_levels_root(path)
    problems: list[Problem] = []
    for level in levels:
        files = _level_files(levels_root, int(level))
        if limit > 0:
            files = files[:limit]
        for file in files:
            problems.append(_to_problem(int(level), file.stem, file.read_text(), str(file)))
    return problems


def problems_from_hf_rows(rows: Iterable[Mapping[str, Any]], level: int, limit: int = 0) -> list[Problem]:
    """Rows of the HF dataset (columns problem_id, name, code) -> Problems, ordered by problem_id.

    `name` is upstream's file name (`19_ReLU.py`); a bare `ReLU` is accepted and prefixed with the id."""
    converted: list[tuple[int, Problem]] = []
    for row in rows:
        missing = [c for c in ("problem_id", "name", "code") if c not in row]
        if missing:
            raise MalformedInput(f"KernelBench HF row lacks columns {missing}",
                                 "use the ScalingIntelligence/KernelBench dataset")
        pid = int(row["problem_id"])
        stem = str(row["name"]).removesuffix(".py")
        if not stem.startswith(f"{pid}_"):
            stem = f"{pid}_{stem}"
        origin = f"HF level_{level} row {pid} ({row['name']})"
        converted.append((pid, _to_problem(level, stem, str(row["code"]), origin)))
    converted.sort(key=lambda item: item[0])
    problems = [p for _, p in converted]
    return problems[:limit] if limit > 0 else problems


def load_kernelbench_hf(
    levels: Sequence[int] = (1, 2, 3), limit: int = 0, *, dataset: str = HF_DATASET
) -> list[Problem]:
    """Problems from the Hugging Face dataset (splits level_1..level_3); needs `datasets` and internet."""
    try:
        from datasets import load_dataset
    except ImportError:
        raise InputNotFound(
            "reading KernelBench from Hugging Face needs the `datasets` package",
            "pip install datasets, or set data.kernelbench_hf=false and use a local folder",
        ) from None
    problems: list[Problem] = []
    for level in levels:
        try:
            rows = load_dataset(dataset, split=f"level_{int(level)}")
        except Exception as exc:  # datasets raises many types for offline / missing splits
            raise InputNotFound(
                f"could not load {dataset} split level_{level} from Hugging Face ({type(exc).__name__}: {exc})",
                "check the internet connection (HF_DATASETS_OFFLINE must be unset), or set "
                "data.kernelbench_hf=false and data.kernelbench_path to a local clone",
            ) from None
        problems.extend(problems_from_hf_rows(rows, int(level), limit))
    return problems


__all__ = [
    "load_kernelbench",
    "load_kernelbench_hf",
    "problems_from_hf_rows",
    "default_kernelbench_path",
    "resolve_levels_root",
    "problem_id",
]
