"""Compile every Triton kernel of the seed examples for an H100 (sm_90) without a GPU.

Run as a script (by test_seed.py, in its own process: it replaces `JITFunction.run`):
    python tests/skills/compile_seeds.py RESULT.json
Each seed's `ModelNew.forward` runs on meta tensors at the example's GPU sizes, so launch parameters
(BLOCK sizes, num_warps, num_stages) are the ones the GPU will see. Every kernel launch is intercepted
and compiled with `triton.compile(ASTSource(...), target=GPUTarget("cuda", 90, 32))` down to a cubin:
type errors, unsupported ops and shared-memory overruns show up here instead of on the GPU machine.
"""

from __future__ import annotations

import importlib.util
import json
import sys
import tempfile
from pathlib import Path

import torch
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from triton.runtime.jit import JITFunction

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from davinci.skills.seed import seed_skills  # noqa: E402

POINTER = {torch.float32: "*fp32", torch.bfloat16: "*bf16", torch.float16: "*fp16", torch.int64: "*i64", torch.int32: "*i32", torch.bool: "*i1"}
H100_SMEM = 227 * 1024


def _signature(fn: JITFunction, args: tuple, kwargs: dict) -> tuple[dict, dict]:
    bound = {**dict(zip(fn.arg_names, args)), **kwargs}
    sig, consts = {}, {}
    for i, p in enumerate(fn.params):
        v = bound[p.name]
        if p.is_constexpr:
            sig[p.name], consts[(i,)] = "constexpr", v
        elif isinstance(v, torch.Tensor):
            sig[p.name] = POINTER[v.dtype]
        elif isinstance(v, bool):
            sig[p.name] = "i1"
        elif isinstance(v, int):
            sig[p.name] = "i32" if -(2**31) <= v < 2**31 else "i64"
        else:
            sig[p.name] = "fp32"
    return sig, consts


def main(out_path: str) -> None:
    records: list[dict] = []
    current = {"skill": ""}

    def compile_instead_of_launch(self, *args, grid, warmup, **kwargs):
        options = {k: kwargs.pop(k) for k in list(kwargs) if k in ("num_warps", "num_stages", "num_ctas")}
        rec = {"skill": current["skill"], "kernel": self.__name__, "options": options}
        try:
            sig, consts = _signature(self, args, kwargs)
            kernel = triton.compile(ASTSource(fn=self, signature=sig, constexprs=consts), target=GPUTarget("cuda", 90, 32), options=options)
            rec.update(ok=kernel.metadata.shared <= H100_SMEM, shared=kernel.metadata.shared, error="" if kernel.metadata.shared <= H100_SMEM else "shared memory over the H100 limit")
        except Exception as exc:  # noqa: BLE001 - recorded, the test reports it
            rec.update(ok=False, shared=None, error=f"{type(exc).__name__}: {str(exc)[:500]}")
        records.append(rec)

    JITFunction.run = compile_instead_of_launch  # this process only
    tmp = Path(tempfile.mkdtemp(prefix="seedcompile-"))
    for skill in (s for s in seed_skills(evidence_path=None) if s.backend == "triton"):
        current["skill"] = skill.id
        path = tmp / f"{skill.id.replace('-', '_')}.py"
        path.write_text(skill.example.after)
        spec = importlib.util.spec_from_file_location(path.stem, path)
        module = importlib.util.module_from_spec(spec)
        n_before = len(records)
        try:
            spec.loader.exec_module(module)  # type: ignore[union-attr]
            ns: dict = {}
            exec(compile(skill.example.before, f"{skill.id}/before", "exec"), ns)
            with torch.device("meta"):
                module.ModelNew(*ns["get_init_inputs"]())(*ns["get_inputs"]())
        except Exception as exc:  # noqa: BLE001
            records.append({"skill": skill.id, "kernel": "(forward)", "ok": False, "error": f"{type(exc).__name__}: {exc}"[:500]})
        if len(records) == n_before:
            records.append({"skill": skill.id, "kernel": "(none)", "ok": False, "error": "no Triton kernel was launched"})
    Path(out_path).write_text(json.dumps(records, indent=1))


if __name__ == "__main__":
    main(sys.argv[1])
