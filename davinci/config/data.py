"""Configuration of the data stage: problem sources, eval split, decontamination, diversity filter, SFT data."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True)
class DataConfig:
    # Training problem sources, in order: builtin (the project's suite), synthetic (composed from it),
    # kernelbench (a local folder in upstream's layout, or the Hugging Face dataset when `kernelbench_hf`).
    sources: tuple[Literal["builtin", "synthetic", "kernelbench"], ...] = ("builtin",)
    # Where the eval problems come from: a held-out part of the built-in suite (CPU-sized) or KernelBench.
    eval_source: Literal["builtin_heldout", "kernelbench"] = "builtin_heldout"
    # Built-in problems held out for eval (ids); empty means the suite's own default held-out list.
    eval_ids: tuple[str, ...] = ()
    # KernelBench: local folder in upstream's layout ("" = $DAVINCI_KERNELBENCH or ../shared/kernelbench).
    kernelbench_path: str = ""
    kernelbench_hf: bool = False
    kernelbench_levels: tuple[int, ...] = (1, 2, 3)
    # Cap on KernelBench problems per level (0 = all).
    kernelbench_limit: int = 0
    synthetic_count: int = 0
    # Decontamination: a training problem whose similarity to any eval problem reaches this is dropped.
    decontam_threshold: float = 0.7
    # Diversity filter: near-duplicates at or above this similarity are merged; at most `cluster_cap`
    # problems per operator cluster are kept.
    dedup_threshold: float = 0.9
    cluster_cap: int = 6
    # Optional raw SFT trajectories (JSONL of role-tagged messages) added to the generated SFT examples.
    sft_trajectories: str = ""
