"""The wire: frames, HMAC authentication, sequence numbers, deadlines; tensors as validated bytes."""

from __future__ import annotations

import socket
import threading
import time
import tracemalloc

import pytest
import torch

from davinci.kernelgym.protocol import MAGIC, PREFIX, Channel, ChannelClosed, ChannelTimeout, ProtocolError
from davinci.kernelgym.transport import TransportError, allocate, decode, encode, spec_of


def pair(key: bytes | None = None) -> tuple[Channel, Channel]:
    a, b = socket.socketpair()
    return Channel(a, sign_key=key, max_blob_bytes=None), Channel(b, verify_key=key, max_blob_bytes=None)


def test_frames_round_trip_with_blobs_and_authentication():
    tx, rx = pair(b"k" * 32)
    tx.send({"op": "x", "v": [1, 2]}, [b"abc", memoryview(b"defg")])
    header, blobs = rx.recv(time.monotonic() + 2)
    assert header["op"] == "x" and [bytes(b) for b in blobs] == [b"abc", b"defg"]


def test_a_frame_signed_with_another_key_is_rejected():
    a, b = socket.socketpair()
    Channel(a, sign_key=b"wrong" * 8, max_blob_bytes=None).send({"op": "forged"})
    with pytest.raises(ProtocolError, match="authentication"):
        Channel(b, verify_key=b"right" * 8, max_blob_bytes=None).recv(time.monotonic() + 2)


def test_raw_bytes_and_replayed_frames_are_rejected():
    a, b = socket.socketpair()
    a.sendall(b"correct: true\n" * 4)
    with pytest.raises(ProtocolError):
        Channel(b, max_blob_bytes=None).recv(time.monotonic() + 2)
    tx, rx = pair()
    tx.send({"op": "one"})
    rx.recv(time.monotonic() + 2)
    tx._send_seq = 0  # replay sequence number 0
    tx.send({"op": "again"})
    with pytest.raises(ProtocolError, match="sequence"):
        rx.recv(time.monotonic() + 2)


def test_deadline_and_closed_peer():
    tx, rx = pair()
    t0 = time.monotonic()
    with pytest.raises(ChannelTimeout):
        rx.recv(time.monotonic() + 0.2)
    assert time.monotonic() - t0 < 1.0
    tx.close()
    with pytest.raises(ChannelClosed):
        rx.recv(time.monotonic() + 2)


def test_oversized_frames_are_refused_before_allocation():
    a, b = socket.socketpair()
    Channel(a, max_blob_bytes=None).send({"op": "big"}, [b"x" * 1000])
    with pytest.raises(ProtocolError):
        Channel(b, max_blob_bytes=100).recv(time.monotonic() + 2)


def test_a_trusted_peers_frame_is_not_bounded_by_a_default():
    """The supervisor and the reference worker exchange whole problems' tensors over the host transport (a
    'check' of 19_ReLU carries 6.4 GB of outputs and 6.4 GB of inputs after the call): a channel with no
    bound reads on, where a bounded one refuses the claim at once. The peer here claims 9 GiB and closes."""
    import json

    def claim(sock: socket.socket) -> None:
        body = json.dumps({"op": "check", "seq": 0, "blobs": [9 << 30]}).encode()
        sock.sendall(PREFIX.pack(MAGIC, len(body), 9 << 30) + body + b"x" * 64)
        sock.close()

    a, b = socket.socketpair()
    claim(a)
    with pytest.raises(ChannelClosed):  # it read the 64 bytes that came, then found the peer gone
        Channel(b, max_blob_bytes=None).recv(time.monotonic() + 2)
    a, b = socket.socketpair()
    claim(a)
    with pytest.raises(ProtocolError, match="limit"):
        Channel(b, max_blob_bytes=16 << 20).recv(time.monotonic() + 2)


def _peak_while(fn) -> int:
    """Peak bytes Python allocated while `fn` ran (tracemalloc sees bytearray buffers)."""
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_a_forged_giant_length_is_refused_without_allocating():
    """rt07: a 16-byte prefix claiming 512 MiB, a tiny body and a junk header tag on an authenticated channel
    (the default cap is 8 GiB): refused at the header tag, and the supervisor never allocates the payload."""
    a, b = socket.socketpair()
    body = b'{"x":1}'
    a.sendall(PREFIX.pack(MAGIC, len(body), 512 << 20) + body + bytes(32))
    rx = Channel(b, verify_key=b"k" * 32, max_blob_bytes=None)

    def receive():
        with pytest.raises(ProtocolError, match="authentication"):
            rx.recv(time.monotonic() + 2)
    assert _peak_while(receive) < 8 << 20


def test_a_signed_frame_above_the_calls_limit_is_refused_before_reading_it():
    """A peer that holds the key (a candidate reaching the harness's channel) still cannot make us allocate
    more than that request can legitimately return: the per-call limit is checked on the prefix."""
    tx, rx = pair(b"k" * 32)
    tx.send({"op": "run"}, [b"x" * 4096])
    with pytest.raises(ProtocolError, match="prefix"):
        rx.recv(time.monotonic() + 2, max_blob_bytes=1024)


def test_a_large_frame_still_round_trips_through_the_growing_buffer():
    tx, rx = pair(b"k" * 32)
    blob = bytes(range(256)) * (12 << 12)  # 12 MiB: several doublings
    threading.Thread(target=tx.send, args=({"op": "big"}, [blob, b"z"]), daemon=True).start()
    header, blobs = rx.recv(time.monotonic() + 10, max_blob_bytes=len(blob) + 1)
    assert bytes(blobs[0]) == blob and bytes(blobs[1]) == b"z"


def test_tensors_and_values_cross_as_bytes():
    values = [torch.arange(6, dtype=torch.float32).reshape(2, 3).t(), 3, (torch.tensor([True, False]), None),
              torch.zeros(0, 4, dtype=torch.bfloat16)]
    blobs: list = []
    descs = encode(values, "host", blobs)
    out = decode(descs, blobs, "cpu")
    assert torch.equal(out[0], values[0]) and out[1] == 3 and torch.equal(out[2][0], values[2][0])
    assert out[2][1] is None and out[3].shape == (0, 4) and out[3].dtype == torch.bfloat16
    slot = allocate(spec_of(values[:2]), "cpu")
    assert slot[0].shape == (3, 2) and slot[1] == 3


@pytest.mark.parametrize("desc", [
    {"kind": "tensor", "dtype": "float32", "shape": [4], "blob": 0},          # 8 bytes for 16 needed
    {"kind": "tensor", "dtype": "object", "shape": [2], "blob": 0},
    {"kind": "tensor", "dtype": "float32", "shape": [-1], "blob": 0},
    {"kind": "pickle", "data": "gASV"},
    {"kind": "ipc", "dtype": "float32", "shape": [4], "stride": [1], "offset": 2, "size_bytes": 16,
     "device": 0, "storage_offset_bytes": 0, "ref_offset": 0},                # view past its storage
])
def test_malformed_descriptors_raise(desc):
    with pytest.raises(TransportError):
        decode([desc], [b"\0" * 8], "cpu")


def test_a_reply_field_that_should_be_a_number_and_is_not_is_named():
    """`protocol.malformed_number`: what the supervisor reads as numbers (times, shares, work, counts) must be numbers;
    a candidate that rewrote one (a string where `overhead_ms` goes: red team, c2_hp_reply_field_type) is a
    malformed reply, never an evaluator error."""
    from davinci.kernelgym.job import malformed_number

    good = {"ok": True, "event_ms": [1.0, 2], "overhead_ms": 0.1, "phases_ms": {"fill": 0.2}, "threads": [1, 2, 3, 4],
            "evidence": {"kernel_ms": None, "forward_ms": 3.0, "names": ["k"]}, "note": "text"}
    assert malformed_number(good) is None
    assert malformed_number({**good, "overhead_ms": "x"}) == "overhead_ms"
    assert malformed_number({**good, "event_ms": [1.0, "2"]}) == "event_ms"
    assert malformed_number({**good, "evidence": {"kernel_ms": True}}) == "evidence.kernel_ms"
    assert malformed_number({**good, "phases_ms": {"fill": "x"}}) == "phases_ms"
    # numbers the supervisor's float() / int() cannot take, and shapes it indexes into (review of the same change)
    assert malformed_number({**good, "reused_storage": float("inf")}) == "reused_storage"
    assert malformed_number({**good, "event_ms": [10 ** 400]}) == "event_ms"
    assert malformed_number({**good, "threads": [1]}) == "threads"
    assert malformed_number({**good, "evidence": [1, 2]}) == "evidence"
    assert malformed_number({**good, "kernels": [["k", "x"]]}) == "kernels"
    assert malformed_number({**good, "kernels": [["k", 1.5]]}) is None
