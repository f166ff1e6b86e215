"""Prefect tasks: small, typed, retryable units that call the engine; no algorithm code here.

Every compute task
- takes plain values (paths, ids, config sections as dicts) and returns a `StageOutputs` dict;
- has a cache key over its inputs and the source of the code it runs (`tasks.caching`), persisted by
  Prefect, so a rerun of the pipeline with the same arguments skips work already done;
- writes into a folder named by that key under `.davinci/work/`, and resumes from partial output there
  when it is retried or rerun after an interruption;
- logs nothing to MLflow itself unless handed a run id (excluded from the cache key); the flows replay the
  task's `metrics.jsonl` into their run, so a cached result still yields a complete run.
"""
