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
mode, and so does a thread the candidate started (the mode is thread-local). `hidden.accounted` runs the CPU
profiler beside the mode, on every thread, and counts the aten compute ops the mode did not handle as
PyTorch's work, named in the verdict (the red team's c2_fb_disable_dispatch_launder,
c2_fb_custom_op_token_kernel and c2_fb_thread_matmul_launder, on a GPU too). In-process, as every check of
the candidate's own process is; on the CPU the store record (`kernel_share`) also sees an output its kernels
did not write, unless a copy kernel launders it.

The forward runs after timing (a later call than any the candidate saw before), on fresh inputs. Honest
glue (allocation, `view`, `contiguous`, `cat`, `copy_`, dtype casts) is untouched, and so is small work
(scalars, per-row statistics of fewer than MIN_POISON_NUMEL elements).

    mode = PoisonMode()
    with hidden.accounted(mode) as hidden:
        out = model(*inputs)
    mode.poisoned   # [(op name, numel), ...] of the results that were overwritten
    mode.work + hidden.work   # PyTorch's work, seen by the mode or not; hidden.names: the unseen ops
"""

from __future__ import annotations

import functools
import inspect
import types
from typing import Any, Mapping, Sequence

import numpy as np  # bound at import, never through sys.modules at call time (see provenance.py)
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves, tree_map

from davinci.kernelgym.provenance import observed_call

# Bound when the harness imports this module, before any candidate code runs: the candidate shares torch.Tensor,
# and a fill_ that writes nothing set on it would hide its PyTorch work from the poison (guards.changed reports it).
_fill = torch.Tensor.fill_


@functools.cache
def flop_table() -> Mapping[Any, Any]:
    """torch's FLOP formula table as the harness first asked for it, read-only: the worker asks when it captures
    what it later checks (guards.capture, before the candidate is imported), so a zero formula the candidate adds
    to torch's shared table is never consulted. Dropping this cache to have torch's table copied again is
    tampering (guards._shared_changed compares the object). Not copied at import: torch.utils.flop_counter
    imports Triton, and importing the evaluator must not fix Triton's mode (TRITON_INTERPRET) for its caller."""
    from torch.utils.flop_counter import flop_registry

    return types.MappingProxyType(dict(flop_registry))

# Ops that allocate, fill with a constant, copy or move values without computing new ones.
GLUE = frozenset({
    "empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "zeros", "zeros_like", "new_zeros",
    "ones", "ones_like", "new_ones", "full", "full_like", "new_full", "fill", "fill_", "zero_", "copy", "copy_",
    "_to_copy", "to", "clone", "contiguous", "cat", "stack", "split", "split_with_sizes", "chunk", "unbind",
    "narrow", "detach", "detach_", "alias", "lift_fresh", "lift_fresh_copy", "resize_", "set_", "_reshape_alias",
    "as_strided", "as_strided_", "expand", "expand_copy", "permute", "transpose", "t", "view", "reshape",
    "_unsafe_view", "squeeze", "unsqueeze", "flatten", "unflatten", "select", "slice",
    "constant_pad_nd", "arange", "scalar_tensor", "_local_scalar_dense", "item", "is_nonzero", "equal",
    "record_stream", "_copy_from", "_copy_from_and_resize", "pin_memory", "_pin_memory",
    "randn", "rand", "normal_", "uniform_", "random_", "randint",
})
# Not glue although they only move values: `masked_fill_` and `index_select` with indices or a mask computed from
# the data compute any elementwise function (a lookup table indexed by the float's bytes, a mask from its sign:
# cheats_v2/c2_fb_glue_lut_relu*), so they are compute ops, counted and poisoned like `where` and `gather`.
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
    formula = flop_table().get(getattr(func, "overloadpacket", None))
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

    def __init__(self, launches: Any = None, track_copies: bool = False) -> None:
        super().__init__()
        self.track_copies = track_copies  # only where the store record reads them (CPU): copies are kept alive
        self.ops: dict[str, int] = {}
        self.poisoned: list[tuple[str, int]] = []
        self.wrapped: list[str] = []  # custom ops that ran the candidate's kernels
        self.launches = launches or (lambda: 0)
        self.work = 0  # `op_work` of every compute op PyTorch ran for the candidate, poisoned or not
        self.mark = False  # under `accounted`: each op runs inside a HIDDEN_MARK range the profiler records
        self.marks = 0  # HIDDEN_MARK ranges opened (the profiler's record must hold no more: hidden.HiddenWork)
        # (start, bytes, element size) of the inputs' storages and of every copy glue made of them (`derive`)
        self.derived: list[tuple[int, int, int]] = []
        # (copy, source) of every bit-exact glue copy (clone, copy_, same-dtype _to_copy, and each slice of a
        # cat / stack): an output that is a copy of the kernels' stores is theirs (`StoreRecorder.kernel_share`),
        # e.g. `buf[:, :n].contiguous()` or `torch.cat([a, b])` of two kernels' buffers
        self.copies: list[tuple[torch.Tensor, torch.Tensor]] = []
        self.provenance: Any = None  # provenance.Provenance on the CPU: what each op reads, vouched for

    def track_inputs(self, values: Any) -> int:
        """Mark the forward's inputs (their storages); returns their element count (tensor inputs)."""
        tensors = [v for v in values if isinstance(v, torch.Tensor)]
        self.derived += [_extent(t) for t in tensors]
        return sum(t.numel() for t in tensors)

    def _derive(self, args: Any, kwargs: Any, out: Any) -> None:
        """A glue op's outputs hold the inputs' values when its tensor arguments do (a copy, a cast, a pad; not an
        allocation like `empty_like(x)`, see FRESH). In place: NumPy writing into such a copy is not seen."""
        ins = [t for t in tree_leaves((args, kwargs or {})) if isinstance(t, torch.Tensor)]
        if any(_overlaps(_extent(t), self.derived) for t in ins):
            self.derived += [_extent(t) for t in tree_leaves(out) if isinstance(t, torch.Tensor)]

    def _note_copy(self, name: str, args: Any, out: Any) -> None:
        if name in ("cat", "stack") and args and isinstance(out, torch.Tensor):
            self._note_pieces(name, args, out)
            return
        src = args[1] if name in ("copy", "copy_") and len(args) > 1 else (args[0] if args else None)
        dst = args[0] if name == "copy_" and args else out  # functional `copy` returns the copy
        if name in ("clone", "copy", "copy_", "_to_copy") and isinstance(src, torch.Tensor) and \
                isinstance(dst, torch.Tensor) and src.shape == dst.shape and src.dtype == dst.dtype:
            self.copies.append((dst, src))

    def _note_pieces(self, name: str, args: Any, out: Any) -> None:
        """`cat` / `stack`: each input is a bit-exact copy of the output's slice along the joined dim."""
        tensors = [t for t in args[0] if isinstance(t, torch.Tensor) and t.numel()]
        dim = (args[1] if len(args) > 1 else 0) % max(1, out.dim())
        offset = 0
        for t in tensors:
            piece = out.select(dim, offset) if name == "stack" else out.narrow(dim, offset, t.shape[dim])
            offset += 1 if name == "stack" else t.shape[dim]
            if piece.shape == t.shape and piece.dtype == t.dtype:
                self.copies.append((piece, t))

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        prov = self.provenance
        if prov is not None:
            prov.before_op(_base_name(func), func, args, kwargs)
        out = self._dispatch(func, args, kwargs)
        if prov is not None:
            prov.after_op(func, args, kwargs, out)  # after poisoning: the op's result as the forward sees it
        return out

    def _run(self, func: Any, args: Any, kwargs: Any) -> Any:
        if is_custom(func) and self.provenance is not None:  # its body runs with this mode popped: observe it
            return observed_call(func, args, kwargs, self.provenance)
        return func(*args, **(kwargs or {}))

    def _dispatch(self, func: Any, args: Any, kwargs: Any) -> Any:
        before = self.launches()
        if self.mark:
            self.marks += 1
            with torch._C._profiler._RecordFunctionFast(HIDDEN_MARK):
                out = self._run(func, args, kwargs)
        else:
            out = self._run(func, args, kwargs)
        name = f"{func.namespace}::{_base_name(func)}" if is_custom(func) else _base_name(func)
        self.ops[name] = self.ops.get(name, 0) + 1
        if is_custom(func) and self.launches() > before:
            self.wrapped.append(name)
            return out
        if not is_compute(func):
            if self.derived and _base_name(func) not in FRESH:
                self._derive(args, kwargs, out)
            if self.track_copies:
                self._note_copy(_base_name(func), args, out)
            return out
        self.work += op_work(func, args, kwargs, out)

        def poison(x: Any) -> Any:
            if isinstance(x, torch.Tensor) and x.numel() >= MIN_POISON_NUMEL:
                if x.dtype.is_floating_point or x.dtype.is_complex:
                    _fill(x, float("nan"))
                else:
                    _fill(x, int(torch.iinfo(x.dtype).max) if x.dtype != torch.bool else True)
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


def plain_load(load: Any) -> Any:
    """`read(builder, ptrs, mask)`: the interpreter's masked load with no `other`, no cache or eviction hints and
    not volatile, whatever its trailing parameters are called in this Triton release."""
    load = inspect.unwrap(load)  # Triton's own method under any recorder's wrapper (a second install)
    names = list(inspect.signature(load).parameters)[1:]  # after the builder
    if names[:2] != ["ptrs", "mask"]:
        raise RuntimeError(f"this Triton's InterpreterBuilder.create_masked_load{tuple(names)} does not start with (ptrs, "
                           "mask): the CPU store record cannot read memory back; install the Triton release torch pins")
    rest = [False if "volatile" in n else None for n in names[2:]]  # the same for every read

    def read(builder: Any, ptrs: Any, mask: Any) -> Any:
        return load(builder, ptrs, mask, *rest)
    return read


# Bytes of addresses and values one record holds at most (a flood of stores past it leaves the shares unknown, at
# the interpreter's cost in the candidate's own timed calls).
RECORD_LIMIT = 1 << 30


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
        self.bytes = 0  # recorded since `start`; past RECORD_LIMIT the record stops and the shares are unknown
        self.overflow = False
        self.load_seq: list[int] = []  # each load's and store's place in one sequence
        self.store_seq: list[int] = []
        self.seq = 0

    def install(self, builder_cls: Any = None) -> bool:
        """Wrap the interpreter's store, load and atomic entry points (of `builder_cls`, default Triton's
        `InterpreterBuilder`). The wrappers name only the leading arguments they read and pass the rest on as
        given, positional or keyword: the trailing ones differ between Triton releases (3.6 has an eviction policy
        that 3.9 dropped) and the interpreter passes some by name (3.9's tensor-descriptor load: `cache_policy=`)."""
        if builder_cls is None:
            try:
                from triton.runtime.interpreter import InterpreterBuilder as builder_cls
            except Exception:
                return False
        original, load, rec = builder_cls.create_masked_store, builder_cls.create_masked_load, self

        def create_masked_store(builder: Any, ptrs: Any, value: Any, mask: Any, *rest: Any, **kw: Any) -> Any:
            if rec.recording:
                keep = np.broadcast_to(mask.data, ptrs.data.shape).astype(bool)
                if rec._room(int(keep.sum()) * 16):  # the lanes recorded, not the masked-off ones
                    vals = np.broadcast_to(value.data, ptrs.data.shape)
                    rec._store(ptrs.data[keep].astype(np.int64).ravel(), np.array(vals[keep]).ravel())
            return original(builder, ptrs, value, mask, *rest, **kw)

        def create_masked_load(builder: Any, ptrs: Any, mask: Any, *rest: Any, **kw: Any) -> Any:
            if rec.recording:
                keep = np.broadcast_to(mask.data, ptrs.data.shape).astype(bool)
                if rec._room(int(keep.sum()) * 8):
                    rec._load(ptrs.data[keep].astype(np.int64).ravel())
            return load(builder, ptrs, mask, *rest, **kw)

        create_masked_store.__wrapped__, create_masked_load.__wrapped__ = original, load  # type: ignore[attr-defined]
        builder_cls.create_masked_store = create_masked_store
        builder_cls.create_masked_load = create_masked_load  # every load path of the interpreter ends here
        self._install_atomics(builder_cls, plain_load(load))
        self.installed = True
        return True

    def _install_atomics(self, builder_cls: Any, read: Any) -> None:
        """Atomic read-modify-writes (`tl.atomic_add`, `atomic_max`, `atomic_cas`, ...) are kernel stores too:
        each is recorded as a load and a store of its addresses, with the value memory holds right after it (read
        back through the interpreter's own load, `read(builder, ptrs, mask)`), since the stored value depends on
        what was there. Split-K reductions into a zeroed output are written this way."""
        rmw, cas, rec = builder_cls.create_atomic_rmw, builder_cls.create_atomic_cas, self

        def record(builder: Any, ptrs: Any, mask: Any) -> None:
            import triton.language as tl
            from triton.runtime.interpreter import TensorHandle

            if mask is None:  # compare-and-swap: every lane
                mask = TensorHandle(np.ones(ptrs.data.shape, dtype=bool), tl.int1)
            keep = np.broadcast_to(mask.data, ptrs.data.shape).astype(bool)
            addrs = ptrs.data[keep].astype(np.int64).ravel()
            if not rec._room(len(addrs) * 24):
                return
            after = read(builder, ptrs, mask)  # the values right after the atomic op
            rec._load(addrs)
            rec._store(addrs, np.array(np.broadcast_to(after.data, ptrs.data.shape)[keep]).ravel())

        def create_atomic_rmw(builder: Any, op: Any, ptr: Any, val: Any, mask: Any, *rest: Any, **kw: Any) -> Any:
            out = rmw(builder, op, ptr, val, mask, *rest, **kw)
            if rec.recording:
                record(builder, ptr, mask)
            return out

        def create_atomic_cas(builder: Any, ptr: Any, *rest: Any, **kw: Any) -> Any:
            out = cas(builder, ptr, *rest, **kw)
            if rec.recording:
                record(builder, ptr, None)
            return out

        builder_cls.create_atomic_rmw, builder_cls.create_atomic_cas = create_atomic_rmw, create_atomic_cas

    def start(self) -> None:
        self.stores, self.loads, self.recording, self.bytes, self.overflow = [], [], True, 0, False
        self.load_seq, self.store_seq, self.seq = [], [], 0

    def clear(self) -> None:
        """Drop what was recorded (memory); the overflow mark stays until the next `start`."""
        self.stores, self.loads, self.load_seq, self.store_seq = [], [], [], []

    def _load(self, addrs: Any) -> None:
        self.loads.append(addrs)
        self.load_seq.append(self.seq)  # the order of loads and stores (provenance.py: reads before any write)
        self.seq += 1

    def _store(self, addrs: Any, vals: Any) -> None:
        self.stores.append((addrs, vals))
        self.store_seq.append(self.seq)
        self.seq += 1

    def _room(self, nbytes: int) -> bool:
        """Whether `nbytes` more fit under RECORD_LIMIT (every scored CPU request records: memory stays bounded)."""
        self.bytes += nbytes
        self.overflow = self.overflow or self.bytes > RECORD_LIMIT
        return not self.overflow

    def input_share(self, ranges: list[tuple[int, int, int]], elements: int) -> float | None:
        """Share of the inputs' `elements` the kernels loaded: distinct loaded element addresses inside `ranges`
        ((start, bytes, element size) of the inputs and of the copies PyTorch's glue made of them), capped at 1.
        A kernel that only copies an answer computed elsewhere (NumPy, PyTorch with the dispatch mode switched
        off, another thread) reads none of them."""

        if not elements or not ranges or self.overflow:
            return None
        ranges = sorted(set(ranges))  # a storage tracked twice (`x.numpy()` detaches: its extent again) counts once
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

    def kernel_share(self, leaves: list[Any], copies: Sequence[tuple[Any, Any]] = ()) -> float | None:
        """Share of the output tensors' elements (by count) whose final value a kernel stored there, or stored
        at the same element of the source of a bit-exact glue copy the output is (`copies`: (copy, source)
        pairs, PoisonMode's): either counts, so a kernel that updates a copy in place (`x.clone()` then an
        in-place kernel) and a glue copy of a kernel's buffer (`buf[:, :n].contiguous()`) are both its work."""

        if self.overflow:  # a partial record would undercount the kernels' stores
            return None
        total, produced = 0, 0
        by_size: dict[int, tuple[Any, Any] | None] = {}  # the last stores of each element size, built once
        for leaf in leaves:
            if not isinstance(leaf, torch.Tensor) or leaf.device.type != "cpu" or leaf.numel() == 0:
                continue
            size = leaf.element_size()
            utype = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}.get(size)
            if utype is None:
                continue
            total += leaf.numel()
            if size not in by_size:
                by_size[size] = self._last_stores(size, utype)
            last = by_size[size]
            if last is None:
                continue
            out_vals = leaf.detach().contiguous().reshape(-1).view(torch.uint8).numpy().view(utype)
            hit = np.zeros(leaf.numel(), dtype=bool)
            for view in _copy_chain(leaf, copies):  # the output itself, then what it was copied from
                hit |= _stored_here(view, out_vals, *last)
            _credit_pieces(leaf, out_vals, hit, copies, last)
            produced += int(hit.sum())
        return produced / total if total else None

    def _last_stores(self, size: int, utype: Any) -> tuple[Any, Any] | None:
        """(sorted unique addresses, the last value stored at each) of the recorded stores of this element size."""

        pairs = [(a, v.view(utype)) for a, v in self.stores if v.dtype.itemsize == size]
        if not pairs:
            return None
        addrs, vals = zip(*pairs)
        a, v = np.concatenate(addrs)[::-1], np.concatenate(vals)[::-1]
        uniq, first = np.unique(a, return_index=True)  # first in reversed order = the last store
        return uniq, v[first]


def _stored_here(view: torch.Tensor, values: Any, uniq: Any, last: Any) -> Any:
    """[N] bool: whether the last value a kernel stored at each element's address in `view` is `values`' value."""

    addrs = _addresses(view)
    idx = np.clip(np.searchsorted(uniq, addrs), 0, len(uniq) - 1)
    return (uniq[idx] == addrs) & (last[idx] == values)


def _addresses(view: torch.Tensor) -> Any:
    """[N] the byte address of each element of `view`, in its logical (row-major) order."""

    if not view.dim():
        return np.array([view.data_ptr()], dtype=np.int64)
    offsets = np.indices(tuple(view.shape)).reshape(view.dim(), -1)
    strides = np.array(view.stride(), dtype=np.int64).reshape(-1, 1)
    return view.data_ptr() + (offsets * strides).sum(axis=0) * view.element_size()


def _credit_pieces(leaf: torch.Tensor, values: Any, hit: Any, copies: Sequence[tuple[Any, Any]], last: Any) -> None:
    """Mark in `hit` [N] the elements of `leaf` that a glue copy into a piece of it (`torch.cat`'s and
    `torch.stack`'s slices) took from an element a kernel stored with the same value."""

    pieces = [(d, src) for d, src in copies if d.numel() < leaf.numel() and d.dtype == leaf.dtype
              and d.untyped_storage().data_ptr() == leaf.untyped_storage().data_ptr()]
    if not pieces:
        return
    addrs = _addresses(leaf)
    order = np.argsort(addrs)
    for d, src in pieces:
        piece = _addresses(d)
        where = order[np.clip(np.searchsorted(addrs, piece, sorter=order), 0, len(order) - 1)]
        inside = addrs[where] == piece  # the piece's elements that are elements of the output
        hit[where[inside]] |= _stored_here(src, values[where], *last)[inside]


def _copy_chain(leaf: torch.Tensor, copies: Sequence[tuple[Any, Any]]) -> list[torch.Tensor]:
    """`leaf`, then the source of the last glue copy that wrote exactly it (same start, shape, strides and dtype),
    and so on back through copies of copies (at most 8: a cycle cannot loop)."""
    chain = [leaf]
    for _ in range(8):
        src = next((s for d, s in reversed(copies) if d.data_ptr() == chain[-1].data_ptr() and d.shape == chain[-1].shape
                    and d.stride() == chain[-1].stride() and d.dtype == chain[-1].dtype), None)
        if src is None:
            break
        chain.append(src)
    return chain


# PyTorch's share of the work (the candidate's compute ops against the reference's, `op_work` both): at or above
# SHARE_MOST it did most of the work, whatever the poisoned answer showed (pieces too small to poison). A
# changed answer is `torch_compute` whatever the share: FLOPs and element counts are not one unit, and an
# algorithmically cheaper PyTorch path (a diagonal matmul as a broadcast multiply) would look like a small share.
SHARE_MOST = 0.5


def torch_verdict(changed: str | None, torch_work: float | None, reference_work: float | None,
                  hidden: list[str] | None = None, tampered: str = "") -> str | None:
    """`torch_compute` evidence or None, from the poisoned forward's outcome (`changed`: why the answer changed or
    the forward failed; None = it still matched) and the two works. `hidden`: names of the ops PyTorch ran out of
    the dispatch mode's sight (`hidden.hidden_work`; their work is inside `torch_work`), named in the message;
    `tampered`: why that record cannot be the whole forward's (the candidate switched the profiler off).

    >>> torch_verdict("16384 of 16384 elements out of tolerance", 16384, 16384) is not None
    True
    >>> torch_verdict(None, 16384, 16384)  # most of the work, even unpoisoned (pieces too small)
    "PyTorch's own ops did 100% of the reference's work"
    >>> torch_verdict(None, 100, 16384) is None
    True
    """
    if tampered:
        return tampered
    if changed:
        return changed
    if reference_work and torch_work is not None and float(torch_work) / float(reference_work) >= SHARE_MOST:
        share = f"PyTorch's own ops did {100 * float(torch_work) / float(reference_work):.0f}% of the reference's work"
        if hidden:
            share += f" (ops run out of the accounting's sight: {', '.join(sorted(set(hidden))[:8])})"
        return share
    return None
