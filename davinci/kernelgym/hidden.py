"""PyTorch work out of the dispatch mode's sight, found by the CPU profiler that runs beside it.

`torch._C._DisableTorchDispatch`, the body of a custom op (the mode is popped while it handles one, and one
that launched the candidate's kernels is its own work), or a thread the candidate started (the mode is
thread-local) hide aten ops from `accounting.PoisonMode`. `accounted` runs the CPU profiler beside the mode,
on every thread (CPU activity only: no CUPTI, nothing on the device); the mode puts each op it handles in a
`HIDDEN_MARK` range, and `hidden_work` reads the profiler's raw events back into per-thread call trees and
counts each aten compute op with no mark at or below it as PyTorch's work (`op_work`'s units), named in the
`torch_compute` verdict. The profiler failing to start, stop or be read costs this evidence only
(`HiddenWork.error`), never the forward. Its own cost is reported (`HiddenWork.overhead_ms`) so the audit
round can take it off the wall it compares.

    mode = PoisonMode()
    with accounted(mode) as hidden:
        out = model(*inputs)
    mode.work + hidden.work   # PyTorch's work, seen by the mode or not; hidden.names: the unseen ops
"""

from __future__ import annotations

import math
from contextlib import contextmanager
from functools import lru_cache
# bound when the harness imports this module, before a candidate can rebind time.perf_counter
from time import perf_counter as _clock
from typing import Any, Iterator

import torch

from davinci.kernelgym.accounting import HIDDEN_MARK, PoisonMode, flop_table, is_compute

START_MARK, END_MARK = "kernelgym::accounting_start", "kernelgym::accounting_end"
PROFILED_OP_MS = 0.05  # the CPU profiler's callbacks per recorded event (ms), an upper figure (HiddenWork.overhead_ms)


class HiddenWork:
    """What `accounted` found: (profiler op name, work) of every aten op that computed out of the mode's sight,
    read from the profiler's events on first use (after the forward, so its time is not the forward's).
    `error` says why nothing could be looked at (the profiler did not start, stop, or parse): the hidden work
    is then unknown and counts as none, never as a failed forward (that would be a verdict on the candidate)."""

    def __init__(self) -> None:
        self.profile: Any = None  # the finished torch.profiler.profile, once the block exited normally
        self.error = ""
        self._tampered = ""       # our start or end mark missing from the events: switched off from inside
        self.overhead_s = 0.0     # the profiler's own start, stop and reading (see `overhead_ms`)
        self.events = 0
        self.marks_opened: int | None = None  # HIDDEN_MARK ranges the mode opened (None: not known)
        self._ops: list[tuple[str, int]] | None = None

    @property
    def ops(self) -> list[tuple[str, int]]:
        if self._ops is None:
            self._ops = []
            if self.profile is not None:
                t0 = _clock()
                try:
                    events = self.profile.profiler.kineto_results.events()
                    self.events = len(events)
                    self._ops = hidden_work(events)
                    names = [e.name() for e in events]
                    if not {START_MARK, END_MARK} <= set(names):
                        self._tampered = ("the CPU profiler beside the accounting was switched off or replaced "
                                          "during the forward (its start or end mark is missing)")
                    self._tampered = self._tampered or forged_marks(names, self.marks_opened)
                except Exception as exc:  # an event layout this torch does not have: unknown, not a verdict
                    self.error = f"the profiler's events could not be read: {exc!r}"[:300]
                self.overhead_s += _clock() - t0
        return self._ops

    @property
    def tampered(self) -> str:
        """Why the profiler's record cannot be the whole forward's, or "" (see `accounted`)."""
        _ = self.ops
        return self._tampered

    @property
    def overhead_ms(self) -> float:
        """What the profiler added to the block's wall time: its start, stop and reading, measured, plus
        PROFILED_OP_MS for each event it recorded (its callbacks around every op; about 40 us an op on a
        loaded 2-core box). The audit round subtracts it from the wall it compares (audit.py)."""
        _ = self.ops
        return 1e3 * self.overhead_s + PROFILED_OP_MS * self.events

    @property
    def work(self) -> int:
        return sum(w for _, w in self.ops)

    @property
    def names(self) -> list[str]:
        return [n for n, _ in self.ops]

    def evidence(self) -> dict[str, Any]:
        """The reply fields the supervisor reads (job.hidden_evidence): the unseen ops, why none could be seen,
        and why the record cannot be the whole block's."""
        return {"torch_hidden": self.names[:16], "torch_hidden_error": self.error, "torch_hidden_tampered": self.tampered}


@contextmanager
def accounted(mode: PoisonMode) -> Iterator[HiddenWork]:
    """Run the block under `mode` and the CPU profiler; on a normal exit the HiddenWork reads `hidden_work`.
    The block's own exceptions pass through; the profiler's set `HiddenWork.error` and nothing else."""
    hidden = HiddenWork()
    t0 = _clock()
    prof = _start_profiler(hidden)
    if prof is not None:
        with torch.profiler.record_function(START_MARK):
            pass
    hidden.overhead_s += _clock() - t0
    mode.mark = prof is not None
    try:
        with mode:
            yield hidden
    finally:
        mode.mark = False
        hidden.marks_opened = mode.marks
        if prof is not None:
            t0 = _clock()
            # A mark at both ends: a profiler switched off from inside the block (torch.autograd._disable_profiler,
            # a profiler of its own closed inside ours) or replaced by a session of its own loses one of them
            # (`HiddenWork.tampered`), and with it whatever ran out of sight meanwhile.
            with torch.profiler.record_function(END_MARK):
                pass
            try:
                prof.__exit__(None, None, None)
                hidden.profile = prof
            except Exception as exc:  # it started: one that cannot stop was most likely stopped from inside
                hidden.error = f"the CPU profiler did not stop: {exc!r}"[:300]
                hidden._tampered = "the CPU profiler beside the accounting could not be stopped (stopped from inside?)"
            hidden.overhead_s += _clock() - t0


def forged_marks(names: list[str], opened: int | None) -> str:
    """Why the record's HIDDEN_MARK ranges (among the events' `names`) cannot all be the mode's, or "": it holds
    more than the mode opened.
    A range of that name opened from the candidate's code (a dispatch mode of its own above ours, running the
    op out of our sight inside it) would make PyTorch's work look handled. (Fewer is no evidence: a profiler
    may drop events.)"""
    if opened is None:
        return ""
    found = names.count(HIDDEN_MARK)
    return (f"the accounting's marks were forged: the profiler recorded {found} where the accounting opened "
            f"{opened} (a range under its name opened from inside the forward)") if found > opened else ""


def _start_profiler(hidden: HiddenWork) -> Any:
    """A started CPU profiler (every thread where it can, input shapes), or None with `hidden.error` saying
    why not. Without privileges the all-threads option failed to start ("Invalid argument", the CPU
    evaluator of tests/kernelgym/test_isolation.py): the calling thread's ops are still worth recording."""
    from torch.profiler import ProfilerActivity, profile

    errors = []
    for config in dict.fromkeys((_all_threads(), None)):
        try:
            prof = profile(activities=[ProfilerActivity.CPU], record_shapes=True, experimental_config=config)
            prof.__enter__()
            hidden.error = "; ".join(errors)  # a fallback that started still says what it lacks
            return prof
        except Exception as exc:
            errors.append(f"the CPU profiler did not start{' on every thread' if config else ''}: {exc!r}"[:200])
    hidden.error = "; ".join(errors)
    return None


def _all_threads() -> Any:
    """The profiler's config to record every thread's ops, not only the calling thread's: the dispatch mode is
    thread-local, so work handed to a thread the candidate started (at import, before any of this) would
    otherwise be seen by neither. None where this torch lacks the option (then those ops stay unseen)."""
    from torch._C._profiler import _ExperimentalConfig

    try:
        return _ExperimentalConfig(profile_all_threads=True)
    except TypeError:
        return None


@lru_cache(maxsize=None)
def _packet(name: str) -> Any:
    """"aten::relu" -> torch.ops.aten.relu (None for a name that is not an aten op)."""
    namespace, _, base = name.partition("::")
    if namespace != "aten" or not base:
        return None
    try:
        return getattr(torch.ops.aten, base)
    except (AttributeError, RuntimeError):
        return None


@lru_cache(maxsize=None)
def _computes(name: str) -> bool:
    """Whether a profiler aten op name is compute, judged as `is_compute` judges the mode's ops."""
    packet = _packet(name)
    if packet is None:
        return False  # not an aten op (a range, a custom op): its aten ops below it are judged themselves
    overloads = [getattr(packet, o) for o in packet.overloads()]
    # glue (allocation, copy, view by name) or a view op (every overload a view): no new values, as for the mode
    if overloads and not any(is_compute(o) for o in overloads):
        return False
    # metadata queries (size, result_type, is_nonzero, ...): no overload returns a tensor, so no tensor values
    return any("Tensor" in str(r.type) for o in overloads for r in o._schema.returns)


class _Op:
    """One profiler event as a node of its thread's call tree (built by `_tree`; kineto's raw events carry
    no parent links, and FunctionEvent trees cost ten times more to build)."""

    __slots__ = ("name", "start", "end", "event", "parent", "children", "marked", "handled")

    def __init__(self, event: Any) -> None:
        self.name: str = event.name()
        self.start, self.end = event.start_ns(), event.start_ns() + max(0, event.duration_ns())
        self.event = event
        self.parent: _Op | None = None
        self.children: list[_Op] = []
        self.marked = False  # a HIDDEN_MARK range in its subtree: the mode handled it or an op below it
        self.handled = False  # the mode handled this very call (`_mark`)


def _tree(events: Any) -> list[_Op]:
    """The roots of every thread's call tree of `_Op`s, nested by time (an event inside another's span is its
    child), with `marked` and `handled` set."""
    by_thread: dict[int, list[_Op]] = {}
    for e in events:
        by_thread.setdefault(e.start_thread_id(), []).append(_Op(e))
    roots: list[_Op] = []
    for nodes in by_thread.values():
        nodes.sort(key=lambda n: (n.start, -n.end))
        stack: list[_Op] = []
        for n in nodes:
            while stack and not (stack[-1].start <= n.start and n.end <= stack[-1].end):
                stack.pop()
            if stack:
                n.parent = stack[-1]
                n.parent.children.append(n)
            else:
                roots.append(n)
            stack.append(n)
            if n.name == HIDDEN_MARK:
                _mark(n)
    return roots


def _mark(mark: _Op) -> None:
    """A HIDDEN_MARK range: its nearest enclosing op (past PyTorch's own "PythonDispatchMode" range, whose name
    has no namespace) is the call the mode handled, and every enclosing op saw the mode inside it."""
    up = mark.parent
    while up is not None and "::" not in up.name:
        up = up.parent
    if up is not None:
        up.handled = True
    up = mark.parent
    while up is not None and not up.marked:
        up.marked, up = True, up.parent


def _aten_children(op: _Op) -> list[_Op]:
    """The nearest aten ops below `op` (through ranges and custom ops)."""
    found, stack = [], list(op.children)
    while stack:
        c = stack.pop()
        if c.name.startswith("aten::"):
            found.append(c)
        else:
            stack += c.children
    return found


def _shape_work(op: _Op) -> int:
    """`op_work` from the recorded input shapes: FLOPs where PyTorch has a formula, else the largest input's
    element count (the output is not recorded; an elementwise op or a reduction reads that many).

    Only the leading tensor arguments go to the formula: the profiler records a scalar (addmm's beta and
    alpha) as an empty shape, which the formulas would take for a tensor and fail on. Convolution's formula
    needs the output shape, which is not recorded: its FLOPs are taken as if the output kept the input's
    spatial size (stride 1, same padding; an upper estimate for a strided one)."""
    shapes = [tuple(s) if isinstance(s, list) and all(isinstance(d, int) for d in s) else s
              for s in (op.event.shapes() or [])]
    dtypes = list(op.event.dtypes() or []) + [""] * len(shapes)
    tensors = []
    for shape, dtype in zip(shapes, dtypes):
        if not isinstance(shape, tuple) or dtype in ("Scalar", ""):
            break  # the first non-tensor argument ends the positional tensors
        tensors.append(shape)
    base = op.name.split("::")[-1]
    if "conv" in base and len(tensors) >= 2 and len(tensors[0]) >= 3 and len(tensors[1]) >= 3:
        x, w = tensors[0], tensors[1]
        return 2 * math.prod(x) // max(1, x[1]) * math.prod(w)  # out elements ~ N*Cout*spatial, each Cin/g*k MACs
    formula = flop_table().get(_packet(op.name))
    if formula is not None and tensors:
        try:
            flops = int(formula(*tensors, out_val=None))
            if flops > 0:
                return flops
        except Exception:
            pass  # a formula that needs arguments the profiler did not keep
    return max((math.prod(s) for s in shapes if isinstance(s, tuple)), default=0)


def _op_work(op: _Op) -> int:
    """Work of a hidden op: the sum of its compute sub-ops' (`linear` is its `addmm`), else its own."""
    inner = [c for c in _aten_children(op) if _computes(c.name)]
    if inner:
        return sum(_op_work(c) for c in inner)
    return _shape_work(op)


def hidden_work(events: Any) -> list[tuple[str, int]]:
    """(name, work) of each aten compute op among the profiler's raw `events` (kineto's) that the mode neither
    handled nor saw inside (see `_unseen`)."""
    found: list[tuple[str, int]] = []
    stack = _tree(events)
    while stack:
        op = stack.pop()
        if _unseen(op):
            work = _op_work(op)
            if work > 0:
                found.append((op.name, work))
        elif not (op.handled and _computes(op.name)):
            stack += op.children
        # (a compute op the mode handled: its work and everything below it are counted there already)
    return found


def _unseen(op: _Op) -> bool:
    """Whether `op` is an aten compute op with no op the mode handled at or below it. Anything else is looked
    into: a range or a custom op (its body, which the mode does not see), a glue op (the mode neither poisons
    nor counts it, so what its implementation computed is not counted either: a tensor subclass's
    `__torch_dispatch__` under `clone`), a composite op (`linear`, whose `addmm` the mode handled)."""
    return op.name.startswith("aten::") and not op.marked and _computes(op.name)
