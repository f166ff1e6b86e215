"""The wire format between the supervisor and its workers: JSON headers plus raw byte blobs, never pickle.

One frame = b"KGYM" | json length (u32) | blob bytes (u64) | JSON header | [32-byte header tag] | blobs |
[32-byte HMAC tag]. The header tag (HMAC over prefix + JSON, so over the blob length and the sequence number
too) is checked before a single blob byte is read or allocated; the final tag covers the header tag and the
blobs. Every read grows its buffer with the bytes that actually arrived, and a claimed blob length above the
receive's limit (the channel's `max_blob_bytes`, or the per-call `max_blob_bytes` the supervisor derives from
what that request can legitimately return) is refused before anything is read: a forged length costs us
nothing.
Nothing read from a worker is ever unpickled (a pickle from the candidate's process would run its code in
ours); tensors cross as raw bytes or as validated CUDA IPC fields (`transport.py`).

Frames from the candidate's process carry an HMAC-SHA256 tag under a per-job key and a sequence number.
The key lives only inside an `hmac` object built before the candidate is imported, so a stray write to the
socket (found through /proc/self/fd) does not authenticate; a candidate that reaches the object through
introspection could still sign (the static checks refuse gc/inspect/frames), which is why nothing
verdict-critical is decided from these frames alone: outputs are compared, and timings bounded, on the
trusted side. Receives and sends take deadlines; a closed peer, a timeout or a malformed frame raise the
typed errors below, which the supervisor turns into a verdict.
"""

from __future__ import annotations

import hmac
import json
import math
import socket
import struct
import time
from typing import Any, Sequence

MAGIC = b"KGYM"
PREFIX = struct.Struct(">4sIQ")
TAG_LEN = 32
MAX_JSON = 16 << 20
GROW_FROM = 1 << 20  # receive buffers start at this size and double as bytes arrive


class ChannelError(Exception):
    """Base of every channel failure."""


class ChannelClosed(ChannelError):
    """The peer closed the socket or died."""


class ChannelTimeout(ChannelError):
    """The deadline passed before a whole frame arrived (or could be sent)."""


class ProtocolError(ChannelError):
    """A malformed, oversized, unauthenticated or out-of-sequence frame."""


def _remaining(deadline: float | None) -> float | None:
    if deadline is None:
        return None
    left = deadline - time.monotonic()
    if left <= 0:
        raise ChannelTimeout("deadline passed")
    return left


class Channel:
    """A framed, optionally authenticated, deadline-aware view of a connected stream socket.

    `sign_key` signs outgoing frames (the candidate side); `verify_key` checks incoming ones (the
    supervisor's side of a candidate channel). `max_blob_bytes` bounds what a peer may make us allocate, and
    every channel names it (no default, so a new channel cannot be left open by omission): a bound on every
    channel that reads from the candidate's process; None (unbounded) only for a trusted peer (the
    supervisor, the reference worker), whose frames carry whole problems' tensors over the host transport
    (a 'check' request of a problem with 6.4 GB outputs carries the outputs and the inputs after the call).
    """

    def __init__(self, sock: socket.socket, *, max_blob_bytes: int | None, sign_key: bytes | None = None,
                 verify_key: bytes | None = None) -> None:
        self.sock = sock
        self._signer = hmac.new(sign_key, digestmod="sha256") if sign_key else None
        self._verifier = hmac.new(verify_key, digestmod="sha256") if verify_key else None
        self._send_seq = 0
        self._recv_seq = 0
        self.max_blob_bytes = max_blob_bytes

    def fileno(self) -> int:
        return self.sock.fileno()

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass

    # --- sending ---
    def send(self, header: dict[str, Any], blobs: Sequence[bytes | memoryview] = (), deadline: float | None = None) -> None:
        header = dict(header, blobs=[len(memoryview(b).cast("B")) for b in blobs], seq=self._send_seq)
        body = json.dumps(header, separators=(",", ":")).encode()
        prefix = PREFIX.pack(MAGIC, len(body), sum(header["blobs"]))
        parts: list[bytes | memoryview] = [prefix, body]
        mac = None
        if self._signer is not None:
            mac = self._signer.copy()
            mac.update(prefix)
            mac.update(body)
            head_tag = mac.digest()
            mac.update(head_tag)
            parts.append(head_tag)
        parts += blobs
        if mac is not None:
            for part in blobs:
                mac.update(part)
            parts.append(mac.digest())
        self._send_seq += 1
        for part in parts:
            self._sendall(memoryview(part).cast("B"), deadline)

    def _sendall(self, view: memoryview, deadline: float | None) -> None:
        sent = 0
        while sent < len(view):
            self.sock.settimeout(_remaining(deadline))
            try:
                sent += self.sock.send(view[sent:sent + (1 << 24)])
            except (socket.timeout, TimeoutError):
                raise ChannelTimeout("send timed out") from None
            except (BrokenPipeError, ConnectionResetError, OSError) as exc:
                raise ChannelClosed(f"peer gone while sending ({exc})") from None

    # --- receiving ---
    def _recv_exact(self, n: int, deadline: float | None) -> bytearray:
        """n bytes; the buffer grows with what arrived (doubling from 1 MiB), never allocated ahead of it."""
        buf = bytearray(min(n, GROW_FROM))
        got = 0
        while got < n:
            if got == len(buf):
                buf.extend(bytes(min(n, 2 * len(buf)) - len(buf)))
            self.sock.settimeout(_remaining(deadline))
            try:
                k = self.sock.recv_into(memoryview(buf)[got:], min(len(buf) - got, 1 << 24))
            except (socket.timeout, TimeoutError):
                raise ChannelTimeout("receive timed out") from None
            except (ConnectionResetError, OSError) as exc:
                raise ChannelClosed(f"peer gone while receiving ({exc})") from None
            if k == 0:
                raise ChannelClosed("peer closed the channel")
            got += k
        return buf

    def recv(self, deadline: float | None = None, max_blob_bytes: int | None = None) -> tuple[dict[str, Any], list[memoryview]]:
        """One frame. `max_blob_bytes`: this call's own bound on the payload (else the channel's)."""
        limit = self.max_blob_bytes if max_blob_bytes is None else max_blob_bytes
        prefix = self._recv_exact(PREFIX.size, deadline)
        magic, json_len, blob_len = PREFIX.unpack(prefix)
        if magic != MAGIC or json_len > MAX_JSON or (limit is not None and blob_len > limit):
            raise ProtocolError(f"bad frame prefix (magic {bytes(magic)!r}, json {json_len}, blobs {blob_len}, "
                                f"limit {limit})")
        body = self._recv_exact(json_len, deadline)
        mac = None
        if self._verifier is not None:
            head_tag = self._recv_exact(TAG_LEN, deadline)
            mac = self._verifier.copy()
            mac.update(prefix)
            mac.update(body)
            if not hmac.compare_digest(mac.digest(), bytes(head_tag)):
                raise ProtocolError("frame header failed authentication")
            mac.update(head_tag)
        header = self._parse_header(body, blob_len)
        blob_data = self._recv_exact(blob_len, deadline) if blob_len else bytearray()
        if mac is not None:
            tag = self._recv_exact(TAG_LEN, deadline)
            mac.update(blob_data)
            if not hmac.compare_digest(mac.digest(), bytes(tag)):
                raise ProtocolError("frame failed authentication")
        blobs, offset, view = [], 0, memoryview(blob_data)
        for size in header["blobs"]:
            blobs.append(view[offset:offset + size])
            offset += size
        return header, blobs

    def _parse_header(self, body: bytearray, blob_len: int) -> dict[str, Any]:
        try:
            header = json.loads(body)
        except (ValueError, UnicodeDecodeError, RecursionError):  # (nesting too deep to parse: not ours either)
            raise ProtocolError("frame header is not JSON") from None
        sizes = header.get("blobs") if isinstance(header, dict) else None
        if not isinstance(sizes, list) or not all(isinstance(s, int) and s >= 0 for s in sizes) or sum(sizes) != blob_len:
            raise ProtocolError("frame blob table does not match its payload")
        if header.get("seq") != self._recv_seq:
            raise ProtocolError(f"frame out of sequence (got {header.get('seq')!r}, expected {self._recv_seq})")
        self._recv_seq += 1
        return header


def socket_from_fd(fd: int) -> socket.socket:
    return socket.socket(socket.AF_UNIX, socket.SOCK_STREAM, fileno=fd)


# --- reply fields --------------------------------------------------------------------------------------------
# Fields the supervisor reads as numbers (times, shares, work, counts): by name, at any depth of a reply.
NUMERIC_SUFFIXES = ("_ms", "_s", "_share", "_work", "_bytes", "_storage", "_growth", "_numel")
NUMERIC_KEYS = frozenset({"threads", "samples", "pid"})


def malformed_number(obj: Any, path: str = "", depth: int = 0) -> str | None:
    """The first field (dotted path) of a reply that should hold a number, a list of numbers or a {name: number}
    map, or has a shape the supervisor indexes into (`_shaped`), and does not (None is allowed: absent); None
    when every such field is well-formed. A string or an object there made the supervisor's float() fail as an
    evaluator error ("internal") and lose the verdict to come."""
    if not isinstance(obj, dict) or depth > 4:
        return None
    for key, value in obj.items():
        name = f"{path}{key}"
        if value is not None and not _shaped(key, value):
            return name
        if isinstance(value, dict):
            found = malformed_number(value, f"{name}.", depth + 1)
            if found:
                return found
            items = list(value.values())
        else:
            items = [v for v in (value if isinstance(value, (list, tuple)) else [value]) if v is not None]
        if isinstance(key, str) and (key.endswith(NUMERIC_SUFFIXES) or key in NUMERIC_KEYS) and \
                not all(_number(v) for v in items):
            return name
    return None


def _number(v: Any) -> bool:
    """A finite int or float (not a bool) that float() takes: what the supervisor's arithmetic can use."""
    if not isinstance(v, (int, float)) or isinstance(v, bool):
        return False
    try:
        return math.isfinite(float(v))
    except OverflowError:  # an int too large for a float
        return False


def _shaped(key: Any, value: Any) -> bool:
    """The reply fields the supervisor indexes into have the shape it indexes: `threads` four counts (before and
    after), `evidence` an object, `kernels` [name, microseconds] pairs."""
    if key == "threads":
        return isinstance(value, list) and len(value) == 4
    if key == "evidence":
        return isinstance(value, dict)
    if key == "kernels":
        return isinstance(value, list) and all(isinstance(k, list) and len(k) == 2 and _number(k[1]) for k in value)
    return True
