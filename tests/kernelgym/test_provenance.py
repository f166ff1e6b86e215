"""Value provenance on the CPU (`provenance.Provenance`, Triton interpreter): every value a kernel or an aten op
reads, and every value returned, was written by an observed writer. Each test is one way of getting values in
out of sight (the attacks are the red team's fixtures cheats_v2/c2_fb_numpy_*, c2_fb_python_item_fill,
c2_fb_numpy_inside_kernel), against the honest chain beside it; counts are hand-computed."""

from __future__ import annotations

import contextlib
import os
from typing import Any, Iterator

import numpy as np
import pytest
import torch

os.environ.setdefault("TRITON_INTERPRET", "1")
triton = pytest.importorskip("triton")
tl = pytest.importorskip("triton.language")

from davinci.kernelgym import guards  # noqa: E402
from davinci.kernelgym.accounting import PoisonMode, StoreRecorder  # noqa: E402
from davinci.kernelgym.hostdata import Record, merge_records, ops_only, provenance_verdict  # noqa: E402
from davinci.kernelgym.provenance import Provenance  # noqa: E402

N = 64


@triton.jit
def _copy(src, dst, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    m = offs < n  # the lanes past n
    tl.store(dst + offs, tl.load(src + offs, mask=m), mask=m)


@triton.jit
def _relu(src, dst, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    m = offs < n  # the lanes past n
    tl.store(dst + offs, tl.maximum(tl.load(src + offs, mask=m), 0.0), mask=m)


@pytest.fixture(scope="module")
def hooks() -> tuple[guards.LaunchRecorder, StoreRecorder]:
    rec, stores = guards.LaunchRecorder(), StoreRecorder()
    rec.install(False)
    assert stores.install()
    return rec, stores


@contextlib.contextmanager
def watched(hooks: Any, roots: list[Any]) -> Iterator[Provenance]:
    """A forward as the harness runs it: the state vouched for, the dispatch mode and the launch hook on."""
    rec, stores = hooks
    prov, mode = Provenance(stores), PoisonMode(launches=rec.count)
    prov.snapshot(roots)
    mode.provenance = rec.provenance = prov
    stores.start()
    try:
        with mode:
            yield prov
    finally:
        stores.stop()
        rec.provenance = None


def _x() -> torch.Tensor:
    return torch.linspace(-1.0, 1.0, N)


def test_an_honest_chain_of_kernels_and_glue_is_fully_explained(hooks):
    x = _x()
    with watched(hooks, [[x]]) as prov:
        a = torch.empty_like(x)
        _relu[(1,)](x, a, N, BLOCK=N)
        b = a.clone()  # glue over a kernel's stores
        out = torch.empty_like(x)
        _copy[(1,)](b, out, N, BLOCK=N)
    prov.check_output([out])
    assert prov.unexplained == 0, prov.where
    assert torch.equal(out, x.clamp(min=0))


def test_numpy_writing_into_a_buffer_the_evaluator_saw_allocated_is_counted_at_the_next_launch(hooks):
    x = _x()
    with watched(hooks, [[x]]) as prov:
        s = torch.empty_like(x)
        np.maximum(x.numpy(), 0.0, out=s.numpy())  # out of every record's sight
        out = torch.empty_like(x)
        _copy[(1,)](s, out, N, BLOCK=N)
    prov.check_output([out])
    assert prov.unexplained == N  # s: 64 elements written by nobody observed, counted once
    assert "written by something neither" in prov.where[0]


def test_a_kernel_loading_a_from_numpy_buffer_counts_every_element_it_loaded(hooks):
    x = _x()
    with watched(hooks, [[x]]) as prov:
        s = torch.from_numpy(np.maximum(x.numpy(), 0.0))  # no aten op made it
        out = torch.empty_like(x)
        _copy[(1,)](s, out, 48, BLOCK=N)  # loads 48 of its 64 elements
    prov.check_output([out])
    assert prov.unexplained == 48  # loaded of unknown origin
    assert out[48:].isnan().all()  # what `empty` handed out was overwritten (NaN): elements nothing wrote are wrong


def test_the_output_written_after_the_last_launch_is_counted(hooks):
    x = _x()
    with watched(hooks, [[x]]) as prov:
        out = torch.empty_like(x)
        _relu[(1,)](x, out, N // 2, BLOCK=N)  # the first half
        on = out.numpy()
        np.maximum(x.numpy()[N // 2:], 0.0, out=on[N // 2:])  # the second half, by NumPy
    prov.check_output([out])
    assert prov.unexplained == N  # the output's storage, as a whole


def test_state_from_before_the_forward_is_vouched_for_and_a_change_to_it_is_not(hooks):
    class Holder:
        pass
    x, held = _x(), Holder()
    held.scratch = np.zeros(N, dtype=np.float32)  # reachable from the roots: an attribute of an object
    cache = torch.full((N,), 2.0)                  # a cache from earlier calls: vouched, unchanged
    with watched(hooks, [[x], {"held": held, "cache": cache}]) as prov:
        out = torch.empty_like(x)
        _copy[(1,)](cache, out, N, BLOCK=N)
    prov.check_output([out])
    assert prov.unexplained == 0
    with watched(hooks, [[x], {"held": held}]) as prov:
        np.maximum(x.numpy(), 0.0, out=held.scratch)
        out = torch.empty_like(x)
        _copy[(1,)](torch.from_numpy(held.scratch), out, N, BLOCK=N)
    prov.check_output([out])
    assert prov.unexplained == N


_SIDE: dict[str, Any] = {}


def _write_scratch() -> int:
    np.maximum(_SIDE["x"], 0.0, out=_SIDE["s"])
    return 0


@triton.jit
def _copy_after_python(src, dst, n, BLOCK: tl.constexpr):
    _write_scratch()  # the interpreter runs a kernel's body as Python
    offs = tl.arange(0, BLOCK)
    m = offs < n  # the lanes past n
    tl.store(dst + offs, tl.load(src + offs, mask=m), mask=m)


def test_memory_an_argument_gained_during_a_launch_other_than_by_its_stores_is_counted(hooks, monkeypatch):
    """Behind the front-end check (frontend.py refuses such a kernel first), switched off here."""
    monkeypatch.setattr(hooks[0], "_front_end", lambda *a: None)
    x = _x()
    with watched(hooks, [[x]]) as prov:
        s, out = torch.full_like(x, -7.0), torch.empty_like(x)
        _SIDE.update(x=x.numpy(), s=s.numpy())
        _copy_after_python[(1,)](s, out, N, BLOCK=N)
    prov.check_output([out])
    assert prov.unexplained == N + 1  # every element of s (-7 -> relu(x) >= 0), and the -7 full_like wrote
    assert any("other than by the kernel's stores" in w for w in prov.where)


def test_each_value_read_into_python_counts_one(hooks):
    x = _x()
    with watched(hooks, [[x]]) as prov:
        out = torch.empty_like(x)
        _relu[(1,)](x, out, N, BLOCK=N)
        for i in range(5):
            out[i].fill_(max(x[i].item(), 0.0))  # glue write of a value Python computed
    prov.check_output([out])
    assert prov.unexplained == 5 + 5  # each value read into Python, and each number fill_ wrote


def test_the_verdict_counts_host_made_data_unless_other_inputs_gave_the_same():
    def record(*events, out=4096, **kw):
        return Record(tuple(events), out, **kw)
    varying, table = ("a" * 32, 8, "kernel k loaded 8 elements", 0), ("c" * 32, 32, "a table", 0)
    assert provenance_verdict(record()) is None
    assert provenance_verdict(record(varying, out=8)) is not None            # 8 of an 8-element output
    assert provenance_verdict(record(("b" * 32, 40, "x", 0))) is None           # 40 < 1% of 4096 (40.96)
    assert provenance_verdict(record(("b" * 32, 41, "x", 0))) is not None
    assert provenance_verdict(record(table, out=8), constant={"c" * 32}) is None  # the same on other inputs
    assert provenance_verdict(record(table, varying, out=8), constant={"c" * 32}).startswith("8 elements came")
    assert "unhooked" in provenance_verdict(record(unhooked=True))
    assert "overflowed" in provenance_verdict(record(overflow=True))


def test_a_table_built_per_call_has_the_same_digest_on_other_inputs_and_host_sums_do_not(hooks):
    """What lets the verdict tell a constant from host compute: the same key, other inputs, the same digest."""
    key = b"k" * 16
    digests = []
    for x in (_x(), _x() * 3.0):
        rec, stores = hooks
        prov, mode = Provenance(stores, key=key), PoisonMode(launches=rec.count)
        prov.snapshot([[x]])
        mode.provenance = rec.provenance = prov
        stores.start()
        try:
            with mode:
                table = torch.from_numpy(np.arange(N, dtype=np.float32))        # the same on any input
                sums = torch.from_numpy(np.maximum(x.numpy(), 0.0))             # computed from the input
                a, b = torch.empty_like(x), torch.empty_like(x)
                _copy[(1,)](table, a, N, BLOCK=N)
                _copy[(1,)](sums, b, N, BLOCK=N)
        finally:
            stores.stop()
            rec.provenance = None
        digests.append([d for d, _, _, _ in prov.events])
    assert len(digests[0]) == 2 and digests[0][0] == digests[1][0] and digests[0][1] != digests[1][1]


def test_data_seen_in_two_calls_of_one_record_is_a_constant_and_data_of_one_call_is_not():
    sizes = [("s" * 32, 1, "n", c) for c in (1, 2, 3)]          # the same size passed in each call
    sums = [(f"{c}" * 32, 1, "a sum", c) for c in (1, 2, 3)]    # a different host-made value in each call
    assert provenance_verdict(Record(tuple(sizes), output_elements=24)) is None
    assert provenance_verdict(Record(tuple(sizes + sums), output_elements=24)).startswith(
        "3 elements came from the host")
    twice_in_one_call = (("t" * 32, 8, "x", 1), ("t" * 32, 8, "x", 1))
    assert provenance_verdict(Record(twice_in_one_call, output_elements=8)) is not None


def test_a_kernel_built_per_call_has_a_new_code_digest_and_a_reused_one_does_not():
    from davinci.kernelgym.launchdata import code_digest as _code_digest

    def build(value: float):
        src = (f"def k(out_ptr, BLOCK: tl.constexpr):\n"
               f"    tl.store(out_ptr + tl.arange(0, BLOCK), tl.full([BLOCK], {value!r}, tl.float32))\n")
        scope = {"tl": tl}
        exec(compile(src, f"<generated {value}>", "exec"), scope)
        return triton.jit(scope["k"])
    key = b"k" * 16
    same = [_code_digest(_relu, (None, None, N), {"BLOCK": N}, key) for _ in range(2)]
    baked = [_code_digest(build(v), (None,), {"BLOCK": N}, key) for v in (1.5, 2.5)]
    other_block = _code_digest(_relu, (None, None, N), {"BLOCK": 2 * N}, key)
    assert same[0] == same[1] and baked[0] != baked[1] and other_block != same[0]


def _glue_record(forward: Any, hooks: Any, inputs: list[torch.Tensor]) -> Record:
    """Audit A's record of `forward` over `inputs`, one call each (each call on its own inputs)."""
    from davinci.kernelgym.hostdata import read_record
    from davinci.kernelgym.provenance import record_evidence

    rec, stores = hooks
    prov, mode = Provenance(stores, int_args=True), PoisonMode(launches=rec.count)
    prov.snapshot([inputs])
    mode.provenance = rec.provenance = prov
    outs = []
    stores.start()
    try:
        with mode:
            for x in inputs:
                prov.begin_call([x])
                outs.append(forward(x))
                prov.calling = False
    finally:
        stores.stop()
        rec.provenance = None
    return read_record(record_evidence(prov, outs, False, len(inputs)))


def _sign_runs(x: torch.Tensor) -> torch.Tensor:
    """relu from glue alone: Python splits x at its sign changes (NumPy) and `cat`s each run or zeros."""
    pos = x.numpy() > 0
    bounds = [0, *(np.flatnonzero(pos[1:] != pos[:-1]) + 1).tolist(), x.numel()]
    runs = torch.split(x, [b - a for a, b in zip(bounds, bounds[1:])])
    return torch.cat([r if pos[a] else torch.zeros(r.numel()) for r, a in zip(runs, bounds)])


def test_glue_whose_numbers_change_with_the_inputs_counts_and_fixed_glue_does_not(hooks):
    from davinci.kernelgym.hostdata import op_events

    gen = torch.Generator().manual_seed(0)
    inputs = [torch.randn(N, generator=gen) for _ in range(3)]

    def fixed(x: torch.Tensor) -> torch.Tensor:  # the same split sizes and views on every input
        out = torch.empty_like(x)
        halves = torch.split(x, N // 2)
        _relu[(1,)](torch.cat([halves[1], halves[0]]).view(N), out, N, BLOCK=N)
        return out

    assert _glue_record(fixed, hooks, inputs).ops and op_events(_glue_record(fixed, hooks, inputs)) == []
    events = op_events(_glue_record(_sign_runs, hooks, inputs))
    # each call's own split and cat weigh what Python decided: the split its sizes (one per sign run) and its input,
    # the cat one element per piece
    signs = [x.numpy() > 0 for x in inputs]
    runs = [1 + int((pos[1:] != pos[:-1]).sum()) for pos in signs]
    by_op: dict[str, int] = {}
    for n, what in events:
        op = what.split(" of ")[1].split(" ")[0]
        by_op[op] = by_op.get(op, 0) + n
    assert by_op["split_with_sizes"] == sum(r + 1 for r in runs) and by_op["cat"] == sum(runs)
    assert provenance_verdict(_glue_record(_sign_runs, hooks, inputs)) is not None


def test_an_op_run_in_one_call_only_counts():
    """Audit A comes after the correctness and accounting calls: honest state is built by then, and op names that
    alternate between calls carry data in each set (cheats_v2/c2_fb_rt4_parity_rotation_rowsum)."""
    from davinci.kernelgym.hostdata import op_events

    ops = (("view", "a", 2, 1), ("view", "a", 2, 2))
    assert op_events(Record((), 128, ops=ops)) == []
    odd_even = (*ops, ("slice", "s", 3, 1), ("select", "t", 3, 2))
    assert [n for n, _ in op_events(Record((), 128, ops=odd_even))] == [3, 3]


def _start_row(call: int, start: int) -> tuple[str, str, int, int]:
    """A `slice` op whose number is a start row: (op, digest, weight, call)."""
    return ("slice", f"start-{start}", 2, call)


def test_a_rotating_start_repeats_over_a_window_of_calls_and_data_does_not():
    # a start row rotating over 4 rows, two calls per request: two calls never repeat, four requests do
    requests = [Record((), 8, ops=(_start_row(0, (2 * k) % 4), _start_row(1, (2 * k + 1) % 4))) for k in range(4)]
    assert ops_only(requests[0])                                    # flagged by its op digests alone
    merged = merge_records(requests, 2)
    assert [c for *_, c in merged.ops] == [0, 1, 2, 3, 4, 5, 6, 7]
    assert provenance_verdict(merged) is None                       # every start seen in two calls
    # a number the data decided: a new one in every call of every request
    data = [Record((), 8, ops=(_start_row(0, 10 * k), _start_row(1, 10 * k + 1))) for k in range(4)]
    assert provenance_verdict(merge_records(data, 2)).startswith("16 elements came from the host")


def test_the_window_weighs_what_stays_unexplained_against_one_request_outputs():
    # 16 calls with the same ops; the last one adds a number no call repeats
    calls = [[_start_row(c % 2, 0)] for c in range(15)] + [[_start_row(1, 0), _start_row(1, 99)]]
    requests = [Record((), 200, ops=tuple(calls[2 * k] + calls[2 * k + 1])) for k in range(8)]
    merged = merge_records(requests, 2)
    assert merged.output_elements == 200                            # not 8 x 200: 4 elements stay >= 1% of 200
    assert provenance_verdict(merged).startswith("4 elements came from the host")   # the whole last call


def test_in_a_window_ops_repeat_only_where_a_whole_call_repeats():
    # one op per bit, each of two digests per position: every op is seen twice over the window, no call is
    bits = [[0, 1], [1, 1], [0, 0], [1, 0], [0, 1], [1, 1], [0, 0], [1, 0]]
    ops = lambda c, b: tuple(("fill_", f"{i}:{v}", 1, c) for i, v in enumerate(b))  # noqa: E731
    distinct = [Record((), 8, ops=ops(0, bits[2 * k]) + ops(1, bits[2 * k + 1])) for k in range(2)]
    assert provenance_verdict(merge_records(distinct, 2)).startswith("8 elements came from the host")
    repeated = [Record((), 8, ops=ops(0, bits[0]) + ops(1, bits[1])) for _ in range(2)]   # a period of 2 calls
    assert provenance_verdict(merge_records(repeated, 2)) is None


def test_a_record_with_host_data_or_tampering_gets_no_window():
    ops = (_start_row(0, 0), _start_row(1, 1))
    assert not ops_only(Record((("e" * 32, 8, "kernel k loaded 8 elements", 0),), 8, ops=ops))
    assert not ops_only(Record((), 8, unhooked=True, ops=ops))
    assert not ops_only(Record((), 8, ops=(_start_row(0, 0), _start_row(1, 0))))   # nothing flags
    assert not ops_only(None)
    assert merge_records([Record((), 8), Record((), 8, overflow=True)], 2).overflow


def test_a_window_that_would_not_fit_before_the_deadline_is_not_run_and_audit_a_stands(monkeypatch):
    import random
    import time
    from types import SimpleNamespace

    from davinci.kernelgym import audit

    asked = []
    monkeypatch.setattr(audit, "_request", lambda *a, **k: asked.append(a) or ({}, [], 0.0, {}))
    job = SimpleNamespace(run_deadline=time.monotonic() + 1.0, prov_seen=set(), prov_codes=set(),
                          evidence=SimpleNamespace(torch_compute=None))
    first = Record((), 8, ops=(_start_row(0, 0), _start_row(1, 1)))
    assert not audit._more_calls(job, ["t0", "t1"], random.Random(0), None, first, wall_s=0.2)  # 7 x 0.2 x 2 > 1 s
    assert asked == []
    job.run_deadline = time.monotonic() + 60.0                       # fits, but the first request fails
    assert not audit._more_calls(job, ["t0", "t1"], random.Random(0), None, first, wall_s=0.2)
    assert len(asked) == 1 and "failed" in job.evidence.torch_compute


def _accounting_job(first: Record, seconds: float = 60.0):
    import time
    from types import SimpleNamespace

    return SimpleNamespace(last_record=first, prov_seen=set(), prov_codes=set(),
                           run_deadline=time.monotonic() + seconds)


def _scripted_calls(monkeypatch, records: list) -> list[str]:
    """hostdata._other_inputs answering from `records` in turn ((record, answered) each); returns the labels asked."""
    from davinci.kernelgym import hostdata

    asked: list[str] = []
    replies = iter(records)
    monkeypatch.setattr(hostdata, "_other_inputs", lambda job, label="provenance": asked.append(label) or next(replies))
    return asked


def _split(call: int, sizes: str) -> tuple[str, str, int, int]:
    """A `split_with_sizes` op whose sizes Python decided: (op, digest, weight 8, call)."""
    return ("split_with_sizes", sizes, 8, call)


def test_the_accounting_calls_judge_glue_numbers_before_timing(monkeypatch):
    # split sizes from the data: the second call on other inputs has other sizes, so both calls' ops count
    from davinci.kernelgym.hostdata import accounting_verdict

    # (op digests alone flag, so the window asks for more calls, up to 16 in all: no call ever repeats)
    asked = _scripted_calls(monkeypatch, [(Record((), 8, ops=(_split(1, f"sizes-{k}"),)), True) for k in range(1, 16)])
    verdict = accounting_verdict(_accounting_job(Record((), 8, ops=(_split(1, "sizes-0"),))))
    assert verdict.startswith("128 elements came from the host") and len(asked) == 15   # 16 calls x 8
    # the same sizes on other inputs (shapes, not data): one more call, and nothing counts
    asked = _scripted_calls(monkeypatch, [(Record((), 8, ops=(_split(1, "sizes-a"),)), True)])
    assert accounting_verdict(_accounting_job(Record((), 8, ops=(_split(1, "sizes-a"),)))) is None
    assert asked == ["provenance"]
    # a record the candidate unhooked is the verdict at once: no call on other inputs
    asked = _scripted_calls(monkeypatch, [])
    assert accounting_verdict(_accounting_job(Record((), 8, unhooked=True))).startswith("the provenance record was unhooked")
    assert asked == []
    # a first call that does not flag asks for none
    asked = _scripted_calls(monkeypatch, [])
    assert accounting_verdict(_accounting_job(Record((), 1000, ops=(_split(1, "sizes-a"),)))) is None  # 8 < 1% of 1000
    assert asked == []


def test_a_rotating_state_clears_over_more_accounting_calls_and_a_wrong_answer_does_not(monkeypatch):
    from davinci.kernelgym.hostdata import accounting_verdict

    rows = [Record((), 8, ops=(_start_row(1, k % 3),)) for k in range(1, 6)]   # a start row rotating over 3 rows
    asked = _scripted_calls(monkeypatch, [(r, True) for r in rows])
    assert accounting_verdict(_accounting_job(Record((), 8, ops=(_start_row(1, 0),)))) is None
    assert asked == ["provenance", *(f"provenance{k}" for k in range(1, 5))]   # 0, 1, 2, 0, 1, 2: each call twice
    asked = _scripted_calls(monkeypatch, [(rows[0], False)])
    assert "answer was wrong" in accounting_verdict(_accounting_job(Record((), 8, ops=(_start_row(1, 0),))))
    # no time left for a window: the two calls' verdict stands
    asked = _scripted_calls(monkeypatch, [(r, True) for r in rows])
    assert accounting_verdict(_accounting_job(Record((), 8, ops=(_start_row(1, 0),)), seconds=0.0)) is not None
    assert asked == ["provenance"]


def test_a_grid_and_a_constexpr_are_read_as_numbers_without_running_candidate_code():
    """The numbers a launch's grid carries (cheats_v2/c2_fb_rt6_grid_channel_hinge) and the value inside a
    `tl.constexpr` global (c2_fb_rt6_constexpr_global_hinge), as the launch events and code digests read them."""
    from davinci.kernelgym.launchdata import grid_numbers as _grid_numbers, plain as _plain

    word, calls = 7, []

    def grid(meta, extra=3):
        calls.append(meta)  # the candidate's code: never run by the record
        return (word + extra,)

    assert _grid_numbers((4, 1)) == [4, 1]
    assert sorted(_grid_numbers(grid)) == [3, 7] and calls == []
    tl = __import__("pytest").importorskip("triton.language")
    assert _plain(tl.constexpr(0.25)) == "float:0.25" and _plain((1, tl.constexpr(2))) == ("int:1", "int:2")
    assert _plain(object()) == "object"  # no address in a digest


def test_a_number_is_digested_by_its_value_whatever_its_class_says():
    """A float subclass whose repr always says "0.0" carried NumPy's answer (cheats_v2/c2_fb_rt8_float_repr_arg_hinge):
    the digest reads the built-in type's own repr; a string, a NumPy scalar and containers likewise."""
    import numpy as np

    from davinci.kernelgym.launchdata import canonical

    class Liar(float):
        def __repr__(self) -> str:
            return "0.0"

    assert repr(Liar(0.75)) == "0.0" and canonical(Liar(0.75)) == "float:0.75" != canonical(Liar(0.5))
    assert canonical((1, "a", None)) == ("int:1", "str:'a'", "None")
    assert canonical(np.float32(0.5)) != canonical(np.float32(0.25))
    assert canonical(object()) == "<builtins.object>"  # no address
