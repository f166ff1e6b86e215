"""The archive of evolutionary search: the best and the most diverse correct programs of one problem.

Pure functions over frozen records (no I/O, no evaluator):
- `code_features(code)`: a set of strings read from the program's AST: Triton/CUDA calls used (`tl.dot`,
  `tl.sum`, `tl.atomic_add`, ...), launch settings (`num_warps=4`), power-of-two tile constants bucketed
  (`BLOCK_SIZE~1024`), the number of kernels, loops inside kernels, autotuning. Programs that use the same
  tricks share features; `feature_distance` is 1 - Jaccard similarity of two such sets.
- `insert(archive, entry, size, diversity_slots)`: incorrect or duplicate programs never enter; the archive
  keeps the best `size - diversity_slots` by `score` (CI lower bound, then median speedup, then hash), then
  fills the diversity slots farthest-first (largest minimum distance to what is already kept).
- `select_parents(archive, n, rng)`: rank-weighted picks (weight 1 / (rank + 1)), reproducible from `rng`.

    arch = insert((), entry, size=6, diversity_slots=2); parents = select_parents(arch, 2, random.Random(0))
"""

from __future__ import annotations

import ast
import random
import re
from dataclasses import dataclass, replace
from typing import Any, Sequence

_TILE_NAME = re.compile(r"(BLOCK|TILE|BLK|CHUNK)", re.IGNORECASE)
_LAUNCH_KW = ("num_warps", "num_stages")


@dataclass(frozen=True)
class ArchiveEntry:
    """One evaluated program. `speedup`/`ci_*` are vs eager (None when not timed or not correct)."""

    code_hash: str
    code: str
    generation: int
    parents: tuple[str, ...] = ()
    kind: str = "seed"  # seed | mutation | crossover
    correct: bool = False
    speedup: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    feedback: str = ""
    features: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {**self.__dict__, "parents": list(self.parents), "features": list(self.features)}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "ArchiveEntry":
        return cls(**{**d, "parents": tuple(d.get("parents", ())), "features": tuple(d.get("features", ()))})


def score(entry: ArchiveEntry) -> tuple[float, float, str]:
    """Sort key, larger is better: CI lower bound, then median speedup; the hash breaks ties (reproducibly)."""
    low = entry.ci_low if entry.ci_low is not None else (entry.speedup or 0.0)
    return (float(low), float(entry.speedup or 0.0), entry.code_hash)


def _bucket(value: int) -> int:
    """Power-of-two bucket of a tile size: 96 -> 64, 1024 -> 1024."""
    return 1 << (max(1, value).bit_length() - 1)


def _call_name(node: ast.Call) -> str:
    func = node.func
    parts = []
    while isinstance(func, ast.Attribute):
        parts.append(func.attr)
        func = func.value
    if isinstance(func, ast.Name):
        parts.append(func.id)
    return ".".join(reversed(parts))


def _int(node: ast.AST) -> int | None:
    return node.value if isinstance(node, ast.Constant) and type(node.value) is int else None


def _node_features(node: ast.AST) -> set[str]:
    out: set[str] = set()
    if isinstance(node, ast.Call):
        name = _call_name(node)
        if name.startswith(("tl.", "triton.language.", "libdevice.")) or name in ("triton.autotune", "triton.cdiv", "load_inline"):
            out.add(f"call:{name.split('.')[-1] if name.startswith('triton.language.') else name}")
        for kw in node.keywords:
            if kw.arg in _LAUNCH_KW and _int(kw.value) is not None:
                out.add(f"{kw.arg}={_int(kw.value)}")
            elif kw.arg and _TILE_NAME.search(kw.arg) and _int(kw.value):
                out.add(f"{kw.arg.upper()}~{_bucket(_int(kw.value) or 1)}")
    elif isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
        name, value = node.targets[0].id, _int(node.value)
        if value and _TILE_NAME.search(name):
            out.add(f"{name.upper()}~{_bucket(value)}")
    return out


def _kernel_features(tree: ast.Module) -> set[str]:
    out: set[str] = set()
    kernels = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)
               and any("jit" in ast.unparse(d) for d in n.decorator_list)]
    out.add(f"kernels={min(len(kernels), 4)}")
    for fn in kernels:
        if any(isinstance(n, (ast.For, ast.While)) for n in ast.walk(fn)):
            out.add("kernel-loop")
        if any("autotune" in ast.unparse(d) for d in fn.decorator_list):
            out.add("autotune")
    return out


def code_features(code: str) -> tuple[str, ...]:
    """Sorted feature strings of a program (empty for code that does not parse)."""
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError):
        return ()
    feats: set[str] = _kernel_features(tree)
    for node in ast.walk(tree):
        feats |= _node_features(node)
    return tuple(sorted(feats))


def feature_distance(a: Sequence[str], b: Sequence[str]) -> float:
    """1 - |a & b| / |a | b| (0 for two empty sets)."""
    sa, sb = set(a), set(b)
    union = sa | sb
    return 0.0 if not union else 1.0 - len(sa & sb) / len(union)


def with_features(entry: ArchiveEntry) -> ArchiveEntry:
    return entry if entry.features else replace(entry, features=code_features(entry.code))


def insert(archive: Sequence[ArchiveEntry], entry: ArchiveEntry, size: int, diversity_slots: int) -> tuple[ArchiveEntry, ...]:
    """The archive after offering `entry` (see the module docstring); order: elites best first, then diverse."""
    if not entry.correct or any(e.code_hash == entry.code_hash for e in archive):
        return tuple(archive)
    pool = sorted([*archive, with_features(entry)], key=score, reverse=True)
    n_elite = max(1, size - max(0, diversity_slots))
    kept = pool[:n_elite]
    rest = pool[n_elite:]
    while rest and len(kept) < size:
        far = max(rest, key=lambda e: (min(feature_distance(e.features, k.features) for k in kept), score(e)))
        kept.append(far)
        rest.remove(far)
    return tuple(kept)


def best(archive: Sequence[ArchiveEntry]) -> ArchiveEntry | None:
    return max(archive, key=score) if archive else None


def select_parents(archive: Sequence[ArchiveEntry], n: int, rng: random.Random) -> list[ArchiveEntry]:
    """`n` parents drawn with replacement, weight 1 / (rank + 1) by score ([] for an empty archive)."""
    if not archive or n <= 0:
        return []
    ranked = sorted(archive, key=score, reverse=True)
    weights = [1.0 / (i + 1) for i in range(len(ranked))]
    return rng.choices(ranked, weights=weights, k=n)
