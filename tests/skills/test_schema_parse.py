"""Skill schema validation and the summary-output parser against garbage."""

from __future__ import annotations

import json
import random

import pytest

from davinci.errors import MalformedInput
from davinci.skills.parse import SkillRejection, parse_skill_json
from davinci.skills.schema import CheckRecord, EvidenceRecord, Example, Measurement, Skill, SkillProvenance, validate_skill

PROV = SkillProvenance(kind="summary", episode_id="ep-7", epoch=3, problem_id="kernelbench/L2/76")


def _summary(**over):
    base = {
        "title": "Fuse bias and ReLU after the GEMM",
        "intent": "Apply bias and ReLU on the accumulator before storing.",
        "applies_to": {"ops": ["linear", "relu"], "patterns": ["epilogue"]},
        "preconditions": {"dtypes": ["fp32"], "shapes": "any", "layout": "row-major", "hardware": "any"},
        "guidance": "Load the bias once per column tile; apply relu to acc; store once.",
        "backend": "triton",
        "failure_modes": ["tf32 in tl.dot"],
        "effect": {"summary": "1.5x", "claimed_speedup": 1.5},
    }
    base.update(over)
    return base


def test_roundtrip_preserves_every_field(skill_factory):
    check = CheckRecord("rerun", "p", True, True, 7, (("rows", 8),), True, 1.2, 1.1, 1.3, ("x",), "cpu", "cpu")
    ev = EvidenceRecord("admission", "admitted", ("ok",), (check,), "2026", (("device", "cpu"),), (("bar", "0"),), (("n", 1.0),))
    skill = skill_factory()
    from dataclasses import replace

    skill = replace(skill, evidence=(ev,), effect=replace(skill.effect, measurements=(Measurement("p", 1.2, 1.1, 1.3, "H100", "cuda", "2.11", "3.6", (("rows", 8),), 3),)))
    d = json.loads(json.dumps(skill.to_dict()))
    assert d["example"]["cpu_shapes"] == {"rows": 8, "cols": 300}  # pairs are dicts in JSON
    assert Skill.from_dict(d) == skill
    assert Skill.from_dict(d).content_hash == skill.content_hash


@pytest.mark.parametrize(
    "field, value, fragment",
    [
        ("id", "Bad Id!", "lowercase slug"),
        ("title", "   ", "title must be a non-empty string"),
        ("backend", "opencl", "backend 'opencl'"),
        ("status", "approved", "status 'approved'"),
        ("guidance", "x" * 20000, "guidance is 20000 chars"),
    ],
)
def test_invalid_field_raises_naming_the_problem(skill_factory, field, value, fragment):
    skill = skill_factory()
    with pytest.raises(MalformedInput) as err:
        type(skill)(**{**{f: getattr(skill, f) for f in skill.__dataclass_fields__}, field: value})
    assert fragment in str(err.value)


def test_example_must_define_the_kernelbench_interface(skill_factory):
    skill = skill_factory()
    bad = Example("import torch\n\nclass Model: pass\n", "class NotModelNew: pass\n")
    problems = validate_skill(type(skill)(**{**{f: getattr(skill, f) for f in skill.__dataclass_fields__}, "example": skill.example}))
    assert problems == []
    with pytest.raises(MalformedInput) as err:
        type(skill)(**{**{f: getattr(skill, f) for f in skill.__dataclass_fields__}, "example": bad})
    text = str(err.value)
    assert "example.before: missing get_inputs" in text and "example.after: missing ModelNew" in text


def test_parse_accepts_fenced_json_with_prose(skill_factory, sources):
    text = "Here is the skill I distilled:\n```json\n" + json.dumps(_summary()) + "\n```\nHope this helps! {not json}"
    out = parse_skill_json(text, PROV, example=Example(sources.problem, sources.solution))
    assert isinstance(out, Skill)
    assert out.status == "candidate" and out.provenance == PROV
    assert out.applies_to.ops == ("linear", "relu") and out.effect.claimed_speedup == 1.5
    assert out.id.startswith("fuse-bias-and-relu-after-the-gemm-")


def test_parse_normalizes_loose_shapes(sources):
    loose = _summary(applies_to=["GELU", "softmax"], failure_modes="one single failure mode", guidance=["step one", "step two"], backend=None)
    out = parse_skill_json(json.dumps(loose), PROV, example=Example(sources.problem, sources.solution))
    assert isinstance(out, Skill)
    assert out.applies_to.ops == ("gelu", "softmax")  # operator names are lowercased
    assert out.failure_modes == ("one single failure mode",)
    assert out.guidance == "step one\nstep two"
    assert out.backend == "triton"  # inferred from the example (no load_inline)


@pytest.mark.parametrize(
    "text, reason",
    [
        ("", "no JSON object"),
        ("I could not find a reusable technique.", "no JSON object"),
        ('{"title": "x", "intent": "y"', "no JSON object"),  # truncated
        ("[1, 2, 3]", "no JSON object"),
        ('{"title": "t", "intent": "i", "guidance": "g"}', "applies_to.ops must name at least one operator"),
        ('{"title": 5, "intent": "i", "guidance": "g", "applies_to": {"ops": ["a"]}}', "title must be a non-empty string"),
        ('{"title": "t", "intent": "i", "guidance": "g", "applies_to": {"ops": [{"x": 1}]}}', "applies_to.ops must be a list of strings"),
        ('{"title": "t", "intent": "i", "guidance": "g", "applies_to": 7}', "applies_to must be an object"),
        ('{"title": "t", "intent": "i", "guidance": "g", "applies_to": ["a"], "backend": "opencl"}', "backend must be"),
        ('{"title": "t", "intent": "i", "guidance": "g", "applies_to": ["a"], "effect": {"claimed_speedup": "fast"}}', "claimed_speedup must be a number"),
    ],
)
def test_parse_rejects_with_the_reason_kept(text, reason, sources):
    out = parse_skill_json(text, PROV, example=Example(sources.problem, sources.solution))
    assert isinstance(out, SkillRejection)
    assert reason in out.reason
    assert out.provenance == PROV and out.excerpt == text[:500]


def test_parse_rejects_missing_example_and_huge_and_non_text():
    assert "example" in parse_skill_json(json.dumps(_summary()), PROV).reason  # type: ignore[union-attr]
    huge = parse_skill_json("{" + "a" * 300_000, PROV)
    assert isinstance(huge, SkillRejection) and "limit" in huge.reason
    assert isinstance(parse_skill_json(None, PROV), SkillRejection)  # type: ignore[arg-type]
    assert isinstance(parse_skill_json(b"{}", PROV), SkillRejection)  # type: ignore[arg-type]


def test_parse_rejects_example_code_that_does_not_define_the_interface():
    bad = _summary(example={"before": "print('hi')", "after": "x = 1"})
    out = parse_skill_json(json.dumps(bad), PROV)
    assert isinstance(out, SkillRejection) and "missing Model" in out.reason


def test_parse_never_raises_on_random_garbage(sources):
    rng = random.Random(0)
    alphabet = '{}[]":,\\ abcdefghijklmnop0123456789\n`ops applies_to title intent guidance'
    example = Example(sources.problem, sources.solution)
    for _ in range(400):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 300)))
        out = parse_skill_json(text, PROV, example=example)
        assert isinstance(out, (Skill, SkillRejection))
    deep = "[" * 5000 + "]" * 5000
    assert isinstance(parse_skill_json(deep, PROV, example=example), SkillRejection)
