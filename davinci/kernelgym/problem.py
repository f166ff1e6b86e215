"""KernelBench-format problem sources: validation, loading from files, shape overrides and shape variants.

A problem is Python source defining `class Model(nn.Module)`, `get_inputs()` and `get_init_inputs()`,
with its sizes as module-level integer constants (`batch_size = 16`, `N = 2048 * 2`, `h = w = 128`).
Everything here is pure source-level work (the `ast` module); nothing imports torch or runs the code.

- `validate_problem_code(code)` lists what is missing; `load_problem_file(path)` builds a `Problem` and
  raises `InputNotFound` / `MalformedInput` with the fix.
- `size_constants(code)` finds the integer constants; `apply_shape_overrides(code, {"batch_size": 8})`
  rewrites them (admission tests unseen shapes this way); `shape_variants(code, n, seed)` proposes
  overrides: size-like constants scaled by a seeded factor, rounded to keep their power-of-two alignment,
  never below 1, with structural constants (kernel sizes, strides, heads, ...) left alone.
"""

from __future__ import annotations

import ast
import math
import random
import re
from pathlib import Path
from typing import Mapping

from davinci.errors import InputNotFound, MalformedInput
from davinci.types import Problem

REQUIRED = ("Model", "get_inputs", "get_init_inputs")
# Constants that set structure rather than size: scaling them breaks the problem's own invariants.
STRUCTURAL = re.compile(
    r"(kernel|stride|pad|dilation|groups|head|dim_head|k_size|ksize|window|scale|factor|eps|p$|^p_|"
    r"axis|reduce|num_layers|layers|levels|order|seed|alpha|beta|momentum|margin)",
    re.IGNORECASE,
)


def _parse(code: str, what: str) -> ast.Module:
    try:
        return ast.parse(code)
    except SyntaxError as exc:
        raise MalformedInput(f"{what} is not valid Python: {exc}", "fix the syntax error") from None


def validate_problem_code(code: str) -> list[str]:
    """Names of the required top-level definitions the source lacks (empty = a valid problem)."""
    try:
        tree = ast.parse(code)
    except SyntaxError as exc:
        return [f"valid Python ({exc.msg}, line {exc.lineno})"]
    defined = {n.name for n in tree.body if isinstance(n, (ast.ClassDef, ast.FunctionDef))}
    return [name for name in REQUIRED if name not in defined]


def read_source(path: str | Path, what: str) -> str:
    """Read a source file or raise the user-facing error that says how to fix it."""
    p = Path(path)
    if not p.exists():
        raise InputNotFound(f"{what} file {str(p)!r} does not exist", f"pass the path of an existing {what} .py file")
    if not p.is_file():
        raise MalformedInput(f"{what} path {str(p)!r} is not a file", f"pass a {what} .py file, not a folder")
    try:
        return p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise MalformedInput(f"cannot read {what} file {str(p)!r}: {exc}", "pass a readable UTF-8 text file") from None


def load_problem_file(path: str | Path) -> Problem:
    """A `Problem` from a KernelBench-format file; level and source come from a `levelN` parent folder."""
    code = read_source(path, "problem")
    missing = validate_problem_code(code)
    if missing:
        raise MalformedInput(
            f"problem file {str(path)!r} lacks {', '.join(missing)}",
            "a problem defines class Model(nn.Module), get_inputs() and get_init_inputs() (KernelBench format)",
        )
    p = Path(path)
    m = re.fullmatch(r"level(\d+)", p.parent.name)
    level = int(m.group(1)) if m else 0
    source = "kernelbench" if m else "synthetic"
    pid = f"kernelbench/L{level}/{p.stem}" if m else f"file/{p.stem}"
    return Problem(id=pid, source=source, level=level, name=p.stem, code=code)


def _int_value(node: ast.expr) -> int | None:
    """The value of an integer constant expression (`4096`, `2048 * 2`, `2 ** 10`), else None."""
    try:
        value = ast.literal_eval(node)
    except ValueError:
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Mult, ast.Add, ast.Sub, ast.Pow, ast.FloorDiv)):
            left, right = _int_value(node.left), _int_value(node.right)
            if left is None or right is None:
                return None
            ops = {ast.Mult: lambda a, b: a * b, ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b,
                   ast.Pow: lambda a, b: a ** b if b < 64 else None, ast.FloorDiv: lambda a, b: a // b if b else None}
            return ops[type(node.op)](left, right)
        return None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def size_constants(code: str) -> dict[str, int]:
    """Module-level `name = <int expression>` assignments (chained targets included), in source order."""
    tree = _parse(code, "problem source")
    out: dict[str, int] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign):
            value = _int_value(node.value)
            if value is None:
                continue
            for target in node.targets:
                if isinstance(target, ast.Name):
                    out[target.id] = value
    return out


def apply_shape_overrides(code: str, overrides: Mapping[str, int] | None) -> str:
    """Rewrite module-level integer constants; an unknown name raises `MalformedInput` listing the known ones."""
    if not overrides:
        return code
    known = size_constants(code)
    unknown = sorted(set(overrides) - set(known))
    if unknown:
        raise MalformedInput(
            f"shape override(s) {unknown} name no module-level integer constant of the problem",
            f"override one of: {', '.join(known) or '(none)'}",
        )
    for name, value in overrides.items():
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise MalformedInput(f"shape override {name}={value!r} is not a positive int", "use a positive integer")
    tree = _parse(code, "problem source")
    lines = code.splitlines(keepends=True)
    edits: list[tuple[int, int, str]] = []
    for node in tree.body:
        if not (isinstance(node, ast.Assign) and _int_value(node.value) is not None):
            continue
        names = [t.id for t in node.targets if isinstance(t, ast.Name)]
        hit = [n for n in names if n in overrides]
        if not hit:
            continue
        # One rewritten line per name so chained targets (h = w = 128) can take different values.
        indent = re.match(r"\s*", lines[node.lineno - 1]).group(0)
        text = "".join(f"{indent}{n} = {int(overrides[n]) if n in overrides else known[n]}\n" for n in names)
        edits.append((node.lineno, node.end_lineno or node.lineno, text))
    for start, end, text in sorted(edits, reverse=True):
        lines[start - 1:end] = [text]
    return "".join(lines)


def _round_like(value: float, original: int) -> int:
    """Round to the power-of-two alignment of `original` (capped at 16) so tiled kernels see usual sizes."""
    align = 1
    while align < 16 and original % (align * 2) == 0:
        align *= 2
    return max(1, int(round(value / align)) * align) if value >= align else max(1, int(round(value)))


def shape_variants(problem_code: str, n: int, seed: int, *, max_elements: int | None = None) -> list[dict[str, int]]:
    """`n` distinct override dicts for the size-like constants, scaled by seeded factors in [0.5, 1.5].

    `max_elements` (e.g. 2**16 on the CPU) additionally shrinks every size constant proportionally so that
    their product stays under it. Returns fewer than `n` dicts when the problem has no size constants.
    """
    # Values below 4 are axes or tiny structural counts (dim=1, channels=3): left alone.
    consts = {k: v for k, v in size_constants(problem_code).items() if v >= 4 and not STRUCTURAL.search(k)}
    if not consts:
        return []
    rng = random.Random(seed)
    base = dict(consts)
    if max_elements:
        total = math.prod(consts.values())
        if total > max_elements:
            shrink = (max_elements / total) ** (1 / len(consts))
            base = {k: _round_like(v * shrink, v) for k, v in consts.items()}
    out: list[dict[str, int]] = []
    seen = {tuple(sorted(consts.items()))}
    for _ in range(n * 50):
        if len(out) >= n:
            break
        variant = {k: _round_like(v * rng.choice((0.5, 0.75, 1.25, 1.5)), v) for k, v in base.items()}
        key = tuple(sorted(variant.items()))
        if key in seen or (max_elements and math.prod(variant.values()) > max_elements):
            continue
        seen.add(key)
        out.append(variant)
    return out
