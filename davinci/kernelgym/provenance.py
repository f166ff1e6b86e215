"""Value provenance on the CPU: every byte the candidate's kernels or PyTorch's ops read must hold what an observed
writer put there.

The CPU store record (`accounting.StoreRecorder`) says which output elements a kernel stored and which input
addresses it loaded, but not where the loaded values came from: NumPy (or Python, or ctypes) can compute the
answer into a scratch buffer, or in place into a copy of the input, or into the output after the kernels ran,
and a copy kernel (or any kernel that loads the inputs for show) makes the stores and loads look like the work
(the red team's cheats_open/c3_b1*, c3_b3, c3_b9, c3_f1). Those writers are invisible to the dispatch mode and
to the store record alike; what they cannot avoid is changing memory that something observed wrote last.

So during the accounting forward (`worker.Harness.op_run`), `Provenance` keeps a keyed digest of every storage
whose content the evaluator can vouch for:
  - the state at the forward's start: its inputs, and every tensor or NumPy array reachable from the model and
    from the candidate module's globals (caches built by earlier calls included: they hold nothing of these
    fresh inputs);
  - the result of every aten op the dispatch mode handles (after poisoning), and of every in-place or out= write;
  - every storage a Triton launch was passed, right after the launch (the kernel's stores are its work).
Before an aten op reads a tensor and before a launch, each storage involved is digested again: a digest that
differs means a write nobody observed (`unobserved write`). After a launch, the addresses its kernels loaded
(from the store record) that lie in no vouched-for storage are reads of values of unknown origin
(`unknown source`: a `torch.from_numpy` of a NumPy result). The returned output is checked the same way. The
evidence (`unexplained`, in elements, and where) becomes `host_compute` in `job._account_evidence` once it reaches
`UNEXPLAINED_MIN` elements and `UNEXPLAINED_SHARE` of the output.

Choices:
  - a digest, not a copy: memory stays bounded whatever the forward allocates. Keyed BLAKE2b (a fresh key per
    forward), so content that keeps a linear checksum (CRC) equal cannot pass; the key lives in the candidate's
    process, as every in-process record does (a forger that reads it is `cheats_open/c3_f1`'s class);
  - views read nothing and are skipped; allocations and fills do not read their arguments; a storage that is
    unknown is an error only where it is read (a fresh buffer allocated out of the mode's sight and only
    stored into is fine);
  - aten ops run by the Triton interpreter inside a launch (its argument wrapping and copy-back) are its own,
    not the candidate's, and so are the harness's input fills (`paused`; the filled inputs are vouched for);
  - one-element storages (Python scalars wrapped as tensors) are not checked; everything else counts however
    small, and so does every value read into Python (`item()`), since pieces add up; the verdict's threshold is on
    the forward's total against its output (`provenance_verdict`).

    prov = Provenance(stores)        # the StoreRecorder: its load addresses, per launch
    prov.snapshot([inputs, model, module_globals])
    ... PoisonMode(provenance=prov) and LaunchRecorder.provenance = prov during the forward ...
    prov.check_output(leaves)
    prov.unexplained, prov.where
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import types
from typing import Any, Iterable

import torch
from torch.utils._python_dispatch import TorchDispatchMode

MIN_ELEMENTS = 2  # storages smaller than this (Python scalars wrapped as tensors) are not checked
# host_compute once the unexplained reads and writes reach this many elements and this share of the output's
UNEXPLAINED_MIN, UNEXPLAINED_SHARE = 16, 0.01
_WALK_LIMIT = 20000  # objects visited by the snapshot walk at most
_WALK_DEPTH = 6


class _Extent:
    """A vouched-for storage: [start, start + nbytes), its element size and digest."""
    __slots__ = ("start", "nbytes", "size", "digest")

    def __init__(self, start: int, nbytes: int, size: int, digest: bytes) -> None:
        self.start, self.nbytes, self.size, self.digest = start, nbytes, size, digest


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
    import numpy as np

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

    def __init__(self, stores: Any = None, key: bytes | None = None) -> None:
        self.key = key or os.urandom(16)
        self.stores = stores  # accounting.StoreRecorder: the kernels' load addresses (CPU)
        self.known: dict[int, _Extent] = {}
        self.unexplained = 0  # elements read or returned that no observed writer explains
        self.where: list[str] = []
        self.to_python = 0  # tensor values read into Python (`_local_scalar_dense`)
        self.paused = 0  # inside a launch (the interpreter's own aten ops) or the harness's input fill
        self._pending: list[tuple[list[tuple[int, int, int]], dict[int, Any], tuple[int, int], list[_Extent]]] = []

    # --- digests ---
    def _digest(self, start: int, nbytes: int) -> bytes:
        view = (ctypes.c_char * nbytes).from_address(start)
        return hashlib.blake2b(memoryview(view), key=self.key, digest_size=16).digest()

    def _vouch(self, extent: tuple[int, int, int]) -> None:
        start, nbytes, size = extent
        self.known[start] = _Extent(start, nbytes, size, self._digest(start, nbytes))

    def _find(self, extent: tuple[int, int, int]) -> _Extent | None:
        """The vouched-for storage that holds this memory: the same start and size, else one that contains it."""
        start, nbytes, _ = extent
        hit = self.known.get(start)
        if hit is not None and hit.nbytes == nbytes:
            return hit
        return next((k for k in self.known.values() if k.start <= start and start + nbytes <= k.start + k.nbytes), None)

    def _note(self, elements: int, what: str) -> None:
        self.unexplained += elements
        if len(self.where) < 8:
            self.where.append(what)

    # --- the forward's start ---
    def snapshot(self, roots: Iterable[Any]) -> int:
        """Vouch for every tensor and NumPy array reachable from `roots` (through modules, containers and object
        attributes); returns how many storages."""
        seen: set[int] = set()
        stack = [(r, 0) for r in roots]
        while stack and len(seen) < _WALK_LIMIT:
            obj, depth = stack.pop()
            if id(obj) in seen or depth > _WALK_DEPTH:
                continue
            seen.add(id(obj))
            extent = _storage(obj) if isinstance(obj, torch.Tensor) else _array(obj) if _is_ndarray(obj) else None
            if extent is not None:
                self._vouch(extent)
                continue
            stack += [(child, depth + 1) for child in _children(obj)]
        return len(self.known)

    def vouch(self, tensors: Iterable[Any]) -> None:
        """Vouch for these tensors' storages as they are now (the harness's own writes)."""
        for t in tensors:
            extent = _storage(t) if isinstance(t, torch.Tensor) else None
            if extent is not None:
                self._vouch(extent)

    # --- aten ops (accounting.PoisonMode) ---
    def before_op(self, name: str, func: Any, args: Any, kwargs: Any) -> None:
        """Check the storages an op reads; not for views (they read nothing) or inside a launch. A value read into
        Python (`item()`, `float(t)`: `_local_scalar_dense`) leaves every record: each counts as one element."""
        if self.paused or getattr(func, "is_view", False):
            return
        if name == "_local_scalar_dense":
            self.to_python += 1
            if self.to_python == 1:
                self.where.append("values read into Python one by one (item())")
            self.unexplained += 1
            return
        for i, value in enumerate(args):
            writes_only = name in _NO_READ and i == 0
            for t in tensors_in(value):
                self._check(t, f"the input of {name}", unknown_counts=not writes_only)
        for k, value in (kwargs or {}).items():
            for t in tensors_in(value):
                self._check(t, f"the input of {name}", unknown_counts=k != "out")

    def after_op(self, func: Any, args: Any, kwargs: Any, out: Any) -> None:
        """Vouch for an op's results and for the arguments it wrote (in place, out=)."""
        if self.paused or getattr(func, "is_view", False):
            return
        written = tensors_in(out)
        for i, arg in enumerate(func._schema.arguments):
            if arg.alias_info is not None and arg.alias_info.is_write:
                written += tensors_in(args[i] if i < len(args) else (kwargs or {}).get(arg.name))
        for t in written:
            extent = _storage(t)
            if extent is not None:
                self._vouch(extent)

    def _check(self, t: torch.Tensor, what: str, unknown_counts: bool = True) -> None:
        extent = _storage(t)
        if extent is None or extent[1] < MIN_ELEMENTS * extent[2]:
            return
        known = self._find(extent)
        if known is None:
            if unknown_counts:
                self._note(extent[1] // extent[2], f"{what}: {extent[1]} bytes no observed op or kernel wrote")
                self._vouch(extent)  # counted once
            return
        if self._digest(known.start, known.nbytes) != known.digest:
            self._note(known.nbytes // known.size, f"{what}: {known.nbytes} bytes written by something neither "
                                                   "PyTorch's ops nor the kernels")
            self._vouch((known.start, known.nbytes, known.size))  # counted once per unobserved write

    # --- Triton launches (guards.LaunchRecorder) ---
    def before_launch(self, name: str, args: Any, kwargs: Any) -> None:
        tensors = tensors_in(list(args)) + tensors_in(dict(kwargs))
        for t in tensors:  # unknown storages count only if the kernel loads from them (after_launch)
            self._check(t, f"an argument of kernel {name}", unknown_counts=False)
        extents = {e[0]: e for e in (_storage(t) for t in tensors) if e is not None}
        copies = {start: _read(start, nbytes) for start, (_, nbytes, _) in extents.items()}
        marks = (len(self.stores.loads), len(self.stores.stores)) if self.stores is not None else (0, 0)
        self._pending.append((list(extents.values()), copies, marks, list(self.known.values())))
        self.paused += 1

    def after_launch(self, name: str) -> None:
        self.paused -= 1
        extents, copies, (loads, stores), vouched = self._pending.pop()
        if self.stores is not None:
            self._unknown_loads(name, self.stores.loads[loads:], vouched)
            if not self.stores.overflow:
                self._only_stores(name, extents, copies, self.stores.stores[stores:])
        for extent in extents:  # what the kernel stored is its work
            self._vouch(extent)

    def _only_stores(self, name: str, extents: list[tuple[int, int, int]], copies: dict[int, Any],
                     stores: list[tuple[Any, Any]]) -> None:
        """Each argument's memory after the launch must be its memory before with the kernel's recorded stores
        applied, in order: anything else changed it meanwhile (Python or NumPy run from inside the interpreted
        kernel, a thread)."""
        import numpy as np

        for start, nbytes, size in extents:
            expect = copies[start]
            for addrs, vals in stores:
                k = vals.dtype.itemsize
                inside = (addrs >= start) & (addrs + k <= start + nbytes)
                if not inside.any():
                    continue
                offs = (addrs[inside] - start)[:, None] + np.arange(k)
                expect[offs] = np.ascontiguousarray(vals[inside]).view(np.uint8).reshape(-1, k)
            now = _read(start, nbytes)
            if not np.array_equal(now, expect):
                unit = {2: np.uint16, 4: np.uint32, 8: np.uint64}.get(size) if nbytes % size == 0 else None
                changed = int((now.view(unit) != expect.view(unit)).sum()) if unit else int((now != expect).sum())
                self._note(changed, f"kernel {name}: {changed} elements of an argument changed during the launch "
                                    "other than by the kernel's stores")

    def _unknown_loads(self, name: str, loads: list[Any], vouched: list[_Extent]) -> None:
        """Count the distinct addresses a launch loaded outside every storage vouched for before it."""
        import numpy as np

        if not loads:
            return
        addrs = np.unique(np.concatenate(loads))
        inside = np.zeros(len(addrs), dtype=bool)
        for k in vouched:
            lo, hi = np.searchsorted(addrs, k.start), np.searchsorted(addrs, k.start + k.nbytes)
            inside[lo:hi] = True
        outside = int((~inside).sum())
        if outside:  # however few: the verdict's threshold is on the forward's total (pieces add up)
            self._note(outside, f"kernel {name} loaded {outside} elements of memory no observed op or kernel wrote")

    # --- the forward's end ---
    def check_output(self, leaves: Iterable[Any]) -> None:
        for t in leaves:
            if isinstance(t, torch.Tensor):
                self._check(t, "the returned output")


# ops whose first argument is written, not read (allocations, fills, copy_'s destination)
_NO_READ = frozenset({"copy_", "fill_", "zero_", "resize_", "set_", "empty_like", "new_empty", "new_empty_strided",
                      "new_zeros", "new_ones", "new_full", "zeros_like", "ones_like", "full_like", "uniform_",
                      "normal_", "random_"})


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


def provenance_verdict(unexplained: int, output_elements: int, where: list[str], unhooked: bool = False,
                       calls: int = 1) -> str | None:
    """`host_compute` evidence from a record's provenance over `calls` forward calls, or None: unexplained elements
    at or above UNEXPLAINED_MIN per call and UNEXPLAINED_SHARE of the outputs' elements.

    >>> provenance_verdict(0, 4096, [])
    >>> provenance_verdict(4096, 4096, ["kernel k loaded 4096 elements ..."])[:22]
    'the kernels read or re'
    >>> provenance_verdict(20, 4096, ["..."])  # under 1% of the output: small host-made constants
    >>> provenance_verdict(20, 64, ["..."], calls=2)  # two calls' 16-element allowance: 32
    >>> provenance_verdict(0, 4096, [], unhooked=True)[:33]
    'the provenance record was unhooke'
    """
    if unhooked:
        return "the provenance record was unhooked during the forward (the candidate reached the evaluator's objects)"
    if unexplained < max(UNEXPLAINED_MIN * max(1, calls), UNEXPLAINED_SHARE * output_elements):
        return None
    return (f"the kernels read or returned {unexplained} elements that no PyTorch op and no kernel of the candidate's "
            f"wrote (computed on the host: NumPy, Python, ctypes): {'; '.join(where[:3])}")


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
    import sys

    module = sys.modules.get(type(model).__module__)
    return dict(vars(module)) if module is not None else {}
