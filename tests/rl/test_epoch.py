"""The epoch driver end to end on a CPU: real tiny backbone, real generation backend, real skill store,
real trainer and files; mid-epoch crash + resume equals the uninterrupted epoch; idempotent re-run;
delayed summary credit in the next epoch.

The episode runner is a local double (`fake_run_episodes`, same signature as davinci.agents.run_episodes):
it generates every agent's output through the backend the driver built, and scores policy turns with a
synthetic verdict computed from the generated ids instead of kernelgym (which would need minutes of
Triton-interpreter evaluations per epoch here). The real runner + evaluator run in test_epoch_real.py.
"""

from __future__ import annotations

import json
import zlib
from pathlib import Path

import pytest
import torch

from davinci.config import profile_from_dict
from davinci.llm.tiny import create_tiny_backbone
from davinci.llm.types import Sampling
from davinci.rl.credit import write_admissions
from davinci.rl.epoch import Collaborators, EpochInputs, load_epoch_outputs, run_rl_epoch
from davinci.rl.rewards import minimal_result
from davinci.tracking import MemoryLogger
from davinci.types import Problem

PROFILE = profile_from_dict(
    {
        "model": {"tiny_hidden": 32, "tiny_layers": 1, "tiny_heads": 2, "tiny_vocab": 300, "max_seq_len": 256},
        "agents": {"group_size": 3, "turns": 2, "max_new_tokens": 6},
        "rl": {"problems_per_epoch": 2, "batch_size": 4, "grad_accum": 2, "lr": 1e-2, "checkpoint_every": 1, "kl_coef": 0.05},
    },
    name="rl-test",
)
PROBLEMS = tuple(Problem(f"builtin/p{i}", "builtin", 1, f"p{i}", f"class Model: pass  # {i}") for i in range(3))


def _seed(*parts: object) -> int:
    return zlib.crc32("/".join(map(str, parts)).encode())


def make_fake_runner(episode_types):
    """Double of davinci.agents.run_episodes: real generations, synthetic verdicts, deterministic seeds."""
    Generation, Turn, Episode = episode_types

    def run(problems, library, backend, profile, *, epoch, group_size, greedy, evaluate_fn):
        n, skills = profile.agents.max_new_tokens, [s.id for s in library.skills]
        episodes = []
        for p in problems:
            for g in range(group_size):
                eid = f"e{epoch}-{p.name}-{g}"

                def gen(agent, text, k):
                    msgs = ({"role": "user", "content": text},)
                    out = backend.generate([msgs], Sampling(max_new_tokens=n, seed=_seed(eid, agent, k)))[0]
                    return Generation(agent, msgs, out, True)

                sel = gen("selection", f"choose skills for {p.code}", 0)
                turns = []
                for t in range(profile.agents.turns):
                    g_t = gen("policy", f"write ModelNew for {p.code} attempt {t}", t)
                    ids = g_t.output.response_ids
                    # a verdict that depends on what was generated, so advantages are not all zero
                    result = minimal_result(sum(ids) % 3 != 0, 1.0 + (ids[0] % 4) / 2)
                    turns.append(Turn(t, g_t, None, result))
                solved = any(t.correct for t in turns)
                summ = gen("summary", f"summarize {eid}", 0) if solved else None
                cand = {"id": f"cand-{eid}"} if solved else None
                chosen = (skills[g % len(skills)],)
                episodes.append(Episode(eid, p.id, epoch, g, sel, tuple(skills), chosen, tuple(turns), summ, cand, None))
        return episodes

    return run


@pytest.fixture
def runner(episode_types):
    """The epoch's collaborators: the fake runner, no evaluator (verdicts are synthetic), the real backend."""
    run = make_fake_runner(episode_types)

    def call(problems, library, backend, profile, epoch, evaluate_fn):
        return run(problems, library, backend, profile, epoch=epoch, group_size=profile.agents.group_size, greedy=False, evaluate_fn=evaluate_fn)

    return Collaborators(run_episodes=call, evaluate=lambda profile: (lambda items, *a, **k: []))


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """An 'SFT' checkpoint of the tiny model and a skill store holding two skills."""
    from davinci.skills import SkillStore
    from davinci.skills.seed import SEED_DIR, load_seed_skill

    root = tmp_path_factory.mktemp("world")
    corpus = [p.code for p in PROBLEMS] + ["write ModelNew for class Model attempt choose skills summarize"] * 30
    bb = create_tiny_backbone(corpus, PROFILE.model, seed=0)
    bb.save(root / "sft")
    store = SkillStore(root / "skills")
    skills = [load_seed_skill(SEED_DIR / name) for name in ("triton-bias-gelu-residual", "triton-chunked-masked-cumsum")]
    lib = store.commit(skills, parent=None, note="seed")
    return root, lib.version


def _inputs(world, out: Path, epoch: int = 0, ckpt: Path | None = None, **kw) -> EpochInputs:
    root, version = world
    return EpochInputs(
        checkpoint_dir=str(ckpt or root / "sft"), output_dir=str(out), skill_store_root=str(root / "skills"),
        library_version=version, problems=PROBLEMS, profile=PROFILE, epoch=epoch, device="cpu", **kw,
    )  # fmt: skip


def _weights(ckpt: str) -> torch.Tensor:
    from safetensors.torch import load_file

    state = load_file(str(Path(ckpt) / "model.safetensors"))
    return torch.cat([state[k].flatten().float() for k in sorted(state)])


class Crash(RuntimeError):
    pass


class CrashAt(MemoryLogger):
    def __init__(self, step: int) -> None:
        super().__init__()
        self.step = step

    def log_metrics(self, metrics, step):
        if step == self.step and any(k.startswith("rl/") for k in metrics):
            raise Crash(step)
        super().log_metrics(metrics, step)


def test_epoch_runs_resumes_exactly_and_is_idempotent(world, runner, tmp_path):
    logger = MemoryLogger()
    full = run_rl_epoch(_inputs(world, tmp_path / "full", logger=logger), runner)
    # files and numbers
    n_samples = len(Path(full.samples_path).read_text().splitlines())
    assert full.timing.steps == -(-n_samples // PROFILE.rl.batch_size)  # ceil: the last step may be short
    rows = [json.loads(x) for x in Path(full.rollouts_path).read_text().splitlines()]
    assert len(rows) == 2 * 3  # problems_per_epoch x group_size episodes
    assert set(rows[0]["advantages"]) == {"policy/0", "policy/1", "selection/0"}
    from davinci.agents.episode import Episode

    assert Episode.from_dict(rows[0]["episode"]).episode_id == rows[0]["episode"]["episode_id"]  # JSONL round trip
    steps = [json.loads(x) for x in Path(full.steps_path).read_text().splitlines()]
    assert [s["step"] for s in steps] == list(range(1, full.global_step + 1))
    assert full.global_step == len(logger.series("rl/loss")) == full.timing.steps >= 4
    assert full.timing.generation_s > 0 and full.timing.generated_tokens > 0 and full.timing.update_s > 0
    assert not Path(full.output_dir, "_resume").exists()  # removed once the epoch is complete

    # crash while logging step 3 (after step 2's checkpoint), then the task's retry on the same folder
    with pytest.raises(Crash):
        run_rl_epoch(_inputs(world, tmp_path / "crash", logger=CrashAt(3)), runner)
    assert list((tmp_path / "crash" / "_resume").glob("resume-*.pt"))
    retry_logger = MemoryLogger()
    resumed = run_rl_epoch(_inputs(world, tmp_path / "crash", logger=retry_logger), runner)
    assert Path(resumed.samples_path).read_bytes() == Path(full.samples_path).read_bytes()  # same rollouts
    assert retry_logger.series("rl/loss")[0] == logger.series("rl/loss")[2]  # the loss of step 3, exactly
    assert torch.equal(_weights(resumed.checkpoint_dir), _weights(full.checkpoint_dir))  # final weights
    assert resumed.global_step == full.global_step

    # idempotent: a complete folder returns its saved outputs without loading a model
    again = run_rl_epoch(_inputs(world, tmp_path / "full", logger=MemoryLogger()), runner)
    assert again == full == load_epoch_outputs(full.output_dir)


def test_next_epoch_trains_delayed_summaries(world, runner, tmp_path):
    first = run_rl_epoch(_inputs(world, tmp_path / "e0"), runner)
    pending = [json.loads(x) for x in Path(first.pending_summaries_path).read_text().splitlines()]
    candidates = [json.loads(x) for x in Path(first.candidates_path).read_text().splitlines()]
    assert pending and len(pending) == len(candidates)
    # the skills stage admits the first candidate under a library id the next epoch's episodes select
    root, version = world
    admitted = candidates[0]
    write_admissions(tmp_path / "adm.jsonl", [{"skill_id": "s-new", "outcome": "admitted", "episode_id": admitted["episode_id"]}])
    second = run_rl_epoch(
        _inputs(world, tmp_path / "e1", epoch=1, ckpt=Path(first.checkpoint_dir), previous_epoch_dir=first.output_dir,
                admissions_path=str(tmp_path / "adm.jsonl")),
        runner,
    )  # fmt: skip
    samples = [json.loads(x) for x in Path(second.samples_path).read_text().splitlines()]
    summ = {s["key"]: s for s in samples if s["agent"] == "summary"}
    assert len(summ) == len(pending)
    assert summ[f"{admitted['episode_id']}/summary/0"]["ret"] == 1.0  # admitted, not selected (no s-new in library)
    assert all(s["ret"] == 0.0 for k, s in summ.items() if not k.startswith(admitted["episode_id"]))
    assert second.global_step > first.global_step  # the global step continues across epochs
    assert second.metrics["summaries_credited"] == len(pending)
    # the KL anchor stays where RL started (the SFT checkpoint), not the previous epoch's weights
    state = torch.load(Path(second.checkpoint_dir) / "trainer_state.pt", weights_only=False)
    assert state["reference_dir"] == str(root / "sft") and state["library_version"] == str(version)
    # without the skills stage's decisions the summaries' reward is unknown (not 0): they are not trained
    blind = run_rl_epoch(_inputs(world, tmp_path / "e1b", epoch=1, ckpt=Path(first.checkpoint_dir), previous_epoch_dir=first.output_dir), runner)
    assert blind.metrics["summaries_credited"] == 0
    assert not any(json.loads(x)["agent"] == "summary" for x in Path(blind.samples_path).read_text().splitlines())


def test_unknown_names_fail_before_any_work(world, runner, tmp_path):
    from dataclasses import replace

    from davinci.errors import UnknownName

    bad = replace(PROFILE, rl=replace(PROFILE.rl, advantage="gae"))
    with pytest.raises(UnknownName, match="trloo"):
        run_rl_epoch(replace(_inputs(world, tmp_path / "bad"), profile=bad), runner)
    assert not (tmp_path / "bad").exists()
    from davinci.errors import ConfigError

    partial = replace(PROFILE, rl=replace(PROFILE.rl, agent_weights={"policy": 1.0}))
    with pytest.raises(ConfigError, match="selection, summary"):
        run_rl_epoch(replace(_inputs(world, tmp_path / "bad"), profile=partial), runner)


def test_batch_size_zero_takes_the_whole_epoch_in_one_step(world, runner, tmp_path):
    # rl.batch_size 0 is documented as "all of the epoch's samples in one step": the config checks accept it and
    # the epoch takes exactly one optimizer step, however many samples it made
    from dataclasses import replace

    from davinci.config import load_profile

    assert load_profile("tiny", ["rl.batch_size=0"]).rl.batch_size == 0
    profile = replace(PROFILE, rl=replace(PROFILE.rl, batch_size=0))
    res = run_rl_epoch(replace(_inputs(world, tmp_path / "one"), profile=profile), runner)
    n_samples = len(Path(res.samples_path).read_text().splitlines())
    assert n_samples > PROFILE.rl.batch_size and res.timing.steps == res.global_step == 1


@pytest.mark.slow
def test_torchrun_update_gives_the_in_process_epochs(world, runner, tmp_path):
    # rl.update_processes 2: the same rollouts, the update on two gloo ranks under torchrun (FSDP2). Two epochs give
    # the in-process epochs' steps, global steps and weights within float tolerance, so the second epoch's AdamW
    # went on from the first's optimizer shards (a fresh AdamW would move every weight by ~lr on its first step)
    from dataclasses import replace

    from davinci.llm.backbone import Backbone
    from davinci.rl.torchrun_update import SHARDED

    dist = replace(PROFILE, rl=replace(PROFILE.rl, update_processes=2))
    ends = {}
    for name, profile in (("local", PROFILE), ("torchrun", dist)):
        first = run_rl_epoch(replace(_inputs(world, tmp_path / name / "e0"), profile=profile), runner)
        second = run_rl_epoch(replace(_inputs(world, tmp_path / name / "e1", epoch=1, ckpt=Path(first.checkpoint_dir)), profile=profile), runner)
        ends[name] = (first, second)
    (l0, l1), (d0, d1) = ends["local"], ends["torchrun"]
    assert Path(l0.samples_path).read_bytes() == Path(d0.samples_path).read_bytes()
    assert (d0.global_step, d1.global_step) == (l0.global_step, l1.global_step) and d1.global_step > d0.global_step
    assert (Path(d1.checkpoint_dir) / SHARDED / ".metadata").is_file()
    steps = [json.loads(x) for x in Path(d1.steps_path).read_text().splitlines()]
    assert [s["step"] for s in steps] == list(range(d0.global_step + 1, d1.global_step + 1)) and steps[0]["rl/world_size"] == 2.0
    local = dict(Backbone.load(l1.checkpoint_dir, PROFILE.model, device="cpu").model.named_parameters())
    for name, p in Backbone.load(d1.checkpoint_dir, PROFILE.model, device="cpu").model.named_parameters():
        torch.testing.assert_close(p.detach(), local[name].detach(), rtol=0, atol=2e-5, msg=name)



@pytest.mark.slow
def test_a_failing_rank_fails_the_update_with_its_error(world, tmp_path):
    # real ranks under torchrun read a samples file that is not one: the update raises with the ranks' own error
    # (the log's tail) and names the whole log, instead of leaving a checkpoint that was never trained
    from dataclasses import replace

    from davinci.rl.torchrun_update import DistributedUpdateFailed, torchrun_update
    from davinci.tracking import MemoryLogger

    bad = tmp_path / "samples.jsonl"
    bad.write_text('{"key": "p0/policy/0"}\n')
    profile = replace(PROFILE, rl=replace(PROFILE.rl, update_processes=2))
    root, _ = world
    with pytest.raises(DistributedUpdateFailed, match=r"(?s)exited with .*not a training sample.*torchrun.log"):
        torchrun_update(profile, checkpoint=root / "sft", out=tmp_path / "e0", epoch=0, global_step=0, device="cpu",
                        library_version="1", samples_path=bad, step_logger=MemoryLogger())
    assert not (tmp_path / "e0" / "checkpoint").exists()
