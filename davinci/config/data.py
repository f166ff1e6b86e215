"""Configuration of the data stage: problem sources, eval split, decontamination, diversity filter, SFT data.

Defaults are the tiny CPU profile: the built-in suite only, its default held-out problems as the eval split.
`data_prep.stage.run_data_stage(cfg, out_dir, seed)` is the engine that reads this section.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True)
class DataConfig:
    # Training problem sources, in order: builtin (the project's suite), synthetic (composed from it),
    # kernelbench (a local folder in upstream's layout, or the Hugging Face dataset when `kernelbench_hf`),
    # evolution (kept revisions of `davinci-kernel evolve` runs, files in `evolution_revisions`: policy SFT
    # examples and RL start states, not problems).
    sources: tuple[Literal["builtin", "synthetic", "kernelbench", "evolution"], ...] = ("builtin",)
    # revisions.jsonl files written by `davinci-kernel evolve` (used when `sources` includes evolution).
    evolution_revisions: tuple[str, ...] = ()
    # Where the eval problems come from: a held-out part of the built-in suite (CPU-sized), KernelBench, or
    # synthetic_heldout: `synthetic_heldout` op-chain problems synthesized with the training ones and held out by
    # operator signature (no training problem has the same op chain; see data_prep.stage).
    eval_source: Literal["builtin_heldout", "kernelbench", "synthetic_heldout"] = "builtin_heldout"
    # Built-in problems held out for eval (ids); empty means the suite's own default held-out list.
    eval_ids: tuple[str, ...] = ()
    # KernelBench: local folder in upstream's layout ("" = $DAVINCI_KERNELBENCH or ../shared/kernelbench).
    kernelbench_path: str = ""
    kernelbench_hf: bool = False
    kernelbench_levels: tuple[int, ...] = (1, 2, 3)
    # Cap on KernelBench problems per level (0 = all).
    kernelbench_limit: int = 0
    # Synthesized problems (op chains composed by data_prep.synthesis); 0 = none. Each costs ~0.3 s here.
    synthetic_count: int = 0
    # Op-chain family of the synthesized problems: op names of data_prep.synthesis_ops.OPS (empty = every op)
    # and the chain lengths drawn from (empty = 2-4 ops, the generator's own mix).
    synthetic_ops: tuple[str, ...] = ()
    synthetic_lengths: tuple[int, ...] = ()
    # Synthesized problems held out for eval when eval_source is synthetic_heldout (on top of synthetic_count).
    synthetic_heldout: int = 0
    # Check every synthesized problem's generated fused Triton solution in the interpreter before keeping it.
    synthetic_verify: bool = True
    # Decontamination: a training problem whose similarity to any eval problem reaches this is dropped.
    decontam_threshold: float = 0.7
    # Diversity filter: near-duplicates at or above this token-shingle Jaccard are dropped; at most
    # `cluster_cap` problems per operator family are kept (0 = no cap).
    dedup_threshold: float = 0.9
    cluster_cap: int = 6
    # Optional raw SFT trajectories (JSONL of role-tagged messages) added to the generated SFT examples.
    sft_trajectories: str = ""
