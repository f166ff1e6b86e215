"""Archive insertion, diversity distance, parent selection and code features, against hand-computed values."""

from __future__ import annotations

import random

from davinci.evolve.archive import ArchiveEntry, best, code_features, feature_distance, insert, score, select_parents


def _e(h: str, speedup: float | None, low: float | None = None, feats: tuple[str, ...] = ("x",), correct: bool = True) -> ArchiveEntry:
    return ArchiveEntry(h, f"# {h}", 0, correct=correct, speedup=speedup, ci_low=low, ci_high=None, features=feats)


def test_feature_distance_is_one_minus_jaccard() -> None:
    # {a,b,c} vs {b,c,d}: intersection 2, union 4 -> 1 - 2/4
    assert feature_distance(("a", "b", "c"), ("b", "c", "d")) == 0.5
    assert feature_distance((), ()) == 0.0
    assert feature_distance(("a",), ("b",)) == 1.0


def test_score_orders_by_ci_lower_bound_then_median() -> None:
    assert score(_e("a", 2.0, 1.5)) > score(_e("b", 3.0, 1.2))  # the CI lower bound wins over the median
    assert score(_e("c", 2.0, None)) == (2.0, 2.0, "c")  # untimed CI: the median stands in


def test_incorrect_and_duplicate_programs_never_enter() -> None:
    arch = insert((), _e("a", 1.0, 1.0), size=3, diversity_slots=1)
    assert insert(arch, _e("b", 9.0, 9.0, correct=False), 3, 1) == arch
    assert insert(arch, _e("a", 5.0, 5.0), 3, 1) == arch


def test_elites_by_speed_then_diversity_slot_farthest_first() -> None:
    # size 3, 1 diversity slot: elites are the 2 best (d 4.0, c 3.0); of a (1.0, features far from both)
    # and b (2.0, features equal to d's), the diverse slot takes a although b is faster.
    arch: tuple = ()
    arch = insert(arch, _e("a", 1.0, 1.0, ("p", "q")), 3, 1)
    arch = insert(arch, _e("b", 2.0, 2.0, ("x", "y")), 3, 1)
    arch = insert(arch, _e("c", 3.0, 3.0, ("x", "z")), 3, 1)
    arch = insert(arch, _e("d", 4.0, 4.0, ("x", "y")), 3, 1)
    assert [e.code_hash for e in arch] == ["d", "c", "a"]
    assert best(arch).code_hash == "d"


def test_without_diversity_slots_the_archive_is_the_top_k() -> None:
    arch: tuple = ()
    for h, s in (("a", 1.0), ("b", 3.0), ("c", 2.0)):
        arch = insert(arch, _e(h, s, s), 2, 0)
    assert [e.code_hash for e in arch] == ["b", "c"]


def test_select_parents_is_rank_weighted_and_reproducible() -> None:
    arch = (_e("a", 1.0, 1.0), _e("b", 3.0, 3.0))
    first = [e.code_hash for e in select_parents(arch, 200, random.Random(7))]
    assert first == [e.code_hash for e in select_parents(arch, 200, random.Random(7))]
    # weights 1 and 1/2: the best is picked about two thirds of the time
    assert 0.55 < first.count("b") / 200 < 0.8
    assert select_parents((), 3, random.Random(0)) == []


def test_code_features_read_kernel_structure() -> None:
    code = '''
import triton
import triton.language as tl
@triton.jit
def k(x_ptr, n, BLOCK: tl.constexpr):
    for i in range(4):
        x = tl.load(x_ptr + tl.arange(0, BLOCK))
    tl.store(x_ptr, tl.sum(x, axis=0))
def run(x):
    BLOCK_SIZE = 1000
    k[(1,)](x, 1, BLOCK=256, num_warps=4)
'''
    feats = set(code_features(code))
    assert {"kernels=1", "kernel-loop", "call:tl.sum", "num_warps=4", "BLOCK~256", "BLOCK_SIZE~512"} <= feats
    assert code_features("def (") == ()
