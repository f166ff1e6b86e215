"""Turn the summary agent's text into a candidate `Skill`, or a `SkillRejection` that keeps the reason.

The summary agent writes a JSON object (schema in `SUMMARY_SCHEMA`). Model output is untrusted, so:
- Any text is accepted: code fences, prose before or after, several JSON values (the first object
  with skill fields wins). Nothing raises; every failure is a `SkillRejection` with a reason, the field
  at fault and an excerpt of the raw text.
- Loose shapes are normalized where the meaning is clear (a string where a list is expected becomes a
  one-item list; `applies_to` may be a list of ops; `ops`/`patterns` may sit at the top level). Wrong
  types that have no clear meaning are rejected, as is text above the size limits.
- The example usually comes from the episode itself (`example=Example(problem.code, candidate.code)`),
  which is more trustworthy than code the model re-types; the JSON `example` is used only without it.
- The id is a slug of the title plus a hash of the content, so two summaries of one technique from
  different episodes get different ids and the admission gate decides between them (near-duplicates).

    out = parse_skill_json(text, SkillProvenance("summary", episode_id="e1", epoch=2, problem_id=p.id),
                           example=Example(p.code, cand.code))
    if isinstance(out, SkillRejection): log(out.reason)
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from typing import Any, Mapping

from davinci.errors import MalformedInput
from davinci.skills.schema import AppliesTo, Effect, Example, Preconditions, Skill, SkillProvenance, slugify

MAX_INPUT_CHARS = 200_000
_FENCE = re.compile(r"```(?:json|JSON)?\s*\n?(.*?)```", re.S)
_SKILL_KEYS = {"title", "intent", "guidance", "applies_to", "ops"}

SUMMARY_SCHEMA = """{
  "title": "short name of the technique",
  "intent": "what it achieves and why it is faster",
  "applies_to": {"ops": ["torch op names, e.g. gelu, softmax, linear"], "patterns": ["e.g. epilogue, elementwise chain"]},
  "preconditions": {"dtypes": ["fp32"], "shapes": "size constraints", "layout": "contiguity / strides", "hardware": "e.g. any NVIDIA GPU"},
  "guidance": "step-by-step instructions for writing the kernel",
  "backend": "triton or cuda",
  "failure_modes": ["mistakes this avoids"],
  "effect": {"summary": "observed effect", "claimed_speedup": 1.8}
}"""


class _FieldError(ValueError):
    """A field of the summary JSON that cannot be used: message first, then the field name."""

    def __init__(self, message: str, field: str) -> None:
        super().__init__(message)
        self.message = message
        self.field = field


@dataclass(frozen=True)
class SkillRejection:
    """A summary that did not become a skill: why, which field, and the start of the raw text."""

    reason: str
    field: str = ""
    excerpt: str = ""
    provenance: SkillProvenance = SkillProvenance()


def _candidate_objects(text: str) -> list[dict[str, Any]]:
    """JSON objects found in `text`: fenced blocks first, then every decodable `{` (at most 32)."""
    decoder = json.JSONDecoder()
    found: list[dict[str, Any]] = []
    for source in [m.group(1) for m in _FENCE.finditer(text)] + [text]:
        for attempt, match in enumerate(re.finditer(r"\{", source)):
            if attempt >= 2000 or len(found) >= 32:
                return found
            try:
                value, _ = decoder.raw_decode(source, match.start())
            except (ValueError, RecursionError):
                continue
            if isinstance(value, dict):
                found.append(value)
    return found


def _str_list(value: Any, name: str) -> tuple[str, ...]:
    """A list of strings from a list, a single string (one item) or a comma list; else `_FieldError`."""
    if value is None:
        return ()
    if isinstance(value, str):
        # "gelu, softmax" is a list written as one line; a sentence with newlines stays one item.
        parts = value.split(",") if ("," in value and "\n" not in value) else [value]
        return tuple(p.strip() for p in parts if p.strip())
    if isinstance(value, (list, tuple)) and all(isinstance(v, (str, int, float)) and not isinstance(v, bool) for v in value):
        return tuple(str(v).strip() for v in value if str(v).strip())
    raise _FieldError(f"{name} must be a list of strings, got {type(value).__name__}", name)


def _text(value: Any, name: str, required: bool = True) -> str:
    if value is None and not required:
        return ""
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        value = "\n".join(value)  # guidance written as a list of steps
    if not isinstance(value, str) or (required and not value.strip()):
        raise _FieldError(f"{name} must be a non-empty string", name)
    return value.strip()


def _applies_to(obj: Mapping[str, Any]) -> AppliesTo:
    raw = obj.get("applies_to")
    if isinstance(raw, (list, str)):
        return AppliesTo(tuple(o.lower() for o in _str_list(raw, "applies_to")), _str_list(obj.get("patterns"), "patterns"))
    if raw is not None and not isinstance(raw, Mapping):
        raise _FieldError("applies_to must be an object with ops and patterns", "applies_to")
    raw = raw or {}
    ops = _str_list(raw.get("ops", obj.get("ops")), "applies_to.ops")
    return AppliesTo(tuple(o.lower() for o in ops), _str_list(raw.get("patterns", obj.get("patterns")), "applies_to.patterns"))


def _preconditions(raw: Any) -> Preconditions:
    if raw is None:
        return Preconditions()
    if not isinstance(raw, Mapping):
        raise _FieldError("preconditions must be an object", "preconditions")
    def pick(key: str) -> str:
        value = raw.get(key)
        if isinstance(value, (list, tuple)):
            return ", ".join(_str_list(value, f"preconditions.{key}"))
        return _text(value, f"preconditions.{key}", required=False)

    return Preconditions(_str_list(raw.get("dtypes"), "preconditions.dtypes"), pick("shapes"), pick("layout"), pick("hardware"))


def _effect(raw: Any) -> Effect:
    if raw is None:
        return Effect()
    if isinstance(raw, str):
        return Effect(summary=raw.strip())
    if not isinstance(raw, Mapping):
        raise _FieldError("effect must be an object", "effect")
    claimed = raw.get("claimed_speedup", raw.get("speedup"))
    if claimed is not None and (isinstance(claimed, bool) or not isinstance(claimed, (int, float))):
        raise _FieldError("effect.claimed_speedup must be a number", "effect.claimed_speedup")
    return Effect(summary=_text(raw.get("summary"), "effect.summary", required=False), claimed_speedup=None if claimed is None else float(claimed))


def _backend(obj: Mapping[str, Any], example: Example) -> str:
    raw = obj.get("backend")
    if raw is None:
        return "cuda" if "load_inline" in example.after else "triton"
    if not isinstance(raw, str) or raw.strip().lower() not in ("triton", "cuda"):
        raise _FieldError(f"backend must be 'triton' or 'cuda', got {raw!r}", "backend")
    return raw.strip().lower()


def _example(obj: Mapping[str, Any], given: Example | None) -> Example:
    if given is not None:
        return given
    raw = obj.get("example")
    if not isinstance(raw, Mapping):
        raise _FieldError("example with before/after code is missing (and none was given)", "example")
    return Example(_text(raw.get("before"), "example.before"), _text(raw.get("after"), "example.after"))


def _build(obj: Mapping[str, Any], provenance: SkillProvenance, example: Example | None) -> Skill:
    ex = _example(obj, example)
    title = _text(obj.get("title"), "title")
    fields = dict(
        title=title,
        intent=_text(obj.get("intent"), "intent"),
        applies_to=_applies_to(obj),
        preconditions=_preconditions(obj.get("preconditions")),
        guidance=_text(obj.get("guidance"), "guidance"),
        backend=_backend(obj, ex),
        example=ex,
        effect=_effect(obj.get("effect")),
        failure_modes=_str_list(obj.get("failure_modes"), "failure_modes"),
        provenance=provenance,
        status="candidate",
    )
    digest = hashlib.sha256(json.dumps([title, fields["intent"], fields["guidance"], ex.content_hash, provenance.episode_id]).encode()).hexdigest()[:8]
    return Skill(id=slugify(title, digest), **fields)


def parse_skill_json(text: Any, provenance: SkillProvenance, *, example: Example | None = None) -> Skill | SkillRejection:
    """A candidate `Skill` (status candidate) from the summary agent's output, or the reason it is not one."""
    excerpt = text[:500] if isinstance(text, str) else repr(text)[:500]
    if not isinstance(text, str):
        return SkillRejection(f"summary output is {type(text).__name__}, not text", "", excerpt, provenance)
    if len(text) > MAX_INPUT_CHARS:
        return SkillRejection(f"summary output is {len(text)} chars (limit {MAX_INPUT_CHARS})", "", excerpt, provenance)
    objects = _candidate_objects(text)
    if not objects:
        return SkillRejection("no JSON object found in the summary output", "", excerpt, provenance)
    obj = next((o for o in objects if _SKILL_KEYS & set(o)), objects[0])
    try:
        return _build(obj, provenance, example)
    except _FieldError as exc:
        return SkillRejection(exc.message, exc.field, excerpt, provenance)
    except MalformedInput as exc:  # the assembled skill failed schema validation
        return SkillRejection(exc.message, "", excerpt, provenance)
    except (TypeError, ValueError, AttributeError, RecursionError) as exc:
        return SkillRejection(f"unusable summary: {type(exc).__name__}: {exc}", "", excerpt, provenance)
