"""Problem synthesis: deterministic for a seed, valid problems, correct generated Triton, drops with reasons."""

from __future__ import annotations

import random

import pytest

from data_prep.builtin import builtin_problems
from data_prep.source_ast import check_interface
from data_prep.synthesis import ChainPool, sample_chain, synthesize, synthesize_with_report, validate_synthetic
from data_prep.synthesis_ops import OPS, ChainSpec, problem_source, solution_source
from data_prep.verify import check_solutions, informativeness
from davinci.types import Problem

BUILTIN = builtin_problems()


def test_same_seed_same_problems_other_seed_other_problems():
    first = synthesize_with_report(BUILTIN, n=3, seed=3, verify_solutions=False)
    again = synthesize_with_report(BUILTIN, n=3, seed=3, verify_solutions=False)
    assert first == again
    assert [p.to_dict() for p in synthesize(BUILTIN, 3, 3)] == [p.to_dict() for p in first.problems]
    other = synthesize_with_report(BUILTIN, n=3, seed=4, verify_solutions=False)
    assert [p.code for p in other.problems] != [p.code for p in first.problems]


def test_synthesized_problems_are_valid_informative_and_solved():
    """Generated without the internal solution check, then checked here independently (one worker)."""
    result = synthesize_with_report(BUILTIN, n=3, seed=11, verify_solutions=False)
    assert len(result.problems) == 3
    for problem in result.problems:
        assert problem.id.startswith("synthetic/s11-") and problem.source == "synthetic" and problem.level == 2
        assert check_interface(problem.code).ok
        assert informativeness(problem.code, seeds=(0, 1)).ok
    checks = check_solutions([(p.code, p.reference_solution) for p in result.problems], seeds=(0, 1, 2))
    assert all(c.ok and c.params_match for c in checks), [c.message for c in checks]
    for record in result.dropped:
        assert record.stage == "synthesis" and record.reason in ("trivial-output", "non-finite", "run-error")


TEMPLATE_CHAINS = [(name,) for name, t in OPS.items() if t.kind != "reduce"] + [
    ("scale", name) for name, t in OPS.items() if t.kind == "reduce"
]


@pytest.fixture(scope="module")
def template_checks():
    """Odd sizes on purpose: dim 96 pads columns to 128, 5 x 4 = 20 rows pad the last row block."""
    specs = [ChainSpec(ops=ops, batch=5, seq=4, dim=96, input_scale=2.0) for ops in TEMPLATE_CHAINS]
    checks = check_solutions([(problem_source(s), solution_source(s)) for s in specs], seeds=(0, 1, 2))
    return dict(zip(TEMPLATE_CHAINS, checks))


@pytest.mark.parametrize("ops", TEMPLATE_CHAINS, ids=lambda ops: "-".join(ops))
def test_every_template_generates_a_correct_fused_kernel(ops, template_checks):
    check = template_checks[ops]
    assert check.ok and check.params_match, check.message


def test_trivial_chains_are_dropped_with_the_reason():
    for ops, expected in [(("softmax", "sum"), "constant"), (("layer_norm", "mean"), "zeros")]:
        spec = ChainSpec(ops=ops, batch=8, seq=0, dim=64, input_scale=1.0)
        problem = Problem(id="synthetic/t", source="synthetic", level=2, name="t", code=problem_source(spec),
                          reference_solution=solution_source(spec))
        record = validate_synthetic(problem)
        assert record is not None and record.reason == "trivial-output" and expected in record.detail


def test_sampled_chains_follow_the_rules():
    rng = random.Random(0)
    for _ in range(300):
        spec = sample_chain(rng)
        kinds = [OPS[op].kind for op in spec.ops]
        assert 2 <= len(spec.ops) <= 4
        assert "reduce" not in kinds[:-1]
        assert spec.ops.count("affine") <= 1
        assert all(a != b for a, b in zip(spec.ops, spec.ops[1:]))
        assert spec.batch * max(spec.seq, 1) * spec.dim <= 65536


def test_a_pool_narrows_ops_and_lengths_and_the_default_draws_as_before():
    pool = ChainPool(ops=("relu", "abs", "shift"), lengths=(2,))
    rng = random.Random(1)
    specs = [sample_chain(rng, pool) for _ in range(100)]
    assert all(len(s.ops) == 2 and set(s.ops) <= {"relu", "abs", "shift"} and s.ops[0] != s.ops[1] for s in specs)
    # 3 ops, no repeat in a row: exactly the 6 ordered pairs
    assert len({s.ops for s in specs}) == 6
    assert [sample_chain(random.Random(5)) for _ in range(1)] == [sample_chain(random.Random(5), ChainPool())]


def test_a_pool_with_unknown_ops_or_no_lengths_is_refused():
    with pytest.raises(ValueError, match="unknown synthesis ops"):
        ChainPool(ops=("relu", "nope"))
    with pytest.raises(ValueError, match="chain lengths"):
        ChainPool(lengths=())
    with pytest.raises(ValueError, match="no op for position 0"):  # a reduction only ends a chain, never starts it
        sample_chain(random.Random(0), ChainPool(ops=("sum",), lengths=(2,)))


def test_a_small_pool_stops_at_its_distinct_signatures():
    result = synthesize_with_report([], n=10, seed=0, verify_solutions=False, pool=ChainPool(ops=("relu", "abs", "shift"), lengths=(2,)))
    assert len(result.problems) == 6  # the 6 ordered pairs, each signature once
    assert len({p.name for p in result.problems}) == 6
