"""daVinci-kernel engine: evaluation, skills, agents, LLM backends and RL, importable without Prefect or MLflow.

Subpackages (each opens with its own docstring):
  kernelgym/  sandboxed, hack-resistant kernel evaluation and metrics (fast_p, %SOL)
  skills/     skill schema, versioned store, BM25 retrieval + rerank, verified admission, seed library
  agents/     prompt templates and parsers for the three roles; the multi-turn episode runner
  llm/        backbone loading (transformers), tiny local model, SFT, generation backends
  rl/         rewards, advantage estimators, losses, the trainer

Top-level modules: `types` (Problem, Candidate), `config` (profiles), `tracking` (MetricLogger protocol),
`errors` (user-facing errors that carry their fix). Nothing here does work at import time.
"""

__version__ = "0.1.0"
