"""The exporter's own bookkeeping of CUDA IPC exports (`transport.Exports`), on hand-made descriptors.

Why it exists: torch frees an exported block only when its reference count, kept in a file in the
exporter's /dev/shm, drops to zero, and the receiver's decrement cannot reach a candidate's private
/dev/shm. Every export then stayed allocated in the candidate's process (and in the twin's) until it exited:
on the H200, five of nine KernelBench problems with GB-sized outputs ran out of device memory. The GPU
side is `benchmarks/gpu/ipc_release_check.py`; here, that each export is released exactly once, by owner.
"""

from __future__ import annotations

import base64

from davinci.kernelgym.transport import Exports, ipc_refs


def _ipc(handle: str, offset: int) -> dict:
    return {"kind": "ipc", "dtype": "float32", "shape": [4], "ref_handle": base64.b64encode(handle.encode()).decode(),
            "ref_offset": offset}


def test_ipc_refs_walks_nested_outputs_and_skips_host_values() -> None:
    descs = [[_ipc("/torch_1_a", 0), {"kind": "value", "value": 3}],
             [{"kind": "seq", "tuple": True, "items": [_ipc("/torch_1_a", 1), {"kind": "tensor", "blob": 0}]}],
             {**_ipc("/torch_1_a", 2), "ref_handle": None}]  # an empty tensor's export has no counter
    assert ipc_refs(descs) == [(b"/torch_1_a", 0), (b"/torch_1_a", 1)]


def test_each_export_is_released_once_with_its_owner() -> None:
    released: list[tuple[bytes, int]] = []
    ex = Exports(release=lambda h, o: released.append((h, o)))
    ex.add("slot:in0", [_ipc("/torch_7_x", 0), _ipc("/torch_7_x", 1)])
    ex.add("tag:timed", [[_ipc("/torch_7_x", 2)], [_ipc("/torch_7_x", 3)]])
    ex.add("tag:a0", [{"kind": "tensor", "blob": 0}])  # host transport: nothing to release
    assert ex.owners() == ["slot:in0", "tag:timed"]
    assert ex.release("tag:timed") == 2
    assert ex.release("tag:timed") == 0  # a second release of the same owner decrements nothing
    assert ex.release("slot:unknown") == 0
    assert ex.release("slot:in0") == 2
    assert released == [(b"/torch_7_x", 2), (b"/torch_7_x", 3), (b"/torch_7_x", 0), (b"/torch_7_x", 1)]
    assert ex.owners() == []


def test_the_receiver_never_opens_an_ipc_event(monkeypatch) -> None:
    """The driver keeps an interprocess event's state in a file in the exporter's /dev/shm, which is private
    for a candidate: opening its event failed every CUDA IPC transfer on the GPU, so the exporter synchronizes
    instead and the receiver ignores whatever event a descriptor names (a forged one would be opened too)."""
    import torch.multiprocessing.reductions as reductions

    from davinci.kernelgym import transport

    seen: list[tuple] = []
    monkeypatch.setattr(reductions, "rebuild_cuda_tensor", lambda *args: seen.append(args) or "rebuilt")
    desc = {**_ipc("/torch_9_y", 5), "stride": [1], "offset": 0, "device": 0, "handle": base64.b64encode(b"h").decode(),
            "size_bytes": 16, "storage_offset_bytes": 0, "event": base64.b64encode(b"forged").decode(), "event_sync": True}
    assert transport.decode([desc], [], "cuda") == ["rebuilt"]
    (args,) = seen
    assert args[-2:] == (b"", False)
    assert args[-4:-2] == (b"/torch_9_y", 5)  # the reference counter still travels (the exporter releases it)
