"""Deterministic rewrites: sites, retuning moves, crossover and the lineage simplifications (hand-checked text)."""

from __future__ import annotations

import pytest

from davinci.errors import UnknownName
from davinci.skills.rewrites import SIMPLIFICATIONS, crossover, moves, retune, sites

CODE = "BLOCK_SIZE = 1024\nk[grid](x, BLOCK_M=64, num_warps=4, num_stages=3)\n"


def test_sites_in_source_order() -> None:
    assert [(s.kind, s.name, s.value) for s in sites(CODE)] == [
        ("tile", "BLOCK_SIZE", 1024), ("tile", "BLOCK_M", 64), ("num_warps", "num_warps", 4), ("num_stages", "num_stages", 3)]


def test_lower_case_tile_names_but_not_counts() -> None:
    assert [(s.name, s.value) for s in sites("block = 4096\nn_blocks = 4\nblock_size=128\n")] == [("block", 4096), ("block_size", 128)]


def test_moves_stay_in_range() -> None:
    # 1024 -> 2048, 512; 64 -> 128, 32; warps 4 -> 8, 2; stages 3 -> 6, 1
    assert [(s.name, v) for s, v in moves(CODE)] == [
        ("BLOCK_SIZE", 2048), ("BLOCK_SIZE", 512), ("BLOCK_M", 128), ("BLOCK_M", 32),
        ("num_warps", 8), ("num_warps", 2), ("num_stages", 6), ("num_stages", 1)]
    assert moves("BLOCK = 16\nnum_warps=16\n") == [(sites("BLOCK = 16\nnum_warps=16\n")[0], 32), (sites("BLOCK = 16\nnum_warps=16\n")[1], 8)]
    assert retune(CODE, 9) == CODE.replace("BLOCK_SIZE = 1024", "BLOCK_SIZE = 512")  # 9 mod 8 = move 1
    assert retune("x = 1\n", 0) is None


def test_crossover_copies_shared_sites() -> None:
    other = CODE.replace("1024", "256").replace("num_warps=4", "num_warps=8")
    assert crossover(CODE, other) == other
    assert crossover(CODE, "BLOCK = 4\n") is None
    assert crossover(CODE, CODE) is None


def test_simplifications() -> None:
    shrink = SIMPLIFICATIONS.get("shrink_tiles").apply(CODE)
    assert shrink == "BLOCK_SIZE = 16\nk[grid](x, BLOCK_M=16, num_warps=4, num_stages=3)\n"
    assert SIMPLIFICATIONS.get("single_warp").apply(CODE) == CODE.replace("num_warps=4", "num_warps=1")
    assert SIMPLIFICATIONS.get("single_stage").apply("x = 1\n") is None
    with pytest.raises(UnknownName, match="shrink_tiles"):
        SIMPLIFICATIONS.get("fuse")
