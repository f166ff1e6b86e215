"""Stage `rl`: E epochs of multi-turn episodes and REINFORCE updates, the skill library evolving between epochs.

Per epoch: the rl-epoch task (rollouts -> rewards -> per-agent advantages -> update -> checkpoint), then,
before the next epoch, the update-library task verifies the epoch's candidate skills by execution and
commits a new library version; its admission decisions give the summary agent its delayed credit. The
last epoch's candidates go to the skills stage. Logged: per-step metrics, a rollouts table per epoch, the
library version each epoch used (as a table), the reward curve.

RL start states: when the data stage's outputs hold `start_states` (kept evolution revisions, with
`data.sources` including evolution), each epoch starts a seeded share `rl.start_state_fraction` of the
training groups that have one from the revision's parent (`davinci.rl.epoch`); the data stage's eval split
is passed along so a held-out problem never gets one. Logged per epoch: `start_states/rollouts` and
`start_states/groups` (step = epoch).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any, Sequence

from prefect import flow

from artifacts.mlflow_logger import replay_metrics
from artifacts.refs import StageOutputs
from artifacts.tables import error_line
from davinci.config import config_hash, to_dict
from flows.context import log_stage_outputs, stage_run
from flows.stages.common import StageEnv, trace_episodes
from tasks.plots import line_plot
from tasks.rl import rl_epoch
from tasks.skills import init_library, library_rows, update_library_task

# Sections an RL epoch reads; the rest of the profile does not enter its cache key.
_RL_SECTIONS = ("seed", "model", "agents", "rl", "skills", "gym")


@flow(name="stage-rl")
def rl_flow(profile: str = "tiny", overrides: Sequence[str] = (), parent_run_id: str = "",
            upstream: dict[str, Any] | None = None, force: bool = False,
            rerun: bool = False) -> dict[str, Any]:
    env = StageEnv.open("rl", profile, overrides, parent_run_id)
    inputs = env.inputs(upstream, ("data", "sft"))
    data, sft = inputs["data"], inputs["sft"]
    rl_profile = {k: v for k, v in to_dict(env.profile).items() if k in _RL_SECTIONS}
    folder = env.stage_dir({"data": data.dir, "sft": sft.dir, "profile": config_hash(rl_profile)}, fresh=force)
    # Epoch i depends on everything but the number of epochs: its folder (and task key) leaves that out, so a
    # run with more epochs reuses the epochs an earlier run already trained; the stage folder above (the
    # outputs of this many epochs) stays per epoch count, so no later run changes an earlier run's outputs.
    epoch_profile = _without_epochs(rl_profile)
    epochs_dir = env.stage_dir({"data": data.dir, "sft": sft.dir, "epochs_of": config_hash(epoch_profile)}, fresh=force)
    with stage_run(env.store, parent_run_id, "rl", env.profile, rerun=rerun) as run_id:
        version = init_library(env.skill_store, env.profile.skills.seed)
        epochs = [_materialise(e, folder) for e in
                  _run_epochs(env, run_id, epochs_dir, data, str(sft.path("checkpoint")), version, epoch_profile)]
        outputs = _outputs(env, folder, epochs)
        _log_curves(env, run_id, folder, epochs)
        log_stage_outputs(env.store, run_id, outputs)
    env.say(f"{len(epochs)} epochs; final checkpoint {outputs.path('checkpoint')}; library v{outputs.summary['library_version']}")
    return outputs.to_dict()


def _materialise(out: dict[str, Any], folder: Path) -> dict[str, Any]:
    """A finished epoch (in the shared, content-keyed epochs folder) hard-linked into this stage's own folder,
    its paths rewritten to there: the stage's outputs stay one self-contained folder (logged to MLflow, read
    by `stage --from`) while the epoch itself is trained once for every run that needs it."""
    src = Path(out["output_dir"])
    if "rollouts_path" not in out:  # no epoch ran (rl.epochs=0): nothing to bring over
        return {**out, "output_dir": str(folder)}
    if src.parent == folder:
        return out
    dst = folder / src.name
    if not dst.exists():
        try:
            shutil.copytree(src, dst, copy_function=os.link)
        except OSError:  # another file system: a plain copy
            shutil.rmtree(dst, ignore_errors=True)
            shutil.copytree(src, dst)
    return {k: str(dst / Path(v).relative_to(src)) if isinstance(v, str) and Path(v).is_relative_to(src) else v
            for k, v in out.items()}


def _without_epochs(rl_profile: dict[str, Any]) -> dict[str, Any]:
    """The profile sections an epoch reads, without `rl.epochs` (only the stage's loop reads it)."""
    return {**rl_profile, "rl": {k: v for k, v in rl_profile["rl"].items() if k != "epochs"}}


def _run_epochs(env: StageEnv, run_id: str, folder: Path, data: StageOutputs, checkpoint: str, version: int,
                rl_profile: dict[str, Any]) -> list[dict[str, Any]]:
    epochs: list[dict[str, Any]] = []
    previous, admissions = "", ""
    for epoch in range(env.profile.rl.epochs):
        _log_library(env, run_id, epoch, version)
        state = rl_epoch(
            checkpoint_dir=checkpoint, output_dir=str(folder / f"epoch_{epoch:03d}"), store_root=env.skill_store,
            library_version=version, problems_path=str(data.path("train")), profile=rl_profile, epoch=epoch,
            previous_epoch_dir=previous, admissions_path=admissions, run_ref=env.run_ref(run_id), return_state=True,
            **_start_state_paths(data),
        )
        out = state.result()
        if state.name == "Cached":
            env.say(f"epoch {epoch}: already done, reusing {out['output_dir']}")
            replay_metrics(env.store, run_id, Path(out["output_dir"]) / "metrics.jsonl")
        _report_epoch(env, run_id, epoch, out)
        epochs.append(out)
        checkpoint, previous = out["checkpoint_dir"], out["output_dir"]
        if epoch + 1 < env.profile.rl.epochs:
            update = update_library_task(
                store_root=env.skill_store, version=version, candidates_paths=[out["candidates_path"]],
                rollouts_paths=[out["rollouts_path"]], problems_path=str(data.path("train")),
                gym_cfg=to_dict(env.profile.gym), skills_cfg=to_dict(env.profile.skills),
                out_dir=str(folder / f"library_{epoch:03d}"), retire_skills=True, note=f"rl epoch {epoch}",
            )
            env.say(f"epoch {epoch}: library v{version} -> v{update['version']} (admitted {update['admitted']}, "
                    f"rejected {update['rejected']}, merged {update['merged']}, retired {update['retired']})")
            version, admissions = update["version"], update["admissions_path"]
    if not epochs:
        epochs.append({"checkpoint_dir": checkpoint, "library_version": version, "output_dir": str(folder), "metrics": {}})
    epochs[-1] = {**epochs[-1], "library_version": version}
    return epochs


def _start_state_paths(data: StageOutputs) -> dict[str, str]:
    """The rl-epoch task's start-state inputs: the data stage's start states (if any) and its held-out split."""
    if "start_states" not in data.files:
        return {}  # no keywords: the task's cache key stays what it was for data without start states
    return {"start_states_path": str(data.path("start_states")), "heldout_path": str(data.path("eval"))}


def _report_epoch(env: StageEnv, run_id: str, epoch: int, out: dict[str, Any]) -> None:
    """The epoch's console line, its rollouts table and its episodes as traces (with their share of the epoch)."""
    m, timing = out["metrics"], out["timing"]
    env.say(f"epoch {epoch}: reward {m.get('reward_turn_mean', 0):.3f}, correct {m.get('correct_rate', 0):.2f}, "
            f"solved {m.get('episode_solved_rate', 0):.2f}, {timing['steps']} steps, "
            f"gen {timing['generation_s']:.0f}s eval {timing['evaluation_s']:.0f}s update {timing['update_s']:.0f}s "
            f"overlap {timing.get('overlap_s', 0.0):.0f}s")
    # rollouts begun from an RL start state (kept evolution revisions); 0 when the data stage had none
    env.store.log_metrics(run_id, {"start_states/rollouts": m.get("start_state_rollouts", 0.0),
                                   "start_states/groups": m.get("start_state_groups", 0.0)}, step=epoch)
    if m.get("start_state_rollouts"):
        env.say(f"epoch {epoch}: {m['start_state_rollouts']:.0f} rollouts ({m.get('start_state_groups', 0):.0f} groups) "
                f"began from evolution start states")
    rollouts = Path(out["rollouts_path"])
    env.store.log_table(run_id, _rollout_table(rollouts), f"rollouts/epoch_{epoch:03d}.json")
    stats = trace_episodes(env, run_id, rollouts)
    epoch_s = sum(float(timing.get(k, 0.0)) for k in ("generation_s", "evaluation_s", "update_s"))
    if stats.logged:
        env.store.log_metrics(run_id, {"timing/trace_s": stats.seconds,
                                       "timing/trace_share": stats.seconds / epoch_s if epoch_s else 0.0}, step=epoch)


def _log_library(env: StageEnv, run_id: str, epoch: int, version: int) -> None:
    """The library version an epoch uses: a metric with step=epoch and a table viewable in the MLflow UI."""
    env.store.log_metrics(run_id, {"library_version": float(version)}, step=epoch)
    env.store.log_table(run_id, library_rows(env.skill_store, version), f"library/epoch_{epoch:03d}_v{version}.json")


def _rollout_table(path: Path) -> list[dict[str, Any]]:
    from davinci.rl.records import read_rollouts, rollout_table

    rows = rollout_table(read_rollouts(path))
    for row in rows:  # the error class and message, not a traceback's first 200 characters
        row["error"] = error_line({"error": row["error"], "correct": row["correct"]}) if row["error"] else ""
    return rows


def _outputs(env: StageEnv, folder: Path, epochs: list[dict[str, Any]]) -> StageOutputs:
    last = epochs[-1]
    rel = lambda p: str(Path(p).resolve().relative_to(folder.resolve()))  # noqa: E731
    files = {"checkpoint": rel(last["checkpoint_dir"])}
    for i, ep in enumerate(e for e in epochs if "rollouts_path" in e):
        files[f"rollouts_{i:03d}"] = rel(ep["rollouts_path"])
        files[f"candidates_{i:03d}"] = rel(ep["candidates_path"])
    if "candidates_path" in last:
        files["candidates"], files["rollouts"] = rel(last["candidates_path"]), rel(last["rollouts_path"])
    summary = {"library_version": int(last["library_version"]), "epochs": len(epochs),
               **{f"final_{k}": v for k, v in last.get("metrics", {}).items() if isinstance(v, (int, float))}}
    return StageOutputs("rl", str(folder), files, summary).write()


def _log_curves(env: StageEnv, run_id: str, folder: Path, epochs: list[dict[str, Any]]) -> None:
    """Reward and loss curves as PNGs (per epoch and per optimizer step)."""
    per_epoch = {k: [(i, e["metrics"].get(k, 0.0)) for i, e in enumerate(epochs) if e.get("metrics")]
                 for k in ("reward_turn_mean", "reward_best_turn_mean", "correct_rate")}
    line_plot(folder / "reward_curve.png", per_epoch, "RL rollouts per epoch", "epoch", "value", integer_x=True)
    steps = []
    for e in epochs:
        path = Path(e.get("steps_path", ""))
        if path.is_file():
            steps += [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
    loss = [(r["step"], r["rl/loss"]) for r in steps if "rl/loss" in r]
    line_plot(folder / "loss_curve.png", {"loss": loss}, "RL loss per optimizer step", "step", "loss")
    env.store.log_artifact(run_id, folder / "reward_curve.png", "plots")
    env.store.log_artifact(run_id, folder / "loss_curve.png", "plots")
