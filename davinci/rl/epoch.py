"""The RL epoch driver: `run_rl_epoch(EpochInputs) -> EpochOutputs`, called by the lead's Prefect rl task.

One epoch, in order (each phase leaves files in `output_dir`, so a retried task picks up where it died):
  1. rollouts   load the backbone (`Backbone.load`), build the backend (`make_backend`), push the weights
                to a generation server and verify them (`weightsync`; stale -> StaleWeightsError), run the agents'
                episodes (`run_episodes`, evaluate_fn = kernelgym `evaluate_batch`), rewards -> per-agent
                advantages -> samples, score behaviour (and reference) log-probs; write the rollout files
                (see `rollout.py`). Skipped when `rollout_meta.json` exists.
  2. update     the seeded sample plan, `run_updates` with a resume checkpoint in `_resume/` every
                `rl.checkpoint_every` steps; a retry resumes from it, bit-exactly. With `rl.update_processes` N > 1
                the update runs on N torchrun ranks with FSDP2 instead (`torchrun_update.py`; a retry repeats it).
  3. save       `checkpoint/` (transformers folder via `Backbone.save` + `trainer_state.pt`), `steps.jsonl`,
                then `epoch_outputs.json` last. A re-run on a complete folder returns the saved outputs
                without loading anything (idempotent); `_resume/` is removed once the epoch is complete.

RL start states (`EpochInputs.start_states`, the data stage's evolution/start_states.jsonl): a seeded share
`rl.start_state_fraction` of the training problems that have one begin their whole group from a kept
revision's parent (`rollout.assign_start_states`; held-out problems never); logged as
`rollout/start_state_rollouts` (with `start_state_groups`, `start_states_available`, `start_states_heldout`,
`start_states_unmeasured`). A start-state episode is a revision: its turns are scored by their gain over the
parent (`rewards.revision_score`), so echoing the parent earns what a failure earns.

Delayed summary credit: pass the previous epoch's output folder and the skills stage's decisions
(`credit.write_admissions`); its stored summary generations are trained now (see `credit.py`).

    out = run_rl_epoch(EpochInputs(checkpoint_dir="runs/sft/checkpoint", output_dir="runs/rl/epoch_000",
                                   skill_store_root=".davinci/skills", library_version="latest",
                                   problems="runs/data/train.jsonl", profile=load_profile("tiny"), epoch=0))
"""

from __future__ import annotations

import json
import random
import shutil
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import torch

from davinci.config import Profile
from davinci.errors import ConfigError, InputNotFound, MalformedInput
from davinci.jsonl import append_jsonl, file_digest, read_jsonl, write_jsonl
from davinci.rl import rollout as ro
from davinci.rl.advantages import ADVANTAGES
from davinci.rl.checkpoint import Progress, load_resume, load_trainer_state, load_trainer_state_meta, save_trainer_state
from davinci.rl.credit import delayed_summary_rewards, read_admissions
from davinci.rl.losses import LOSSES
from davinci.rl.onpolicy import check_rollout_kl
from davinci.rl.records import write_rollouts
from davinci.rl.rewards import REWARDS
from davinci.rl.samples import PendingSummary, TrainSample, build_samples, summary_samples, to_pending
from davinci.rl.trainer import make_optimizer, plan_updates, run_updates
from davinci.rl.weightsync import sync_served_weights
from davinci.tracking import MetricLogger, NullLogger
from davinci.types import Problem

OUTPUTS_FILE, STEPS_FILE, RESUME_DIR, CHECKPOINT_DIR = "epoch_outputs.json", "steps.jsonl", "_resume", "checkpoint"


@dataclass(frozen=True)
class EpochInputs:
    """Everything one epoch needs: paths and plain values (plus the logger the task builds)."""

    checkpoint_dir: str  # model to start from: the SFT checkpoint, or the previous epoch's checkpoint/
    output_dir: str  # this epoch's folder (created; also holds mid-epoch resume state)
    skill_store_root: str
    library_version: int | str  # a version number or "latest" (resolved and recorded)
    problems: tuple[Problem, ...] | str  # the training problems, or a JSONL path of Problem.to_dict()
    profile: Profile
    epoch: int
    previous_epoch_dir: str = ""  # the previous epoch's output_dir: its pending summaries get trained now
    admissions_path: str = ""  # JSONL of the skills stage's decisions on those summaries' skills
    # frozen KL reference when rl.kl_coef > 0; "" = the checkpoint RL started from (recorded in each
    # epoch's trainer_state.pt, so epoch 0's input, typically the SFT checkpoint, stays the anchor)
    reference_dir: str = ""
    # the data stage's evolution/start_states.jsonl ("" = none): some groups begin from a revision's parent
    # (`rl.start_state_fraction`); problems of `heldout_problems` (its eval split JSONL) never get one
    start_states: str = ""
    heldout_problems: str = ""
    device: str = "auto"
    logger: MetricLogger | None = field(default=None, compare=False)


@dataclass(frozen=True)
class EpochTiming:
    generation_s: float = 0.0  # inside backend.generate
    evaluation_s: float = 0.0  # inside the evaluate function (kernelgym)
    rollout_other_s: float = 0.0  # the rest of run_episodes (retrieval, parsing, prompts)
    overlap_s: float = 0.0  # evaluation running while generation ran (agents.overlap_eval); in both above
    scoring_s: float = 0.0  # behaviour / reference log-prob passes
    update_s: float = 0.0  # optimizer steps (this run of the update phase)
    total_s: float = 0.0
    generated_tokens: int = 0
    generation_tokens_per_s: float = 0.0
    train_tokens: int = 0
    train_tokens_per_s: float = 0.0
    steps: int = 0
    evaluations: int = 0
    evaluation_copies: int = 0  # of `evaluations`, copies of another item in the same batch (not evaluated again)


@dataclass(frozen=True)
class EpochOutputs:
    epoch: int
    output_dir: str
    checkpoint_dir: str  # load the next epoch (or eval) from here
    rollouts_path: str
    samples_path: str
    candidates_path: str  # input of the skills stage: {"episode_id", "problem_id", "epoch", "skill"}
    pending_summaries_path: str  # pass output_dir as the next epoch's previous_epoch_dir
    steps_path: str  # one JSON line of metrics per optimizer step ({"step": global_step, ...})
    library_version: int
    global_step: int  # optimizer steps since RL began, after this epoch
    metrics: dict[str, float]
    timing: EpochTiming

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "EpochOutputs":
        known = {f.name for f in fields(cls)}
        return cls(**{**{k: v for k, v in d.items() if k in known}, "timing": EpochTiming(**d["timing"])})


# ---------------------------------------------------------------------------------------------------
# Inputs


def load_problems(problems: Sequence[Problem] | str) -> list[Problem]:
    if not isinstance(problems, str):
        return list(problems)
    path = Path(problems)
    if not path.exists():
        raise InputNotFound(f"no problems file {path}", "pass the data stage's train JSONL or a list of Problem")
    try:
        return [Problem.from_dict(r) for r in read_jsonl(path)]
    except (TypeError, KeyError, json.JSONDecodeError) as exc:
        raise MalformedInput(f"{path} is not a JSONL of Problem.to_dict() rows ({exc})", "regenerate it with the data stage") from None


def _check_config(profile: Profile) -> None:
    """Fail before any work on a wrong registry name (UnknownName lists the valid ones) or agent weight."""
    REWARDS.get(profile.rl.reward)
    ADVANTAGES.get(profile.rl.advantage)
    LOSSES.get(profile.rl.loss)
    missing = sorted({"selection", "policy", "summary"} - set(profile.rl.agent_weights))
    if missing:
        raise ConfigError(
            f"rl.agent_weights has no weight for {', '.join(missing)} (a --set of one key replaces the whole mapping)",
            "give all three: --set 'rl.agent_weights={policy: 1.0, selection: 0.5, summary: 0.5}'",
        )


def _check_update_devices(processes: int, device: str) -> None:
    """rl.update_processes > 1 on a GPU needs that many visible GPUs (one rank each): refused before any work."""
    if processes <= 1 or not str(device).startswith("cuda") or not torch.cuda.is_available():
        return
    count = torch.cuda.device_count()
    if processes > count:
        raise ConfigError(f"rl.update_processes = {processes}, but {count} GPU(s) are visible (one rank per GPU)",
                          f"set rl.update_processes to at most {count}, or make more GPUs visible (CUDA_VISIBLE_DEVICES)")


def _load_pending(inputs: EpochInputs) -> list[PendingSummary]:
    """The previous epoch's summaries; none without admission decisions (an unknown reward is not 0)."""
    if not inputs.previous_epoch_dir or not inputs.admissions_path:
        return []
    return [PendingSummary.from_dict(r) for r in read_jsonl(Path(inputs.previous_epoch_dir) / ro.PENDING)]


# ---------------------------------------------------------------------------------------------------
# Phase 1: rollouts


def default_run_episodes(problems: list[Problem], library: Any, backend: Any, profile: Profile, epoch: int, evaluate_fn: Any,
                         starts: dict[str, Any] | None = None) -> list[Any]:
    from davinci.agents import run_episodes

    return run_episodes(problems, library, backend, profile, epoch=epoch, group_size=profile.agents.group_size, greedy=False,
                        evaluate_fn=evaluate_fn, starts=starts)


def _start_states(inputs: EpochInputs, problems: list[Problem]) -> ro.StartAssignment:
    """The epoch's start states (none without a file); a malformed file fails here, before any generation."""
    if not inputs.start_states:
        return ro.StartAssignment({})
    from davinci.agents.starts import read_start_states

    states = read_start_states(inputs.start_states)
    heldout = {p.id for p in load_problems(inputs.heldout_problems)} if inputs.heldout_problems else set()
    rl = inputs.profile.rl
    # a fixed probe set keeps its starts too: the reward curve then tracks the policy, not the draw
    return ro.assign_start_states(problems, states, rl.start_state_fraction, seed=inputs.profile.seed,
                                  epoch=0 if rl.fixed_problems else inputs.epoch, heldout_ids=heldout)


def _start_metrics(assignment: ro.StartAssignment, episodes: Sequence[Any]) -> dict[str, float]:
    """How many rollouts (episodes) and groups began from a start state, of how many states available."""
    return {"start_state_rollouts": float(sum(e.start_state is not None for e in episodes)),
            "start_state_groups": float(len(assignment.starts)), "start_states_available": float(assignment.available),
            "start_states_heldout": float(assignment.heldout), "start_states_unmeasured": float(assignment.unmeasured)}


def default_evaluate(profile: Profile) -> Any:
    from davinci.kernelgym import evaluate_batch

    gym = profile.gym

    def evaluate(items: Sequence[Any], *args: Any, **kwargs: Any) -> list[Any]:
        """kernelgym.evaluate_batch with the profile's GymConfig (a config the caller passes wins)."""
        return evaluate_batch(items, *(args or (gym,)), **kwargs)

    return evaluate


def default_make_backend(backbone: Any, profile: Profile) -> Any:
    from davinci.llm.backends import make_backend

    return make_backend(backbone, profile.model)


@dataclass(frozen=True)
class Collaborators:
    """What an epoch calls out to. The defaults are the real ones; a test passes its own (no patching).

    run_episodes(problems, library, backend, profile, epoch, evaluate_fn[, starts=]) -> list[Episode]
                                                  (starts= is passed only when some group has a start state)
    make_backend(backbone, profile) -> GenerationBackend        (the rollouts' generator)
    evaluate(profile) -> EvaluateFn                              (kernelgym.evaluate_batch by default)
    sync_weights(backend, checkpoint_dir, profile, global_step=) -> served version ("" in process)
    """

    run_episodes: Callable[..., list[Any]] = default_run_episodes
    make_backend: Callable[[Any, Profile], Any] = default_make_backend
    evaluate: Callable[[Profile], Any] = default_evaluate
    sync_weights: Callable[..., str] = sync_served_weights


def _agent_metrics(episodes: Sequence[Any]) -> dict[str, float]:
    """The agents package's own episode metrics (parse failures and tokens per agent, solve rates)."""
    from davinci.agents import episode_metrics

    return {k.replace("/", "_"): float(v) for k, v in episode_metrics(episodes).items()}


def _rollout_phase(inputs: EpochInputs, backbone: Any, out: Path, library: Any, co: Collaborators, global_step: int) -> dict[str, Any]:
    profile, cfg = inputs.profile, inputs.profile.rl
    problems = ro.select_problems(load_problems(inputs.problems), cfg, seed=profile.seed, epoch=inputs.epoch)
    assignment = _start_states(inputs, problems)
    generator = co.make_backend(backbone, profile)
    served_version = co.sync_weights(generator, inputs.checkpoint_dir, profile, global_step=global_step)  # stale -> raises
    backend = ro.TimedBackend(generator, lambda t: len(backbone.encode_text(t)))
    evaluate = ro.TimedCall(co.evaluate(profile))
    _seed_everything(profile.seed, inputs.epoch)
    t0 = time.perf_counter()
    # starts= only when some group has one, so an injected runner without the keyword keeps working
    episodes = co.run_episodes(problems, library, backend, profile, inputs.epoch, evaluate,
                               **({"starts": assignment.starts} if assignment.starts else {}))
    rollout_s = time.perf_counter() - t0
    pending = _load_pending(inputs)
    admissions = read_admissions(inputs.admissions_path) if inputs.admissions_path else []
    summary_r = delayed_summary_rewards(pending, admissions, episodes, cfg)
    samples, rewards, counts = build_samples(episodes, profile, backbone, pending, summary_r)
    ref = _reference_model(inputs, backbone) if cfg.kl_coef > 0 or cfg.ref_kl_metric else None
    step_samples = cfg.batch_size or len(samples)  # 0 = the whole epoch's samples in one optimizer step
    micro = max(1, -(-step_samples // max(cfg.grad_accum, 1)))
    scored = ro.score_all(backbone.model, samples, summary_samples(episodes, backbone, cfg), pad_id=backbone.pad_token_id, micro_batch=micro,
                          ref_model=ref, temperature=profile.agents.temperature, chunk_rows=cfg.logprob_chunk_rows)
    del ref
    check_rollout_kl(scored.rollout_kl, scored.rollout_kl_tokens, cfg.max_rollout_kl)  # loud before any update
    write_rollouts(out / ro.ROLLOUTS, ro.rollout_records(episodes, rewards, scored.samples))
    digest = write_jsonl(out / ro.SAMPLES, [s.to_dict() for s in scored.samples])
    write_jsonl(out / ro.PENDING, [p.to_dict() for p in to_pending(episodes, scored.summaries)])
    write_jsonl(out / ro.CANDIDATES, ro.candidate_rows(episodes))
    metrics = {**ro.rollout_metrics(episodes, rewards, scored.samples), **counts, **_agent_metrics(episodes),
               **_start_metrics(assignment, episodes)}
    metrics["summary_reward_mean"] = sum(summary_r) / len(summary_r) if summary_r else 0.0
    metrics["rollout_kl"], metrics["rollout_kl_tokens"] = scored.rollout_kl, float(scored.rollout_kl_tokens)
    metrics["summaries_credited"] = float(len(summary_r))
    overlap = ro.overlap_seconds(backend.intervals, evaluate.intervals)
    timing = {
        "generation_s": backend.seconds,
        "evaluation_s": evaluate.seconds,
        "overlap_s": overlap,
        "rollout_other_s": max(rollout_s - (backend.seconds + evaluate.seconds - overlap), 0.0),
        "scoring_s": scored.scoring_s,
        "generated_tokens": backend.tokens,
        "evaluations": evaluate.items,
        "evaluation_copies": evaluate.copies,
    }
    meta = {"samples_digest": digest, "library_version": library.version, "metrics": metrics, "timing": timing, "served_version": served_version}
    _write_json(out / ro.META, meta)  # last: its presence marks the rollout phase complete
    return meta


def _write_json(path: Path, obj: Any) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(obj, indent=2))
    tmp.replace(path)


def _seed_everything(seed: int, epoch: int) -> None:
    """Seed python, numpy and torch from (profile seed, epoch): a rerun of the rollouts samples the same."""
    derived = int(np.random.SeedSequence([seed, epoch]).generate_state(1)[0])
    random.seed(derived)
    np.random.seed(derived)
    torch.manual_seed(derived)


def _reference_dir(inputs: EpochInputs) -> str:
    """The KL anchor: as given, else the one the input checkpoint records (where RL started), else it."""
    if inputs.reference_dir:
        return inputs.reference_dir
    return str(load_trainer_state_meta(Path(inputs.checkpoint_dir)).get("reference_dir") or inputs.checkpoint_dir)


def _reference_model(inputs: EpochInputs, backbone: Any) -> Any:
    from davinci.llm.backbone import Backbone

    ref = Backbone.load(_reference_dir(inputs), inputs.profile.model, backbone.device)
    ref.model.eval()
    return ref.model


# ---------------------------------------------------------------------------------------------------
# Phase 2 + 3: update and save


class _StepFile:
    """A MetricLogger that forwards to the task's logger and appends every step to steps.jsonl."""

    def __init__(self, path: Path, inner: MetricLogger) -> None:
        self.path, self.inner = path, inner

    def log_metrics(self, metrics: Any, step: int) -> None:
        append_jsonl(self.path, [{"step": step, **{k: float(v) for k, v in metrics.items()}}])
        self.inner.log_metrics(metrics, step=step)

    def log_params(self, params: Any) -> None:
        self.inner.log_params(params)

    def log_artifact(self, local_path: Any, artifact_path: str | None = None) -> None:
        self.inner.log_artifact(local_path, artifact_path)

    def log_text(self, text: str, artifact_file: str) -> None:
        self.inner.log_text(text, artifact_file)


def _dedup_steps(path: Path) -> list[dict[str, Any]]:
    """Steps repeated after a resume (between the last checkpoint and the crash) keep their last record."""
    by_step = {int(r["step"]): r for r in read_jsonl(path)}
    rows = [by_step[s] for s in sorted(by_step)]
    write_jsonl(path, rows)
    return rows


def _update_phase(inputs: EpochInputs, backbone: Any, optimizer: Any, start_step: int, meta: dict[str, Any], out: Path, logger: MetricLogger) -> tuple[list[dict[str, float]], Progress]:
    cfg = inputs.profile.rl
    samples_path = out / ro.SAMPLES
    samples = [TrainSample.from_dict(r) for r in read_jsonl(samples_path)]
    digest = file_digest(samples_path)
    progress = load_resume(out / RESUME_DIR, backbone.model, optimizer)
    if progress is not None and progress.samples_digest != digest:
        raise MalformedInput(f"{out / RESUME_DIR} was written for other samples than {samples_path}", f"delete {out} and rerun the epoch")
    if progress is None:
        plan = plan_updates(len(samples), cfg, seed=inputs.profile.seed, epoch=inputs.epoch)
        progress = Progress.start(inputs.epoch, start_step, plan, library_version=str(meta["library_version"]), samples_digest=digest)
    step_logger = _StepFile(out / STEPS_FILE, logger)
    return run_updates(backbone.model, optimizer, samples, progress, cfg, pad_id=backbone.pad_token_id, logger=step_logger, resume_dir=out / RESUME_DIR, desc=f"rl epoch {inputs.epoch}",
                       temperature=inputs.profile.agents.temperature)


def _torchrun_update_phase(inputs: EpochInputs, backbone: Any, start_step: int, meta: dict[str, Any], out: Path, logger: MetricLogger) -> Progress:
    from davinci.rl.torchrun_update import torchrun_update

    def release() -> None:  # the ranks get the GPU memory this process's copy of the model held
        backbone.model.to("cpu")
        if torch.cuda.is_available():
            torch.cuda.empty_cache()

    if (out / STEPS_FILE).exists():
        (out / STEPS_FILE).unlink()  # a rerun repeats the whole update: its steps are logged afresh
    _, progress = torchrun_update(inputs.profile, checkpoint=Path(inputs.checkpoint_dir), out=out, epoch=inputs.epoch,
                                  global_step=start_step, device=inputs.device, library_version=str(meta["library_version"]),
                                  samples_path=out / ro.SAMPLES, step_logger=_StepFile(out / STEPS_FILE, logger), release=release)
    return progress


def _finish(inputs: EpochInputs, out: Path, meta: dict[str, Any], progress: Progress, t_update: float, t_start: float) -> EpochOutputs:
    steps = _dedup_steps(out / STEPS_FILE) if (out / STEPS_FILE).exists() else []
    train_tokens = int(sum(r.get("rl/tokens", 0.0) for r in steps))
    tm = meta["timing"]
    timing = EpochTiming(
        generation_s=tm["generation_s"], evaluation_s=tm["evaluation_s"], rollout_other_s=tm["rollout_other_s"], overlap_s=tm.get("overlap_s", 0.0),
        scoring_s=tm["scoring_s"], update_s=t_update, total_s=time.perf_counter() - t_start,
        generated_tokens=int(tm["generated_tokens"]), generation_tokens_per_s=tm["generated_tokens"] / max(tm["generation_s"], 1e-9),
        train_tokens=train_tokens, train_tokens_per_s=train_tokens / max(sum(r.get("rl/update_s", 0.0) for r in steps), 1e-9),
        steps=len(steps), evaluations=int(tm["evaluations"]), evaluation_copies=int(tm.get("evaluation_copies", 0)),
    )  # fmt: skip
    metrics = dict(meta["metrics"])
    if steps:
        last = steps[-1]
        metrics.update({k[3:]: v for k, v in last.items() if k.startswith("rl/") and k[3:] in ("loss", "kl", "clip_frac", "grad_norm")})
    return EpochOutputs(
        epoch=inputs.epoch, output_dir=str(out), checkpoint_dir=str(out / CHECKPOINT_DIR),
        rollouts_path=str(out / ro.ROLLOUTS), samples_path=str(out / ro.SAMPLES), candidates_path=str(out / ro.CANDIDATES),
        pending_summaries_path=str(out / ro.PENDING), steps_path=str(out / STEPS_FILE),
        library_version=int(meta["library_version"]), global_step=progress.global_step, metrics=metrics, timing=timing,
    )  # fmt: skip


def load_epoch_outputs(output_dir: str | Path) -> EpochOutputs | None:
    """The saved outputs of a complete epoch folder, or None when the epoch has not finished."""
    path = Path(output_dir) / OUTPUTS_FILE
    return EpochOutputs.from_dict(json.loads(path.read_text())) if path.exists() else None


def run_rl_epoch(inputs: EpochInputs, collaborators: Collaborators | None = None) -> EpochOutputs:
    """Rollouts -> rewards -> advantages -> update -> checkpoint; resumable, idempotent on a complete folder."""
    done = load_epoch_outputs(inputs.output_dir)
    if done is not None:
        return done
    from davinci.llm.backbone import Backbone
    from davinci.skills import SkillStore

    _check_config(inputs.profile)
    _check_update_devices(inputs.profile.rl.update_processes, inputs.device)
    t_start = time.perf_counter()
    out = Path(inputs.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    logger = inputs.logger or NullLogger()
    backbone = Backbone.load(inputs.checkpoint_dir, inputs.profile.model, inputs.device)
    optimizer = make_optimizer(backbone.model, inputs.profile.rl)
    state = load_trainer_state(Path(inputs.checkpoint_dir), optimizer)
    if (out / ro.META).exists():
        meta = json.loads((out / ro.META).read_text())
    else:
        library = SkillStore(inputs.skill_store_root).load(inputs.library_version)
        meta = _rollout_phase(inputs, backbone, out, library, collaborators or Collaborators(), int(state["global_step"]))
    t0 = time.perf_counter()
    if inputs.profile.rl.update_processes > 1:  # FSDP2 ranks under torchrun; the optimizer lives in their shards
        progress = _torchrun_update_phase(inputs, backbone, int(state["global_step"]), meta, out, logger)
        save_trainer_state(out / CHECKPOINT_DIR, None, progress, reference_dir=_reference_dir(inputs))
    else:
        _, progress = _update_phase(inputs, backbone, optimizer, int(state["global_step"]), meta, out, logger)
        backbone.save(out / CHECKPOINT_DIR)
        opt = optimizer if inputs.profile.rl.save_optimizer else None
        save_trainer_state(out / CHECKPOINT_DIR, opt, progress, reference_dir=_reference_dir(inputs))
    t_update = time.perf_counter() - t0
    outputs = _finish(inputs, out, meta, progress, t_update, t_start)
    logger.log_metrics({f"rollout/{k}": v for k, v in outputs.metrics.items()}, step=progress.global_step)
    logger.log_metrics({f"timing/{k}": float(v) for k, v in asdict(outputs.timing).items()}, step=progress.global_step)
    _write_json(out / OUTPUTS_FILE, outputs.to_dict())
    shutil.rmtree(out / RESUME_DIR, ignore_errors=True)
    return outputs
