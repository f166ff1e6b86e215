"""Prefect flows: the pipeline, one flow per stage, deployments and schedules, and the `davinci-kernel` CLI.

    flows/pipeline.py   data -> sft -> rl -> skills -> eval, as subflows of one pipeline flow
    flows/stages/       one flow per stage; each also runs alone (`davinci-kernel stage NAME --from RUN_ID`)
    flows/context.py    MLflow run lifecycle for flows (only flows open runs), resume, upstream lookup
    flows/deployments.py  nightly pipeline + on-demand stage reruns (`davinci-kernel serve`)
    flows/cli.py        the console script

Importing this package imports nothing heavy; Prefect and MLflow load when a command needs them.
"""
