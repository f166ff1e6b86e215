"""Evolutionary search over kernels (Kernel-Smith) and the training data it leaves (step-centric revisions).

Modules (each opens with its own docstring):
  config      `EvolveConfig` (the profile's `evolve` section): population, archive, budgets, mutator
  archive     `ArchiveEntry`, code features, diversity distance, insertion, parent selection (pure)
  mutators    registry `MUTATORS`: `replay` (recorded edits) and `policy` (the backbone)
  state       the per-generation state files that make a run resumable without re-evaluation
  search      `run_evolution(problem, cfg, mutator, evaluate, out_dir)` -> `EvolveResult`
  revisions   kept revisions (parent -> child beyond the CI noise) as SFT examples and RL start states
  lineage     the lineage graph (JSON) and its SVG picture
  outputs     per-problem files (archive, best kernel, lineage, revisions, summary) and fast_p of the best

Imports neither Prefect nor MLflow; kernelgym is reached only through the `evaluate` callable passed in.
The flow is `flows/evolve.py`, the command `davinci-kernel evolve`. Lineage skills are `davinci.skills.lineage`;
applying one to a problem is `davinci.agents.materialise`.
"""
