"""Feedback for the policy's next turn: a few structured lines, never a wall of log.

    verdict: incorrect (mismatch in trial 2/3, heavy_tail inputs)
    outputs: 4096 of 4096 elements out of tolerance (atol 1e-4, rtol 1e-4); first at [0, 17]: 0 vs 1.25e-05;
             max abs err 2.1e-05, max rel err 1; relative error norm 1
    time (cuda): 0.412 ms [0.409, 0.415] | eager 0.520 ms -> 1.26x [1.24, 1.28] | torch.compile 0.455 ms -> 1.10x
    speed of light: 63% | kernel coverage: 92% (add_kernel)
    flags: input_mutation: the forward changed its input(s) #0

Compile and runtime errors come as an excerpt: the last traceback lines that point into the candidate
(or nvcc's `error` lines), plus the exception line, with folders stripped.
"""

from __future__ import annotations

import re
from typing import Any

MAX_CHARS = 1800


def strip_paths(text: str, job_dir: str | None = None) -> str:
    if job_dir:
        text = text.replace(job_dir + "/", "").replace(job_dir, "")
    text = re.sub(r"/[^\s\"']*/site-packages/", "<lib>/", text)
    text = re.sub(r"/[^\s\"']*/davinci/kernelgym/", "<kernelgym>/", text)
    text = re.sub(r"/[^\s\"']*/(builds|jobs)/[0-9a-f]+/", "", text)
    text = re.sub(r"/[^\s\"']*/lanes/[^/\s]+/(ref|jobs/[0-9a-f]+)/", "", text)
    return text


_NOISE = re.compile(r'File "(<kernelgym>|<frozen |<lib>/torch/nn/modules/module.py|<lib>/torch/_)')


def _drop_harness_frames(lines: list[str]) -> list[str]:
    """Remove traceback frames of the harness, importlib and torch's module plumbing (and their code lines)."""
    out, skipping = [], False
    for ln in lines:
        if ln.lstrip().startswith("File "):
            skipping = bool(_NOISE.search(ln))
        elif not ln.startswith("    ") and not ln.startswith("  ") or ln.startswith("Traceback"):
            skipping = False
        if not skipping and not ln.startswith("Traceback"):
            out.append(ln)
    return out


def excerpt(text: str, max_lines: int = 12) -> str:
    """The informative end of a traceback or compiler log."""
    lines = _drop_harness_frames([ln.rstrip() for ln in text.strip().splitlines() if ln.strip()])
    if not lines:
        return ""
    errors = [ln for ln in lines if re.search(r"\berror\b", ln, re.IGNORECASE) and "Traceback" not in ln]
    tail = lines[-max_lines:]
    if len(errors) > 2 and not any(e in tail for e in errors):
        tail = errors[:max_lines // 2] + lines[-(max_lines - max_lines // 2):]
    return "\n".join(tail)


def _g(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.3g}"


def describe_mismatch(c: dict[str, Any]) -> str:
    parts = [c.get("reason", "outputs differ")]
    idx, vals = c.get("first_bad_index"), c.get("first_bad_values")
    if idx is not None and vals:
        where = f"at {list(idx)}" if idx else "(scalar)"
        parts.append(f"first {where}: {vals[0]:.7g} vs reference {vals[1]:.7g}")
    if c.get("max_abs_error"):
        stats = f"max abs err {_g(c['max_abs_error'])}, max rel err {_g(c.get('max_rel_error'))}"
        if c.get("mismatch_fraction"):
            stats += f", {100 * c['mismatch_fraction']:.3g}% of elements out of tolerance"
        if not c.get("guard"):
            stats += f", relative error norm {_g(c.get('rel_error_norm'))}"
        parts.append(stats)
    if c.get("output_index"):
        parts.append(f"output #{c['output_index']}")
    return "; ".join(parts)


def describe_timing(label: str, runtime: Any, baselines: dict[str, Any], speedups: dict[str, Any]) -> str:
    if runtime is None:
        return ""
    out = [f"time ({label}): {runtime.median_ms:.4g} ms [{runtime.ci_low_ms:.4g}, {runtime.ci_high_ms:.4g}]"]
    for name, stats in baselines.items():
        s, ci = speedups.get(name, (None, None))
        shown = "torch.compile" if name == "compile" else name
        speed = f" -> {s:.3g}x" + (f" [{ci[0]:.3g}, {ci[1]:.3g}]" if ci else "") if s else ""
        out.append(f"{shown} {stats.median_ms:.4g} ms{speed}")
    return " | ".join(out)


def render(verdict: str, *, detail: str = "", comparison: dict[str, Any] | None = None, timing: str = "",
           sol: float | None = None, coverage: float | None = None, kernels: tuple[str, ...] = (),
           flags: dict[str, str] | None = None, notes: list[str] | None = None) -> str:
    lines = [f"verdict: {verdict}"]
    if detail:
        lines.append(detail)
    if comparison:
        lines.append("outputs: " + describe_mismatch(comparison))
    if timing:
        lines.append(timing)
    extra = []
    if sol is not None:
        extra.append(f"speed of light: {sol:.3g}%")
    if coverage is not None:
        names = f" ({', '.join(kernels[:3])})" if kernels else ""
        extra.append(f"kernel coverage: {100 * coverage:.3g}% of the time in your kernels{names}")
    if extra:
        lines.append(" | ".join(extra))
    for name, reason in (flags or {}).items():
        lines.append(f"flag {name}: {reason}")
    lines.extend(notes or [])
    text = "\n".join(lines)
    return text if len(text) <= MAX_CHARS else text[:MAX_CHARS - 3] + "..."
