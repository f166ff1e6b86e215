"""Outputs handed back in storage the candidate reuses across calls: static outputs and double buffers.

A CUDA graph's replay, or a kernel that writes into one of k buffers it keeps, returns the same storage every
k-th call. That is an honest style (torch.compile's "reduce-overhead" mode does it), but a timing request keeps
every call's outputs until the supervisor spot-checks one of them, so a later call would overwrite an earlier
call's answer before it is read. The harness tells such a candidate apart in its warm-up calls, as many as a
timing request holds (`Reuse`): an output whose storage an earlier call handed back while the candidate still
holds it (a weak reference to the storage, so the warm-up keeps no output alive and reserves no memory; a
storage freed and handed out again by the allocator is not a reuse, and neither is an input's storage, which
differs between a request's calls). From then on it copies each timed call's outputs right after the call,
outside the clocks and out of every dispatch mode's sight (`copy_outputs`): the copies are what the supervisor
checks, while the launch replay still runs on the storage the kernels wrote. A call that hands back an earlier
call's storage with the same contents did not answer its own inputs (`stale_calls`): that is still
`result_replay` evidence, as any reused storage is for a candidate whose warm-up calls returned fresh storage.

    watch = Reuse(args)
    for _ in range(calls): watch.see(model(*args))            # the warm-up
    if watch.found: copies = [copy_outputs(model(*s)) for s in sets]
"""

from __future__ import annotations

from typing import Any

import torch
from torch.multiprocessing.reductions import StorageWeakRef

from davinci.kernelgym.compare import flatten_outputs

# bound when the harness imports this module, before any candidate code can rebind them
_clone, _equal, _no_modes = torch.Tensor.clone, torch.equal, torch._C._DisableTorchDispatch


def _held(out: Any) -> list[Any]:
    """The untyped storages behind the non-empty tensor leaves of an output or an argument list."""
    return [t.untyped_storage() for t in flatten_outputs(out) if isinstance(t, torch.Tensor) and t.numel()]


def storages(out: Any) -> set[int]:
    """The base addresses of the storages behind the tensor leaves of an output or an argument list (two views of
    one buffer share one)."""
    return {s.data_ptr() for s in _held(out)}


class Reuse:
    """Whether the calls seen hand back a storage an earlier call handed back that is still alive (`found`).
    The outputs themselves are not kept: each storage is held by a weak reference."""

    def __init__(self, inputs: Any) -> None:
        self.inputs = storages(inputs)  # an output in an input's storage (in place) differs between sets
        self.seen: dict[int, Any] = {}
        self.found = False

    def see(self, out: Any) -> None:
        for storage in _held(out):
            ptr = storage.data_ptr()
            if ptr in self.inputs:
                continue
            earlier = self.seen.get(ptr)
            self.found = self.found or (earlier is not None and not earlier.expired())
            self.seen[ptr] = StorageWeakRef(storage)


def copy_outputs(out: Any) -> list[Any]:
    """An output's leaves, each plain tensor copied (the harness's own copy: no dispatch mode or record sees it).
    A tensor subclass is left as it is, so its `__torch_function__` never runs outside the clocks; the hand-over
    refuses it (`worker._check_leaves`)."""
    with _no_modes():
        return [_clone(t) if type(t) is torch.Tensor else t for t in flatten_outputs(out)]


def stale_calls(leaves: list[list[Any]], copies: list[list[Any]]) -> int:
    """Calls whose outputs share a storage with an earlier call's and whose copies equal that call's copies
    bit for bit: the storage was handed back without being written for the new inputs.

    leaves[j], copies[j]: call j's output leaves as returned, and their copies taken right after call j."""
    owned = [storages(call) for call in leaves]
    stale = 0
    with _no_modes():
        for j in range(1, len(leaves)):
            stale += any(owned[j] & owned[i] and _same(copies[i], copies[j]) for i in range(j))
    return stale


def _same(a: list[Any], b: list[Any]) -> bool:
    tensors = [(x, y) for x, y in zip(a, b) if isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor)]
    return len(a) == len(b) and bool(tensors) and all(
        x.shape == y.shape and x.dtype == y.dtype and bool(_equal(x, y)) for x, y in tensors)
