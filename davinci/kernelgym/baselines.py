"""Baselines (eager and torch.compile of the reference): standalone measurement and the on-disk cache.

Live baselines are timed interleaved with the candidate inside an evaluation (job.py). The others are
measured once by `measure_program` in the trusted reference worker (fresh inputs every round, generated
on the device outside the timed region; same `DeviceTimer` loop as the candidate) and cached per
(problem code hash + shape overrides, device model, torch version, baseline name) by `DiskCache`. The device
model (`device_model`) is the GPU's name, e.g. "NVIDIA H100 80GB HBM3" vs "NVIDIA H100 PCIe", or the CPU's
model name, so workers of a heterogeneous cluster sharing one cache folder never mix timings:

    cache = DiskCache(root); cache.get("baselines", key) / cache.put("baselines", key, value)

Writes are atomic (temp file + rename), so concurrent lanes and interrupted runs never leave half a file.
"""

from __future__ import annotations

import hashlib
import json
import os
import functools
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from davinci.kernelgym.stats import defended, launch_allowance, should_stop


class DiskCache:
    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    def _path(self, kind: str, key: str) -> Path:
        return self.root / kind / f"{key}.json"

    def get(self, kind: str, key: str) -> dict[str, Any] | None:
        path = self._path(kind, key)
        try:
            return json.loads(path.read_text())
        except (OSError, ValueError):
            return None

    def put(self, kind: str, key: str, value: dict[str, Any]) -> None:
        path = self._path(kind, key)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
        with os.fdopen(fd, "w") as f:
            json.dump(value, f)
        os.replace(tmp, path)


@functools.lru_cache(maxsize=1)
def cpu_model() -> str:
    """The host CPU's model name from /proc/cpuinfo (or the platform's processor string)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform

    return platform.processor() or platform.machine() or "unknown"


def device_model(info: Mapping[str, Any]) -> str:
    """The device part of every cache key, from a lane's `info`: the GPU's name, or "cpu:<CPU model name>"."""
    device = str(info.get("device") or "cpu")
    return f"cpu:{cpu_model()}" if device == "cpu" else device


def cache_key(*parts: Any) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:24]


def measure_program(fn: Callable[..., Any], make_inputs: Callable[[int], Sequence[Any]], timer: Any, *,
                    rotation: int, seed: int, warmup: int, rule: dict[str, Any]) -> dict[str, Any]:
    """Time `fn` over rounds of `rotation` fresh input sets until `rule` says stop.

    `rule` = {min_reps, max_reps, ci_rel, max_s}. Returns event ms, host ms, the timer overhead and the
    defended samples (`stats.defended`, with this program's own host-minus-event gap as the allowance).
    """
    events: list[float] = []
    hosts: list[float] = []
    launches: list[float] = []
    samples: list[float] = []
    t0 = time.monotonic()
    rnd = 0
    while True:
        sets = [list(make_inputs(seed * 7919 + rnd * rotation + j)) for j in range(max(1, rotation))]
        if rnd == 0:
            timer.warmup(fn, sets[0], warmup)
            timer.calibrate()
        after: list[float] = []
        ev, ho, _ = timer.time_calls(fn, sets, range(len(sets)), keep=False, after=after)
        del sets
        events += ev
        hosts += ho
        launches += [h - a for h, a in zip(ho, after)]
        # the program is the trusted reference itself: its own host-minus-event gap is its allowance
        samples = defended(events, hosts, launch_allowance(events, hosts), timer.cuda, launches,
                           timer.launch_overhead_ms)
        rnd += 1
        if should_stop({"p": samples}, min_reps=rule["min_reps"], max_reps=rule["max_reps"],
                       ci_rel=rule["ci_rel"], elapsed_s=time.monotonic() - t0, max_s=rule["max_s"]):
            break
    return {"event_ms": events, "host_ms": hosts, "overhead_ms": timer.overhead_ms, "samples": samples}
