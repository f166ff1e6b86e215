"""The candidate sandbox's layers (isolation.py, seccomp.py), as root and without privileges.

Each test runs the real evaluator (fork server, namespaces, mounts, seccomp) and, for the unprivileged path,
a real process that holds no capability at all: uid 0 with an empty capability bounding set, which the
kernel treats like any unprivileged user (no CAP_SYS_ADMIN, no CAP_SETUID), so the same machine tests both.
"""

from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from davinci.kernelgym import isolation, seccomp

ROOT = Path(__file__).resolve().parents[2]
FIX = Path(__file__).parent / "fixtures"
PRIVILEGED = isolation.has_cap(isolation.CAP_SYS_ADMIN) and os.geteuid() == 0


def _no_capabilities() -> None:
    """preexec: empty the bounding set, so the exec'd program holds no capability (even as uid 0)."""
    libc = ctypes.CDLL(None, use_errno=True)
    for cap in range(64):
        libc.prctl(24, cap, 0, 0, 0)  # PR_CAPBSET_DROP


def _eval_json(tmp_path: Path, unprivileged: bool, candidate: str = "honest_relu") -> dict:
    env = dict(os.environ, DAVINCI_HOME=str(tmp_path), PYTHONPATH=str(ROOT))
    cmd = [sys.executable, "-m", "flows.cli", "eval", "--problem", str(FIX / "problems" / "relu.py"),
           "--candidate", str(FIX / "candidates" / f"{candidate}.py"), "--device", "cpu", "--json"]
    proc = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600,
                          preexec_fn=_no_capabilities if unprivileged else None)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(not PRIVILEGED, reason="needs root with CAP_SYS_ADMIN (the CI and the GPU machines have it)")
def test_as_root_every_required_layer_holds_and_eval_json_says_so(tmp_path):
    out = _eval_json(tmp_path, unprivileged=False)
    assert out["correct"], out["feedback"]
    assert out["isolation"]["missing"] == [], out["isolation"]
    assert set(isolation.REQUIRED) <= set(out["isolation"]["held"])
    assert "audit_hook" in out["isolation"]["held"], out["isolation"]  # the in-process layer (pyaudit.py) too


@pytest.mark.skipif(not PRIVILEGED, reason="needs root to drop to an unprivileged process")
def test_without_privileges_the_cpu_evaluator_runs_and_names_the_missing_layers(tmp_path):
    out = _eval_json(tmp_path, unprivileged=True)
    assert out["correct"], out["feedback"]  # the evaluator still works ...
    missing = out["isolation"]["missing"]
    assert "user" in missing and missing, out["isolation"]  # ... and says what it could not apply
    assert out["isolation"]["errors"], out["isolation"]
    assert {"no_caps", "no_new_privs", "seccomp", "audit_hook"} <= set(out["isolation"]["held"])


@pytest.mark.skipif(not PRIVILEGED, reason="needs root to drop to an unprivileged process")
def test_require_isolation_stops_before_any_candidate_with_the_fix(tmp_path):
    script = ("from davinci.kernelgym import Evaluator\n"
              "from davinci.kernelgym.config import GymConfig\n"
              "from davinci.errors import DavinciError\n"
              f"cfg = GymConfig(device='cpu', workers=1, require_isolation=True, cache_dir={str(tmp_path)!r})\n"
              "try:\n    Evaluator(cfg).ensure_lanes(1)\nexcept DavinciError as e:\n    print('ERR', e)\n")
    proc = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)),
                          capture_output=True, text=True, timeout=300, preexec_fn=_no_capabilities)
    assert "ERR the candidate sandbox is missing layers" in proc.stdout, proc.stdout + proc.stderr[-2000:]
    assert "user" in proc.stdout and "fix:" in proc.stdout


def test_seccomp_program_denies_only_what_it_lists():
    """The assembled filter: every jump lands inside the program, it ends in ALLOW, and each denied call
    has its own EPERM return (a hand count over the tables)."""
    prog = seccomp.program(own_pid=1234, restrict_pids=True)
    codes = [int.from_bytes(i[:2], "little") for i in prog]
    assert codes[-1] == seccomp.RET and int.from_bytes(prog[-1][4:], "little") == seccomp.RET_ALLOW
    for n, (code, ins) in enumerate(zip(codes, prog)):
        if code in (seccomp.JEQ, seccomp.JGE, seccomp.JSET):
            assert n + 1 + max(ins[2], ins[3]) < len(prog)
    eperm = sum(1 for i in prog if int.from_bytes(i[:2], "little") == seccomp.RET
                and int.from_bytes(i[4:], "little") == seccomp.RET_ERRNO | seccomp.EPERM)
    # arch, x32, each denied call, 3 socket domains, clone flags, one per pid-checked call
    assert eperm == 2 + len(seccomp.DENY) + len(seccomp.DENIED_DOMAINS) + 1 + len(seccomp.PID_ARG)


def _confined_child(scratch: Path, body: str) -> str:
    """A script that forks a child through both sandbox stages (`scratch` writable, user nobody), runs `body`
    there (indented four spaces; `w` is the pipe back, `applied` the layers) and prints what it wrote."""
    return f"""
import json, os, sys
from davinci.kernelgym import sandbox, isolation
r, w = os.pipe()
pid = os.fork()
if pid == 0:
    os.close(r)
    applied = sandbox.enter_sandbox(w, {{"network_isolation": True}}, os.getppid())
    applied = isolation.confine({{"writable": [{str(scratch)!r}], "hide": [], "user": "nobody"}}, applied)
{body.strip(chr(10))}
os.close(w)
print(os.fdopen(r).read()); os.waitpid(pid, 0)
"""


@pytest.mark.skipif(not PRIVILEGED, reason="namespaces need root here")
def test_a_confined_process_cannot_write_outside_its_folder_or_see_the_evaluator(tmp_path):
    """Both stages in a forked child: the writes it may make land, every other write fails, and it sees
    only its own PID namespace."""
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    code = _confined_child(scratch, f"""
    res = {{"uid": os.getuid(), "pids": sorted(int(p) for p in os.listdir("/proc") if p.isdigit())}}
    for target in [{str(ROOT / 'README.md')!r}, {str(tmp_path / 'outside.txt')!r}, "/etc/evil"]:
        try:
            open(target, "a").write("x"); res[target] = "written"
        except OSError as e:
            res[target] = type(e).__name__
    open({str(scratch / 'ok.txt')!r}, "w").write("ok")
    open("/tmp/private", "w").write("x")
    os.write(w, json.dumps({{"applied": applied, **res}}).encode()); os._exit(0)
""")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)),
                          capture_output=True, text=True, timeout=120)
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["uid"] == 65534 and out["pids"] == [1], out
    assert {out[t] for t in out if t.startswith("/")} == {"PermissionError"} or all(
        out[t] != "written" for t in out if t.startswith("/")), out
    assert (scratch / "ok.txt").read_text() == "ok"
    assert not (tmp_path / "outside.txt").exists() and not Path("/tmp/private").exists()


@pytest.mark.skipif(not PRIVILEGED, reason="namespaces need root here")
def test_a_project_under_tmp_stays_importable_inside_the_private_tmp(tmp_path):
    """The candidate gets a private /tmp; a checkout that lives under /tmp (as a CI clone may) must still be
    readable there, or every lazy import of the harness fails."""
    import shutil

    copy = tmp_path / "checkout"
    shutil.copytree(ROOT / "davinci", copy / "davinci", ignore=shutil.ignore_patterns("__pycache__"))
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    code = _confined_child(scratch, """
    import davinci.kernelgym.metrics  # first imported here, from the checkout under /tmp
    os.write(w, ("imported " + str(applied["private_tmp"])).encode()); os._exit(0)
""")
    proc = subprocess.run([sys.executable, "-c", code], cwd=copy, env=dict(os.environ, PYTHONPATH=str(copy)),
                          capture_output=True, text=True, timeout=120)
    assert proc.stdout.strip().endswith("imported True"), proc.stdout + proc.stderr[-2000:]
