"""Typed artifact references and the MLflow store: log, find and load what stages produce.

- `home`: where the project keeps its state (MLflow store, Prefect home, work folders, skill store).
- `store.TrackingStore`: one MLflow experiment, accessed only through `MlflowClient` with explicit run ids.
- `refs.StageOutputs`: the manifest a stage writes (`outputs.json`): its folder, its files, its summary;
  a later stage (or a rerun with `--from RUN_ID`) finds its inputs through it, locally or by download.
- `mlflow_logger.MlflowLogger`: the engine's `MetricLogger` protocol backed by MLflow.

Imports MLflow lazily, so `import artifacts` stays cheap.
"""
