"""The CPU lanes' Triton interpreter self-test (`interpcheck`): an installation whose interpreter cannot run an
ordinary kernel stops before any candidate, with the versions and the fix, instead of failing every honest
reduction as the candidate's `runtime` error (seen on the GPU machine: triton 3.6.0 with numpy 2.5.2).

The broken pair is simulated here with the installed Triton: its `__index__` set back to Triton 3.6's
`int(handle.data)`, which NumPy refuses for a one-element array (2.4.6 and 2.5.2 raise; an older NumPy only warns,
and the warning is made an error here). Each check runs in a subprocess (TRITON_INTERPRET must be set before Triton is imported)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

TRITON36_NUMPY25 = """
import warnings
warnings.filterwarnings("error", message=".*Conversion of an array with ndim")  # a NumPy that only warns
from triton.runtime import interpreter
original = interpreter._patch_lang_tensor

def triton36(tensor, scope):  # Triton 3.6's loop-bound conversion, without the squeeze later releases added
    original(tensor, scope)
    scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data))

interpreter._patch_lang_tensor = triton36
"""


def _run(body: str) -> str:
    script = "import os\nos.environ['TRITON_INTERPRET'] = '1'\n" + textwrap.dedent(body)
    proc = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, PYTHONPATH=str(ROOT), TRITON_INTERPRET="1"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def test_the_installed_interpreter_passes_the_self_test():
    out = _run("""
        from davinci.kernelgym.interpcheck import self_test
        print("RESULT", repr(self_test()))
    """)
    assert "RESULT ''" in out, out


def test_a_broken_interpreter_stops_with_the_versions_and_the_fix():
    out = _run(TRITON36_NUMPY25 + """
from davinci.errors import DavinciError
from davinci.kernelgym.interpcheck import check_interpreter
try:
    check_interpreter()
    print("PASSED")
except DavinciError as e:
    print("ERR", e)
""")
    assert "ERR the Triton interpreter (triton " in out, out
    # the interpreter's own words
    assert "runtime loop bound" in out and ("only 0-dimensional arrays" in out or "Conversion of an array with ndim" in out)
    assert "fix: install the Triton the project pins" in out and "numpy<2.4" in out


def test_the_zygote_reports_a_broken_interpreter_as_the_installations_problem():
    """The zygote's ready frame carries the message, the fix and `environment`, which the lane raises as
    `EnvironmentBroken` (a DavinciError) rather than a worker crash."""
    out = _run(TRITON36_NUMPY25 + """
import json, os
from davinci.kernelgym import zygote
from davinci.kernelgym.protocol import Channel
from davinci.kernelgym.sandbox import socketpair
a, b = socketpair()
pid = os.fork()
if pid == 0:
    a.close()
    os._exit(zygote.main([str(b.fileno()), json.dumps({"interpret": True})]))
b.close()
ready, _ = Channel(a, max_blob_bytes=None).recv()
_, status = os.waitpid(pid, 0)
print("READY", json.dumps(ready), os.waitstatus_to_exitcode(status))
""")
    line = next(x for x in out.splitlines() if x.startswith("READY"))
    import json

    ready = json.loads(line.split(" ", 1)[1].rsplit(" ", 1)[0])
    assert ready["environment"] is True and line.endswith(" 1"), line
    assert "cannot run a known-good kernel" in ready["error"] and "numpy<2.4" in ready["hint"]


def test_the_zygote_computes_tritons_cache_key_once_for_every_fork():
    """Compiled (non-interpreted) lanes: the key every first launch needs is computed before the fork (its forks
    inherit the cached value) and the zygote stays fit to fork CUDA children."""
    script = """
import json
from davinci.kernelgym import zygote
zygote._preload({"interpret": False})
from triton.runtime.cache import triton_key
import torch
print(json.dumps([triton_key.cache_info().currsize, torch.cuda.is_initialized()]))
"""
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300,
                          cwd=str(ROOT), env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(proc.stdout.splitlines()[-1]) == [1, False]
