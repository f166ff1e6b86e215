"""Problem synthesis: new KernelBench-format problems composed from operator templates.

What it does: samples chains of 2-4 ops over the last dimension (elementwise and activation ops, a
per-feature affine, row-wise softmax / log-softmax / layer-norm / rms-norm / centering, and a final
reduction), with random shapes (rows x [seq x] dim, at most 64K elements) and input scales, writes each as
a problem file (`synthesis_ops.problem_source`), runs its reference once on the CPU and drops it when the
output is non-finite or trivially matched (zeros, a constant or another draw's output pass at 1e-2; see
`verify.trivial_answer_reasons`). Each kept problem gets a generated fused Triton solution
(`synthesis_ops.solution_source`), checked in the Triton interpreter when `verify_solutions`.

Choices:
- Deterministic for a seed: one `random.Random(seed)` draws every choice; validation is seeded too.
- A reduction only ends a chain; a chain never repeats the same op twice in a row nor uses the affine twice.
- A `ChainPool` narrows the family: only the named ops, only the given chain lengths (the tiny profile uses
  two-op chains of eight elementwise ops, a family a ~1M-parameter model learns to compose on a CPU in
  minutes). The default pool (every op, lengths 2-4) draws exactly as before the pool existed.
- Chains whose operator signature equals one of the given `problems` (or an earlier synthesized chain)
  are skipped before running anything: they would only be near-duplicates.
- A generated solution that fails its check is dropped with the problem (reason `run-error`), never shipped.

    result = synthesize_with_report(builtin_problems(), n=8, seed=0)
    result.problems, result.dropped
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Sequence

from tqdm import tqdm

from data_prep.records import DropRecord
from data_prep.source_ast import operator_signature, signature_family
from data_prep.synthesis_ops import OPS, ChainSpec, problem_source, solution_source
from data_prep.verify import SolutionCheck, check_solution, check_solutions, reference_outputs, trivial_answer_reasons
from davinci.types import Problem

_UNARY = tuple(name for name, t in OPS.items() if t.kind == "unary")
_ROW = tuple(name for name, t in OPS.items() if t.kind == "row")
_REDUCE = tuple(name for name, t in OPS.items() if t.kind == "reduce")
_DIMS = (64, 96, 128, 192, 256, 384, 512)
_BATCHES = (8, 16, 32, 64)
_SEQS = (0, 0, 4, 8)
_SCALES = (1.0, 2.0, 3.0)
MAX_ELEMENTS = 65536
ATTEMPTS_PER_PROBLEM = 12
# Seeds of the generated-solution check: native, scaled and heavy-tailed inputs (kernelgym's distributions).
SOLUTION_SEEDS = (0, 1, 2)


@dataclass(frozen=True)
class ChainPool:
    """Which chains `sample_chain` may draw: op names (empty = every op in `OPS`) and chain lengths."""

    ops: tuple[str, ...] = ()
    lengths: tuple[int, ...] = (2, 3, 3, 4)

    def __post_init__(self) -> None:
        unknown = sorted(set(self.ops) - set(OPS))
        if unknown:
            raise ValueError(f"unknown synthesis ops {unknown}; valid: {', '.join(sorted(OPS))}")
        if not self.lengths or min(self.lengths) < 1:
            raise ValueError(f"chain lengths must be a non-empty list of positive numbers (got {list(self.lengths)})")

    def allows(self, name: str) -> bool:
        return not self.ops or name in self.ops


DEFAULT_POOL = ChainPool()


@dataclass(frozen=True)
class SynthesisResult:
    problems: tuple[Problem, ...]
    dropped: tuple[DropRecord, ...]
    attempts: int


def sample_chain(rng: random.Random, pool: ChainPool = DEFAULT_POOL) -> ChainSpec:
    """One random chain spec (see module docstring for the rules); ops and lengths from `pool`."""
    length = rng.choice(pool.lengths)
    ops: list[str] = []
    for position in range(length):
        last = position == length - 1
        names = list(_UNARY) * 2 + list(_ROW) + (["affine"] if "affine" not in ops else [])
        if last and position > 0:
            names += list(_REDUCE) * 2
        choices = [op for op in names if (not ops or op != ops[-1]) and pool.allows(op)]
        if not choices:
            raise ValueError(f"the pool {list(pool.ops)} has no op for position {position} of a {length}-op chain")
        ops.append(rng.choice(choices))
    dim = rng.choice(_DIMS)
    seq = rng.choice(_SEQS)
    batch = rng.choice(_BATCHES)
    while batch * max(seq, 1) * dim > MAX_ELEMENTS and batch > 1:
        batch //= 2
    return ChainSpec(ops=tuple(ops), batch=batch, seq=seq, dim=dim, input_scale=rng.choice(_SCALES))


def _problem(spec: ChainSpec, seed: int, index: int, solution: str | None) -> Problem:
    name = "_".join(spec.ops)
    code = problem_source(spec)
    signature = operator_signature(code)
    tags = ("synthetic", "chain", signature_family(signature), *spec.ops)
    return Problem(
        id=f"synthetic/s{seed}-{index:03d}-{name}",
        source="synthetic",
        level=2,
        name=name,
        code=code,
        reference_solution=solution,
        tags=tuple(dict.fromkeys(tags)),
    )


def validate_reference(problem: Problem) -> DropRecord | None:
    """None when the reference runs and its outputs are informative; else the drop record saying why not."""
    try:
        outputs = reference_outputs(problem.code, seeds=(0, 1))
    except Exception as exc:  # generated code: any failure is a reason to drop, reported
        return DropRecord("synthesis", problem.id, "run-error", f"reference raised {type(exc).__name__}: {exc}")
    reasons = trivial_answer_reasons(outputs)
    if reasons:
        kind = "non-finite" if any("non-finite" in r for r in reasons) else "trivial-output"
        return DropRecord("synthesis", problem.id, kind, "; ".join(reasons))  # type: ignore[arg-type]
    return None


def _solution_drop(problem: Problem, check: SolutionCheck) -> DropRecord | None:
    if check.ok:
        return None
    return DropRecord("synthesis", problem.id, "run-error", f"generated solution failed: {check.message}")


def validate_synthetic(problem: Problem, verify_solution: bool = True) -> DropRecord | None:
    """`validate_reference`, then (optionally) the generated solution against the reference."""
    drop = validate_reference(problem)
    if drop is not None or not verify_solution or problem.reference_solution is None:
        return drop
    return _solution_drop(problem, check_solution(problem.code, problem.reference_solution, seeds=SOLUTION_SEEDS))


def _round(rng, seed, want, seen, attempts, budget, dropped, pool) -> tuple[list[Problem], int]:  # noqa: ANN001
    """Sample until `want` problems pass reference validation (or the budget runs out)."""
    batch: list[Problem] = []
    while len(batch) < want and attempts < budget:
        attempts += 1
        spec = sample_chain(rng, pool)
        signature = operator_signature(problem_source(spec))
        if signature in seen:
            continue
        seen.add(signature)
        problem = _problem(spec, seed, attempts, solution_source(spec))
        drop = validate_reference(problem)
        if drop is None:
            batch.append(problem)
        else:
            dropped.append(drop)
    return batch, attempts


def synthesize_with_report(
    problems: Sequence[Problem], n: int, seed: int, *, verify_solutions: bool = True, progress: bool = False,
    pool: ChainPool = DEFAULT_POOL,
) -> SynthesisResult:
    """Up to `n` valid synthesized problems (fewer only when the attempt budget runs out or `pool` has fewer
    distinct signatures), plus the drops.

    Solutions are checked a round at a time (`verify.check_solutions`: one worker process per round)."""
    rng = random.Random(seed)
    seen = {operator_signature(p.code) for p in problems}
    kept: list[Problem] = []
    dropped: list[DropRecord] = []
    attempts, budget = 0, n * ATTEMPTS_PER_PROBLEM
    bar = tqdm(total=n, desc="synthesize", disable=not progress, leave=False)
    while len(kept) < n and attempts < budget:
        batch, attempts = _round(rng, seed, n - len(kept), seen, attempts, budget, dropped, pool)
        checks = (
            check_solutions([(p.code, p.reference_solution or "") for p in batch], seeds=SOLUTION_SEEDS)
            if verify_solutions and batch else [None] * len(batch)
        )
        for problem, check in zip(batch, checks):
            drop = _solution_drop(problem, check) if check is not None else None
            if drop is None:
                kept.append(problem)
                bar.update(1)
            else:
                dropped.append(drop)
    bar.close()
    return SynthesisResult(problems=tuple(kept), dropped=tuple(dropped), attempts=attempts)


def synthesize(problems: Sequence[Problem], n: int, seed: int) -> list[Problem]:
    """`synthesize_with_report(...).problems` as a list (the contract's signature)."""
    return list(synthesize_with_report(problems, n, seed).problems)


__all__ = [
    "synthesize",
    "synthesize_with_report",
    "SynthesisResult",
    "ChainPool",
    "DEFAULT_POOL",
    "sample_chain",
    "validate_reference",
    "validate_synthetic",
]
