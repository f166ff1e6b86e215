"""Dispatcher-level accounting of the work a candidate's forward does through PyTorch, with poisoning.

One forward of the candidate runs under `PoisonMode`, a TorchDispatchMode: every aten op reached during
the call is seen here, however the candidate reached it (`torch.relu`, `getattr(torch, "re" + "lu")`,
`torch.ops.aten.relu.default`, code decoded and compiled at run time, a C++ extension calling aten). Ops
of PyTorch's own namespaces that only allocate, move or re-view data (`GLUE`, plus every view op) pass
through untouched; a custom op (another namespace) is judged by what ran inside it, not by its name: one
during which the candidate's Triton kernels launched is its own work, one that launched none is compute;
every compute op that produces a tensor of at least `MIN_POISON_NUMEL` elements has its result overwritten
with NaN. The
reference worker then compares that forward's output with the reference. The mode also sums the work of
every compute op (`op_work`: FLOPs where PyTorch has a formula, else the elements touched), however small,
against the reference forward's work counted the same way (`torch_work`, in the reference worker), and
`torch_verdict` decides: an answer that changed under poison, or PyTorch doing most of the work
(SHARE_MOST) even where nothing was poisoned, is `torch_compute` (a "fallback" behind a token kernel, a
kernel launched on the first call only, answers assembled from pieces too small to poison). No name in the
candidate's source is read.
Work out of the mode's sight: `torch._C._DisableTorchDispatch`, or the body of a custom op (the mode is popped
while it handles one, and one that launched the candidate's kernels is its own work), hides aten ops from the
mode. `accounted` runs the CPU profiler beside it (CPU activity only: no CUPTI, nothing on the device), which
records every op at the dispatcher's entry; `hidden_work` adds each top-level aten compute op the mode did not
handle to PyTorch's work, named in the verdict (the red team's c2_fb_disable_dispatch_launder and
c2_fb_custom_op_token_kernel, on a GPU too). In-process, as every check of the candidate's own process is: a
thread of its own still hides PyTorch work from both (the profiler records the threads it was started on; the
red team's rt2_02); on the CPU the store record (`kernel_share`) still sees an output its kernels did not
write, unless a copy kernel launders it.

The forward runs after timing (a later call than any the candidate saw before), on fresh inputs. Honest
glue (allocation, `view`, `contiguous`, `cat`, `copy_`, dtype casts) is untouched, and so is small work
(scalars, per-row statistics of fewer than MIN_POISON_NUMEL elements).

    mode = PoisonMode()
    with accounted(mode) as hidden:
        out = model(*inputs)
    mode.poisoned   # [(op name, numel), ...] of the results that were overwritten
    mode.work + hidden.work   # PyTorch's work, seen by the mode or not; hidden.names: the unseen ops
"""

from __future__ import annotations

import math
import time
from contextlib import contextmanager
from functools import lru_cache
from typing import Any, Iterator

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_map

# Ops that allocate, fill with a constant, copy or move values without computing new ones.
GLUE = frozenset({
    "empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "zeros", "zeros_like", "new_zeros",
    "ones", "ones_like", "new_ones", "full", "full_like", "new_full", "fill", "fill_", "zero_", "copy", "copy_",
    "_to_copy", "to", "clone", "contiguous", "cat", "stack", "split", "split_with_sizes", "chunk", "unbind",
    "narrow", "detach", "detach_", "alias", "lift_fresh", "lift_fresh_copy", "resize_", "set_", "_reshape_alias",
    "as_strided", "as_strided_", "expand", "expand_copy", "permute", "transpose", "t", "view", "reshape",
    "_unsafe_view", "squeeze", "unsqueeze", "flatten", "unflatten", "select", "slice", "index_select",
    "constant_pad_nd", "arange", "scalar_tensor", "_local_scalar_dense", "item", "is_nonzero", "equal",
    "record_stream", "_copy_from", "_copy_from_and_resize", "pin_memory", "_pin_memory", "masked_fill_",
    "randn", "rand", "normal_", "uniform_", "random_", "randint",
})
MIN_POISON_NUMEL = 16
# Glue that allocates or fills: its result holds none of its arguments' values (`PoisonMode._derive`).
FRESH = frozenset({
    "empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "zeros", "zeros_like", "new_zeros",
    "ones", "ones_like", "new_ones", "full", "full_like", "new_full", "fill", "fill_", "zero_", "arange",
    "scalar_tensor", "randn", "rand", "normal_", "uniform_", "random_", "randint", "resize_", "set_",
})


NATIVE = ("aten", "prims")  # PyTorch's own op namespaces: classified by name (GLUE); any other is a custom op


def _base_name(func: Any) -> str:
    """aten.relu.default -> "relu" (the overload packet's name, namespace dropped)."""
    name = getattr(getattr(func, "overloadpacket", None), "__name__", None) or str(func)
    return name.split("::")[-1].split(".")[0]


def is_custom(func: Any) -> bool:
    """An op outside PyTorch's namespaces (`torch.library.custom_op("mylib::clone")`): its name says nothing."""
    return getattr(func, "namespace", "aten") not in NATIVE


def is_compute(func: Any) -> bool:
    """Whether an aten op computes new values (not an allocation, copy, constant fill or view). A custom op is
    never glue by its name ("mylib::clone" is whatever its body does)."""
    if is_custom(func):
        return True
    if getattr(func, "is_view", False):
        return False
    return _base_name(func).rstrip("_") not in GLUE and _base_name(func) not in GLUE


def op_work(func: Any, args: Any, kwargs: Any, out: Any) -> int:
    """The work of one op: its FLOPs where PyTorch has a formula (matmul, conv, attention), else the number
    of elements of its largest tensor argument or result (an elementwise op or a reduction touches that many).
    Used only as a share against the reference's own work counted the same way (`torch_work`)."""
    from torch.utils.flop_counter import flop_registry

    formula = flop_registry.get(getattr(func, "overloadpacket", None))
    if formula is not None:
        try:
            return int(formula(*args, **(kwargs or {}), out_val=out))
        except Exception:
            pass
    sizes = [t.numel() for t in (*args, *((kwargs or {}).values()), *(out if isinstance(out, (tuple, list)) else (out,)))
             if isinstance(t, torch.Tensor)]
    return max(sizes, default=0)


class WorkCounter(TorchDispatchMode):
    """The work (`op_work`) of every compute op of a forward, summed: run in the reference worker on the
    problem's own `Model`, the denominator of the candidate's PyTorch share."""

    def __init__(self) -> None:
        super().__init__()
        self.work = 0

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        if is_compute(func):
            self.work += op_work(func, args, kwargs, out)
        return out


def torch_work(model: Any, inputs: Any) -> int:
    """The reference forward's work, counted like the candidate's PyTorch work (0 when it cannot be counted)."""
    try:
        counter = WorkCounter()
        with counter, torch.no_grad():
            model(*inputs)
        return counter.work
    except Exception:
        return 0


def _extent(t: torch.Tensor) -> tuple[int, int, int]:
    """(start, bytes, element size) of a tensor's storage (a view shares its base's)."""
    storage = t.untyped_storage()
    return storage.data_ptr(), storage.nbytes(), t.element_size()


def _overlaps(extent: tuple[int, int, int], ranges: list[tuple[int, int, int]]) -> bool:
    start, nbytes, _ = extent
    return any(start < s + n and s < start + nbytes for s, n, _ in ranges)


class PoisonMode(TorchDispatchMode):
    """Record every aten op of the forward; overwrite large results of compute ops with NaN (see above).

    `launches` counts the candidate's Triton launches (`guards.LaunchRecorder.count`): a custom op during which
    the candidate's own kernels ran is its kernel wrapped as an op (`torch.library.custom_op`, `triton_op`),
    its work, and is not poisoned; a custom op that launched none computed through PyTorch and is."""

    def __init__(self, launches: Any = None) -> None:
        super().__init__()
        self.ops: dict[str, int] = {}
        self.poisoned: list[tuple[str, int]] = []
        self.wrapped: list[str] = []  # custom ops that ran the candidate's kernels
        self.launches = launches or (lambda: 0)
        self.work = 0  # `op_work` of every compute op PyTorch ran for the candidate, poisoned or not
        self.mark = False  # under `accounted`: each op runs inside a HIDDEN_MARK range the profiler records
        # (start, bytes, element size) of the inputs' storages and of every copy glue made of them (`derive`)
        self.derived: list[tuple[int, int, int]] = []

    def track_inputs(self, values: Any) -> int:
        """Mark the forward's inputs (their storages); returns their element count (tensor inputs)."""
        tensors = [v for v in values if isinstance(v, torch.Tensor)]
        self.derived += [_extent(t) for t in tensors]
        return sum(t.numel() for t in tensors)

    def _derive(self, args: Any, kwargs: Any, out: Any) -> None:
        """A glue op's outputs hold the inputs' values when its tensor arguments do (a copy, a cast, a pad; not an
        allocation like `empty_like(x)`, see FRESH). In place: NumPy writing into such a copy is not seen."""
        from torch.utils._pytree import tree_leaves

        ins = [t for t in tree_leaves((args, kwargs or {})) if isinstance(t, torch.Tensor)]
        if any(_overlaps(_extent(t), self.derived) for t in ins):
            self.derived += [_extent(t) for t in tree_leaves(out) if isinstance(t, torch.Tensor)]

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        before = self.launches()
        if self.mark:
            with torch._C._profiler._RecordFunctionFast(HIDDEN_MARK):
                out = func(*args, **(kwargs or {}))
        else:
            out = func(*args, **(kwargs or {}))
        name = f"{func.namespace}::{_base_name(func)}" if is_custom(func) else _base_name(func)
        self.ops[name] = self.ops.get(name, 0) + 1
        if is_custom(func) and self.launches() > before:
            self.wrapped.append(name)
            return out
        if not is_compute(func):
            if self.derived and _base_name(func) not in FRESH:
                self._derive(args, kwargs, out)
            return out
        self.work += op_work(func, args, kwargs, out)

        def poison(x: Any) -> Any:
            if isinstance(x, torch.Tensor) and x.numel() >= MIN_POISON_NUMEL:
                if x.dtype.is_floating_point or x.dtype.is_complex:
                    x.fill_(float("nan"))
                else:
                    x.fill_(int(torch.iinfo(x.dtype).max) if x.dtype != torch.bool else True)
                self.poisoned.append((name, int(x.numel())))
            return x

        return tree_map(poison, out)


# --- PyTorch work out of the dispatch mode's sight ---------------------------------------------------------
# The mode sees only what reaches its dispatch key: `torch._C._DisableTorchDispatch`, or the body of a custom op
# (the mode is popped while it handles the op, and one that launched the candidate's kernels counts as its own
# work), hide aten ops from it. The CPU profiler records every op at the dispatcher's entry whatever the modes,
# so `accounted` runs it beside the mode (CPU activity only: no CUPTI, nothing on the device's timeline) and each
# op the mode handles runs inside a HIDDEN_MARK range: an aten compute op with no mark at or below it, and not
# inside a compute op the mode handled, ran unseen (`hidden_work`). The body of a custom op the mode handled is
# always looked into: one that launched no kernel of the candidate's is counted twice then (by the mode too),
# which only adds to an op the mode poisoned already.

HIDDEN_MARK = "kernelgym::dispatched"


PROFILED_OP_MS = 0.05  # the CPU profiler's callbacks per recorded event (ms), an upper figure (HiddenWork.overhead_ms)


class HiddenWork:
    """What `accounted` found: (profiler op name, work) of every aten op that computed out of the mode's sight,
    read from the profiler's events on first use (after the forward, so its time is not the forward's).
    `error` says why nothing could be looked at (the profiler did not start, stop, or parse): the hidden work
    is then unknown and counts as none, never as a failed forward (that would be a verdict on the candidate)."""

    def __init__(self) -> None:
        self.profile: Any = None  # the finished torch.profiler.profile, once the block exited normally
        self.error = ""
        self.overhead_s = 0.0     # the profiler's own start, stop and reading (see `overhead_ms`)
        self.events = 0
        self._ops: list[tuple[str, int]] | None = None

    @property
    def ops(self) -> list[tuple[str, int]]:
        if self._ops is None:
            self._ops = []
            if self.profile is not None:
                t0 = time.perf_counter()
                try:
                    events = self.profile.profiler.kineto_results.events()
                    self.events = len(events)
                    self._ops = hidden_work(events)
                except Exception as exc:  # an event layout this torch does not have: unknown, not a verdict
                    self.error = f"the profiler's events could not be read: {exc!r}"[:300]
                self.overhead_s += time.perf_counter() - t0
        return self._ops

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


@contextmanager
def accounted(mode: PoisonMode) -> Iterator[HiddenWork]:
    """Run the block under `mode` and the CPU profiler; on a normal exit the HiddenWork reads `hidden_work`.
    The block's own exceptions pass through; the profiler's set `HiddenWork.error` and nothing else."""
    hidden = HiddenWork()
    t0 = time.perf_counter()
    prof = _start_profiler(hidden)
    hidden.overhead_s += time.perf_counter() - t0
    mode.mark = prof is not None
    try:
        with mode:
            yield hidden
    finally:
        mode.mark = False
        if prof is not None:
            t0 = time.perf_counter()
            try:
                prof.__exit__(None, None, None)
                hidden.profile = prof
            except Exception as exc:
                hidden.error = f"the CPU profiler did not stop: {exc!r}"[:300]
            hidden.overhead_s += time.perf_counter() - t0


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
    base = name.split("::")[-1]
    # glue (allocation, copy, view by name): no new values, as for the mode (GLUE)
    if base in GLUE or base.rstrip("_") in GLUE:
        return False
    overloads = [getattr(packet, o) for o in packet.overloads()]
    # a view op shares its input's values (every overload a view)
    if overloads and all(getattr(o, "is_view", False) for o in overloads):
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
    from torch.utils.flop_counter import flop_registry

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
    formula = flop_registry.get(_packet(op.name))
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


class StoreRecorder:
    """On the CPU (Triton interpreter): the address and value of every element a Triton kernel stores while
    `recording`, so that the output's provenance can be checked afterwards (`kernel_share`).

    The interpreter writes kernel stores through `InterpreterBuilder.create_masked_store`; this wraps that
    method once (before the candidate is imported). An output element counts as the kernels' work when the
    last value a kernel stored at its address is the value it holds when the forward returns: results
    computed by NumPy or Python and written over (or beside) a token kernel's stores do not count.
    """

    def __init__(self) -> None:
        self.recording = False
        self.stores: list[tuple[Any, Any]] = []
        self.loads: list[Any] = []  # addresses the kernels loaded while recording
        self.installed = False

    def install(self) -> bool:
        try:
            from triton.runtime.interpreter import InterpreterBuilder
        except Exception:
            return False
        original, rec = InterpreterBuilder.create_masked_store, self

        def create_masked_store(builder: Any, ptrs: Any, value: Any, mask: Any, cache_policy: Any) -> Any:
            if rec.recording:
                import numpy as np

                keep = np.broadcast_to(mask.data, ptrs.data.shape).astype(bool)
                vals = np.broadcast_to(value.data, ptrs.data.shape)
                rec.stores.append((ptrs.data[keep].astype(np.int64).ravel(), np.array(vals[keep]).ravel()))
            return original(builder, ptrs, value, mask, cache_policy)

        load = InterpreterBuilder.create_masked_load

        def create_masked_load(builder: Any, ptrs: Any, mask: Any, other: Any, cache_policy: Any, is_volatile: Any) -> Any:
            if rec.recording:
                import numpy as np

                keep = np.broadcast_to(mask.data, ptrs.data.shape).astype(bool)
                rec.loads.append(ptrs.data[keep].astype(np.int64).ravel())
            return load(builder, ptrs, mask, other, cache_policy, is_volatile)

        InterpreterBuilder.create_masked_store = create_masked_store
        InterpreterBuilder.create_masked_load = create_masked_load  # every load path of the interpreter ends here
        self.installed = True
        return True

    def start(self) -> None:
        self.stores, self.loads, self.recording = [], [], True

    def input_share(self, ranges: list[tuple[int, int, int]], elements: int) -> float | None:
        """Share of the inputs' `elements` the kernels loaded: distinct loaded element addresses inside `ranges`
        ((start, bytes, element size) of the inputs and of the copies PyTorch's glue made of them), capped at 1.
        A kernel that only copies an answer computed elsewhere (NumPy, PyTorch with the dispatch mode switched
        off, another thread) reads none of them."""
        import numpy as np

        if not elements or not ranges:
            return None
        if not self.loads:
            return 0.0
        addrs = np.unique(np.concatenate(self.loads))
        seen = 0
        for start, nbytes, size in ranges:
            lo, hi = np.searchsorted(addrs, start), np.searchsorted(addrs, start + nbytes)
            inside = addrs[lo:hi]
            seen += int(((inside - start) % max(1, size) == 0).sum())
        return min(1.0, seen / elements)

    def stop(self) -> None:
        self.recording = False

    def kernel_share(self, leaves: list[Any]) -> float | None:
        """Share of the output tensors' elements (by count) whose final value a kernel stored there."""
        import numpy as np

        total, produced = 0, 0
        for leaf in leaves:
            if not isinstance(leaf, torch.Tensor) or leaf.device.type != "cpu" or leaf.numel() == 0:
                continue
            size = leaf.element_size()
            utype = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}.get(size)
            if utype is None:
                continue
            addrs, vals = [], []
            for a, v in self.stores:
                if v.dtype.itemsize == size:
                    addrs.append(a)
                    vals.append(v.view(utype))
            total += leaf.numel()
            if not addrs:
                continue
            a, v = np.concatenate(addrs)[::-1], np.concatenate(vals)[::-1]
            uniq, first = np.unique(a, return_index=True)  # first in reversed order = the last store
            last = v[first]
            offsets = np.indices(tuple(leaf.shape)).reshape(leaf.dim(), -1) if leaf.dim() else np.zeros((0, 1), int)
            strides = np.array(leaf.stride(), dtype=np.int64).reshape(-1, 1)
            out_addrs = leaf.data_ptr() + (offsets * strides).sum(axis=0) * size if leaf.dim() else np.array([leaf.data_ptr()])
            out_vals = leaf.detach().contiguous().reshape(-1).view(torch.uint8).numpy().view(utype)
            idx = np.clip(np.searchsorted(uniq, out_addrs), 0, len(uniq) - 1)
            produced += int(((uniq[idx] == out_addrs) & (last[idx] == out_vals)).sum())
        return produced / total if total else None


# PyTorch's share of the work (the candidate's compute ops against the reference's, `op_work` both): at or above
# SHARE_MOST it did most of the work, whatever the poisoned answer showed (pieces too small to poison). A
# changed answer is `torch_compute` whatever the share: FLOPs and element counts are not one unit, and an
# algorithmically cheaper PyTorch path (a diagonal matmul as a broadcast multiply) would look like a small share.
SHARE_MOST = 0.5


def torch_verdict(changed: str | None, torch_work: float | None, reference_work: float | None,
                  hidden: list[str] | None = None) -> str | None:
    """`torch_compute` evidence or None, from the poisoned forward's outcome (`changed`: why the answer changed or
    the forward failed; None = it still matched) and the two works. `hidden`: names of the ops PyTorch ran out of
    the dispatch mode's sight (`hidden_work`; their work is inside `torch_work`), named in the message.

    >>> torch_verdict("16384 of 16384 elements out of tolerance", 16384, 16384) is not None
    True
    >>> torch_verdict(None, 16384, 16384)  # most of the work, even unpoisoned (pieces too small)
    "PyTorch's own ops did 100% of the reference's work"
    >>> torch_verdict(None, 100, 16384) is None
    True
    """
    if changed:
        return changed
    if reference_work and torch_work is not None and float(torch_work) / float(reference_work) >= SHARE_MOST:
        share = f"PyTorch's own ops did {100 * float(torch_work) / float(reference_work):.0f}% of the reference's work"
        if hidden:
            share += f" (ops run out of the accounting's sight: {', '.join(sorted(set(hidden))[:8])})"
        return share
    return None
