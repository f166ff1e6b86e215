"""The `davinci-kernel` command.

    davinci-kernel run [--profile NAME] [--set key=value ...]        the whole pipeline (resumes if interrupted)
    davinci-kernel stage NAME --from RUN_ID [--set ...] [--use-cache] rerun one stage of a pipeline run
    davinci-kernel eval --problem FILE --candidate FILE [--device cpu|cuda] [--timeout S] [--json]
    davinci-kernel skills list [--version V] [--json] | skills show ID [--version V]
    davinci-kernel skills lineage --kernel K [--problem P] [--admit] [--replay FILE]   lineage-derived skills
    davinci-kernel skills materialise --skill ID_OR_FILE --problem P (--checkpoint DIR | --replay FILE)   apply one skill
    davinci-kernel evolve --problem P [--generations N] [--kernel FILE] [--mutator rules|replay|policy] [--replay FILE]
    davinci-kernel runs [--limit N]                                   pipeline runs: time, status, overrides, fast_1
    davinci-kernel config [--profile NAME] [--set ...]                print the resolved profile
    davinci-kernel ui [--port N]                                      MLflow UI on the project's store
    davinci-kernel serve [--cron "0 3 * * *"]                        Prefect deployments with schedules

Bad input ends with one `error:` line plus the fix and exit code 2, never a traceback: argparse's own errors
too (`_Parser.error`), numbers are range-checked as they are parsed, a closed pipe (`| head`) ends quietly.
Heavy imports (Prefect, MLflow, torch) happen only inside the command that needs them, after the arguments
are checked. Ctrl-C / SIGTERM: see `flows/interrupt.py`.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
import traceback
from typing import Any, Callable, NoReturn, Sequence

from artifacts.home import Home, prepare_environment
from davinci.errors import DavinciError
from flows.interrupt import install_interrupt_handler

STAGE_NAMES = ("data", "sft", "rl", "skills", "eval")
RESUMABLE = ("run", "stage", "serve", "evolve")


class _Parser(argparse.ArgumentParser):
    """argparse with the CLI's error format: one `error:` line, one `fix:` line, exit 2."""

    def error(self, message: str) -> NoReturn:
        print(f"error: {self.prog}: {message}", file=sys.stderr)
        print(f"  fix: see `{self.prog} --help`", file=sys.stderr)
        sys.exit(2)


def _number(kind: Callable[[str], float], low: float, strict: bool, what: str,
            high: float = float("inf")) -> Callable[[str], float]:
    def parse(text: str) -> float:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {what}") from None
        if value != value or value < low or value > high or (strict and value == low):
            raise argparse.ArgumentTypeError(f"{text} is out of range: give {what}")
        return value

    return parse


POSITIVE_INT = _number(int, 1, False, "an integer >= 1")
POSITIVE_SECONDS = _number(float, 0, True, "a number of seconds > 0")
PORT = _number(int, 1, False, "a port number in 1-65535", high=65535)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="davinci-kernel", description="Train an LLM to write fast, correct GPU kernels.")
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
    ev.add_argument("--timeout", type=POSITIVE_SECONDS, default=None, metavar="SECONDS")
    ev.add_argument("--json", action="store_true", help="print one JSON object")

    skills = sub.add_parser("skills", help="inspect the skill library")
    skills_sub = skills.add_subparsers(dest="skills_command", required=True, metavar="ACTION")
    lst = skills_sub.add_parser("list", help="list the skills of a library version")
    lst.add_argument("--version", default="latest")
    lst.add_argument("--json", action="store_true")
    show = skills_sub.add_parser("show", help="show one skill")
    show.add_argument("skill_id")
    show.add_argument("--version", default="latest")
    _lineage_parser(skills_sub)
    _materialise_parser(skills_sub)
    _evolve_parser(sub)

    runs = sub.add_parser("runs", help="list pipeline runs in the MLflow store")
    runs.add_argument("--limit", type=POSITIVE_INT, default=20, help="show at most N runs (default 20)")
    runs.add_argument("--profile", default="tiny", help="profile whose tracking settings to use")

    cfg = sub.add_parser("config", help="print the resolved profile")
    cfg.add_argument("--profile", default="tiny")
    cfg.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")

    ui = sub.add_parser("ui", help="start the MLflow UI on the project's store")
    ui.add_argument("--host", default="127.0.0.1")
    ui.add_argument("--port", type=PORT, default=None, help="default: the profile's tracking.ui_port (5000)")
    ui.add_argument("--profile", default="tiny", help="profile whose tracking settings to use")

    serve = sub.add_parser("serve", help="serve Prefect deployments: nightly pipeline + on-demand stage reruns")
    serve.add_argument("--profile", default="tiny")
    serve.add_argument("--cron", default="0 3 * * *", help="schedule of the pipeline deployment (default: 03:00 daily)")
    serve.add_argument("--port", type=PORT, default=4200, help="port of the Prefect server started when PREFECT_API_URL is unset")
    return parser


def _evolve_parser(sub: Any) -> None:
    evo = sub.add_parser("evolve", help="evolutionary search per problem (archive, best kernel, lineage in MLflow)")
    evo.add_argument("--profile", default="tiny", help="profile name in configs/ or a YAML path (default: tiny)")
    evo.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    evo.add_argument("--problem", dest="problems", action="append", required=True, metavar="ID_OR_FILE",
                     help="a built-in id (builtin/relu) or a KernelBench-format file; repeat for several")
    evo.add_argument("--generations", type=POSITIVE_INT, default=None, help="generations after the population (evolve.generations)")
    evo.add_argument("--kernel", dest="kernels", action="append", default=[], metavar="FILE", help="a starting program (repeatable)")
    evo.add_argument("--mutator", default=None, help="rules (default, no model), replay (recorded edits) or policy (--checkpoint)")
    evo.add_argument("--replay", default="", metavar="FILE", help="JSONL of recorded edits for the replay mutator")
    evo.add_argument("--checkpoint", default="", metavar="DIR", help="model checkpoint for the policy mutator")


def _lineage_parser(skills_sub: Any) -> None:
    lin = skills_sub.add_parser("lineage", help="lineage skills: simplify an expert kernel, reverse each kept step into a candidate skill")
    lin.add_argument("--kernel", required=True, metavar="K",
                     help="a seed skill id, `builtin` (the problem's reference solution) or a .py file defining ModelNew")
    lin.add_argument("--problem", default="", metavar="P", help="a built-in id or a problem file (not needed for a seed skill)")
    lin.add_argument("--profile", default="tiny")
    lin.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    lin.add_argument("--simplifications", default="", metavar="A,B", help="comma list (default: every deterministic rule)")
    lin.add_argument("--replay", default="", metavar="FILE", help="JSONL of recorded simplifications to try after the rules")
    lin.add_argument("--admit", action="store_true", help="run the admission gate and commit admitted skills as a new library version")
    lin.add_argument("--out", default="", metavar="DIR", help="where to write candidates.jsonl and the report")


def _materialise_parser(skills_sub: Any) -> None:
    mat = skills_sub.add_parser("materialise", help="the policy applies one skill to one problem under the admission gate; "
                                "records the skill's usage")
    mat.add_argument("--skill", required=True, metavar="ID_OR_FILE",
                     help="a library or seed skill id, or a .json/.jsonl file of one skill (e.g. from `skills lineage`)")
    mat.add_argument("--problem", required=True, metavar="P", help="a built-in id (builtin/relu) or a KernelBench-format file")
    mat.add_argument("--checkpoint", default="", metavar="DIR", help="the policy's checkpoint (or --replay)")
    mat.add_argument("--replay", default="", metavar="FILE", help="JSONL of recorded answers {\"answer\": ...} (or --checkpoint)")
    mat.add_argument("--profile", default="tiny")
    mat.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    mat.add_argument("--out", default="", metavar="DIR", help="where to write skill.json, check.json and kernel.py")


def cmd_evolve(args: argparse.Namespace) -> int:
    from davinci.config import load_profile

    overrides = list(args.overrides)
    if args.generations is not None:
        overrides.append(f"evolve.generations={args.generations}")
    if args.mutator:
        overrides.append(f"evolve.mutator={args.mutator}")
    profile = load_profile(args.profile, overrides)  # bad profile / key / mutator name fails here
    _check_evolve_inputs(profile, args)
    from flows.evolve import evolve_flow
    from flows.servers import detached_prefect_api

    detached_prefect_api()
    out = evolve_flow(profile=args.profile, overrides=overrides, problems=list(args.problems), kernels=list(args.kernels),
                      replay=args.replay, checkpoint=args.checkpoint)
    from flows.context import open_store, ui_base

    print(f"\nfast_p of the best programs: {out['fast_p']}")
    print(f"MLflow evolve run: {open_store(profile).ui_url(out['run_id'], ui_base(profile))}")
    print(f"kept revisions (a data source): {out['revisions']}")
    return 0


def _check_evolve_inputs(profile: Any, args: argparse.Namespace) -> None:
    """Every input checked before Prefect starts: problems, kernel files, the mutator and its replay file."""
    from data_prep.resolve import read_kernel, resolve_problem
    from davinci.errors import ConfigError
    from davinci.evolve.mutators import make_mutator

    from pathlib import Path

    from davinci.errors import InputNotFound

    problems = [resolve_problem(p) for p in args.problems]
    for k in args.kernels:
        read_kernel(k)
    if args.replay and not Path(args.replay).is_file():  # (the run's key reads it whatever the mutator)
        raise InputNotFound(f"replay file {args.replay} does not exist", "pass --replay with an existing JSONL file of recorded edits, or leave it out")
    if profile.evolve.mutator == "policy":
        if not args.checkpoint:
            raise ConfigError("the policy mutator needs a model", "pass --checkpoint DIR (a trained checkpoint) or use --mutator rules")
        if not Path(args.checkpoint).is_dir():
            raise InputNotFound(f"checkpoint folder {args.checkpoint} does not exist", "pass --checkpoint with a folder a run saved (e.g. an sft or rl stage's model)")
        return
    mutator = make_mutator(profile.evolve, replay_path=args.replay)
    if not args.kernels:
        for p in problems:
            if not mutator.seeds(p, profile.evolve.population):
                raise ConfigError(f"no starting program for {p.id}",
                                  "pass --kernel FILE, or add seed rows for it to the replay file")


def cmd_run(args: argparse.Namespace) -> int:
    from davinci.config import load_profile

    profile = load_profile(args.profile, args.overrides)  # bad profile / key / range fails here, before Prefect
    from flows.cluster import check_cluster

    print(check_cluster(profile).describe())  # an unreachable, empty, stale or GPU-less cluster fails here too
    from flows.pipeline import pipeline_flow
    from flows.servers import detached_prefect_api

    detached_prefect_api()
    result = pipeline_flow(profile=args.profile, overrides=list(args.overrides))
    _print_heldout(result["eval"])
    _print_run_footer(profile, result["parent_run_id"])
    return 0


def _print_heldout(evaluation: dict) -> None:
    """The run's last word on learning: SFT vs RL on the held-out problems (the eval stage's comparison table)."""
    from artifacts.refs import StageOutputs

    outputs = StageOutputs.from_dict(evaluation)
    if "comparison_md" in outputs.files:  # an eval stage finished before the comparison existed has none
        print("\n" + outputs.path("comparison_md").read_text().rstrip())


def _print_run_footer(profile, parent_run_id: str) -> None:
    from flows.context import open_store, ui_base

    store = open_store(profile)
    port = profile.tracking.ui_port
    print(f"\nMLflow parent run: {parent_run_id}")
    print(f"  open it: davinci-kernel ui{'' if port == 5000 else f' --port {port}'}   then   "
          f"{store.ui_url(parent_run_id, ui_base(profile))}")
    print(f"  rerun one stage: davinci-kernel stage eval --from {parent_run_id}")


def cmd_stage(args: argparse.Namespace) -> int:
    from flows.context import resolve_rerun

    parent, ref = resolve_rerun(args.from_run, args.overrides)  # bad run id / key fails before Prefect
    from flows.cluster import check_cluster

    print(check_cluster(ref.load()).describe())  # so does a cluster that cannot evaluate
    from flows.context import open_store, ui_base
    from flows.rerun import rerun_stage_flow
    from flows.servers import detached_prefect_api

    detached_prefect_api()
    rerun_stage_flow(stage=args.name, from_run_id=parent, overrides=list(args.overrides), use_cache=args.use_cache)
    profile = ref.load()
    print(f"\nlogged a new {args.name} run under pipeline run {parent}: "
          f"{open_store(profile).ui_url(parent, ui_base(profile))}")
    return 0


def cmd_eval(args: argparse.Namespace) -> int:
    from davinci.kernelgym.cli import eval_command

    return eval_command(args.problem, args.candidate, args.device, args.timeout, args.json)


def cmd_skills(args: argparse.Namespace) -> int:
    from davinci.skills.cli import list_command, show_command

    root = Home.current().skills
    if args.skills_command == "lineage":
        from tasks.lineage import lineage_command

        return lineage_command(args)
    if args.skills_command == "materialise":
        from tasks.materialise import materialise_command

        return materialise_command(args)
    if args.skills_command == "list":
        return list_command(root, args.version, args.json)
    return show_command(root, args.skill_id, args.version)


def cmd_runs(args: argparse.Namespace) -> int:
    from davinci.config import load_profile
    from flows.context import open_store
    from flows.runs_table import format_runs

    store = open_store(load_profile(args.profile))
    runs = store.pipeline_runs()[: args.limit]
    if not runs:
        print("no pipeline runs yet: start one with `davinci-kernel run`")
        return 0
    print(format_runs(runs))
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
    "runs": cmd_runs, "config": cmd_config, "ui": cmd_ui, "serve": cmd_serve, "evolve": cmd_evolve,
}


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    home = Home.current()
    prepare_environment(home, verbose=args.verbose)
    resumable = args.command in RESUMABLE
    install_interrupt_handler(_resume_hint(argv) if resumable else "")
    try:
        return COMMANDS[args.command](args)
    except DavinciError as exc:
        print(f"error: {exc.message}", file=sys.stderr)
        if exc.hint:
            print(f"  fix: {exc.hint}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        from flows.interrupt import kill_open_runs, say_interrupted

        say_interrupted(kill_open_runs())
        return 130
    except BrokenPipeError:  # `davinci-kernel skills list | head`: the reader left; nothing is wrong
        return _closed_pipe()
    except Exception as exc:  # an internal failure: one line here, the traceback in a log file
        return _internal_error(home, exc, resumable)


def _resume_hint(argv: Sequence[str] | None) -> str:
    words = list(sys.argv[1:] if argv is None else argv)
    return shlex.join(["davinci-kernel", *words])


def _closed_pipe() -> int:
    """Point stdout at /dev/null so the interpreter's final flush does not raise again; exit as `yes | head` does."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    return 141


def _internal_error(home: Home, exc: BaseException, resumable: bool) -> int:
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
    print(f"  the full traceback is in {log}" + ("; rerun the same command to resume" if resumable else ""),
          file=sys.stderr)
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
