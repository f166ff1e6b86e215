"""The seed library: enough valid skills in both backends, Triton examples correct on the CPU
interpreter, and GPU evidence attached only when it matches the example it measured."""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import replace

import pytest

from davinci.skills.codeinfo import apply_shape_overrides, module_constants
from davinci.skills.schema import CheckRecord, EvidenceRecord, Measurement, record_to_dict
from davinci.skills.seed import EVIDENCE_FILE, attach_evidence, seed_skills


@pytest.fixture(scope="module")
def seeds():
    return seed_skills(evidence_path=None)


def test_at_least_twenty_valid_seed_skills_in_both_backends(seeds):
    assert len(seeds) >= 20
    assert len({s.id for s in seeds}) == len(seeds)
    backends = Counter(s.backend for s in seeds)
    assert backends["triton"] >= 15 and backends["cuda"] >= 4
    for s in seeds:
        assert s.provenance.kind == "seed" and s.status == "candidate"
        assert len(s.guidance.splitlines()) >= 4 and len(s.failure_modes) >= 3, s.id
        constants = module_constants(s.example.before)
        assert set(s.example.cpu_overrides) <= set(constants), s.id
        assert s.example.cpu_overrides, s.id
        # GPU sizes are large enough to time (>= 4M elements in the product of the size constants).
        size = 1
        for v in constants.values():
            size *= v
        assert size >= 4_000_000, s.id


def test_cuda_seeds_build_distinct_extensions_on_the_current_stream(seeds):
    names = []
    for s in (s for s in seeds if s.backend == "cuda"):
        names += re.findall(r'name="([^"]+)"', s.example.after)
        assert "load_inline" in s.example.after and "getCurrentCUDAStream" in s.example.after
        assert "C10_CUDA_KERNEL_LAUNCH_CHECK" in s.example.after and "use_fast_math" not in s.example.after
    assert len(names) == len(set(names))


def test_triton_seed_examples_are_correct_on_the_cpu_interpreter(seeds, gym_double):
    """Every Triton example at its CPU sizes and at one unseen variant, in one interpreter process."""
    items, labels = [], []
    for s in (s for s in seeds if s.backend == "triton"):
        base = s.example.cpu_overrides
        items.append((s.example.before, s.example.after, base))
        labels.append((s.id, base))
        for variant in gym_double.shape_variants(apply_shape_overrides(s.example.before, base), 1, seed=11):
            merged = {**base, **variant}
            items.append((s.example.before, s.example.after, merged))
            labels.append((s.id, merged))
    results = gym_double.evaluate_many(items)
    failures = [(label, r.error_kind, r.error[:300]) for label, r in zip(labels, results) if not r.correct]
    assert not failures


def _entry(skill, outcome="admitted", label="cuda", example_hash=None):
    check = CheckRecord("rerun", f"skill-example/{skill.id}", True, True, 1, (), True, 2.0, 1.9, 2.1, (), "NVIDIA H100 80GB HBM3", label)
    ev = EvidenceRecord("admission", outcome, ("ok",), (check,), "2026-01-01", (("device", "NVIDIA H100 80GB HBM3"), ("timing_label", label), ("torch", "2.11.0"), ("triton", "3.6.0")))
    m = Measurement(check.problem_id, 2.0, 1.9, 2.1, "NVIDIA H100 80GB HBM3", label, "2.11.0", "3.6.0")
    return {"example_hash": example_hash or skill.example.content_hash, "outcome": outcome, "evidence": record_to_dict(ev), "measurements": [record_to_dict(m)]}


def test_evidence_is_attached_only_when_it_matches_and_was_measured_on_a_gpu(seeds, tmp_path):
    a, b, c, d = seeds[:4]
    doc = {"skills": {a.id: _entry(a), b.id: _entry(b, example_hash="0" * 16), c.id: _entry(c, label="cpu"), d.id: _entry(d, outcome="rejected")}}
    path = tmp_path / "evidence.json"
    path.write_text(json.dumps(doc))
    by_id = {s.id: s for s in seed_skills(evidence_path=path)}
    assert by_id[a.id].status == "admitted" and by_id[a.id].effect.best_lower == 1.9
    assert by_id[a.id].evidence[-1].decision == "admitted"
    assert by_id[b.id].status == "candidate" and by_id[b.id].evidence == ()  # stale: example changed since
    assert by_id[c.id].status == "candidate" and by_id[c.id].evidence  # CPU timing never admits a seed
    assert by_id[d.id].status == "candidate" and by_id[d.id].evidence[-1].decision == "rejected"
    assert attach_evidence(replace(a, example=replace(a.example, after=a.example.after + "\n")), doc["skills"][a.id]).status == "candidate"


def test_committed_gpu_evidence_admits_at_least_twenty_seeds():
    if not EVIDENCE_FILE.exists():
        pytest.skip(f"no GPU evidence yet ({EVIDENCE_FILE}): run benchmarks/gpu/skills_admit_seed.py on an H100")
    admitted = [s for s in seed_skills() if s.status == "admitted"]
    assert len(admitted) >= 20
    for s in admitted:
        env = dict(s.evidence[-1].environment)
        assert env["timing_label"] == "cuda" and env["device"] and env["torch"] and env["triton"]
        assert s.effect.best_lower > 1.0


def test_seed_skills_are_not_near_duplicates_of_each_other(seeds):
    """Admitting the seeds together must never merge two of them (default threshold 0.6)."""
    from davinci.skills.config import SkillsConfig
    from davinci.skills.dedup import similarity

    worst = max(similarity(a, b) for i, a in enumerate(seeds) for b in seeds[i + 1 :])
    assert worst < SkillsConfig().duplicate_threshold - 0.15


@pytest.mark.slow
def test_triton_seed_kernels_compile_for_h100(tmp_path):
    """Offline compile (no GPU) of every Triton seed kernel for sm_90 at the GPU example sizes."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).with_name("compile_seeds.py")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["TRITON_CACHE_DIR"] = str(tmp_path / "triton-cache")  # not the user's ~/.triton
    proc = subprocess.run([sys.executable, str(script), str(tmp_path / "out.json")], env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    records = json.loads((tmp_path / "out.json").read_text())
    assert {r["skill"] for r in records} == {s.id for s in seed_skills(evidence_path=None) if s.backend == "triton"}
    assert [r for r in records if not r["ok"]] == []
