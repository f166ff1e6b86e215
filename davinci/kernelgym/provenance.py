"""Value provenance on the CPU: every byte the candidate's kernels or PyTorch's ops read must hold what an observed
writer put there, or be data that does not change with the inputs.

The CPU store record (`accounting.StoreRecorder`) says which output elements a kernel stored and which input
addresses it loaded, but not where the loaded values came from: NumPy (or Python, or ctypes) can compute the
answer into a scratch buffer, or in place into a copy of the input, or into the output after the kernels ran,
and a copy kernel (or any kernel that loads the inputs for show) makes the stores and loads look like the work
(cheats_v2/c2_fb_numpy_*, c2_fb_half_numpy_split, c2_hp_forge_store_record, c2_fb_rt_*). Those writers are
invisible to the dispatch mode and to the store record alike; what they cannot avoid is changing memory that
something observed wrote last, or handing the kernels memory that nothing observed wrote at all.

So during the accounting forward (`worker.Harness.op_run`) and audit A (`worker.Harness._audit`, fresh inputs),
`Provenance` keeps a keyed digest of every storage (an extent) whose content the evaluator can vouch for:
  - the state at the forward's start: its inputs, then every tensor or NumPy array reachable from the model and
    from the candidate module's globals (caches built by earlier calls included);
  - what every aten op the dispatch mode handles wrote (after poisoning): its results, its in-place and out=
    arguments; a custom op's body is observed too (`observed_call`), so its results are what the body's writers
    left; ops that change metadata only (`resize_`, `set_`, in-place views) vouch for nothing;
  - every storage a Triton launch was passed, right after the launch (the kernel's stores are its work).
Extents hold their storages alive for the record's life, so freed memory is never reused out of sight, and what
an allocation (`empty`) hands out is overwritten with all-ones bytes (NaN, -1) first: memory NumPy freed may hold
the answer, and no honest kernel reads what it did not write. What counts, each time with a digest of the data
itself (`events`):
  - a recorded extent under a tensor an op reads, under a launch's argument (however small the argument), or
    under memory a launch loaded (pointer arithmetic past its arguments), whose digest changed: a write nobody
    observed;
  - bytes read, or loaded by a kernel, that lie under no recorded extent: data of unknown origin
    (`torch.from_numpy` of NumPy's answer, `torch.tensor` of a Python list); an argument's bytes of unknown origin
    stay unknown after a launch unless the kernel stored every one of them;
  - an argument's memory after a launch that is not its memory before with the kernel's recorded stores applied
    (Python or NumPy run from inside the interpreted kernel; `frontend.py` refuses such kernels first);
  - each value read into Python (`item()`), each number a fill writes (`fill_`, `full`), and each float argument
    of a launch, inside tuples too and under any keyword that names a kernel parameter (in audit A, whose calls
    each have their own inputs, and in the accounting calls, compared with each other, each integer argument too,
    and where each tensor argument points within its storage: sizes, strides and offsets are the same in every
    call);
  - the returned output, checked the same way.
The digest of unknown data covers every argument storage the loads fell in, whole; loads past every argument, and
events past the cap, get digests nothing shares. The record also keeps a digest of each launched kernel's code and
compile-time constants (`codes`): a kernel generated per call with the data baked in differs on other inputs
(`hostdata.code_verdict`).
`hostdata.provenance_verdict` counts the events whose data is not the same on other inputs (`hostdata.accounting_verdict`
runs the accounting call again on other inputs when the first record would flag, its ops and integer arguments
included, and judges the calls as one record; audit A compares with what the accounting calls saw, and across its
own calls): a table or a float constant built per call is not host compute; data that changes with the inputs is,
from one element and 1% of the output up.

Choices:
  - a digest, not a copy: memory stays bounded. Keyed BLAKE2b (one key per worker process, so records compare),
    so content that keeps a linear checksum (CRC) equal cannot pass; the key, like every in-process record,
    lives in the candidate's process (a forger that vouches for its own scratch: cheats_open/c3_f2);
  - views read nothing and are skipped; allocations and fills do not read their arguments; unknown bytes count
    only where they are read (a fresh buffer allocated out of sight and only stored into is fine);
  - aten ops run by the Triton interpreter inside a launch (its argument wrapping and copy-back) are its own,
    not the candidate's, and so are the harness's input fills (`paused`; the filled inputs are vouched for);
  - one-element storages (Python scalars wrapped as tensors) are not checked.

    prov = Provenance(stores, key)   # the StoreRecorder: its loads and stores, in order
    prov.snapshot([inputs, model, module_globals])
    ... PoisonMode(provenance=prov) and LaunchRecorder.provenance = prov during the forward ...
    prov.check_output(leaves)
    prov.events                      # [(digest of the data, elements, what)]
"""

from __future__ import annotations

import ctypes
import os
import sys
import types
from collections import deque
from contextlib import contextmanager
from hashlib import blake2b as _blake2b  # bound when the harness imports this, before any candidate code runs
# bound when the harness imports this module, before a candidate can rebind time.perf_counter
from time import perf_counter as _clock
from typing import Any, Iterable, Iterator

# NumPy and every other module the record uses are bound here, at import: an import at call time goes through
# sys.modules, which the candidate can swap for the length of a launch (cheats_v2/c2_fb_rt15_lazy_import_numpy_relu)
import numpy as np
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from davinci.kernelgym.launchdata import (LAUNCH_OPTIONS, canonical, code_digest, grid_numbers, kernel_name,
                                          kernel_params, numbers as numbers_in, resolved_grid)

MIN_ELEMENTS = 1  # a one-element storage counts too (a wrapped Python scalar: a number from Python, as a fill's)
# host_compute once the unexplained data that changes with the inputs reaches this share of the output's elements
UNEXPLAINED_SHARE = 0.01
_WALK_LIMIT = 50000  # objects visited by the snapshot walk at most (numbers and strings are not visited)
_WALK_DEPTH = 6
MAX_EVENTS = 512  # unexplained reads recorded one by one (each with its content's digest) at most
MAX_OPS = 512  # distinct (op, numbers and views) entries per call at most (`Provenance._op_shape`)


class _Extent:
    """A vouched-for storage: [start, start + nbytes), its element size and digest; `keep` holds the storage alive
    for the record's life (its memory cannot be freed and reused by an allocation nobody observed)."""
    __slots__ = ("start", "nbytes", "size", "digest", "keep")

    def __init__(self, start: int, nbytes: int, size: int, digest: bytes, keep: Any) -> None:
        self.start, self.nbytes, self.size, self.digest, self.keep = start, nbytes, size, digest, keep

    @property
    def end(self) -> int:
        return self.start + self.nbytes


def _storage(t: torch.Tensor) -> tuple[int, int, int] | None:
    """(start, bytes, element size) of a CPU tensor's storage; None for other devices or empty storages."""
    if t.device.type != "cpu":
        return None
    try:
        s = t.untyped_storage()
        start, nbytes = s.data_ptr(), s.nbytes()
    except Exception:  # a tensor subclass or a meta tensor without storage
        return None
    return (start, nbytes, t.element_size()) if start and nbytes else None


def _array(a: Any) -> tuple[int, int, int] | None:
    """(start, bytes, element size) of a NumPy array's memory."""
    try:
        start = a.__array_interface__["data"][0]
        return (start, int(a.nbytes), int(a.itemsize)) if start and a.nbytes else None
    except Exception:
        return None


def _read(start: int, nbytes: int) -> Any:
    """[nbytes] uint8: a copy of the memory at `start`."""

    return np.frombuffer((ctypes.c_char * nbytes).from_address(start), dtype=np.uint8).copy()


def tensors_in(value: Any, depth: int = 0) -> list[torch.Tensor]:
    """The tensors of a launch's or an op's arguments: tensors, inside tuples, lists and dicts, and a tensor
    descriptor's `base`."""
    if isinstance(value, torch.Tensor):
        return [value]
    if depth > 3:
        return []
    if isinstance(value, (tuple, list)):
        return [t for v in value for t in tensors_in(v, depth + 1)]
    if isinstance(value, dict):
        return [t for v in value.values() for t in tensors_in(v, depth + 1)]
    base = getattr(value, "base", None)
    return [base] if isinstance(base, torch.Tensor) else []


class Provenance:
    """Digests of the storages whose content is vouched for, and what was read or returned without one."""

    def __init__(self, stores: Any = None, key: bytes | None = None, int_args: bool = False) -> None:
        self.key = key or os.urandom(16)
        self.stores = stores  # accounting.StoreRecorder: the kernels' loads and stores, in order (CPU)
        self.known: dict[int, _Extent] = {}
        self.unexplained = 0  # elements read or returned that no observed writer explains
        self.where: list[str] = []
        self.events: list[tuple[bytes, int, str, int]] = []  # (digest of the data, elements, what, call) each
        self.codes: set[bytes] = set()  # digests of the launched kernels' code and compile-time constants
        self.call = 0  # which forward call of the record (audit A times several, each on its own inputs)
        self.int_args = int_args  # integer launch arguments count too (in a record of several calls)
        # with int_args: each op's numbers and argument views, per call (`_op_shape`): {(call, name, digest): (weight,
        # times run)}
        self.ops: dict[tuple[int, str, bytes], tuple[int, int]] = {}
        self._op_count: dict[int, int] = {}  # distinct entries per call
        self._rest: dict[tuple[int, str], bytes] = {}  # per call and op past MAX_OPS: the chained digest
        self.calling = False  # inside one of the candidate's calls (not the harness's hand-over of its outputs)
        self._roots: dict[int, int] = {}  # storage address -> its place in the snapshot (state from before the calls)
        self._inputs: dict[int, int] = {}  # storage address -> which argument of the current call
        self._fresh: dict[int, int] = {}  # storage address -> order first seen in the current call
        self.paused = 0  # inside a launch (the interpreter's own aten ops) or the harness's input fill
        self.cost_s = 0.0  # the record's own time (audit.py takes it off the audit request's wall)
        self._launches: dict[tuple[int, str, str], int] = {}  # (call, kernel, launch shape) -> launches so far
        self._pending: list[tuple[list[tuple[int, int, int, Any]], dict[int, Any], set[int], tuple[int, int],
                                  list[_Extent]]] = []

    # --- digests and the record ---
    def _digest(self, start: int, nbytes: int) -> bytes:
        view = (ctypes.c_char * nbytes).from_address(start)
        return _blake2b(memoryview(view), key=self.key, digest_size=16).digest()

    def _value_digest(self, label: str, value: Any) -> bytes:
        return _blake2b(f"{label}={canonical(value)!r}".encode(), key=self.key, digest_size=16).digest()

    def _vouch(self, start: int, nbytes: int, size: int, keep: Any) -> None:
        self.known[start] = _Extent(start, nbytes, size, self._digest(start, nbytes), keep)

    def _revouch(self, lo: int, hi: int) -> None:
        """Digest again every recorded extent overlapping [lo, hi) (written by an observed writer)."""
        for k in self._overlapping(lo, hi):
            k.digest = self._digest(k.start, k.nbytes)

    def _overlapping(self, lo: int, hi: int) -> list[_Extent]:
        return [k for k in self.known.values() if k.start < hi and lo < k.end]

    def _note(self, elements: int, what: str, content: bytes) -> None:
        """Count `elements` of unexplained data; `content`: a digest of the data itself, so that data that is the
        same on other inputs (a constant table built per call) can be told from data computed from them."""
        self.unexplained += elements
        if len(self.events) < MAX_EVENTS:
            self.events.append((content, elements, what, self.call))
        else:  # past the cap: one event whose digest nothing shares
            self.events[-1] = (os.urandom(16), self.events[-1][1] + elements, "more unexplained data", -1)
        if len(self.where) < 8:
            self.where.append(what)

    def vouch(self, tensors: Iterable[Any]) -> None:
        """Vouch for these tensors' storages as they are now (the harness's own writes)."""
        for t in tensors:
            extent = _storage(t) if isinstance(t, torch.Tensor) else None
            if extent is not None:
                self._vouch(*extent, keep=t.untyped_storage())
                self._revouch(extent[0], extent[0] + extent[1])

    # --- the forward's start ---
    def snapshot(self, roots: Iterable[Any]) -> int:
        """Vouch for every tensor and NumPy array reachable from `roots`, in their order (inputs first), through
        modules, containers and object attributes; returns how many storages."""

        t0 = _clock()
        seen: set[int] = set()
        queue = deque((r, 0) for r in roots)
        while queue and len(seen) < _WALK_LIMIT:
            obj, depth = queue.popleft()
            if id(obj) in seen or depth > _WALK_DEPTH or isinstance(obj, _LEAVES):
                continue
            seen.add(id(obj))
            if isinstance(obj, torch.Tensor):
                extent = _storage(obj)
                if extent is not None:
                    self._vouch(*extent, keep=obj.untyped_storage())
                    self._roots.setdefault(extent[0], len(self._roots))
            elif _is_ndarray(obj):
                extent = _array(obj)
                if extent is not None:
                    self._vouch(*extent, keep=obj)
            else:
                queue.extend((child, depth + 1) for child in _children(obj) if not isinstance(child, _LEAVES))
        self.cost_s += _clock() - t0
        return len(self.known)

    # --- aten ops (accounting.PoisonMode, Observer) ---
    def before_op(self, name: str, func: Any, args: Any, kwargs: Any) -> None:
        """Check what an op reads; not for views (they read nothing) or while paused. A number a fill writes
        (`fill_`, `full`) is data from Python, as a value read into Python is (after_op)."""
        if self.paused or getattr(func, "is_view", False) or name == "_local_scalar_dense":
            return
        t0 = _clock()
        if name in _FILLS:
            for i, value in enumerate(numbers_in([a for a in args if not isinstance(a, torch.Tensor)])):
                self._note(1, f"a number written by {name}", self._value_digest(f"{name}:{i}", value))
        for i, value in enumerate(args):
            writes_only = name in _NO_READ and i == 0
            for t in tensors_in(value):
                self._check(t, f"the input of {name}", reads=not writes_only)
        for k, value in (kwargs or {}).items():
            for t in tensors_in(value):
                self._check(t, f"the input of {name}", reads=k != "out")
        self.cost_s += _clock() - t0

    def after_op(self, func: Any, args: Any, kwargs: Any, out: Any) -> None:
        """Vouch for what an op wrote: its results and the arguments it wrote in place or through out=. Not a custom
        op's results (its body was observed, `observed_call`: they hold what the body's observed writers left),
        nor ops that change only metadata (`resize_`, `set_`, in-place views): they write no values. What an
        allocation hands out is overwritten with all-ones bytes first (NaN, -1): memory freed by NumPy may hold
        the answer, and no honest kernel reads what it did not write."""
        if self.paused or func.namespace not in _NATIVE:
            return
        name = func.__name__.split(".")[0]
        if self.int_args and self.calling and name != "_local_scalar_dense":
            self._op_shape(name, args, kwargs, out)
        if getattr(func, "is_view", False):
            return
        if name == "_local_scalar_dense":  # a value read into Python: it leaves every record
            self._note(1, "values read into Python (item())", self._value_digest("item", out))
            return
        if name in _METADATA_ONLY or torch.Tag.inplace_view in getattr(func, "tags", ()):
            return
        t0 = _clock()
        written = tensors_in(out)
        for i, arg in enumerate(func._schema.arguments):
            if arg.alias_info is not None and arg.alias_info.is_write:
                written += tensors_in(args[i] if i < len(args) else (kwargs or {}).get(arg.name))
        for t in written:
            extent = _storage(t)
            if extent is None:
                continue
            if name in _ALLOC:
                ctypes.memset(extent[0], 0xFF, extent[1])
            self._vouch(*extent, keep=t.untyped_storage())
            self._revouch(extent[0], extent[0] + extent[1])
        self.cost_s += _clock() - t0

    def begin_call(self, args: Any) -> None:
        """One of the candidate's calls starts (the harness's call wrapper): its inputs are `args`."""
        self.call, self.calling, self._fresh = self.call + 1, True, {}
        self._inputs = {}
        for i, t in enumerate(tensors_in(list(args))):
            extent = _storage(t)
            if extent is not None:
                self._inputs.setdefault(extent[0], i)

    def _origin(self, t: torch.Tensor) -> tuple[str, int]:
        """Where `t`'s storage comes from, named the same way in every call of honest code: this call's input k,
        state from before the calls (its place in the snapshot), or the n-th storage first seen in this call."""
        extent = _storage(t)
        if extent is None:
            return ("device", 0)
        start = extent[0]
        if start in self._inputs:
            return ("input", self._inputs[start])
        if start in self._fresh or start not in self._roots:
            return ("new", self._fresh.setdefault(start, len(self._fresh)))
        return ("state", self._roots[start])

    def _op_shape(self, name: str, args: Any, kwargs: Any, out: Any) -> None:
        """In a record whose calls are compared (audit A's; the accounting calls'): what Python decided about an op,
        views and glue included: its numbers (split sizes, indices, shapes) and where each tensor argument points
        (its storage's origin, offset, shape, strides: which pieces a `cat` joins, from which storage, `out=` too)
        and how often it ran so in the call. Honest code decides the same on every input of one shape; an op whose
        decision changes with the inputs passes host-made data through glue alone (hostdata.op_events). Each entry
        weighs what Python decided: one element per number and per tensor argument."""
        t0 = _clock()
        numbers = numbers_in([a for a in [*args, *(kwargs or {}).values()] if not isinstance(a, torch.Tensor)])
        tensors = tensors_in(list(args)) + tensors_in(dict(sorted((kwargs or {}).items())))
        views = [(self._origin(t), t.storage_offset(), tuple(t.shape), t.stride(), str(t.dtype)) for t in tensors]
        weight = max(1, len(numbers) + len(views))
        key = (self.call, name, self._value_digest(f"op:{name}", (numbers, views)))
        if key not in self.ops and self._op_count.get(self.call, 0) >= MAX_OPS:  # past the cap: chained in order
            prev = self._rest.get(key[:2], b"")
            weight += self.ops.pop((*key[:2], prev), (0, 0))[0]
            key = (*key[:2], self._value_digest("rest", (prev, key[2])))
            self._rest[key[:2]] = key[2]
        elif key not in self.ops:
            self._op_count[self.call] = self._op_count.get(self.call, 0) + 1
        held, count = self.ops.get(key, (0, 0))
        self.ops[key] = (held + weight, count + 1)
        self.cost_s += _clock() - t0

    def _check(self, t: torch.Tensor, what: str, reads: bool = True) -> int:
        """Every recorded extent under `t`'s storage must hold what its observed writer left; bytes of it under no
        recorded extent count where `t` is read. Returns those bytes."""
        extent = _storage(t)
        if extent is None:
            return 0
        start, nbytes, size = extent
        covered = 0
        for k in self._overlapping(start, start + nbytes):  # however small `t` is: it may sit inside a scratch
            covered += min(k.end, start + nbytes) - max(k.start, start)
            if self._digest(k.start, k.nbytes) != k.digest:
                k.digest = self._digest(k.start, k.nbytes)  # counted once per unobserved write
                self._note(k.nbytes // k.size, f"{what}: {k.nbytes} bytes written by something neither PyTorch's "
                                               "ops nor the kernels", k.digest)
        unknown = max(0, nbytes - covered)
        if reads and unknown >= MIN_ELEMENTS * size:
            self._note(unknown // size, f"{what}: {unknown} bytes no observed op or kernel wrote",
                       self._digest(start, nbytes))
            self._vouch(start, nbytes, size, keep=t.untyped_storage())  # counted once
            return 0
        return unknown

    # --- Triton launches (guards.LaunchRecorder) ---
    def before_launch(self, kernel: Any, args: Any, kwargs: Any) -> None:
        t0 = _clock()
        name, params = kernel_name(kernel), kernel_params(kernel)
        self.codes.add(code_digest(kernel, args, kwargs, self.key))
        named = [*zip(params, args), *((k, v) for k, v in kwargs.items() if k in params or k not in LAUNCH_OPTIONS)]
        for where, value in named:  # a number passed in, however wrapped: data from Python
            for i, number in enumerate(numbers_in([value], self.int_args, launch=True)):
                self._note(1, f"a number passed to kernel {name}", self._value_digest(f"{name}:{where}:{i}", number))
        tensors = tensors_in(list(args)) + tensors_in(dict(kwargs))
        if self.int_args:  # where a pointer points is a number too: a view's offset (or its dtype: the kernel is
            # specialised on it, c2_fb_rt7_dtype_view_bits_hinge) can carry the data
            views = [(self._origin(t), t.storage_offset(), tuple(t.shape), t.stride(), str(t.dtype)) for t in tensors]
            for i, view in enumerate(views):
                self._note(1, f"where argument {i} of kernel {name} points", self._value_digest(f"{name}:view{i}", view))
        for where, value in named:  # a pointer that is no tensor: where it points is not known to the record
            if hasattr(value, "data_ptr") and not isinstance(value, torch.Tensor):
                self._note(1, f"argument {where} of kernel {name} is a pointer but not a tensor", os.urandom(16))
        partly_unknown = {t.untyped_storage().data_ptr() for t in tensors  # count only where loaded (after_launch)
                          if self._check(t, f"an argument of kernel {name}", reads=False)}
        extents = {e[0]: (*e, t.untyped_storage()) for e, t in ((_storage(t), t) for t in tensors) if e is not None}
        copies = {start: _read(start, nbytes) for start, (_, nbytes, _, _) in extents.items()}
        marks = (len(self.stores.loads), len(self.stores.stores)) if self.stores is not None else (0, 0)
        shape = (name, [v for _, v in named], views, kwargs.get("grid")) if self.int_args else None
        self._pending.append((list(extents.values()), copies, partly_unknown, marks, list(self.known.values()), shape))
        self.paused += 1
        self.cost_s += _clock() - t0

    def _launch_shape(self, name: str, values: list[Any], views: list[Any], grid: Any, resolved: Any) -> None:
        """One event per launch in a record whose calls are compared: its numbers and argument views together, its
        grid, and how many launches like it ran before it in the call. A number alone that another call repeats is
        excused, but which numbers went together (a bit and its position: cheats_v2/c2_fb_rt6_split_int_args_hinge),
        the grid (the kernel reads it: `tl.num_programs`, c2_fb_rt6_grid_channel_hinge) and how often a launch ran
        (a launch repeated to cancel itself, c2_fb_rt6_launch_count_hinge) are data from Python as well. The grid is
        both the one passed and the one the interpreter ran over (`resolved_grid`: a grid function's closure may hold
        anything, a string's length, c2_fb_rt7_grid_fn_string_hinge). Honest code launches the same on every input
        of one shape."""
        shape = (numbers_in(values, launch=True), views, grid_numbers(grid), resolved)
        key = (self.call, name, repr(canonical(shape)))
        seen = self._launches[key] = self._launches.get(key, -1) + 1
        self._note(1, f"the numbers, grid or repetition of kernel {name}'s launches",
                   self._value_digest(f"{name}:launch#{seen}", shape))

    def after_launch(self, kernel: Any) -> None:
        t0 = _clock()
        self.paused -= 1
        name = kernel_name(kernel)
        extents, copies, partly_unknown, (i, j), vouched, shape = self._pending.pop()
        if shape is not None:  # noted once the grid is resolved
            self._launch_shape(*shape, resolved_grid())
        stored: dict[int, Any] = {}
        if self.stores is not None:
            self._launch_loads(name, self.stores.loads[i:], vouched, extents)
            if not self.stores.overflow:
                stored = self._only_stores(name, extents, copies, self.stores.stores[j:])
        for start, nbytes, size, keep in extents:  # what the kernel stored is its work
            if start in partly_unknown and not (start in stored and stored[start].all()):
                self._revouch(start, start + nbytes)  # bytes of unknown origin the kernel left stay unknown
                continue
            self._vouch(start, nbytes, size, keep)
            self._revouch(start, start + nbytes)
        self.cost_s += _clock() - t0

    def _launch_loads(self, name: str, loads: list[Any], vouched: list[_Extent],
                      args: list[tuple[int, int, int, Any]]) -> None:
        """The distinct addresses a launch loaded: outside every extent recorded before it they count (values of
        unknown origin); a recorded extent it loaded from must still hold what its writer left (it may have been
        reached by pointer arithmetic, past every argument check)."""

        if not loads:
            return
        addrs = np.unique(np.concatenate(loads))
        inside = np.zeros(len(addrs), dtype=bool)
        for k in vouched:
            lo, hi = np.searchsorted(addrs, k.start), np.searchsorted(addrs, k.end)
            if hi > lo:
                inside[lo:hi] = True
                if not any(s < k.end and k.start < s + n for s, n, _, _ in args) and \
                        self._digest(k.start, k.nbytes) != k.digest:
                    k.digest = self._digest(k.start, k.nbytes)
                    self._note(k.nbytes // k.size, f"kernel {name} loaded memory outside its arguments that "
                                                   "something neither PyTorch's ops nor the kernels wrote", k.digest)
        outside = int((~inside).sum())
        if outside:  # however few: the verdict's threshold is on the forward's total (pieces add up)
            self._note(outside, f"kernel {name} loaded {outside} elements of memory no observed op or kernel wrote",
                       self._unknown_digest(addrs[~inside], args))

    def _unknown_digest(self, addrs: Any, args: list[tuple[int, int, int, Any]]) -> bytes:
        """A digest of the unknown data a launch loaded: every argument storage it fell in, whole (a
        `torch.from_numpy` passed in: the same on other inputs only if all of it is). Loads outside every argument
        get a digest nothing shares: no honest kernel reaches memory past its arguments."""
        parts = []
        for start, nbytes, _, _ in sorted(args):
            if ((addrs >= start) & (addrs < start + nbytes)).any():
                parts.append(self._digest(start, nbytes))
        if sum(int(((addrs >= s) & (addrs < s + n)).sum()) for s, n, _, _ in args) < len(addrs):
            parts.append(os.urandom(16))
        return _blake2b(b"".join(parts), key=self.key, digest_size=16).digest()

    def _only_stores(self, name: str, extents: list[tuple[int, int, int, Any]], copies: dict[int, Any],
                     stores: list[tuple[Any, Any]]) -> dict[int, Any]:
        """Each argument's memory after the launch must be its memory before with the kernel's recorded stores
        applied, in order: anything else changed it meanwhile (Python or NumPy run from inside the interpreted
        kernel, a thread). Returns, per argument, which of its bytes the kernel stored ([nbytes] bool)."""

        stored = {}
        for start, nbytes, size, _ in extents:
            expect, hit = copies[start], np.zeros(nbytes, dtype=bool)
            for addrs, vals in stores:
                k = vals.dtype.itemsize
                inside = (addrs >= start) & (addrs + k <= start + nbytes)
                if not inside.any():
                    continue
                offs = (addrs[inside] - start)[:, None] + np.arange(k)
                expect[offs] = np.ascontiguousarray(vals[inside]).view(np.uint8).reshape(-1, k)
                hit[offs] = True
            stored[start] = hit
            now = _read(start, nbytes)
            if not np.array_equal(now, expect):
                unit = {2: np.uint16, 4: np.uint32, 8: np.uint64}.get(size) if nbytes % size == 0 else None
                changed = int((now.view(unit) != expect.view(unit)).sum()) if unit else int((now != expect).sum())
                self._note(changed, f"kernel {name}: {changed} elements of an argument changed during the launch "
                                    "other than by the kernel's stores", self._digest(start, nbytes))
        return stored

    # --- the forward's end ---
    def check_output(self, leaves: Iterable[Any]) -> None:
        for t in leaves:
            if isinstance(t, torch.Tensor):
                self._check(t, "the returned output")


_NO_READ = frozenset({"copy_", "fill_", "zero_", "resize_", "set_", "empty_like", "new_empty", "new_empty_strided",
                      "new_zeros", "new_ones", "new_full", "zeros_like", "ones_like", "full_like", "uniform_",
                      "normal_", "random_"})
# allocations: what they return holds no value yet
_ALLOC = frozenset({"empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "empty_permuted"})
# ops that write numbers given from Python
_FILLS = frozenset({"fill_", "fill", "full", "full_like", "new_full", "scalar_tensor", "index_fill_", "index_fill"})
# in-place ops that change a tensor's metadata (its storage, size, strides), never its values
_METADATA_ONLY = frozenset({"resize_", "resize_as_", "set_", "as_strided_", "detach_", "squeeze_", "unsqueeze_", "t_",
                            "transpose_", "swapdims_", "swapaxes_"})
_NATIVE = ("aten", "prims")
_LEAVES = (str, bytes, int, float, complex, bool, type(None))  # what the snapshot walk never visits


def _is_ndarray(obj: Any) -> bool:
    return type(obj).__module__ == "numpy" and type(obj).__name__ == "ndarray"


def _children(obj: Any) -> list[Any]:
    """What the snapshot walk looks into: containers' items, a module's parameters, buffers and submodules, an
    object's attributes; not classes, functions or modules other than the root's globals."""
    if isinstance(obj, dict):
        return list(obj.values())
    if isinstance(obj, (list, tuple, set, frozenset)):
        return list(obj)
    if isinstance(obj, (str, bytes, int, float, complex, bool, type(None), type, types.ModuleType)) or \
            callable(obj) and not isinstance(obj, torch.nn.Module):
        return []
    attrs = getattr(obj, "__dict__", None)
    return list(attrs.values()) if isinstance(attrs, dict) else []


class Observer(TorchDispatchMode):
    """Provenance alone (no poisoning, no work counted) for the aten ops inside a custom op's body, where
    accounting.PoisonMode is popped: a buffer the body allocates and its kernels then read is vouched for."""

    def __init__(self, provenance: Provenance) -> None:
        super().__init__()
        self.provenance = provenance

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        name = func.__name__.split(".")[0]
        self.provenance.before_op(name, func, args, kwargs)
        if func.namespace in ("aten", "prims"):
            out = func(*args, **(kwargs or {}))
        else:  # a custom op inside a custom op: its body observed too
            out = observed_call(func, args, kwargs, self.provenance)
        self.provenance.after_op(func, args, kwargs, out)
        return out


def observed_call(func: Any, args: Any, kwargs: Any, provenance: Provenance) -> Any:
    """Run a custom op with its body's aten ops observed. A mode that handles an op is popped while it runs it, so
    a plain call would run the body out of sight; instead the op is redispatched straight to its CPU kernel (the
    body) with an `Observer` pushed, where the body's own ops reach it."""
    with Observer(provenance):
        return func.redispatch(torch._C.DispatchKeySet(torch._C.DispatchKey.CPU), *args, **(kwargs or {}))


def module_globals(model: Any) -> dict[str, Any]:
    """The globals of the module that defines the model's class (the candidate's module), for `snapshot`."""

    module = sys.modules.get(type(model).__module__)
    return dict(vars(module)) if module is not None else {}


@contextmanager
def candidate_call(prov: Provenance | None, args: Any) -> Iterator[None]:
    """One of the candidate's calls on `args` while a record is on (`Provenance.begin_call`): which call each
    unexplained read and each op belongs to, and its ops digested only inside it."""
    if prov is None:
        yield
        return
    prov.begin_call(args)
    try:
        yield
    finally:
        prov.calling = False


@contextmanager
def harness_writes(prov: Provenance | None, tensors: list[Any]) -> Iterator[None]:
    """The harness writing the inputs while a record is on (audit A's fill): not the candidate's writes, and what
    they leave is vouched for."""
    if prov is None:
        yield
        return
    prov.paused += 1
    try:
        yield
    finally:
        prov.paused -= 1
        prov.vouch(tensors)


def record_evidence(prov: Provenance | None, leaves: list[Any], unhooked: bool, calls: int = 1,
                    overflow: bool = False) -> dict[str, Any]:
    """A record's reply fields (hostdata.read_record reads them), its outputs checked last; a record the candidate
    unhooked (`unhooked`: the hooks no longer held it when the calls returned) is evidence itself."""
    if prov is None:
        return {}
    prov.check_output(leaves)
    return {"unexplained": prov.unexplained, "prov_events": [[d.hex(), n, w, c] for d, n, w, c in prov.events],
            "prov_codes": sorted(c.hex() for c in prov.codes),
            "prov_ops": [[name, prov._value_digest("times", (d, k)).hex(), n, c] for (c, name, d), (n, k) in prov.ops.items()],
            "provenance_unhooked": unhooked, "calls": calls, "record_overflow": bool(overflow),
            "output_elements": sum(int(t.numel()) for t in leaves if isinstance(t, torch.Tensor))}
