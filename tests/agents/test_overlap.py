"""Overlap of evaluation with generation (`agents.overlap_eval`): a policy turn hands each finished generation
batch's kernels to the evaluator while the next batch generates.

Methodology: a streaming backend double answers each policy prompt with a fixed kernel (relu: its correct
reference solution; add: a wrong one), in batches of 2 that take 0.3 s each (`generate_batches`, the hf
backend's protocol); the evaluator is conftest's in-process Triton-interpreter double, wrapped in the RL
epoch's `TimedCall`. With overlap on, the first evaluation (0.2 s each) starts before the last batch has been generated,
the episodes equal the serial path's exactly, and the epoch's clocks see overlap; with it off, none.
"""

from __future__ import annotations

import threading
import time
from dataclasses import replace

from davinci.agents.runner import overlap_enabled, run_episodes
from davinci.llm.types import GenOutput
from davinci.rl.rollout import TimedBackend, TimedCall, overlap_seconds

BATCH, DELAY_S, EVAL_S = 2, 0.3, 0.2


class StreamingBackend:
    """Canned answers by problem, generated in batches of BATCH prompts, DELAY_S seconds each."""

    def __init__(self, answers: dict[str, str]) -> None:
        self.answers = answers
        self.batch_ends: list[float] = []

    def _out(self, prompt) -> GenOutput:
        user = prompt[1]["content"]
        if prompt[0]["content"].startswith("You distill"):
            return GenOutput("{not json", (1,), (2,), (-0.1,), "stop")
        text = self.answers["relu" if "torch.relu(x)" in user else "add"]
        return GenOutput(text, (1, 2), (3, 4), (-0.1, -0.2), "stop")

    def generate_batches(self, prompts, sampling):
        for start in range(0, len(prompts), BATCH):
            time.sleep(DELAY_S)
            batch = [(i, self._out(prompts[i])) for i in range(start, min(start + BATCH, len(prompts)))]
            self.batch_ends.append(time.perf_counter())
            yield batch

    def generate(self, prompts, sampling):
        out = [None] * len(prompts)
        for batch in self.generate_batches(prompts, sampling):
            for i, o in batch:
                out[i] = o
        return out


class NonStreaming:
    def generate(self, prompts, sampling):
        return []


def _backend(problems) -> StreamingBackend:
    relu, add = problems
    wrong_add = add.reference_solution.replace("a + b, mask=mask", "a - b, mask=mask")
    return StreamingBackend({"relu": f"```python\n{relu.reference_solution}```", "add": f"```python\n{wrong_add}```"})


def _run(problems, profile, evaluate, mode: str):
    prof = replace(profile, agents=replace(profile.agents, turns=1, overlap_eval=mode))
    backend = _backend(problems)

    def slow_evaluate(items):  # a real evaluation takes seconds; the interpreter double, milliseconds
        time.sleep(EVAL_S)
        return evaluate(items)

    timed, timed_eval = TimedBackend(backend, len), TimedCall(slow_evaluate)
    eps = run_episodes(problems, None, timed, prof, epoch=0, group_size=3, greedy=False, evaluate_fn=timed_eval)
    return eps, backend, timed, timed_eval


def test_overlap_starts_evaluating_before_generation_ends_and_changes_nothing(problems, profile, interpret_evaluate):
    serial, _, serial_gen, serial_eval = _run(problems, profile, interpret_evaluate, "off")
    overlapped, backend, gen, ev = _run(problems, profile, interpret_evaluate, "on")
    # 6 policy prompts -> 3 batches; the first evaluation began while batches 2 and 3 were still generating
    assert len(backend.batch_ends) == 3 + 1  # + the summary call (relu solved: one summary per problem)
    first_eval_start = min(t0 for t0, _ in ev.intervals)
    assert first_eval_start < backend.batch_ends[2]
    assert len(ev.intervals) == 3 and len(serial_eval.intervals) == 1  # one call per batch vs one per turn
    # evaluations of batches 1 and 2 (EVAL_S each) ran under the generation of batches 2 and 3
    assert overlap_seconds(gen.intervals, ev.intervals) >= 2 * EVAL_S * 0.9
    assert overlap_seconds(serial_gen.intervals, serial_eval.intervals) == 0.0
    # identical episodes: the same generations, candidates and verdicts as the serial path
    assert [e.to_dict() for e in overlapped] == [e.to_dict() for e in serial]
    assert [t.correct for e in overlapped for t in e.turns] == [True] * 3 + [False] * 3


def test_auto_overlaps_only_on_a_dask_cluster_with_a_streaming_backend(problems, profile):
    auto = replace(profile, agents=replace(profile.agents, overlap_eval="auto"))
    on_cluster = replace(auto, gym=replace(auto.gym, cluster="local-dask:2"))
    streaming = _backend(problems)
    assert not overlap_enabled(auto, streaming)  # in-process lanes would time kernels beside generation
    assert overlap_enabled(on_cluster, streaming)
    assert overlap_enabled(on_cluster, TimedBackend(streaming, len))
    assert not overlap_enabled(on_cluster, NonStreaming())
    assert not overlap_enabled(on_cluster, TimedBackend(NonStreaming(), len))
    off = replace(on_cluster, agents=replace(on_cluster.agents, overlap_eval="off"))
    assert not overlap_enabled(off, streaming)


def test_overlap_seconds_by_hand():
    # generation 0-1, 2-3; evaluation 0.5-2.5 -> overlap 0.5 + 0.5
    assert overlap_seconds([(0.0, 1.0), (2.0, 3.0)], [(0.5, 2.5)]) == 1.0
    # overlapping evaluations count once
    assert overlap_seconds([(0.0, 4.0)], [(1.0, 3.0), (2.0, 3.5)]) == 2.5
    assert overlap_seconds([], [(0.0, 1.0)]) == 0.0


def test_a_failed_evaluation_stops_the_turn_with_its_own_error(problems, profile, interpret_evaluate):
    import pytest

    prof = replace(profile, agents=replace(profile.agents, turns=1, overlap_eval="on"))
    backend = _backend(problems)

    def broken(items):
        raise RuntimeError("the evaluator's cluster went away")

    with pytest.raises(RuntimeError, match="cluster went away"):
        run_episodes(problems, None, backend, prof, epoch=0, group_size=3, greedy=False, evaluate_fn=broken)
    # stopped at the batch boundary after the failure, not after generating every batch
    assert len(backend.batch_ends) == 2


def test_an_error_in_generation_does_not_wait_for_the_evaluation_in_flight(problems, profile, interpret_evaluate):
    import pytest

    prof = replace(profile, agents=replace(profile.agents, turns=1, overlap_eval="on"))
    backend = _backend(problems)
    real = backend.generate_batches

    def failing(prompts, sampling):
        it = real(prompts, sampling)
        yield next(it)
        raise MemoryError("CUDA out of memory while generating batch 2")

    backend.generate_batches = failing

    release = threading.Event()
    finished: list[bool] = []

    def held(items):  # batch 1's evaluation, still in flight when generation fails
        release.wait(30)
        finished.append(True)
        return interpret_evaluate(items)

    with pytest.raises(MemoryError, match="batch 2"):
        run_episodes(problems, None, backend, prof, epoch=0, group_size=3, greedy=False, evaluate_fn=held)
    assert not finished  # the turn raised without waiting for the evaluation in flight
    release.set()
