"""Input generation on the target device and the distributions correctness trials draw from.

Runs in the trusted reference worker. `native_inputs` calls the problem's own `get_inputs()` under a seeded
generator with the target device as torch's default device, so `torch.rand(...)` fills device memory
directly (no host `torch.rand` of gigabytes plus a copy: the main cost of KernelBench's harness).

A distribution is a registered function `(x [*S], gen) -> y [*S]` applied to every *continuous* floating
input (at least 16 distinct values in a sample; discrete inputs such as +-1 targets, masks and labels
keep their contract). Each one is structure-preserving: an odd, monotone, elementwise map with f(0) = 0,
so zeros, signs, order, symmetry and triangularity survive (symmetric- or triangular-matrix problems stay
what they claim to be), while the magnitudes a closed-form shortcut relies on do not:
- "native":     the problem's own values;
- "scaled":     x * c, c ~ 2**U(1, 3) per tensor (breaks E[x]-based analytical answers);
- "heavy_tail": x -> sign(x) * m * ((1 - 0.999 |x|/m) ** (-2/3) - 1), m = max|x|: a Pareto(1.5)-like tail
                with rare values ~100x the typical one at random positions (breaks subsampling).
The maps work in place, chunk by chunk, so an 8 GB input needs no second copy; on a GPU, float32 and half
inputs take `fused`'s one-pass versions of heavy_tail, spikes and reshaped. The reference worker
rejects a distribution whose reference output is non-finite and regenerates the native inputs instead.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import torch

from davinci.kernelgym import fused
from davinci.registry import Registry

DISTRIBUTIONS: Registry[Callable[[torch.Tensor, torch.Generator], torch.Tensor]] = Registry("input distribution")


def is_continuous(x: Any) -> bool:
    """A floating tensor with >= 16 distinct values among (up to) its first 4096 elements."""
    if not isinstance(x, torch.Tensor) or not x.dtype.is_floating_point or x.numel() < 16:
        return False
    sample = x.reshape(-1)[:4096]
    return int(torch.unique(sample).numel()) >= 16


CHUNK = 1 << 24


def _chunks(x: torch.Tensor):
    """In-place views of a contiguous tensor, 2**24 elements each (bounded temporaries on 8 GB inputs)."""
    return x.view(-1).split(CHUNK)


def _absmax(x: torch.Tensor) -> float:
    """max |x| over the chunks with one synchronisation (not one per chunk: 96 on a 1.6 G-element input)."""
    return float(torch.stack([c.abs().amax() for c in _chunks(x)]).amax())


@DISTRIBUTIONS.register("native")
def native(x: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    return x


@DISTRIBUTIONS.register("scaled")
def scaled(x: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    exponent = 1.0 + 2.0 * float(torch.rand((), generator=gen, device=gen.device))
    return x.mul_(2.0 ** exponent)


@DISTRIBUTIONS.register("heavy_tail")
def heavy_tail(x: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    m = _absmax(x) if x.numel() else 0.0
    if m == 0.0:
        return x
    if fused.maps(x):  # one pass on a GPU
        return fused.heavy_tail_(x, m)
    for c in _chunks(x):
        t = (c.abs() / m).clamp_(max=1.0)
        c.copy_(torch.sign(c) * m * ((1.0 - 0.999 * t) ** (-2.0 / 3.0) - 1.0))
    return x


_SAME_SIZE_INT = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


@DISTRIBUTIONS.register("spikes")
def spikes(x: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """The native values, except a few (about 16 per tensor, at most one in 8192) pushed 256-4096 times the
    tensor's largest magnitude further out, away from zero, and never beyond a quarter of the square root of
    the dtype's largest value (64 in half precision): a square of a spike stays finite in the input's own dtype.

    Almost every value stays in the problem's own range, so an approximation chosen because a sample of the
    input looked native (a lookup table, a truncated series, skipping the max of a softmax) meets the few
    that are not. The factor starts at 256: a softmax without its max pass overflows float32 once a value is
    88 above whatever fixed shift it subtracts, and a shift that keeps unit-scale rows from underflowing is
    at most ~87, so every such window ends below 256 x a unit maximum (a shift of 45 passed at 4-64 x).
    Which values move: outside the tensor's first eighth and every row's first eighth (where a sample is
    usually taken), by a seeded hash of the position; in a square matrix, by a hash of the value instead, so
    equal entries move together and symmetry and triangles survive. Zeros and signs always do.
    """
    if not x.is_floating_point() or x.element_size() not in _SAME_SIZE_INT or not x.numel():
        return x
    salt = int(torch.randint(0, 1 << 30, (), generator=gen, device=gen.device))
    factor = 2.0 ** float(8.0 + 4.0 * torch.rand((), generator=gen, device=gen.device))
    top = _absmax(x)
    amount = min(factor * top, torch.finfo(x.dtype).max ** 0.5 / 4.0)
    by_value = x.dim() >= 2 and x.shape[-1] == x.shape[-2]
    skip = 0 if by_value else max(1, x.numel() // 8)
    cols = int(x.shape[-1]) if x.dim() else 1
    rate = int(min(8192, max(32, (x.numel() - skip) // 16)))
    if fused.maps(x):  # one pass on a GPU, the same positions
        return fused.spikes_(x, salt, rate, skip, cols, amount, by_value)
    start = 0
    for c in _chunks(x):
        if by_value:
            key = c.view(_SAME_SIZE_INT[c.element_size()]).to(torch.int64)
        else:
            key = torch.arange(start, start + c.numel(), device=c.device, dtype=torch.int64)
        mixed = ((key ^ salt) * 0x9E3779B1) >> 16  # a multiplicative hash: every bit of the key matters
        picked = (mixed & 0x7FFFFFFF) % rate == 0
        if not by_value:  # not in the flat first eighth, nor in the first eighth of any row
            picked &= (key >= skip) & (key % cols >= cols // 8)
        c.add_(torch.where(picked, torch.sign(c) * amount, 0.0).to(c.dtype))
        start += c.numel()
    return x


@DISTRIBUTIONS.register("reshaped")
def reshaped(x: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """The same range, another shape: |x| / max|x| raised to a drawn power k in [1/4, 4] (sign, zeros,
    symmetry and the largest magnitude kept). Every value stays where the native ones lie, so a shortcut that
    checks the range and then relies on the native *distribution* (a normaliser estimated from sum(x) for
    uniform entries, say) meets inputs it was not fitted to."""
    if not x.is_floating_point() or not x.numel():
        return x
    top = _absmax(x)
    if top == 0.0:
        return x
    k = 4.0 ** float(2.0 * torch.rand((), generator=gen, device=gen.device) - 1.0)
    if fused.maps(x):  # one pass on a GPU
        return fused.reshaped_(x, top, k)
    for c in _chunks(x):
        c.copy_(torch.sign(c) * top * (c.abs() / top) ** k)
    return x


def native_inputs(get_inputs: Callable[[], Sequence[Any]], seed: int, device: str) -> list[Any]:
    """The problem's `get_inputs()` drawn on `device` under `seed`; tensors made on the host are moved."""
    torch.manual_seed(seed % (2 ** 63 - 1))
    with torch.device(device):
        values = list(get_inputs())
    return [v.to(device) if isinstance(v, torch.Tensor) and v.device.type != torch.device(device).type else v
            for v in values]


def apply_distribution(values: list[Any], name: str, seed: int) -> list[Any]:
    """Apply distribution `name` to every continuous input, in place (fresh tensors from `get_inputs`);
    others pass through unchanged."""
    fn = DISTRIBUTIONS.get(name)
    if name == "native":
        return values
    out = []
    for i, v in enumerate(values):
        if is_continuous(v):
            gen = torch.Generator(device=v.device)
            gen.manual_seed((seed * 1009 + i) % (2 ** 63 - 1))
            v = fn(v if v.is_contiguous() else v.contiguous(), gen)
        out.append(v)
    return out
