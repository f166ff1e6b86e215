"""Configuration of evolutionary search (`davinci-kernel evolve`): population, archive, budgets, mutation.

Defaults are the tiny CPU profile: a small population and archive, a few generations, and the `replay`
`rules` mutator (no model needed; `policy` needs a checkpoint). `evolve.*` keys can be set like any profile key
(`--set evolve.population=4`); `davinci.evolve.search.run_evolution` reads this section.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True)
class EvolveConfig:
    # Programs in generation 0 (from the given kernels, else from the mutator's seeds).
    population: int = 2
    # Budgets: stop after this many generations, evaluations (0 = no limit) or seconds of wall time
    # spent across resumes (0 = no limit), whichever comes first.
    generations: int = 3
    max_evaluations: int = 0
    wall_time_s: float = 0.0
    # Children proposed per generation, and the share of them made by crossover of two archive parents.
    children_per_generation: int = 2
    crossover_rate: float = 0.25
    # Archive: at most `archive_size` correct programs; the best `archive_size - diversity_slots` by
    # speedup, the rest picked for code-feature distance from those (farthest first).
    archive_size: int = 6
    diversity_slots: int = 2
    # Archive programs shown to the mutator as examples besides the parent.
    archive_examples: int = 1
    # Who proposes children: `rules` (model-free retuning of tiles and launch settings), `replay`
    # (recorded edits from `replay_path`) or `policy` (the backbone; `davinci-kernel evolve --checkpoint`).
    mutator: Literal["rules", "replay", "policy"] = "rules"
    replay_path: str = ""
    # A revision (parent -> child) is kept as training data when the child's speedup CI lower bound is
    # above the parent's CI upper bound times this factor (>= 1: beyond the timing noise).
    revision_min_gain: float = 1.0
    seed: int = 0
