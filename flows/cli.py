"""The `davinci-kernel` command.

    davinci-kernel run [--profile NAME] [--set key=value ...]        the whole pipeline (resumes if interrupted)
    davinci-kernel stage NAME --from RUN_ID [--set ...] [--use-cache] rerun one stage of a pipeline run
    davinci-kernel eval --problem FILE --candidate FILE [--device cpu|cuda] [--timeout S] [--json]
    davinci-kernel skills list [--version V] [--json] | skills show ID [--version V]
    davinci-kernel runs [--limit N]                                   list pipeline runs
    davinci-kernel config [--profile NAME] [--set ...]                print the resolved profile
    davinci-kernel ui [--port 5000]                                   MLflow UI on the project's store
    davinci-kernel serve                                              Prefect deployments with schedules

Bad input ends with one `error:` line plus the fix and exit code 2, never a traceback. Heavy imports
(Prefect, MLflow, torch) happen only inside the command that needs them, after the arguments are checked.
"""

from __future__ import annotations

import _thread
import argparse
import os
import signal
import sys
import threading
import traceback
from typing import Any, Sequence

from artifacts.home import Home, prepare_environment
from davinci.errors import DavinciError

STAGE_NAMES = ("data", "sft", "rl", "skills", "eval")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="davinci-kernel", description="Train an LLM to write fast, correct GPU kernels.")
    parser.add_argument("-v", "--verbose", action="store_true", help="show Prefect's own logs")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    run = sub.add_parser("run", help="run the whole pipeline")
    run.add_argument("--profile", default="tiny", help="profile name in configs/ or a YAML path (default: tiny)")
    run.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")

    stage = sub.add_parser("stage", help="rerun one stage of a pipeline run, logging a new stage run")
    stage.add_argument("name", choices=STAGE_NAMES, help="the stage to rerun")
    stage.add_argument("--from", dest="from_run", required=True, metavar="RUN_ID", help="the pipeline run to take inputs from")
    stage.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    stage.add_argument("--use-cache", action="store_true", help="reuse cached task results instead of recomputing")

    ev = sub.add_parser("eval", help="evaluate one candidate file against one KernelBench-format problem file")
    ev.add_argument("--problem", required=True, metavar="FILE")
    ev.add_argument("--candidate", required=True, metavar="FILE")
    ev.add_argument("--device", choices=("cpu", "cuda", "auto"), default="auto")
    ev.add_argument("--timeout", type=float, default=None, metavar="SECONDS")
    ev.add_argument("--json", action="store_true", help="print one JSON object")

    skills = sub.add_parser("skills", help="inspect the skill library")
    skills_sub = skills.add_subparsers(dest="skills_command", required=True, metavar="ACTION")
    lst = skills_sub.add_parser("list", help="list the skills of a library version")
    lst.add_argument("--version", default="latest")
    lst.add_argument("--json", action="store_true")
    show = skills_sub.add_parser("show", help="show one skill")
    show.add_argument("skill_id")
    show.add_argument("--version", default="latest")

    runs = sub.add_parser("runs", help="list pipeline runs in the MLflow store")
    runs.add_argument("--limit", type=int, default=20)
    runs.add_argument("--profile", default="tiny", help="profile whose tracking settings to use")

    cfg = sub.add_parser("config", help="print the resolved profile")
    cfg.add_argument("--profile", default="tiny")
    cfg.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")

    ui = sub.add_parser("ui", help="start the MLflow UI on the project's store")
    ui.add_argument("--host", default="127.0.0.1")
    ui.add_argument("--port", type=int, default=5000)
    ui.add_argument("--profile", default="tiny", help="profile whose tracking settings to use")

    serve = sub.add_parser("serve", help="serve Prefect deployments: nightly pipeline + on-demand stage reruns")
    serve.add_argument("--profile", default="tiny")
    serve.add_argument("--cron", default="0 3 * * *", help="schedule of the pipeline deployment (default: 03:00 daily)")
    serve.add_argument("--port", type=int, default=4200, help="port of the Prefect server started when PREFECT_API_URL is unset")
    return parser


def cmd_run(args: argparse.Namespace) -> int:
    from davinci.config import load_profile

    profile = load_profile(args.profile, args.overrides)  # bad profile / key fails here, before Prefect starts
    from flows.pipeline import pipeline_flow

    result = pipeline_flow(profile=args.profile, overrides=list(args.overrides))
    _print_run_footer(profile, result["parent_run_id"])
    return 0


def _print_run_footer(profile, parent_run_id: str) -> None:
    from flows.context import open_store

    store = open_store(profile)
    print(f"\nMLflow parent run: {parent_run_id}")
    print(f"  open it: davinci-kernel ui   then   {store.ui_url(parent_run_id)}")
    print(f"  rerun one stage: davinci-kernel stage eval --from {parent_run_id}")


def cmd_stage(args: argparse.Namespace) -> int:
    from flows.context import resolve_rerun

    parent, _ = resolve_rerun(args.from_run, args.overrides)  # bad run id / key fails before Prefect
    from flows.context import open_store
    from flows.rerun import rerun_stage_flow
    from davinci.config import load_profile

    rerun_stage_flow(stage=args.name, from_run_id=parent, overrides=list(args.overrides), use_cache=args.use_cache)
    print(f"\nlogged a new {args.name} run under pipeline run {parent}: {open_store(load_profile('tiny')).ui_url(parent)}")
    return 0


def cmd_eval(args: argparse.Namespace) -> int:
    from davinci.kernelgym.cli import eval_command

    return eval_command(args.problem, args.candidate, args.device, args.timeout, args.json)


def cmd_skills(args: argparse.Namespace) -> int:
    from davinci.skills.cli import list_command, show_command

    root = Home.current().skills
    if args.skills_command == "list":
        return list_command(root, args.version, args.json)
    return show_command(root, args.skill_id, args.version)


def cmd_runs(args: argparse.Namespace) -> int:
    from davinci.config import load_profile
    from flows.context import open_store

    store = open_store(load_profile(args.profile))
    runs = store.pipeline_runs()[: args.limit]
    if not runs:
        print("no pipeline runs yet: start one with `davinci-kernel run`")
        return 0
    for run in runs:
        tags = run.data.tags
        print(f"{run.info.run_id}  {run.info.status:9s}  profile={tags.get('profile', '?'):10s} {run.info.run_name}")
    return 0


def cmd_config(args: argparse.Namespace) -> int:
    import yaml

    from davinci.config import config_hash, load_profile, to_dict

    profile = load_profile(args.profile, args.overrides)
    print(f"# profile {profile.name}, hash {config_hash(profile)}")
    print(yaml.safe_dump(to_dict(profile), sort_keys=False))
    return 0


def cmd_ui(args: argparse.Namespace) -> int:
    from flows.servers import run_mlflow_ui

    return run_mlflow_ui(args.profile, args.host, args.port)


def cmd_serve(args: argparse.Namespace) -> int:
    from flows.deployments import serve_deployments

    return serve_deployments(args.profile, args.cron, args.port)


COMMANDS = {
    "run": cmd_run, "stage": cmd_stage, "eval": cmd_eval, "skills": cmd_skills,
    "runs": cmd_runs, "config": cmd_config, "ui": cmd_ui, "serve": cmd_serve,
}


INTERRUPT_GRACE_S = 20.0


def _exit_interrupted() -> None:
    print("\ninterrupted: rerun the same command to resume where it stopped", file=sys.stderr, flush=True)
    os._exit(130)


def install_interrupt_handler(grace_s: float = INTERRUPT_GRACE_S) -> None:
    """Ctrl-C / SIGTERM raise KeyboardInterrupt as usual (runs are marked KILLED on the way out), and arm a
    watchdog: Ctrl-C reaches the whole process group, Prefect's ephemeral API server included, and Prefect
    then retries reporting the crash to a server that is gone. After `grace_s`, or at a second signal, the
    process exits at once; an interrupted run is resumable either way.

    A signal that lands while the interpreter runs a finalizer or weakref callback raises KeyboardInterrupt
    where Python can only print it ("Exception ignored in ...", with a traceback) and drop it; the
    unraisable hook hides that one and delivers the interrupt again in ordinary code."""

    def second(signum: int, frame: Any) -> None:
        _exit_interrupted()

    def again(signum: int, frame: Any) -> None:
        signal.signal(signal.SIGINT, second)
        raise KeyboardInterrupt

    def first(signum: int, frame: Any) -> None:
        timer = threading.Timer(grace_s, _exit_interrupted)
        timer.daemon = True
        timer.start()
        signal.signal(signal.SIGINT, second)
        signal.signal(signal.SIGTERM, second)
        raise KeyboardInterrupt

    default_hook = sys.unraisablehook

    def unraisable(info: Any) -> None:
        if info.exc_type is not KeyboardInterrupt:
            default_hook(info)
            return
        signal.signal(signal.SIGINT, again)
        # From another thread, a moment later: tripped while this hook runs, the signal would be handled
        # inside it and dropped again.
        timer = threading.Timer(0.05, _thread.interrupt_main, args=(signal.SIGINT,))
        timer.daemon = True
        timer.start()

    signal.signal(signal.SIGINT, first)
    signal.signal(signal.SIGTERM, first)
    sys.unraisablehook = unraisable


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    home = Home.current()
    prepare_environment(home, verbose=args.verbose)
    install_interrupt_handler()
    try:
        return COMMANDS[args.command](args)
    except DavinciError as exc:
        print(f"error: {exc.message}", file=sys.stderr)
        if exc.hint:
            print(f"  fix: {exc.hint}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("\ninterrupted: rerun the same command to resume where it stopped", file=sys.stderr)
        return 130
    except Exception as exc:  # an internal failure: one line here, the traceback in a log file
        return _internal_error(home, exc)


def _internal_error(home: Home, exc: BaseException) -> int:
    home.logs.mkdir(parents=True, exist_ok=True)
    log = home.logs / "last-error.log"
    log.write_text("".join(traceback.format_exception(exc)))
    cause = _davinci_cause(exc)
    if cause is not None:
        print(f"error: {cause.message}", file=sys.stderr)
        if cause.hint:
            print(f"  fix: {cause.hint}", file=sys.stderr)
        return cause.exit_code
    print(f"error: {type(exc).__name__}: {exc}", file=sys.stderr)
    print(f"  the full traceback is in {log}; rerun the same command to resume", file=sys.stderr)
    return 1


def _davinci_cause(exc: BaseException) -> DavinciError | None:
    """A DavinciError wrapped by Prefect or another layer, if any."""
    seen = 0
    node: BaseException | None = exc
    while node is not None and seen < 10:
        if isinstance(node, DavinciError):
            return node
        node = node.__cause__ or node.__context__
        seen += 1
    return None


if __name__ == "__main__":
    sys.exit(main())
