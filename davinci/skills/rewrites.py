"""Deterministic source rewrites of Triton kernels where the rule is clear (no model needed).

A *site* is a tunable integer in the source: a tile constant (`BLOCK_SIZE = 1024`, `BLOCK_M=64` as a launch
keyword, upper-case names containing BLOCK/TILE/CHUNK, or exactly `block`, `tile`, `chunk`, `block_size`, ...) or a launch setting (`num_warps=8`, `num_stages=3`). Rules:

- `sites(code)` finds them (regex over the text; offsets let a rewrite change exactly one);
- `set_site(code, site, value)` rewrites one site;
- `retune(code, n)`: the n-th of all (site, x2 or /2) moves that stay in range (tiles 16..8192 and powers of
  two, warps 1..16, stages 1..8), for evolution's `rules` mutator;
- simplifications for lineage (`SIMPLIFICATIONS`): `shrink_tiles` (every tile to 16: removes tiling work
  per program, the naive form), `single_warp` (`num_warps` -> 1: un-vectorised across the warp),
  `single_stage` (`num_stages` -> 1: no software pipelining). Each returns None when it changes nothing.

A rewrite may break a kernel (a row-wise kernel whose tile must cover the row); kernelgym decides.

    child = retune(parent_code, 3); simpler = SIMPLIFICATIONS.get("shrink_tiles").apply(code)
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable

from davinci.registry import Registry

_TILE = re.compile(r"\b([A-Z_][A-Z0-9_]*(?:BLOCK|TILE|CHUNK)[A-Z0-9_]*|(?:BLOCK|TILE|CHUNK)[A-Z0-9_]*"
                   r"|(?:block|tile|chunk)(?:_size)?)(\s*=\s*)(\d+)\b")
_LAUNCH = re.compile(r"\b(num_warps|num_stages)(\s*=\s*)(\d+)\b")
_BOUNDS = {"tile": (16, 8192), "num_warps": (1, 16), "num_stages": (1, 8)}


@dataclass(frozen=True)
class Site:
    kind: str  # tile | num_warps | num_stages
    name: str
    start: int  # offset of the number
    end: int
    value: int


def sites(code: str) -> list[Site]:
    """Every tunable integer, in source order."""
    out = []
    for m in _TILE.finditer(code):
        out.append(Site("tile", m.group(1), m.start(3), m.end(3), int(m.group(3))))
    for m in _LAUNCH.finditer(code):
        out.append(Site(m.group(1), m.group(1), m.start(3), m.end(3), int(m.group(3))))
    return sorted(out, key=lambda s: s.start)


def set_site(code: str, site: Site, value: int) -> str:
    return code[: site.start] + str(value) + code[site.end:]


def _in_range(site: Site, value: int) -> bool:
    lo, hi = _BOUNDS["tile" if site.kind == "tile" else site.kind]
    power_of_two = value & (value - 1) == 0
    return lo <= value <= hi and (site.kind == "num_stages" or power_of_two)


def moves(code: str) -> list[tuple[Site, int]]:
    """All (site, new value) moves x2 and /2 that stay in range, in source order."""
    out = []
    for site in sites(code):
        for value in (site.value * 2, site.value // 2):
            if value != site.value and _in_range(site, value):
                out.append((site, value))
    return out


def retune(code: str, n: int) -> str | None:
    """The n-th move (mod the number of moves) applied to `code`; None when the code has no sites."""
    options = moves(code)
    if not options:
        return None
    site, value = options[n % len(options)]
    return set_site(code, site, value)


def crossover(code: str, other: str) -> str | None:
    """`code` with the values of `other` at the sites both share by name and order (None if nothing changes)."""
    mine, theirs = sites(code), sites(other)
    if [s.name for s in mine] != [s.name for s in theirs]:
        return None
    out = code
    for site, donor in sorted(zip(mine, theirs), key=lambda p: -p[0].start):  # right to left keeps offsets valid
        out = set_site(out, site, donor.value)
    return out if out != code else None


# --- simplifications (lineage) ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Simplification:
    """A deterministic rewrite toward a simpler kernel, and the skill its reverse teaches."""

    name: str
    description: str  # what the simplification does
    reverse_intent: str  # what the reverse step (simple -> expert) achieves
    pattern: str  # applies_to pattern of the reverse skill
    apply: Callable[[str], str | None]


SIMPLIFICATIONS: Registry[Simplification] = Registry("simplification")


def _set_all(code: str, kinds: tuple[str, ...], value: int) -> str | None:
    out = code
    for site in sorted((s for s in sites(code) if s.kind in kinds), key=lambda s: -s.start):
        if site.value != value:
            out = set_site(out, site, value)
    return out if out != code else None


def _register(item: Simplification) -> None:
    SIMPLIFICATIONS.register(item.name)(item)


_register(Simplification(
    "shrink_tiles", "every tile constant set to 16 (each program handles a minimal tile: the naive form)",
    "give each program a large tile so per-program index math, masks and launch overhead are amortised over many elements",
    "tiling", lambda code: _set_all(code, ("tile",), 16)))
_register(Simplification(
    "single_warp", "num_warps set to 1 (one warp per program: no parallelism across the warp group)",
    "use several warps per program so each program's tile is processed in parallel and memory latency is hidden",
    "warp-parallelism", lambda code: _set_all(code, ("num_warps",), 1)))
_register(Simplification(
    "single_stage", "num_stages set to 1 (no software pipelining of loads)",
    "pipeline loads over several stages so the next tile's loads overlap the current tile's compute",
    "pipelining", lambda code: _set_all(code, ("num_stages",), 1)))
