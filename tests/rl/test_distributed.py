"""FSDP2 update (`davinci.rl.distributed`): two gloo processes give the same step as the one-process trainer.

Methodology: a tiny random-init Llama (davinci.llm.tiny) is saved as a Backbone folder; five samples of two
agents are cut by the token budget into three micro-batches, so one rank gets two and the other one plus a
padding pass. The reference is `trainer.train_step` in this process; the distributed run is the real entry
point under `python -m torch.distributed.run --nproc-per-node 2` (gloo). Parameters after the step, the
summed loss and the pre-clip gradient norm must agree: Adam's first step is blind to the gradient's scale,
so the gradient norm is what catches averaging instead of summing, or a micro-batch run twice or never.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from davinci.config import load_profile
from davinci.jsonl import read_jsonl, write_jsonl
from davinci.llm.backbone import Backbone
from davinci.rl.distributed import assign_micro_batches
from davinci.rl.samples import TrainSample
from davinci.rl.trainer import make_optimizer, plan_updates, step_micro_batches, train_step

ROOT = Path(__file__).resolve().parents[2]
LENGTHS = (22, 15, 11, 9, 6)  # budget 33 -> micro-batches [22], [15, 11], [9, 6]: padded 22, 30, 18 tokens
BASE = ["model.tiny_hidden=32", "model.tiny_layers=2", "model.tiny_heads=2", "model.tiny_vocab=300",
        "rl.batch_size=5", "rl.micro_batch_tokens=33", "rl.lr=0.01", "rl.max_grad_norm=1000", "rl.agent_weights={policy: 1.0, summary: 0.5}"]
VARIANTS = {
    "full": [],
    "full-checkpointed": ["model.gradient_checkpointing=true"],
    "lora": ["model.lora=true", "model.lora_r=4", "model.lora_alpha=8", "model.gradient_checkpointing=true"],
}


def test_assign_micro_batches_balances_padded_tokens():
    # costs 22, 30, 18: 30 -> rank 0; 22 -> rank 1; 18 -> rank 1 (load 22 < 30): rank 0 runs one padding pass
    assert assign_micro_batches([22, 30, 18], 2) == [[1], [0, 2]]
    assert assign_micro_batches([5, 5, 5, 5], 2) == [[0, 2], [1, 3]]
    assert assign_micro_batches([], 2) == [[], []]


def _samples(vocab: int) -> list[TrainSample]:
    rng = random.Random(0)
    out = []
    for i, n in enumerate(LENGTHS):
        prompt = n // 2
        ids = tuple(rng.randrange(5, vocab) for _ in range(n))
        agent = "policy" if i % 2 == 0 else "summary"
        adv = (-1.0) ** i * (0.5 + i / 4)
        out.append(TrainSample(agent, ids, prompt, adv, adv, f"ep{i}/{agent}/0"))
    return out


@pytest.fixture(scope="module")
def base_checkpoint(tmp_path_factory) -> Path:
    from davinci.llm.tiny import create_tiny_backbone

    root = tmp_path_factory.mktemp("fsdp")
    corpus = ["def forward(self, x):\n    return torch.relu(x)\n"] * 20 + ["import torch\nimport triton\n"] * 20
    bb = create_tiny_backbone(corpus, load_profile("tiny", BASE).model, seed=0, device="cpu")
    bb.save(root / "sft")
    return root / "sft"


def _checkpoint_for(variant: str, base: Path, overrides: list[str]) -> Path:
    """The full variant starts from the sft folder; LoRA from a folder with a saved adapter whose B is not 0
    (a fresh adapter is random, and B = 0 would leave A without gradient)."""
    if variant != "lora":
        return base
    target = base.parent / "lora"
    if not target.exists():
        bb = Backbone.load(base, load_profile("tiny", overrides).model, device="cpu")
        gen = torch.Generator().manual_seed(1)
        with torch.no_grad():
            for name, p in bb.model.named_parameters():
                if "lora_B" in name:
                    p.copy_(torch.randn(p.shape, generator=gen) * 0.05)
        bb.save(target)
    return target


def _reference_step(checkpoint: Path, overrides: list[str], samples: list[TrainSample]) -> tuple[dict, dict]:
    profile = load_profile("tiny", overrides)
    bb = Backbone.load(checkpoint, profile.model, device="cpu")
    plan = plan_updates(len(samples), profile.rl, seed=profile.seed, epoch=0)
    assert len(step_micro_batches([samples[i] for i in plan[0]], profile.rl)) == 3
    metrics = train_step(bb.model, make_optimizer(bb.model, profile.rl), [samples[i] for i in plan[0]], profile.rl, pad_id=bb.pad_token_id)
    return metrics, {n: p.detach().clone() for n, p in bb.model.named_parameters()}


def _torchrun(args: list[str], nproc: int) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}", "-m", "davinci.rl.distributed", *args]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.slow
@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_two_processes_give_the_one_process_update(variant, base_checkpoint, tmp_path):
    overrides = BASE + VARIANTS[variant]
    base_checkpoint = _checkpoint_for(variant, base_checkpoint, overrides)
    vocab = Backbone.load(base_checkpoint, load_profile("tiny", overrides).model, device="cpu").model.config.vocab_size
    samples = _samples(vocab)
    write_jsonl(tmp_path / "samples.jsonl", [s.to_dict() for s in samples])
    ref_metrics, ref_params = _reference_step(base_checkpoint, overrides, samples)
    sets = [a for o in overrides for a in ("--set", o)]
    run = _torchrun(["update", "--profile", "tiny", *sets, "--checkpoint", str(base_checkpoint), "--samples",
                     str(tmp_path / "samples.jsonl"), "--out", str(tmp_path / "out"), "--device", "cpu", "--save-sharded"], 2)
    assert run.returncode == 0, run.stderr[-4000:]
    [metrics] = read_jsonl(tmp_path / "out" / "metrics.jsonl")
    assert metrics["world_size"] == 2.0
    assert metrics["tokens"] == ref_metrics["tokens"] == sum(n - n // 2 for n in LENGTHS)
    assert metrics["loss"] == pytest.approx(ref_metrics["loss"], rel=1e-5, abs=1e-7)
    assert metrics["grad_norm"] == pytest.approx(ref_metrics["grad_norm"], rel=1e-5)
    trained = Backbone.load(tmp_path / "out" / "checkpoint", load_profile("tiny", overrides).model, device="cpu")
    params = dict(trained.model.named_parameters())
    before = Backbone.load(base_checkpoint, load_profile("tiny", overrides).model, device="cpu")
    moved = 0
    for name, p0 in before.model.named_parameters():
        if not p0.requires_grad:
            continue
        torch.testing.assert_close(params[name].detach(), ref_params[name], rtol=0, atol=1e-5, msg=name)
        moved += int((ref_params[name] - p0.detach()).abs().max() > 1e-3)
    assert moved == sum(p.requires_grad for p in before.model.parameters())  # lr 0.01: Adam moves each by ~0.01
    assert (tmp_path / "out" / "sharded" / ".metadata").is_file()


@pytest.mark.slow
def test_sharded_checkpoint_resumes_into_one_process(base_checkpoint, tmp_path):
    """A DCP shard set written by 2 ranks loads into 1 rank with 0 steps: the saved weights come back."""
    overrides = BASE
    vocab = Backbone.load(base_checkpoint, load_profile("tiny", overrides).model, device="cpu").model.config.vocab_size
    write_jsonl(tmp_path / "samples.jsonl", [s.to_dict() for s in _samples(vocab)])
    sets = [a for o in overrides for a in ("--set", o)]
    common = ["update", "--profile", "tiny", *sets, "--samples", str(tmp_path / "samples.jsonl"), "--device", "cpu"]
    first = _torchrun([*common, "--checkpoint", str(base_checkpoint), "--out", str(tmp_path / "a"), "--save-sharded"], 2)
    assert first.returncode == 0, first.stderr[-4000:]
    second = _torchrun([*common, "--checkpoint", str(base_checkpoint), "--out", str(tmp_path / "b"), "--steps", "0",
                        "--resume-sharded", str(tmp_path / "a" / "sharded")], 1)
    assert second.returncode == 0, second.stderr[-4000:]
    cfg = load_profile("tiny", overrides).model
    a = dict(Backbone.load(tmp_path / "a" / "checkpoint", cfg, device="cpu").model.named_parameters())
    b = dict(Backbone.load(tmp_path / "b" / "checkpoint", cfg, device="cpu").model.named_parameters())
    for name in a:
        torch.testing.assert_close(a[name], b[name], rtol=0, atol=0, msg=name)


def test_entry_point_outside_torchrun_names_the_fix(tmp_path, capsys):
    from davinci.rl.distributed import main

    env_keys = ("RANK", "WORLD_SIZE")
    saved = {k: os.environ.pop(k) for k in env_keys if k in os.environ}
    try:
        code = main(["update", "--checkpoint", str(tmp_path), "--samples", str(tmp_path / "s.jsonl"), "--out", str(tmp_path / "o")])
    finally:
        os.environ.update(saved)
    assert code == 2
    err = capsys.readouterr().err
    assert "not started by torchrun" in err and "torchrun --nproc-per-node" in err


def test_resume_goes_on_with_the_same_epochs_plan(tmp_path):
    import json

    from davinci.rl.distributed import PROGRESS, _steps_done

    assert _steps_done(tmp_path, 3) == 0  # shards without a progress file: from the start
    (tmp_path / PROGRESS).write_text(json.dumps({"epoch": 3, "steps_done": 2}))
    assert _steps_done(tmp_path, 3) == 2  # the same epoch: its first two steps are in the shards already
    assert _steps_done(tmp_path, 4) == 0  # another epoch: its own plan from the start


def test_a_malformed_samples_row_names_the_line(tmp_path):
    from davinci.errors import MalformedInput
    from davinci.rl.distributed import _read_samples

    (tmp_path / "samples.jsonl").write_text('{"agent": "policy"}\n')
    with pytest.raises(MalformedInput, match="samples.jsonl:1 is not a training sample"):
        _read_samples(tmp_path / "samples.jsonl")
