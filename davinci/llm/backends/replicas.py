"""Generation on several devices of one host: a model replica per device, the hf backend's batches spread over them.

What: `ReplicaBackend(backbone, devices)` is the hf backend (`HFBackend`) on `backbone` plus a copy of the model
on every other device named in `model.gen_devices` (e.g. `[cuda:0, cuda:1]`). `generate_batches` cuts the
prompts into exactly the batches one `HFBackend` would (length-sorted, the same size rule, batch b seeded
seed + b) and hands each to the next free replica, yielding batches as they finish, so the runner's overlap of
generation and evaluation (`agents.runner`) works as on one device. A batch's output is the one-device
backend's: the same prompts, seed and weights, only the device differs (bitwise equal on CPU replicas, the
test; on GPUs up to the device's own kernel choices).

Choices:
- Threads, not processes: each replica decodes on its own device and stream, and the decoding step (graphgen's
  CUDA graph replay, or `generate`'s kernels) runs outside the GIL; the weights go to each device once when the
  backend is built (the epoch driver builds one per epoch from that epoch's checkpoint), never through files.
- Seeds per device: every replica seeds only its own device's generator (`HFBackend(seed_scope="device")`), so
  one thread's seed never resets another's sampling stream. CPU replicas share the one CPU generator, so they
  take one batch at a time (the same outputs, no speedup: CPU replicas exist for tests).
- Batch size: the configured `model.gen_batch_size`, or (0) the smallest any replica's free memory allows, so
  the batches do not depend on which replica is free.
- The first device is the backbone's own (the model being trained is a replica): `gen_devices` must name it.

Run: set `model.gen_devices=[cuda:0,cuda:1]` with `model.backend: hf` (make_backend builds this backend);
`benchmarks/gpu/rl_epoch_gpus.py` uses it for one RL epoch of the learning demonstration across GPUs.
"""

from __future__ import annotations

import copy
import queue
from contextlib import nullcontext
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import Iterator, Sequence

import torch

from davinci.errors import ConfigError
from davinci.llm.attention import attention_kernels
from davinci.llm.backbone import Backbone
from davinci.llm.backends.hf import HFBackend, batch_plan, batch_seed, in_prompt_order
from davinci.llm.types import GenOutput, Message, Sampling


def replica_backbone(backbone: Backbone, device: torch.device) -> Backbone:
    """A copy of `backbone` on `device` (same tokenizer object, a deep copy of the model's weights)."""
    model = copy.deepcopy(backbone.model).to(device)
    model.eval()
    bb = Backbone(model, backbone.tokenizer, backbone.cfg, device, base_path=backbone.base_path)
    bb.source_dir = backbone.source_dir
    return bb


def _indexed(device: torch.device) -> torch.device:
    """`cuda` as `cuda:0` (torch's default index), so that the two compare equal; any other device as it is."""
    return torch.device("cuda", 0) if device.type == "cuda" and device.index is None else device


def check_devices(backbone: Backbone, devices: Sequence[str]) -> list[torch.device]:
    """`devices` as torch devices: distinct, the backbone's own first, every CUDA index present."""
    devs = [_indexed(torch.device(d)) for d in devices]
    cuda = [d for d in devs if d.type == "cuda"]
    if len(set(cuda)) != len(cuda):  # CPU may repeat: CPU replicas exist for tests
        raise ConfigError(f"model.gen_devices names a device twice: {list(devices)}", "name each device once, e.g. [cuda:0, cuda:1]")
    own = _indexed(backbone.device)
    if devs[0] != own:
        raise ConfigError(f"model.gen_devices starts with {devs[0]}, but the model being trained is on {own}",
                          f"list the training device first, e.g. [{own}, ...]")
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    missing = [str(d) for d in devs if d.type == "cuda" and d.index >= count]
    if missing:
        raise ConfigError(f"model.gen_devices names {missing}, but this host has {count} CUDA device(s)",
                          "name only devices that exist (nvidia-smi -L), or leave model.gen_devices empty")
    return devs


class ReplicaBackend:
    """`GenerationBackend` over one model replica per device; see the module docstring."""

    def __init__(self, backbone: Backbone, devices: Sequence[str], batch_size: int = 16, cache: str = "auto",
                 concurrent: bool | None = None) -> None:
        devs = check_devices(backbone, devices)
        self.backbone = backbone
        self.replicas = [HFBackend(backbone, batch_size, cache, seed_scope="device")]
        self.replicas += [HFBackend(replica_backbone(backbone, d), batch_size, cache, seed_scope="device") for d in devs[1:]]
        # CPU replicas share the CPU generator, so by default they take one batch at a time (sampled outputs stay
        # reproducible); `concurrent=True` forces threads (greedy decoding draws nothing: the tests' check)
        self.concurrent = all(d.type == "cuda" for d in devs) if concurrent is None else concurrent

    def generate(self, prompts: Sequence[Sequence[Message]], sampling: Sampling) -> list[GenOutput]:
        return in_prompt_order(self.generate_batches(prompts, sampling), len(prompts))

    def generate_batches(self, prompts: Sequence[Sequence[Message]], sampling: Sampling) -> Iterator[list[tuple[int, GenOutput]]]:
        """HFBackend's batches and seeds, spread over the replicas; each batch yielded as soon as it finishes."""
        encoded = [self.backbone.encode_chat(p, add_generation_prompt=True) for p in prompts]
        batches = batch_plan(encoded, min(r._batch_size(encoded, sampling) for r in self.replicas))
        if not self.concurrent:
            for b, idx in batches:
                yield list(zip(idx, self.replicas[b % len(self.replicas)].generate_ids([encoded[i] for i in idx], sampling, batch_seed(sampling, b))))
            return
        yield from self._concurrent(batches, encoded, sampling)

    def _concurrent(self, batches: list[tuple[int, list[int]]], encoded: list[list[int]], sampling: Sampling) -> Iterator[list[tuple[int, GenOutput]]]:
        free: queue.SimpleQueue[HFBackend] = queue.SimpleQueue()
        for r in self.replicas:
            free.put(r)

        def run(b: int, idx: list[int]) -> list[tuple[int, GenOutput]]:
            replica = free.get()
            try:
                dev = replica.backbone.device
                with torch.cuda.device(dev) if dev.type == "cuda" else nullcontext():  # this thread's streams and graphs
                    return list(zip(idx, replica.generate_ids([encoded[i] for i in idx], sampling, batch_seed(sampling, b))))
            finally:
                free.put(replica)

        # SDPA's kernel choice is process-wide: entered here first, every thread's own enter/exit restores this set
        with attention_kernels(self.backbone.device):
            with ThreadPoolExecutor(max_workers=len(self.replicas), thread_name_prefix="gen-replica") as pool:
                pending: set[Future[list[tuple[int, GenOutput]]]] = {pool.submit(run, b, idx) for b, idx in batches}
                try:
                    while pending:
                        done, pending = wait(pending, return_when=FIRST_COMPLETED)
                        for fut in done:
                            yield fut.result()
                finally:
                    for fut in pending:
                        fut.cancel()


__all__ = ["ReplicaBackend", "check_devices", "replica_backbone"]
