"""On-policy or loud, end to end over HTTP against the project's own server (`python -m davinci.llm.server`).

Real pieces: the tiny model, `run_rl_epoch` (rollouts, scoring, update, checkpoint), the OpenAI-compatible
client, the server process and its weight-update endpoints. Only the episode runner is a small double
(one policy turn per episode through the real backend, a verdict computed from the generated ids), so an
epoch takes seconds. What is checked:
  - full fine-tuning: before epoch 1 the trainer pushes epoch 0's weights (`/update_weights_from_disk`),
    the server reports that version, and the rollout-vs-trainer KL is ~0 (served = trained);
  - LoRA: epoch 1 hot-loads epoch 0's adapter (`/v1/load_lora_adapter`) and generates with it; KL ~0;
  - a frozen server (refuses updates, like vLLM without runtime updates) stops the run, clear message;
  - a server silently left on old weights (no push) stops the run through the KL bound.
"""

from __future__ import annotations

import zlib
from dataclasses import replace
from pathlib import Path

import httpx
import pytest

from davinci.config import profile_from_dict
from davinci.llm.server import ServerProcess
from davinci.llm.tiny import create_tiny_backbone
from davinci.llm.types import Sampling
from davinci.rl.epoch import Collaborators, EpochInputs, run_rl_epoch
from davinci.rl.onpolicy import OffPolicyError, StaleWeightsError
from davinci.rl.rewards import minimal_result
from davinci.rl.weightsync import weights_version
from davinci.types import Problem

PROBLEMS = tuple(Problem(f"builtin/q{i}", "builtin", 1, f"q{i}", f"class Model: pass  # {i}") for i in range(2))
TINY = {"tiny_hidden": 32, "tiny_layers": 1, "tiny_heads": 2, "tiny_vocab": 300, "max_seq_len": 256}


def one_turn_runner(episode_types):
    """Episodes of one policy turn, generated through the real backend; the verdict is read off the ids."""
    Generation, Turn, Episode = episode_types

    def run(problems, library, backend, profile, epoch, evaluate_fn):
        prompts = [({"role": "user", "content": f"write ModelNew for {p.code}"},) for p in problems for _ in range(profile.agents.group_size)]
        outs = backend.generate(prompts, Sampling(max_new_tokens=profile.agents.max_new_tokens, seed=zlib.crc32(f"{epoch}".encode())))
        episodes = []
        for i, (msgs, out) in enumerate(zip(prompts, outs)):
            p = problems[i // profile.agents.group_size]
            verdict = minimal_result(sum(out.response_ids) % 2 == 0, 1.0)  # differs across the group
            turn = Turn(0, Generation("policy", msgs, out, True), None, verdict)
            episodes.append(Episode(f"e{epoch}-{i}", p.id, epoch, i, None, (), (), (turn,), None, None, None))
        return episodes

    return run


def profile(url: str, **model):
    return profile_from_dict({
        "model": {**TINY, "backend": "openai", "openai_base_url": url, **model},
        "agents": {"group_size": 4, "turns": 1, "max_new_tokens": 8, "summarize": False},
        "rl": {"problems_per_epoch": 0, "batch_size": 4, "lr": 3e-2, "checkpoint_every": 0, "max_rollout_kl": 1e-3},
    }, name="onpolicy-test")  # fmt: skip


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    from davinci.skills import SkillStore

    root = tmp_path_factory.mktemp("onpolicy")
    corpus = [p.code for p in PROBLEMS] + ["write ModelNew for class Model pass"] * 30
    create_tiny_backbone(corpus, profile("http://unused/v1").model, seed=0).save(root / "sft")
    version = SkillStore(root / "skills").commit([], parent=None, note="empty").version
    return root, version


def epoch(world, prof, out: Path, n: int, ckpt: Path, co: Collaborators):
    root, version = world
    inputs = EpochInputs(checkpoint_dir=str(ckpt), output_dir=str(out), skill_store_root=str(root / "skills"), library_version=version,
                         problems=PROBLEMS, profile=prof, epoch=n, device="cpu")  # fmt: skip
    return run_rl_epoch(inputs, co)


@pytest.mark.slow
def test_full_weights_are_pushed_and_served(world, episode_types, tmp_path):
    root, _ = world
    co = Collaborators(run_episodes=one_turn_runner(episode_types))
    with ServerProcess(root / "sft", model_name="tiny", log_path=tmp_path / "server.log") as server:
        prof = profile(server.url)
        first = epoch(world, prof, tmp_path / "e0", 0, root / "sft", co)
        assert first.metrics["rollout_kl_tokens"] > 0 and first.metrics["rollout_kl"] < 1e-4
        second = epoch(world, prof, tmp_path / "e1", 1, Path(first.checkpoint_dir), co)
        served = httpx.get(f"{server.url}/models").json()["data"][0]
        assert served["version"] == weights_version(first.checkpoint_dir, first.global_step)
        # the trained weights moved (lr 3e-2), yet the served policy equals the trainer's
        assert second.metrics["rollout_kl_tokens"] > 0 and second.metrics["rollout_kl"] < 1e-4


@pytest.mark.slow
def test_lora_adapter_is_hot_loaded(world, episode_types, tmp_path):
    root, _ = world
    co = Collaborators(run_episodes=one_turn_runner(episode_types))
    with ServerProcess(root / "sft", model_name="tiny", log_path=tmp_path / "server.log") as server:
        prof = profile(server.url, lora=True, lora_r=4, lora_alpha=8)
        first = epoch(world, prof, tmp_path / "e0", 0, root / "sft", co)  # fresh adapters: the base is the policy
        second = epoch(world, prof, tmp_path / "e1", 1, Path(first.checkpoint_dir), co)
        names = [m["id"] for m in httpx.get(f"{server.url}/models").json()["data"]]
        adapter = f"policy-{weights_version(first.checkpoint_dir, first.global_step)}"
        assert adapter in names
        assert second.metrics["rollout_kl_tokens"] > 0 and second.metrics["rollout_kl"] < 1e-4
        # the adapter really changes what the server computes: same request, base vs adapter
        def logprobs(model: str) -> list[float]:
            body = {"model": model, "messages": [{"role": "user", "content": "write ModelNew for class Model"}],
                    "max_tokens": 6, "temperature": 0.0, "logprobs": True}
            choice = httpx.post(f"{server.url}/chat/completions", json=body, timeout=60).json()["choices"][0]
            return [t["logprob"] for t in choice["logprobs"]["content"]]

        assert max(abs(a - b) for a, b in zip(logprobs("tiny"), logprobs(adapter))) > 1e-4


@pytest.mark.slow
def test_a_frozen_server_stops_the_run(world, episode_types, tmp_path):
    root, _ = world
    co = Collaborators(run_episodes=one_turn_runner(episode_types))
    with ServerProcess(root / "sft", model_name="tiny", frozen=True) as server:
        with pytest.raises(StaleWeightsError, match="did not accept the trainer's weights") as err:
            epoch(world, profile(server.url), tmp_path / "e0", 0, root / "sft", co)
        assert "403" in str(err.value) and "off-policy" in str(err.value)


@pytest.mark.slow
def test_silently_stale_weights_stop_the_run_through_the_kl_bound(world, episode_types, tmp_path):
    root, _ = world
    synced = Collaborators(run_episodes=one_turn_runner(episode_types))
    with ServerProcess(root / "sft", model_name="tiny") as server:
        prof = profile(server.url)
        first = epoch(world, prof, tmp_path / "e0", 0, root / "sft", synced)
        # nothing pushes epoch 0's weights: the server keeps sampling from the SFT checkpoint
        unsynced = replace(synced, sync_weights=lambda *a, **k: "")
        with pytest.raises(OffPolicyError, match="not serving the weights being trained"):
            epoch(world, prof, tmp_path / "e1", 1, Path(first.checkpoint_dir), unsynced)
