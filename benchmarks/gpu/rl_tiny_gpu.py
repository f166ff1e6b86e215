"""GPU run of the rl stage on the tiny profile: SFT cold start, then several `run_rl_epoch` epochs on cuda.

What it does (the same engine code the Prefect rl task calls; no Prefect or MLflow needed):
  1. builds an SFT'd tiny checkpoint itself: `create_tiny_backbone` on the built-in problems' text,
     `train_sft` on `data_prep.build_sft_examples(train problems, seed skills)`;
  2. commits the seed skills to a fresh skill store;
  3. runs `run_rl_epoch` for up to --epochs epochs (tiny model on cuda, kernelgym on cuda), each epoch
     continuing from the previous epoch's checkpoint and crediting its summaries; stops starting new
     epochs once --budget-s seconds have passed, so one invocation stays under ~7 minutes;
  4. reports, per epoch and per optimizer step: time split into generation / evaluation / update,
     generated tokens per second and trained tokens per second, and the reward curve.

Writes under $OUT: rl_tiny_metrics.json (config, per-epoch and per-step metrics, timing),
rl_tiny_reward.png (reward curve + per-step time split), rl_tiny_table.md (the printed table),
rl_tiny_log.txt (progress log), rollouts/epoch_NNN.jsonl (every episode: generated turns and verdicts).
Prints a short table at the end.

    PYTHONPATH=. OUT=/tmp/rl_out python benchmarks/gpu/rl_tiny_gpu.py            # ~5-7 min on an H100
    PYTHONPATH=. OUT=/tmp/rl_out python benchmarks/gpu/rl_tiny_gpu.py --epochs 2 --budget-s 120 --device cpu
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

T0 = time.perf_counter()
LOG_LINES: list[str] = []


def log(msg: str) -> None:
    line = f"[{time.perf_counter() - T0:7.1f}s] {msg}"
    LOG_LINES.append(line)
    print(line, flush=True)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--epochs", type=int, default=6)
    ap.add_argument("--budget-s", type=float, default=300.0, help="start no new epoch after this many seconds")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--problems-per-epoch", type=int, default=4)
    ap.add_argument("--group-size", type=int, default=4)
    ap.add_argument("--turns", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=4)
    ap.add_argument("--max-new-tokens", type=int, default=0, help="0 = the profile's agents.max_new_tokens")
    # The tiny model must memorize the reference solutions well enough to sometimes write a correct
    # kernel, or every reward is 0 and there is nothing to learn from: many cheap epochs on the GPU.
    ap.add_argument("--sft-epochs", type=int, default=40)
    ap.add_argument("--gym-workers", type=int, default=8)
    ap.add_argument("--set", action="append", default=[], help="extra profile override key=value")
    return ap.parse_args(argv)


def build_profile(args: argparse.Namespace) -> Any:
    from davinci.config import load_profile

    overrides = [
        f"gym.device={args.device}",
        f"gym.workers={args.gym_workers}",
        # the rewards read the speedup vs eager; a torch.compile baseline costs ~10 s per new problem
        "gym.baselines=[eager]",
        f"rl.problems_per_epoch={args.problems_per_epoch}",
        f"rl.batch_size={args.batch_size}",
        f"rl.epochs={args.epochs}",
        f"agents.group_size={args.group_size}",
        f"agents.turns={args.turns}",
        *([f"agents.max_new_tokens={args.max_new_tokens}"] if args.max_new_tokens else []),
        f"sft.epochs={args.sft_epochs}",
        "sft.max_len=2048",
        *args.set,
    ]
    return load_profile("tiny", overrides)


def split_problems(profile: Any) -> list[Any]:
    from data_prep import builtin_problems, default_heldout_ids

    held = set(profile.data.eval_ids or default_heldout_ids())
    return [p for p in builtin_problems() if p.id not in held]


def sft_checkpoint(profile: Any, problems: list[Any], work: Path, device: str) -> Path:
    """Tiny backbone trained with SFT on the built-in training problems; saved to work/sft."""
    from data_prep import build_sft_examples
    from davinci.llm.sft import train_sft
    from davinci.llm.tiny import create_tiny_backbone
    from davinci.skills import seed_skills
    from davinci.tracking import MemoryLogger

    skills = seed_skills()
    examples = build_sft_examples(problems, skills, seed=profile.seed)
    corpus = [m["content"] for ex in examples for m in ex.messages] + [p.code for p in problems]
    log(f"sft: {len(examples)} examples from {len(problems)} problems; training the tokenizer + tiny model")
    backbone = create_tiny_backbone(corpus, profile.model, seed=profile.seed, device=device)
    stats = train_sft(backbone, examples, profile.sft, MemoryLogger(), progress=False)
    log(f"sft: {stats.steps} steps, loss {stats.first_loss:.3f} -> {stats.final_loss:.3f} in {stats.seconds:.1f}s")
    return backbone.save(work / "sft")


def run_epochs(args: argparse.Namespace, profile: Any, problems: list[Any], ckpt: Path, work: Path) -> list[dict[str, Any]]:
    from davinci.rl.epoch import EpochInputs, run_rl_epoch
    from davinci.skills import SkillStore, seed_skills
    from davinci.tracking import MemoryLogger

    store_root = work / "skills"
    library = SkillStore(store_root).commit(seed_skills(), parent=None, note="seed")
    epochs: list[dict[str, Any]] = []
    prev = ""
    for epoch in range(args.epochs):
        if time.perf_counter() - T0 > args.budget_s:
            log(f"budget of {args.budget_s:.0f}s reached: not starting epoch {epoch}")
            break
        inputs = EpochInputs(
            checkpoint_dir=str(ckpt), output_dir=str(work / f"epoch_{epoch:03d}"), skill_store_root=str(store_root),
            library_version=library.version, problems=tuple(problems), profile=profile, epoch=epoch,
            previous_epoch_dir=prev, device=args.device, logger=MemoryLogger(),
        )  # fmt: skip
        t = time.perf_counter()
        try:
            out = run_rl_epoch(inputs)
        except Exception:  # report and stop: later epochs start from this one's checkpoint
            log(f"epoch {epoch} FAILED:\n{traceback.format_exc()}")
            break
        steps = [json.loads(x) for x in Path(out.steps_path).read_text().splitlines() if x.strip()]
        epochs.append({"epoch": epoch, "wall_s": time.perf_counter() - t, "outputs": out.to_dict(), "steps": steps})
        m, tm = out.metrics, out.timing
        log(
            f"epoch {epoch}: {tm.steps} steps, reward/turn {m.get('reward_turn_mean', 0):.3f}, best {m.get('reward_best_turn_mean', 0):.3f}, "
            f"correct {m.get('correct_rate', 0):.2f}, gen {tm.generation_s:.1f}s eval {tm.evaluation_s:.1f}s update {tm.update_s:.1f}s"
        )
        ckpt, prev = Path(out.checkpoint_dir), out.output_dir
    return epochs


def summarize(epochs: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], str]:
    """Per-epoch rows (time per step split, tokens/s, rewards) and the markdown table."""
    rows = []
    for e in epochs:
        tm, m = e["outputs"]["timing"], e["outputs"]["metrics"]
        n = max(tm["steps"], 1)
        rows.append({
            "epoch": e["epoch"], "steps": tm["steps"], "gen_s_per_step": tm["generation_s"] / n,
            "eval_s_per_step": tm["evaluation_s"] / n, "update_s_per_step": tm["update_s"] / n,
            "gen_tok_s": tm["generation_tokens_per_s"], "train_tok_s": tm["train_tokens_per_s"],
            "reward_turn": m.get("reward_turn_mean", 0.0), "reward_best": m.get("reward_best_turn_mean", 0.0),
            "correct": m.get("correct_rate", 0.0), "compiled": m.get("compiled_rate", 0.0), "evals": tm["evaluations"],
        })  # fmt: skip
    head = "| epoch | steps | gen s/step | eval s/step | update s/step | gen tok/s | train tok/s | reward/turn | best-turn | correct | compiled | evals |"
    lines = [head, "|" + "---|" * 12]
    for r in rows:
        lines.append(
            f"| {r['epoch']} | {r['steps']} | {r['gen_s_per_step']:.2f} | {r['eval_s_per_step']:.2f} | {r['update_s_per_step']:.3f} | "
            f"{r['gen_tok_s']:.0f} | {r['train_tok_s']:.0f} | {r['reward_turn']:.3f} | {r['reward_best']:.3f} | {r['correct']:.2f} | {r['compiled']:.2f} | {r['evals']} |"
        )
    return rows, "\n".join(lines)


def plot(epochs: list[dict[str, Any]], rows: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(15, 4))
    ends = [e["steps"][-1]["step"] if e["steps"] else 0 for e in epochs]
    for key, label in (("reward_turn", "reward per turn"), ("reward_best", "best-turn reward"), ("correct", "correct rate")):
        axes[0].plot(ends, [r[key] for r in rows], marker="o", label=label)
    axes[0].set(title="rollout reward per epoch", xlabel="global optimizer step (end of epoch)")
    axes[0].legend()
    steps = [s for e in epochs for s in e["steps"]]
    axes[1].plot([s["step"] for s in steps], [s.get("rl/return_mean", 0.0) for s in steps], label="return of trained samples")
    axes[1].plot([s["step"] for s in steps], [s.get("rl/loss", 0.0) for s in steps], label="loss")
    axes[1].set(title="per optimizer step", xlabel="global step")
    axes[1].legend()
    x = [r["epoch"] for r in rows]
    bottom = [0.0] * len(rows)
    for key, label in (("gen_s_per_step", "generation"), ("eval_s_per_step", "evaluation"), ("update_s_per_step", "update")):
        vals = [r[key] for r in rows]
        axes[2].bar(x, vals, bottom=bottom, label=label)
        bottom = [b + v for b, v in zip(bottom, vals)]
    axes[2].set(title="seconds per optimizer step", xlabel="epoch")
    axes[2].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def _close_evaluator() -> None:
    try:
        from davinci.kernelgym import close_shared

        close_shared()
    except Exception:  # noqa: BLE001 - nothing to close, or already closed
        pass


def keep_rollouts(epochs: list[dict[str, Any]], folder: Path) -> None:
    """Copy each epoch's rollouts.jsonl (episodes with every generated turn and verdict) out of the temp dir."""
    folder.mkdir(parents=True, exist_ok=True)
    for e in epochs:
        src = Path(str(e.get("outputs", {}).get("rollouts_path", "")))
        if src.is_file():
            (folder / f"epoch_{int(e['epoch']):03d}.jsonl").write_bytes(src.read_bytes())


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    out = Path(os.environ.get("OUT", "out"))
    out.mkdir(parents=True, exist_ok=True)
    result: dict[str, Any] = {"args": vars(args), "epochs": [], "error": None}
    try:
        import torch

        if args.device == "cuda" and not torch.cuda.is_available():
            raise SystemExit("no CUDA device visible; pass --device cpu for a CPU smoke run")
        result["device"] = torch.cuda.get_device_name(0) if args.device == "cuda" else "cpu"
        profile = build_profile(args)
        problems = split_problems(profile)
        with tempfile.TemporaryDirectory(prefix="rl_tiny_") as tmp:
            work = Path(tmp)
            ckpt = sft_checkpoint(profile, problems, work, args.device)
            result["sft_s"] = time.perf_counter() - T0
            result["epochs"] = run_epochs(args, profile, problems, ckpt, work)
            keep_rollouts(result["epochs"], out / "rollouts")
    except BaseException as exc:  # noqa: BLE001 - report whatever happened and still write the files
        result["error"] = f"{type(exc).__name__}: {exc}"
        log(f"FAILED: {traceback.format_exc()}")
    rows, table = summarize(result["epochs"])
    result["table"] = rows
    result["total_s"] = time.perf_counter() - T0
    (out / "rl_tiny_metrics.json").write_text(json.dumps(result, indent=2, default=str))
    (out / "rl_tiny_table.md").write_text(table + "\n")
    if result["epochs"]:
        try:
            plot(result["epochs"], rows, out / "rl_tiny_reward.png")
        except Exception:  # noqa: BLE001 - the numbers are in the JSON either way
            log(f"plot failed: {traceback.format_exc()}")
    _close_evaluator()
    log(f"done in {result['total_s']:.0f}s on {result.get('device', '?')}; files in {out}")
    (out / "rl_tiny_log.txt").write_text("\n".join(LOG_LINES) + "\n")
    print(table)
    return 0 if result["error"] is None and result["epochs"] else 1


if __name__ == "__main__":
    sys.exit(main())
