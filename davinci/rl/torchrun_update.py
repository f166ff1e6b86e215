"""An RL epoch's update on several processes: torchrun runs `davinci.rl.distributed update` (FSDP2) on the epoch's
samples, and the epoch driver takes its checkpoint, metrics and progress as if it had trained in process.

What: with `rl.update_processes: N > 1`, `run_rl_epoch` (davinci.rl.epoch) does its rollouts in process as always,
writes samples.jsonl, then calls `torchrun_update`, which
  1. writes the resolved profile to `<epoch>/_torchrun/profile.json` (the ranks read the profile the epoch runs
     with, --set overrides included, not the named profile's defaults);
  2. runs `python -m torch.distributed.run --standalone --nproc-per-node N -m davinci.rl.distributed update` with the
     epoch's global step (the lr warmup counts RL's steps, not the epoch's) and, when the input checkpoint holds
     them, the previous epoch's optimizer shards (`optim_sharded/`, so AdamW goes on across epochs as in process);
  3. moves the saved checkpoint to `<epoch>/checkpoint` and the new shards into it, logs each step's metrics as
     `rl/<name>` at its global step (steps.jsonl and the logger, the in-process path's files), and returns the
     `Progress` the in-process trainer would have ended with.

Choices:
- One subprocess per epoch, not a long-lived process group: rollouts and the update never hold the GPUs at the
  same time, and a crashed rank fails the epoch loudly (`DistributedUpdateFailed` with the ranks' own errors and
  the log's path) instead of hanging a collective; the rollouts are kept (`rollout_meta.json`), so a rerun repeats only
  the update, from the epoch's input checkpoint.
- The parent's model goes to the CPU before the ranks start, so its GPU memory is theirs.
- Rank i uses cuda:i of the visible devices (torchrun's LOCAL_RANK); on the CPU the ranks use gloo (the tests).
The update equals the in-process one within float tolerance (`tests/rl/test_distributed.py` for a step,
`tests/rl/test_epoch.py` for two whole epochs).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import torch

from davinci.jsonl import file_digest, read_jsonl
from davinci.rl.checkpoint import Progress
from davinci.rl.trainer import plan_updates

WORK_DIR = "_torchrun"
SHARDED = "optim_sharded"  # beside a checkpoint: the FSDP ranks' model + AdamW shards (DCP)
LOG_TAIL = 3000


class DistributedUpdateFailed(RuntimeError):
    """torchrun's ranks exited with an error; the message holds the log's tail and names the log file."""


def update_command(nproc: int, *, profile_file: Path, checkpoint: Path, samples: Path, out: Path, epoch: int,
                   global_step: int, device: str, resume: Path | None) -> list[str]:
    """The torchrun command line of one epoch's update."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}",
           "-m", "davinci.rl.distributed", "update", "--profile-file", str(profile_file), "--checkpoint", str(checkpoint),
           "--samples", str(samples), "--out", str(out), "--epoch", str(epoch), "--global-step", str(global_step),
           "--device", device, "--save-sharded"]  # fmt: skip
    return cmd + (["--resume-sharded", str(resume)] if resume is not None else [])


def _environment() -> dict[str, str]:
    """The ranks import davinci from where this process did, with one CPU thread each unless the user chose."""
    root = str(Path(__file__).resolve().parents[2])
    path = os.environ.get("PYTHONPATH", "")
    return {**os.environ, "PYTHONPATH": root + (os.pathsep + path if path else ""), "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}


def rank_errors(log_text: str) -> str:
    """The ranks' own `error: ... / fix: ...` lines (davinci.rl.distributed.main prints them), each once, in order."""
    lines, seen, keep = log_text.splitlines(), set(), []
    for i, line in enumerate(lines):
        if line.startswith("error: ") and line not in seen:
            seen.add(line)
            keep += [line] + [x for x in lines[i + 1 : i + 2] if x.startswith("  fix: ")]
    return "\n".join(keep)


def _run(cmd: list[str], log: Path) -> None:
    with log.open("w") as fh:
        rc = subprocess.run(cmd, stdout=fh, stderr=subprocess.STDOUT, env=_environment(), check=False).returncode
    if rc != 0:
        text = log.read_text(errors="replace")
        cause = rank_errors(text) or text[-LOG_TAIL:]  # a crash without a davinci error: the log's end (a traceback)
        raise DistributedUpdateFailed(f"the distributed update exited with {rc}:\n{cause}\nthe whole log: {log}\ncommand: {' '.join(cmd)}")


def torchrun_update(profile: Any, *, checkpoint: Path, out: Path, epoch: int, global_step: int, device: str,
                    library_version: str, samples_path: Path, step_logger: Any, release: Any = None) -> tuple[list[dict[str, float]], Progress]:
    """Run the epoch's update on `profile.rl.update_processes` ranks; returns (per-step metrics, final Progress).

    `release()` is called before the ranks start (the epoch driver moves its model off the GPU there)."""
    from davinci.config.loader import to_dict

    cfg = profile.rl
    work = out / WORK_DIR
    shutil.rmtree(work, ignore_errors=True)  # a rerun after a crash starts the update over from the input checkpoint
    work.mkdir(parents=True)
    (work / "profile.json").write_text(json.dumps(to_dict(profile), indent=1))
    resume = checkpoint / SHARDED if (checkpoint / SHARDED).is_dir() else None
    kind = "cuda" if str(device).startswith("cuda") and torch.cuda.is_available() else "cpu"
    if release is not None:
        release()
    cmd = update_command(cfg.update_processes, profile_file=work / "profile.json", checkpoint=checkpoint, samples=samples_path,
                         out=work, epoch=epoch, global_step=global_step, device=kind, resume=resume)
    _run(cmd, work / "torchrun.log")
    history = list(read_jsonl(work / "metrics.jsonl"))
    for k, metrics in enumerate(history):
        step_logger.log_metrics({f"rl/{name}": float(v) for name, v in metrics.items()}, step=global_step + k + 1)
    target = out / "checkpoint"
    shutil.rmtree(target, ignore_errors=True)
    (work / "checkpoint").replace(target)
    (work / "sharded").replace(target / SHARDED)
    n_samples = sum(1 for _ in read_jsonl(samples_path))
    plan = plan_updates(n_samples, cfg, seed=profile.seed, epoch=epoch)
    progress = Progress(epoch=epoch, step_in_epoch=len(history), global_step=global_step + len(history), plan=plan,
                        library_version=library_version, samples_digest=file_digest(samples_path))
    return history, progress


__all__ = ["DistributedUpdateFailed", "SHARDED", "torchrun_update", "update_command"]
