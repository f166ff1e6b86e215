"""Static outputs (static_outputs.py): storage handed back across calls is told apart, copied out of every
dispatch mode's sight, and a storage handed back unchanged is counted as stale. Hand-made tensors, CPU."""

from __future__ import annotations

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from davinci.kernelgym.static_outputs import Reuse, copy_outputs, stale_calls
from davinci.kernelgym.timing import DeviceTimer


def _found(calls, inputs=()) -> bool:
    watch = Reuse(list(inputs))
    for call in calls:
        watch.see(call())
    return watch.found


def test_a_storage_handed_back_while_held_is_found_and_one_freed_and_reallocated_is_not():
    freed = torch.zeros(4)
    address = freed.untyped_storage().data_ptr()
    watch = Reuse([])
    watch.see(freed)
    del freed  # the harness drops an honest output: its storage is freed ...
    again = torch.zeros(4)
    watch.see(again)  # ... and whatever takes the same address next (the caching allocator's way) is new
    assert not watch.found, again.untyped_storage().data_ptr() == address
    assert not _found([lambda: torch.zeros(4)] * 3)
    static = torch.zeros(4)
    assert _found([lambda: static] * 2)
    buf = torch.zeros(2, 4)
    assert _found([lambda: buf[0], lambda: buf[1]])  # a double buffer stacked in one storage: its views share it
    assert _found([lambda: (torch.zeros(1), static), lambda: [static]])  # a leaf of a nested output counts too
    x = torch.zeros(4)
    assert not _found([lambda: x.relu_()] * 3, inputs=[x])  # in place: an input's storage differs between sets
    assert not _found([lambda: torch.zeros(0)] * 2)  # empty tensors hold no storage worth a copy


def test_the_watch_keeps_no_output_alive():
    import weakref

    out = torch.zeros(1 << 10)
    alive = weakref.ref(out)
    Reuse([]).see(out)
    del out
    assert alive() is None  # a warm-up output is freed as soon as the harness drops it (no memory reserved)


class _Seen(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.ops: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.append(str(func))
        return func(*args, **(kwargs or {}))


def test_copies_are_independent_of_the_buffer_and_unseen_by_a_dispatch_mode():
    static = torch.arange(4.0)
    with _Seen() as seen:
        copies = copy_outputs((static, 3))
    assert seen.ops == []  # the harness's own copy is not the candidate's op
    static.fill_(-1.0)
    assert torch.equal(copies[0], torch.arange(4.0)) and copies[1] == 3


class _Sneaky(torch.Tensor):
    calls = 0

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        cls.calls += 1  # the candidate's code, run by whoever touches the tensor
        return super().__torch_function__(func, types, args, kwargs)


def test_the_copy_runs_no_code_of_a_tensor_subclass():
    sneaky = torch.zeros(4).as_subclass(_Sneaky)
    _Sneaky.calls = 0
    copies = copy_outputs([sneaky])
    assert _Sneaky.calls == 0 and copies[0] is sneaky  # left for the hand-over to refuse, not cloned


def test_a_buffer_handed_back_unchanged_is_stale_and_one_rewritten_is_not():
    buf = torch.zeros(2, 4)
    leaves, copies = [], []
    for k, value in enumerate([1.0, 2.0, 3.0]):  # honest double buffer: call k writes buf[k % 2]
        buf[k % 2].fill_(value)
        leaves.append([buf[k % 2]])
        copies.append(copy_outputs(buf[k % 2]))
    assert stale_calls(leaves, copies) == 0
    static = torch.ones(4)
    assert stale_calls([[static], [static], [static]], [[static.clone()]] * 3) == 2  # never rewritten
    # equal values in separate storages are not a handed-back buffer (an input-independent answer)
    assert stale_calls([[torch.ones(4)], [torch.ones(4)]], [[torch.ones(4)], [torch.ones(4)]]) == 0


def test_the_timed_loop_sees_each_output_before_the_next_call_overwrites_it():
    static = torch.zeros(3)

    def fn(x):
        static.copy_(x * 2)
        return static

    copies: list = []
    _, _, outs = DeviceTimer("cpu").time_calls(fn, [[torch.full((3,), 1.0)], [torch.full((3,), 2.0)]], [0, 1],
                                               on_return=lambda out: copies.append(copy_outputs(out)))
    assert [c[0][0].item() for c in copies] == [2.0, 4.0]
    assert outs[0] is outs[1]  # the outputs as returned: both the last call's answer


def _released(leaves: list, copies: list | None) -> dict:
    """The harness's release of a kept timed request (worker.Harness.op_release), on hand-made outputs."""
    from davinci.kernelgym import transport
    from davinci.kernelgym.worker import Harness

    harness = object.__new__(Harness)  # no channel or sandbox: only the release's own state
    harness.cuda, harness.replayable, harness.exports = False, {}, transport.Exports()
    harness.timer = DeviceTimer("cpu")
    harness.kept = {"timed": leaves, "timed:copies": copies or []}
    harness.timed_reuse = (copies is not None, False)
    reply, _ = harness.op_release({"tags": ["timed"], "reused": True}, [])
    assert "timed" not in harness.kept  # dropped once counted
    return reply


def test_the_release_counts_handed_back_storage_after_the_timed_request():
    static = torch.ones(4)
    # static outputs never rewritten: the 2nd and 3rd calls answered nothing (stale against their copies)
    assert _released([[static]] * 3, [[static.clone()]] * 3)["reused_storage"] == 2
    buf = torch.zeros(2, 4)
    leaves, copies = [], []
    for k, value in enumerate([1.0, 2.0, 3.0]):  # an honest double buffer, copied after each call
        buf[k % 2].fill_(value)
        leaves.append([buf[k % 2]])
        copies.append(copy_outputs(buf[k % 2]))
    assert _released(leaves, copies)["reused_storage"] == 0
    # a candidate whose warm-up found no static outputs: any storage handed back twice counts
    assert _released([[static], [torch.ones(4)], [static]], None)["reused_storage"] == 1
