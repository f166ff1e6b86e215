"""bf16 training needs float32 master weights: plain AdamW on bf16 loses RL-sized updates; ours keeps them."""

from __future__ import annotations

import torch

from davinci.rl.config import RLConfig
from davinci.rl.optim import MasterWeightAdamW, make_optimizer
from davinci.rl.trainer import train_step


def _bf16(lm_factory):
    return lm_factory(seed=5).to(torch.bfloat16)


def _flat(model):
    return torch.cat([p.detach().float().flatten() for p in model.parameters()])


def test_plain_adamw_on_bf16_loses_small_updates_and_masters_keep_them(lm_factory, sample_factory):
    samples = sample_factory(4, seed=1)
    cfg = RLConfig(lr=1e-6)
    # the failure mode: plain AdamW on bf16 weights at an RL learning rate changes (almost) nothing
    plain = _bf16(lm_factory)
    before = _flat(plain)
    opt = torch.optim.AdamW([p for p in plain.parameters()], lr=cfg.lr)
    for _ in range(3):
        train_step(plain, opt, samples, cfg, pad_id=0)
    assert (_flat(plain) != before).float().mean() < 0.05  # only weights within ~1e-4 of zero can move
    # with float32 masters the 3 steps accumulate: masters move by ~3e-6 per weight
    model = _bf16(lm_factory)
    opt = make_optimizer(model, cfg)
    assert isinstance(opt, MasterWeightAdamW)
    start = torch.cat([m.detach().flatten() for m in opt.masters]).clone()
    for _ in range(3):
        train_step(model, opt, samples, cfg, pad_id=0)
    moved = (torch.cat([m.detach().flatten() for m in opt.masters]) - start).abs()
    assert float(moved.median()) > 1e-6
    # and the model's bf16 weights are the masters, rounded
    torch.testing.assert_close(_flat(model), torch.cat([m.detach().bfloat16().float().flatten() for m in opt.masters]))


def test_master_state_round_trips(lm_factory, sample_factory):
    cfg = RLConfig(lr=1e-3)
    model = _bf16(lm_factory)
    opt = make_optimizer(model, cfg)
    train_step(model, opt, sample_factory(3, seed=2), cfg, pad_id=0)
    other = _bf16(lm_factory)
    opt2 = make_optimizer(other, cfg)
    opt2.load_state_dict(opt.state_dict())
    assert all(torch.equal(a, b) for a, b in zip(opt.masters, opt2.masters))
    assert torch.equal(_flat(other), _flat(model))


def test_float32_models_get_plain_adamw(lm_factory):
    assert isinstance(make_optimizer(lm_factory(), RLConfig()), torch.optim.AdamW)


def test_warmup_lr_is_linear_over_the_first_steps_then_flat():
    """Hand-computed: lr 1e-3 over 4 warmup steps; 0 warmup steps is no warmup."""
    from davinci.rl.optim import warmup_lr

    assert [warmup_lr(1e-3, 4, g) for g in range(6)] == [2.5e-4, 5e-4, 7.5e-4, 1e-3, 1e-3, 1e-3]
    assert warmup_lr(1e-3, 0, 0) == 1e-3


def test_run_updates_warms_up_from_the_global_step_and_a_resume_continues_it(lm_factory, sample_factory):
    """The first step of a fresh AdamW moves each weight by about the lr it is given: with 4 warmup steps, a
    quarter of rl.lr; the logged lr follows the global step, so a run resumed at step 2 takes the same lrs."""
    from davinci.rl.checkpoint import Progress
    from davinci.rl.trainer import run_updates

    samples = sample_factory(8, seed=2)
    cfg = RLConfig(lr=1e-3, warmup_steps=4, batch_size=2)
    plan = ((0, 1), (2, 3), (4, 5), (6, 7))
    model = lm_factory(seed=3)
    opt = make_optimizer(model, cfg)
    before = _flat(model)
    first, progress = run_updates(model, opt, samples, Progress.start(0, 0, plan[:1]), cfg, pad_id=0)
    assert float((_flat(model) - before).abs().max()) <= 1e-3 / 4 * 1.01  # not the full 1e-3 of a cold step
    rest, _ = run_updates(model, opt, samples, Progress.start(0, 2, plan[2:]), cfg, pad_id=0)
    assert [m["lr"] for m in first + rest] == [2.5e-4, 7.5e-4, 1e-3]
