"""`rollout.TimedCall`: the evaluate wrapper's counts (items, and copies kernelgym did not evaluate again)."""

from __future__ import annotations

from types import SimpleNamespace

from davinci.rl.rollout import TimedCall


def test_counts_items_and_copies_across_calls():
    def evaluate(items):
        # the second and fourth item are copies of the first (kernelgym's dedup_batch marks them copy_of)
        return [SimpleNamespace(details={"copy_of": 0} if i in (1, 3) else {}) for i in range(len(items))]

    call = TimedCall(evaluate)
    call(["a", "a", "b", "a"])
    call(["c"])
    assert (call.items, call.copies, len(call.intervals)) == (5, 2, 2)


def test_a_failing_evaluate_still_counts_its_items_and_time():
    def broken(items):
        raise RuntimeError("worker died")

    call = TimedCall(broken)
    try:
        call(["a", "b"])
    except RuntimeError:
        pass
    assert (call.items, call.copies, len(call.intervals)) == (2, 0, 1)


def test_an_evaluate_that_yields_still_hands_every_result_to_the_runner():
    def evaluate(items):
        for _ in items:
            yield SimpleNamespace(details={"copy_of": 0})

    call = TimedCall(evaluate)
    assert len(call(["a", "b", "c"])) == 3 and call.copies == 3
