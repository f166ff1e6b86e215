"""Exact resume: N steps uninterrupted == k steps, crash, resume from the checkpoint, N-k more steps.

Same loss at step k+1 (bit for bit), same final weights and optimizer state; RNG states come back too.
"""

from __future__ import annotations

import random
from dataclasses import replace

import numpy as np
import pytest
import torch

from davinci.errors import MalformedInput
from davinci.rl.checkpoint import Progress, load_resume, load_trainer_state, save_resume, save_trainer_state
from davinci.rl.config import RLConfig
from davinci.rl.samples import with_logprobs
from davinci.rl.trainer import make_optimizer, plan_updates, run_updates, score_samples
from davinci.tracking import MemoryLogger

CFG = RLConfig(lr=3e-2, batch_size=4, grad_accum=2, update_passes=2, checkpoint_every=1, kl_coef=0.05)


class Crash(RuntimeError):
    pass


class CrashingLogger(MemoryLogger):
    """Logs normally, then dies while logging step `at` (after that step trained, before its checkpoint)."""

    def __init__(self, at: int) -> None:
        super().__init__()
        self.at = at

    def log_metrics(self, metrics, step):
        if step == self.at:
            raise Crash(f"simulated crash at step {step}")
        super().log_metrics(metrics, step)


def _setup(lm_factory, samples):
    model = lm_factory(seed=11)
    scored = score_samples(model, samples, pad_id=0)
    samples = with_logprobs(samples, scored, scored)  # behaviour = reference = the starting weights
    progress = Progress.start(epoch=0, global_step=0, plan=plan_updates(len(samples), CFG, seed=0, epoch=0), library_version="v3")
    return model, make_optimizer(model, CFG), samples, progress


def _flat(model):
    return torch.cat([p.detach().flatten() for p in model.parameters()])


@pytest.mark.parametrize("k", [1, 3])
def test_resume_mid_epoch_reproduces_the_uninterrupted_run(lm_factory, sample_factory, tmp_path, k):
    samples = sample_factory(12, seed=7)
    model, opt, scored, progress = _setup(lm_factory, samples)
    full, end = run_updates(model, opt, scored, progress, CFG, pad_id=0, logger=MemoryLogger())
    assert len(full) == len(progress.plan) == 6 and end.step_in_epoch == 6

    # interrupted run: crashes while logging step k+1, so the last checkpoint holds k steps
    model2, opt2, scored2, progress2 = _setup(lm_factory, samples)
    with pytest.raises(Crash):
        run_updates(model2, opt2, scored2, progress2, CFG, pad_id=0, logger=CrashingLogger(at=k + 1), resume_dir=tmp_path)
    del model2, opt2

    # "new process": fresh model from the epoch's input weights, then the resume checkpoint
    model3, opt3, scored3, _ = _setup(lm_factory, samples)
    resumed = load_resume(tmp_path, model3, opt3)
    assert resumed is not None and resumed.step_in_epoch == k and resumed.global_step == k
    assert resumed.plan == progress.plan and resumed.library_version == "v3"
    rest, end3 = run_updates(model3, opt3, scored3, resumed, CFG, pad_id=0, logger=MemoryLogger())

    assert rest[0]["loss"] == full[k]["loss"]  # the loss at step k+1, exactly
    assert [m["loss"] for m in rest] == [m["loss"] for m in full[k:]]
    assert torch.equal(_flat(model3), _flat(model))  # the final weights, bit for bit
    assert end3 == end
    s1, s3 = opt.state_dict()["state"], opt3.state_dict()["state"]
    assert all(torch.equal(s1[i]["exp_avg_sq"], s3[i]["exp_avg_sq"]) for i in s1)


def test_rng_states_round_trip(lm_factory, tmp_path):
    model = lm_factory(seed=1)
    opt = make_optimizer(model, CFG)
    progress = Progress.start(epoch=2, global_step=9, plan=((0, 1),))
    save_resume(tmp_path, model, opt, progress)
    expected = (random.random(), float(np.random.rand()), float(torch.rand(1)))
    random.random(), np.random.rand(), torch.rand(5)  # move every generator on
    assert load_resume(tmp_path, model, opt) == progress
    assert (random.random(), float(np.random.rand()), float(torch.rand(1))) == expected


def test_trainer_state_carries_the_optimizer_across_epochs(lm_factory, sample_factory, tmp_path):
    model, opt, scored, progress = _setup(lm_factory, sample_factory(4, seed=3))
    _, end = run_updates(model, opt, scored, progress, CFG, pad_id=0)
    save_trainer_state(tmp_path, opt, end)
    opt2 = make_optimizer(model, CFG)
    state = load_trainer_state(tmp_path, opt2)
    assert state["global_step"] == end.global_step and state["library_version"] == "v3"
    assert opt2.state_dict()["state"][0]["step"] == opt.state_dict()["state"][0]["step"]
    # a checkpoint without trainer state (the SFT one) starts at step 0 with a fresh optimizer
    assert load_trainer_state(tmp_path / "sft", make_optimizer(model, CFG))["global_step"] == 0


def test_corrupt_resume_file_is_a_clear_error(lm_factory, tmp_path):
    (tmp_path / "resume.pt").write_bytes(b"not a checkpoint")
    model = lm_factory()
    with pytest.raises(MalformedInput, match="delete"):
        load_resume(tmp_path, model, make_optimizer(model, CFG))


def test_resume_checkpoints_are_retained_and_a_torn_newest_falls_back(lm_factory, sample_factory, tmp_path):
    model, opt, _, progress = _setup(lm_factory, sample_factory(4, seed=3))
    for step in (1, 2, 3):
        save_resume(tmp_path, model, opt, replace(progress, step_in_epoch=step, global_step=step), keep=2)
    assert sorted(p.name for p in tmp_path.glob("resume-*.pt")) == ["resume-000000002.pt", "resume-000000003.pt"]
    (tmp_path / "resume-000000003.pt").write_bytes(b"torn while writing")  # a crash mid-write of the newest
    assert load_resume(tmp_path, model, opt).global_step == 2
