"""Moving tensors between the candidate's process and the trusted reference worker without pickle.

Two modes behind one encode/decode pair (descriptors are JSON dicts; bytes travel as frame blobs):
- "host": a tensor crosses as its raw bytes (dtype, shape) and is rebuilt with `torch.frombuffer`
  (CPU mode, and the GPU fallback when CUDA IPC is unavailable);
- "ipc":  a CUDA tensor crosses as the fields of torch's own CUDA IPC reduction (`reduce_tensor`), which
  the receiver validates and hands to torch's `rebuild_cuda_tensor`: no code from the sender runs.
Only the candidate's process exports device memory: input buffers are allocated by the candidate's
harness and filled by the trusted worker through the mapping, so no trusted allocation (reference outputs,
pristine inputs) shares a CUDA segment the candidate could reach by pointer arithmetic.

    descs = encode([x, 3, (y, z)], "host", blobs)        # blobs: list the frame will carry
    values = decode(descs, blobs, "cpu", "host")

Every CUDA IPC export holds device memory until its reference count, a counter in a shared-memory file
the exporter made, drops to zero. torch's receiver decrements it when it lets go, but it finds the file by
name in /dev/shm, and the candidate's /dev/shm is private: the decrement silently misses and every export
(each trial's inputs and outputs, every timed call's outputs, the twin's outputs nobody reads) stays
allocated in the exporter until it exits, tens of GB on GB-sized problems. So the exporter keeps the count
itself (`Exports`): the harness drops its own reference when the supervisor releases a slot or a kept
output, which it does only after the reference worker is done with it. A counter decremented by both sides
goes to -1, which torch frees the same as 0.

No CUDA IPC *event* crosses: the exporter synchronizes its stream before a descriptor leaves, and the
receiver never opens an event handle (whatever the descriptor says). The driver keeps an interprocess
event's host state in a file in the exporter's /dev/shm (`cuda.shm.*`), so behind the candidate's private
/dev/shm every `cudaIpcOpenEventHandle` failed ("mapping of buffer object failed", seen on H100 and H200
machines, benchmarks/results/h100/session_2026-11-26b), the IPC probe failed, and every evaluation fell
back to host copies. Memory handles need no such file.
"""

from __future__ import annotations

import base64
import math
from typing import Any, Literal, Sequence

import torch

Mode = Literal["host", "ipc"]
DTYPES: dict[str, torch.dtype] = {
    str(dt).removeprefix("torch."): dt
    for dt in (torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8, torch.int16, torch.int32,
               torch.int64, torch.uint8, torch.bool, torch.complex64, torch.complex128)
}


class TransportError(ValueError):
    """A descriptor that does not describe a valid tensor (or a value that cannot cross)."""


def dtype_name(dtype: torch.dtype) -> str:
    name = str(dtype).removeprefix("torch.")
    if name not in DTYPES:
        raise TransportError(f"dtype {dtype} cannot cross the process boundary")
    return name


def _b64(b: bytes | None) -> str | None:
    return base64.b64encode(b).decode() if b is not None else None


def _unb64(s: Any) -> bytes | None:
    if s is None:
        return None
    if not isinstance(s, str):
        raise TransportError("handle is not a base64 string")
    return base64.b64decode(s)


def _host_desc(t: torch.Tensor, blobs: list) -> dict[str, Any]:
    c = t.detach().to("cpu").contiguous()
    blobs.append(c.reshape(-1).view(torch.uint8).numpy().data if c.numel() else b"")
    return {"kind": "tensor", "dtype": dtype_name(c.dtype), "shape": list(c.shape), "blob": len(blobs) - 1}


def _ipc_desc(t: torch.Tensor) -> dict[str, Any]:
    from torch.multiprocessing.reductions import reduce_tensor, rebuild_cuda_tensor

    fn, args = reduce_tensor(t.detach())
    if fn is not rebuild_cuda_tensor or len(args) != 15:
        raise TransportError("unexpected torch CUDA IPC reduction layout")
    (_, size, stride, offset, _, dtype, device, handle, size_bytes, storage_offset_bytes, _,
     ref_handle, ref_offset, _event_handle, _event_sync) = args
    # the receiver opens no IPC event (module docstring): the data must be complete before it leaves
    torch.cuda.current_stream(t.device).synchronize()
    return {"kind": "ipc", "dtype": dtype_name(dtype), "shape": list(size), "stride": list(stride),
            "offset": int(offset), "device": int(device), "handle": _b64(handle), "size_bytes": int(size_bytes),
            "storage_offset_bytes": int(storage_offset_bytes), "ref_handle": _b64(ref_handle),
            "ref_offset": int(ref_offset)}


def encode(values: Sequence[Any], mode: Mode, blobs: list) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for v in values:
        if isinstance(v, torch.Tensor):
            out.append(_ipc_desc(v) if mode == "ipc" and v.is_cuda else _host_desc(v, blobs))
        elif v is None or isinstance(v, (bool, int, float, str)):
            out.append({"kind": "value", "value": v})
        elif isinstance(v, (list, tuple)):
            out.append({"kind": "seq", "tuple": isinstance(v, tuple), "items": encode(v, mode, blobs)})
        else:
            raise TransportError(f"a {type(v).__name__} cannot cross the process boundary")
    return out


def _check_shape(desc: dict[str, Any]) -> tuple[torch.dtype, list[int]]:
    dtype = DTYPES.get(desc.get("dtype"))  # type: ignore[arg-type]
    shape = desc.get("shape")
    if dtype is None:
        raise TransportError(f"unknown dtype {desc.get('dtype')!r}")
    if not isinstance(shape, list) or not all(isinstance(s, int) and 0 <= s < 1 << 40 for s in shape):
        raise TransportError("shape must be a list of non-negative ints")
    return dtype, shape


def _host_tensor(desc: dict[str, Any], blobs: Sequence[Any], device: str) -> torch.Tensor:
    dtype, shape = _check_shape(desc)
    idx = desc.get("blob")
    if not isinstance(idx, int) or not 0 <= idx < len(blobs):
        raise TransportError("tensor blob index out of range")
    nbytes = math.prod(shape) * torch.empty((), dtype=dtype).element_size()
    data = blobs[idx]
    if len(data) != nbytes:
        raise TransportError(f"tensor blob has {len(data)} bytes, shape {shape} {dtype} needs {nbytes}")
    if nbytes == 0:
        return torch.empty(shape, dtype=dtype, device=device)
    t = torch.frombuffer(data, dtype=torch.uint8).view(dtype).reshape(shape)
    return t.to(device) if device != "cpu" else t.clone()


def _ipc_tensor(desc: dict[str, Any]) -> torch.Tensor:
    from torch.multiprocessing.reductions import rebuild_cuda_tensor

    dtype, shape = _check_shape(desc)
    stride, offset, size_bytes = desc.get("stride"), desc.get("offset"), desc.get("size_bytes")
    ints = [desc.get(k) for k in ("device", "storage_offset_bytes", "ref_offset")]
    if not (isinstance(stride, list) and len(stride) == len(shape) and all(isinstance(s, int) and s >= 0 for s in stride)
            and isinstance(offset, int) and offset >= 0 and isinstance(size_bytes, int) and size_bytes >= 0
            and all(isinstance(i, int) and i >= 0 for i in ints)):
        raise TransportError("malformed CUDA IPC descriptor")
    itemsize = torch.empty((), dtype=dtype).element_size()
    if math.prod(shape) > 0:
        extent = offset + sum((n - 1) * s for n, s in zip(shape, stride)) + 1
        if extent * itemsize > size_bytes:
            raise TransportError("CUDA IPC view reaches past its storage")
    return rebuild_cuda_tensor(
        torch.Tensor, torch.Size(shape), tuple(stride), offset, torch.storage.TypedStorage, dtype,
        ints[0], _unb64(desc.get("handle")), size_bytes, ints[1], False,
        _unb64(desc.get("ref_handle")), ints[2], b"", False,  # no IPC event, whatever the sender wrote
    )


def ipc_refs(descs: Any) -> list[tuple[bytes, int]]:
    """(reference-counter file, offset) of every CUDA IPC export in a descriptor tree, in order."""
    out: list[tuple[bytes, int]] = []
    for d in descs if isinstance(descs, list) else []:
        if isinstance(d, list):
            out += ipc_refs(d)
        elif isinstance(d, dict) and d.get("kind") == "seq":
            out += ipc_refs(d.get("items"))
        elif isinstance(d, dict) and d.get("kind") == "ipc" and d.get("ref_handle"):
            out.append((_unb64(d["ref_handle"]) or b"", int(d.get("ref_offset") or 0)))
    return out


def release_counter(handle: bytes, offset: int) -> None:
    """Drop one reference of this process's own export (torch's receiver-side decrement, run here)."""
    torch.UntypedStorage._release_ipc_counter_cuda(handle, offset)


class Exports:
    """The CUDA IPC exports this process made, by owner (a slot, a kept output tag); each released once.

        exports.add("slot:in0", descs)     # after encode(..., "ipc", ...)
        exports.release("slot:in0")        # when the supervisor releases it; then torch.cuda.ipc_collect()
    """

    def __init__(self, release: Any = release_counter) -> None:
        self._release = release
        self._owned: dict[str, list[tuple[bytes, int]]] = {}

    def add(self, owner: str, descs: Any) -> None:
        refs = ipc_refs(descs)
        if refs:
            self._owned.setdefault(owner, []).extend(refs)

    def release(self, owner: str) -> int:
        refs = self._owned.pop(owner, [])
        for handle, offset in refs:
            self._release(handle, offset)
        return len(refs)

    def owners(self) -> list[str]:
        return list(self._owned)


def decode(descs: Any, blobs: Sequence[Any], device: str) -> list[Any]:
    """Rebuild values from descriptors; raises `TransportError` on anything malformed."""
    if not isinstance(descs, list):
        raise TransportError("descriptor list expected")
    out: list[Any] = []
    for d in descs:
        kind = d.get("kind") if isinstance(d, dict) else None
        if kind == "tensor":
            out.append(_host_tensor(d, blobs, device))
        elif kind == "ipc":
            out.append(_ipc_tensor(d))
        elif kind == "value" and (d.get("value") is None or isinstance(d.get("value"), (bool, int, float, str))):
            out.append(d["value"])
        elif kind == "seq":
            items = decode(d.get("items"), blobs, device)
            out.append(tuple(items) if d.get("tuple") else items)
        else:
            raise TransportError(f"unknown descriptor {str(d)[:80]!r}")
    return out


def spec_of(values: Sequence[Any]) -> list[dict[str, Any]]:
    """Shapes and dtypes of tensor inputs (values as-is): what the candidate allocates for an input slot."""
    out = []
    for v in values:
        if isinstance(v, torch.Tensor):
            out.append({"kind": "tensor", "dtype": dtype_name(v.dtype), "shape": list(v.shape)})
        else:
            out.extend(encode([v], "host", []))
    return out


def allocate(spec: Sequence[dict[str, Any]], device: str) -> list[Any]:
    """Fresh (uninitialised) buffers for a slot described by `spec_of`; values are passed through."""
    out: list[Any] = []
    for d in spec:
        if d.get("kind") == "tensor":
            dtype, shape = _check_shape(d)
            out.append(torch.empty(shape, dtype=dtype, device=device))
        else:
            out.extend(decode([d], [], device))
    return out
