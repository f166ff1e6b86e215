"""One RL epoch of the learning demonstration on 1 GPU and on N GPUs, its wall time split (issue 17, item 3).

For each GPU count n, the demonstration's RL stage (`learning_demo.py --stages rl`) runs from the same SFT checkpoint
on the same problems, with n > 1 spreading every part over the GPUs:
  generation   `model.gen_devices=[cuda:0..n-1]`: a model replica per GPU (davinci.llm.backends.replicas);
  evaluation   `gym.cluster=local-dask:n`: one Dask worker per GPU, `--lanes` kernelgym lanes each;
  update       `rl.update_processes=n`: FSDP2 ranks under torchrun, one per GPU (davinci.rl.torchrun_update).
n = 1 is the in-process default (one device, `--lanes` lanes). Prints one row per (GPU count, epoch) from the
epoch's own timing (`EpochOutputs.timing`): generation / evaluation / overlap / scoring / update / total seconds,
evaluations (and copies), the probe set's correctness; writes $OUT/rl_epoch_gpus.{txt,json}.

The SFT checkpoint comes from --base (a folder holding sft/, problems.jsonl and stage_eval_before.json of an
earlier demonstration run with the same arguments), so no GPU time goes to SFT; every count gets its own work
folder under --work (same_run refuses changed arguments).

    PYTHONPATH=. OUT=/tmp/out python3 benchmarks/gpu/rl_epoch_gpus.py --base .learning_base --gpus 1,2 --epochs 2
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# the arguments of the run that trained --base's SFT checkpoint (benchmarks/results/cpu/learning_plateau)
DEMO = ["--sft-n", "800", "--calib-target", "1.01", "--sft-steps", "2000", "--calib-check", "250", "--probe-sets", "per-epoch"]


def spread(n: int, lanes: int) -> list[str]:
    """The --set overrides that put generation, evaluation and the update on n GPUs."""
    sets = [f"gym.workers={lanes}"]
    if n > 1:
        devices = ",".join(f"cuda:{i}" for i in range(n))
        sets += [f"model.gen_devices=[{devices}]", f"gym.cluster=local-dask:{n}", f"rl.update_processes={n}"]
    return [a for s in sets for a in ("--set", s)]


def prepare(base: Path, work: Path) -> None:
    """A work folder whose SFT and held-out-before stages are --base's (the RL stage starts from them)."""
    if not (base / "sft").is_dir():
        sys.exit(f"no SFT checkpoint at {base / 'sft'}: pass --base a folder holding sft/, problems.jsonl and stage_eval_before.json")
    work.mkdir(parents=True, exist_ok=True)
    for name in ("problems.jsonl", "stage_eval_before.json"):
        shutil.copy(base / name, work / name)
    (work / "stage_sft.json").write_text(json.dumps([str((base / "sft").resolve()), 2000]))


def run_count(n: int, args: argparse.Namespace, out: Path) -> list[dict]:
    work = Path(args.work) / f"gpus{n}"
    prepare(Path(args.base), work)
    cmd = [sys.executable, str(ROOT / "benchmarks/gpu/learning_demo.py"), *DEMO, "--device", "cuda", "--eval-device", args.eval_device,
           "--epochs", str(args.epochs), "--stages", "rl", *spread(n, args.lanes)]
    env = {**os.environ, "LEARNING_WORK": str(work), "OUT": str(out / f"gpus{n}"),
           "CUDA_VISIBLE_DEVICES": ",".join(str(i) for i in range(n))}
    print(f"--- {n} GPU(s): {' '.join(cmd)}", flush=True)
    subprocess.run(cmd, env=env, check=False, timeout=args.timeout_s)
    rows = []
    for e in range(args.epochs):
        path = work / "rl" / f"epoch_{e:03d}" / "epoch_outputs.json"
        if path.is_file():
            res = json.loads(path.read_text())
            rows.append({"gpus": n, "epoch": e, **res["timing"], "correct": res["metrics"]["correct_rate"]})
    return rows


def replica_check(base: Path, n: int, prompts: int = 256) -> str:
    """Seeded sampling of the SFT model on one GPU and on n replicas: outputs identical, and tokens/s of each."""
    import time

    import torch

    from davinci.config import load_profile
    from davinci.llm.backbone import Backbone
    from davinci.llm.backends.hf import HFBackend
    from davinci.llm.backends.replicas import ReplicaBackend
    from davinci.llm.types import Sampling
    from davinci.types import Problem

    problems = [Problem.from_dict(json.loads(x)) for x in (base / "problems.jsonl").read_text().splitlines()[:prompts]]
    msgs = [[{"role": "user", "content": p.code}] for p in problems]
    gpu = torch.cuda.is_available()  # the CPU (replicas "cpu") only checks the script here
    devices = [f"cuda:{i}" for i in range(n)] if gpu else ["cpu"] * n
    sync = torch.cuda.synchronize if gpu else (lambda: None)
    bb = Backbone.load(base / "sft", load_profile("tiny", ["model.max_seq_len=4096"]).model, devices[0])
    sampling = Sampling(max_new_tokens=96, temperature=1.0, seed=7)
    rows = []
    for name, backend in (("1 GPU", HFBackend(bb, batch_size=32)), (f"{n} replicas", ReplicaBackend(bb, devices, batch_size=32))):
        backend.generate(msgs[:32], sampling)  # graph capture and first launches
        sync()
        t0 = time.perf_counter()
        outs = backend.generate(msgs, sampling)
        sync()
        rows.append((name, outs, time.perf_counter() - t0))
    same = sum(a.response_ids == b.response_ids for a, b in zip(rows[0][1], rows[1][1]))
    tok = [sum(len(o.response_ids) for o in outs) / s for _, outs, s in rows]
    return (f"generation, {prompts} prompts, batches of 32, seeded T=1: 1 GPU {tok[0]:.0f} tok/s, {n} replicas {tok[1]:.0f} tok/s "
            f"({tok[1] / tok[0]:.2f}x); identical outputs {same}/{prompts}")


def table(rows: list[dict]) -> str:
    head = "| GPUs | epoch | generation s | evaluation s | overlap s | scoring s | update s | total s | evaluations (copies) | probe correct |"
    lines = [head, "|---" * (head.count("|") - 1) + "|"]
    for r in rows:
        lines.append(f"| {r['gpus']} | {r['epoch']} | {r['generation_s']:.1f} | {r['evaluation_s']:.1f} | {r['overlap_s']:.1f} | "
                     f"{r['scoring_s']:.1f} | {r['update_s']:.1f} | {r['total_s']:.1f} | {r['evaluations']} ({r['evaluation_copies']}) | {r['correct']:.3f} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", default=".learning_base")
    ap.add_argument("--work", default="/tmp/rl_epoch_gpus")
    ap.add_argument("--gpus", default="1,2", help="comma-separated GPU counts")
    ap.add_argument("--epochs", type=int, default=2, help="epoch 0 pays the first-call costs; later epochs are the steady state")
    ap.add_argument("--lanes", type=int, default=4, help="kernelgym lanes per GPU")
    ap.add_argument("--eval-device", default="cuda")
    ap.add_argument("--timeout-s", type=float, default=560)
    args = ap.parse_args()
    out = Path(os.environ.get("OUT", "/tmp/rl_epoch_gpus_out"))
    out.mkdir(parents=True, exist_ok=True)
    counts = [int(x) for x in args.gpus.split(",")]
    check = replica_check(Path(args.base), max(counts)) if max(counts) > 1 else ""
    print(check, flush=True)
    rows = [r for n in counts for r in run_count(n, args, out)]
    text = f"rl_epoch_gpus: {' '.join(sys.argv[1:])}\n\n{check}\n\n{table(rows)}\n"
    print(text)
    (out / "rl_epoch_gpus.txt").write_text(text)
    (out / "rl_epoch_gpus.json").write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
