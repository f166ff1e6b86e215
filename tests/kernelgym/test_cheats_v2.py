"""Red-team suite v2 (issue 12): cheats written before their defences, plus unusual honest kernels.

Fixtures:
- fixtures/cheats_v2/c2_*.py: one cheat per file. The docstring says its class (harness_patch, fallback,
  distribution, backend, cross_eval), the problem it targets (fixtures/problems or fixtures/problems_v2) and the
  evidence that should expose it. Every cheat produces the right outputs where it needs them, so only a real
  defence stops it. GPU-only cheats live in fixtures/cheats_v2/gpu/ (not run here).
- fixtures/honest_v2/honest_v2_*.py: unusual but honest Triton kernels (docstring names the problem).

Tests:
- every cheat comes back `not correct` or flagged, under `strict` and under `runtime` (one that cheats only where it
  can tell it is unchecked, `Neutralised: <details key>` in its docstring, may instead show in that key that every
  scored request ran honestly);
- every honest kernel comes back correct with no flags, under `strict` and under `runtime`;
- cross-evaluation properties: after each cross_eval cheat, nothing it wrote is left in the project (git status),
  the venv's site-packages, the evaluator's cache / runtime folders, /tmp or /dev/shm, and the nice value, CPU
  affinity and rlimits of the test process and of its evaluator's worker processes are unchanged; a cheat
  evaluated beside a sibling on another lane cannot read the sibling's source or environment.
Markers: the cross_eval fixtures name what they write `c2_marker*` (the project, /tmp and the caches are shared
with other engineers' runs, so a general "anything new" listing would be flaky there; site-packages is compared
in full). Whatever a cheat managed to change is undone after each test, so a cheat that gets through today
cannot poison later tests or other users of the venv.

Set C2_RESULTS=<file.jsonl> to append one JSON line per evaluation (the BASELINE.md table is built from it).
"""

from __future__ import annotations

import ast
import contextlib
import json
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import psutil
import pytest

import davinci
from davinci.kernelgym import Evaluator, load_problem_file
from davinci.types import Candidate

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

FIXTURES = Path(__file__).parent / "fixtures"
CHEATS_DIR = FIXTURES / "cheats_v2"
HONEST_DIR = FIXTURES / "honest_v2"
REPO = Path(davinci.__file__).resolve().parents[1]
SITE = Path(os.path.dirname(os.path.dirname(__import__("torch").__file__)))
MARK = "c2_marker"
SHM = Path("/dev/shm")
TMP = Path("/tmp")


def _meta(path: Path) -> dict[str, str]:
    doc = ast.get_docstring(ast.parse(path.read_text())) or ""
    cls = re.search(r"Class:\s*(\w+)", doc)
    prob = re.search(r"Problem:\s*(\w+)", doc)
    forges = re.search(r"Forges:\s*(\w+)", doc)
    neutral = re.search(r"Neutralised:\s*(\w+)", doc)
    return {"cls": cls.group(1) if cls else "honest", "problem": prob.group(1) if prob else "",
            "forges": forges.group(1) if forges else "", "neutralised": neutral.group(1) if neutral else ""}


CHEATS = {p.stem: _meta(p) for p in sorted(CHEATS_DIR.glob("c2_*.py"))}
HONEST = {p.stem: _meta(p) for p in sorted(HONEST_DIR.glob("honest_v2_*.py"))}
CROSS = sorted(n for n, m in CHEATS.items() if m["cls"] == "cross_eval" and n != "c2_xe_read_siblings")
TIME_FORGERS = sorted(n for n, m in CHEATS.items() if m["forges"] == "timing")
PRESETS = ("strict", "runtime")


def load_problem(name: str):
    for folder in ("problems", "problems_v2"):
        path = FIXTURES / folder / f"{name}.py"
        if path.exists():
            return load_problem_file(path)
    raise FileNotFoundError(name)


def load(folder: Path, name: str, problem) -> Candidate:
    return Candidate(problem_id=problem.id, code=(folder / f"{name}.py").read_text(), backend="triton")


def record(name: str, cls: str, preset: str, r, **extra) -> None:
    out = os.environ.get("C2_RESULTS")
    if not out:
        return
    row = {"name": name, "cls": cls, "preset": preset, "correct": r.correct, "flags": list(r.flags),
           "error_kind": r.error_kind, "speedup": r.speedup, "runtime_ms": r.runtime.median_ms if r.runtime else None,
           "error": (r.error or "")[:300], "sandbox": r.details.get("sandbox"), **extra}
    with open(out, "a") as f:
        f.write(json.dumps(row, default=str) + "\n")


# --- evaluators ---------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def gyms(tmp_path_factory, make_config):
    # 30 s to run: a slow cheat (Python over thousands of glue pieces) must reach the audit rounds, which come after
    # the scored ones (8 s ran out first on a loaded box, and a timing that runs out before them reports no time)
    evs = {p: Evaluator(make_config(tmp_path_factory.mktemp(f"kg-c2-{p}"), checks=p, run_timeout_s=30.0))
           for p in PRESETS}
    yield evs
    for ev in evs.values():
        ev.close()


# --- snapshots of what a cross-evaluation cheat could change ------------------------------------------

RLIMITS = [getattr(psutil, n) for n in ("RLIMIT_CORE", "RLIMIT_NOFILE", "RLIMIT_NPROC", "RLIMIT_FSIZE", "RLIMIT_AS",
                                        "RLIMIT_CPU", "RLIMIT_MSGQUEUE") if hasattr(psutil, n)]


def _proc_state(p: psutil.Process) -> dict | None:
    try:
        return {"ppid": p.ppid(), "nice": p.nice(), "affinity": sorted(p.cpu_affinity()),
                "rlimits": {int(r): tuple(p.rlimit(r)) for r in RLIMITS}}
    except psutil.Error:
        return None


def process_tree() -> dict[int, dict]:
    me = psutil.Process()
    out = {}
    for p in [me] + me.children(recursive=True):
        st = _proc_state(p)
        if st is not None:
            out[p.pid] = st
    return out


def marker_paths(roots: list[Path]) -> list[Path]:
    found = []
    for root in roots:
        if not root.exists():
            continue
        if root in (TMP, SHM, SITE):  # shared, large folders: top level only
            found += [p for p in root.iterdir() if MARK in p.name]
            continue
        for dirpath, dirnames, filenames in os.walk(root):
            found += [Path(dirpath) / n for n in dirnames + filenames if MARK in n]
    return found


def git_status() -> set[str]:
    try:
        res = subprocess.run(["git", "status", "--porcelain", "--untracked-files=all"], cwd=REPO, capture_output=True,
                             text=True, timeout=60)
        return set(res.stdout.splitlines())
    except (OSError, subprocess.SubprocessError):
        return set()


def runtime_root() -> Path:
    return Path(tempfile.gettempdir()) / f"kernelgym-{os.getuid()}"


def watched_roots(ev: Evaluator) -> list[Path]:
    return [REPO / "davinci", REPO / "tests" / "kernelgym", ev.cache_root, runtime_root(), TMP, SHM, SITE]


def restore(before: dict[int, dict]) -> None:
    """Undo what a cheat changed on our processes (we run as root: lowering nice and raising limits is allowed)."""
    me = psutil.Process()
    mine = before.get(me.pid)
    for p in [me] + me.children(recursive=True):
        want = before.get(p.pid) or (before.get(p.ppid()) if p.ppid() in before and p.ppid() != me.pid else mine)
        if want is None:
            continue
        with contextlib.suppress(psutil.Error, OSError, ValueError):
            if p.nice() != want["nice"]:
                p.nice(want["nice"])
        with contextlib.suppress(psutil.Error, OSError, ValueError):
            if sorted(p.cpu_affinity()) != want["affinity"]:
                p.cpu_affinity(want["affinity"])
        if p.pid in before or p.pid == me.pid:
            for r, lim in want["rlimits"].items():
                with contextlib.suppress(psutil.Error, OSError, ValueError):
                    if tuple(p.rlimit(r)) != lim:
                        p.rlimit(r, lim)


def remove_markers(roots: list[Path]) -> None:
    for path in marker_paths(roots):
        with contextlib.suppress(OSError):
            shutil.rmtree(path) if path.is_dir() and not path.is_symlink() else path.unlink()


@pytest.fixture()
def undo(gyms):
    """Snapshot before the test, undo any damage after it (markers, priorities, affinities, limits)."""
    before = process_tree()
    yield before
    restore(before)
    remove_markers([r for ev in gyms.values() for r in watched_roots(ev)])


# --- verdicts -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("preset", PRESETS)
@pytest.mark.parametrize("name", sorted(CHEATS))
def test_cheat_is_not_correct_or_is_flagged(gyms, undo, name, preset):
    """A cheat is caught (not correct, or flagged). A cross_eval cheat computes honestly and is after a side
    effect, so for it "neutralised" also counts: nothing it tried to change outside its evaluation changed."""
    meta = CHEATS[name]
    p = load_problem(meta["problem"])
    ev = gyms[preset]
    snap = snapshot(ev) if meta["cls"] == "cross_eval" else None
    r = ev.evaluate(p, load(CHEATS_DIR, name, p), seed=2)
    leaks = violations(ev, snap, undo) if snap is not None else []
    record(name, meta["cls"], preset, r, property_violations=leaks)
    # an evaluator error is no verdict: the candidate made the supervisor fail, and whatever was still to be
    # checked (audit, integrity after timing) was never checked
    assert r.error_kind != "internal", f"{name} under {preset} broke the evaluator: {r.error[-600:]}"
    caught = not r.correct or bool(r.flags)
    if meta["neutralised"]:  # it cheats only where it can tell it is unchecked: the figure must be the honest one
        share = r.details.get(meta["neutralised"])
        assert caught or (share is not None and share >= 0.99), \
            f"{name} got through under {preset}: {meta['neutralised']} {share}, speedup {r.speedup}"
    elif meta["cls"] == "cross_eval":
        assert caught or not leaks, f"{name} got through under {preset} and its side effects leaked: {leaks}"
    else:
        assert caught, f"{name} ({meta['cls']}) got through under {preset}: speedup {r.speedup}\n{r.feedback}"


@pytest.mark.parametrize("preset", PRESETS)
@pytest.mark.parametrize("name", sorted(HONEST))
def test_honest_kernel_is_correct_with_no_flags(gyms, undo, name, preset):
    meta = HONEST[name]
    p = load_problem(meta["problem"])
    r = gyms[preset].evaluate(p, load(HONEST_DIR, name, p), seed=1)
    record(name, "honest", preset, r)
    assert (r.correct, r.flags, r.error_kind) == (True, (), None), r.feedback


@pytest.mark.parametrize("name", ["c2_hp_flatten_deferred", "c2_hp_tensor_detach_handoff"])
def test_work_in_the_output_hand_off_is_flagged_by_launches(gyms, undo, name):
    """Deferred work (the real kernel run from a patched helper or Tensor method while the harness takes the
    outputs over) is named by the Triton launch record, which holds on a GPU too (the CPU store recorder,
    `host_compute`, does not run there)."""
    meta = CHEATS[name]
    p = load_problem(meta["problem"])
    r = gyms["runtime"].evaluate(p, load(CHEATS_DIR, name, p), seed=2)
    assert "deferred_work" in r.flags, r.feedback


# --- cross-evaluation properties ----------------------------------------------------------------------------

def sysv_ipc() -> set[str]:
    """SysV shared memory, message queues and semaphore sets on the host, as (kind, key, id) lines."""
    out = set()
    for kind in ("shm", "msg", "sem"):
        try:
            lines = Path(f"/proc/sysvipc/{kind}").read_text().splitlines()[1:]
        except OSError:
            continue
        out |= {f"{kind} key={f.split()[0]} id={f.split()[1]}" for f in lines if f.split()}
    return out


def remove_sysv(lines: set[str]) -> None:
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    for line in lines:
        kind, _, ident = line.split()
        ident = int(ident.split("=")[1])
        if kind == "shm":
            libc.shmctl(ident, 0, None)  # IPC_RMID
        elif kind == "msg":
            libc.msgctl(ident, 0, None)
        else:
            libc.semctl(ident, 0, 0)


def snapshot(ev: Evaluator) -> dict:
    return {"git": git_status(), "site": {p.name for p in SITE.iterdir()}, "markers": set(marker_paths(watched_roots(ev))),
            "sysv": sysv_ipc()}


def violations(ev: Evaluator, snap: dict, before_tree: dict[int, dict]) -> list[str]:
    """What changed outside the evaluation since `snap` / `before_tree` (see the module docstring)."""
    after_tree = process_tree()
    problems = []
    new_git = [line for line in git_status() - snap["git"] if MARK in line]
    if new_git:
        problems.append(f"git status shows new files: {new_git}")
    new_site = {p.name for p in SITE.iterdir()} - snap["site"]
    if new_site:
        problems.append(f"site-packages has new entries: {sorted(new_site)}")
    new_markers = sorted(str(m) for m in set(marker_paths(watched_roots(ev))) - snap["markers"])
    if new_markers:
        problems.append(f"files written outside the candidate's scratch: {new_markers}")
    new_ipc = sorted(sysv_ipc() - snap["sysv"])  # other users' objects may come and go: only new ones count
    if new_ipc:
        problems.append(f"SysV IPC objects left on the host: {new_ipc}")
    me = psutil.Process().pid
    for pid, now in after_tree.items():
        was = before_tree.get(pid)
        if was is None:  # forked during the evaluation (a new spare): compare with what its parent had
            was = before_tree.get(now["ppid"])
            if was is None or now["ppid"] == me:
                continue
            keys = ("nice", "affinity")
        else:
            keys = ("nice", "affinity", "rlimits")
        diff = {k: (was[k], now[k]) for k in keys if was[k] != now[k]}
        if diff:
            problems.append(f"process {pid} changed: {diff}")
    return problems


@pytest.mark.parametrize("name", CROSS)
def test_cross_eval_cheat_leaves_nothing_behind(gyms, undo, name):
    """Flagged or not, a hostile candidate must not change anything outside its own evaluation."""
    ev = gyms["strict"]
    snap = snapshot(ev)
    p = load_problem(CHEATS[name]["problem"])
    r = ev.evaluate(p, load(CHEATS_DIR, name, p), seed=3)
    problems = violations(ev, snap, undo)
    remove_sysv(sysv_ipc() - snap["sysv"])  # what got through must not outlive the test either
    record(name, "cross_eval", "strict/property", r, property_violations=problems)
    assert not problems, "\n".join(problems)


def test_sibling_candidates_cannot_read_each_other(tmp_path_factory, make_config, undo):
    """Two lanes evaluate an honest candidate and the reader at the same time: the reader must not see the
    other job's folder or the other evaluation's processes (its marker in /dev/shm records what it read)."""
    marker = SHM / "c2_marker_xe_read_siblings"
    with contextlib.suppress(OSError):
        marker.unlink()
    p = load_problem("relu")
    sibling_code = (FIXTURES / "candidates" / "honest_relu.py").read_text() + "\n# sibling under evaluation\n"
    items = [(p, Candidate(p.id, sibling_code, "triton")), (p, load(CHEATS_DIR, "c2_xe_read_siblings", p)),
             (p, Candidate(p.id, sibling_code + "# second sibling\n", "triton"))]
    ev = Evaluator(make_config(tmp_path_factory.mktemp("kg-c2-siblings"), workers=2))
    try:
        results = ev.evaluate_batch(items)
        leaked = marker.read_text() if marker.exists() else ""
    finally:
        ev.close()
        with contextlib.suppress(OSError):
            marker.unlink()
    record("c2_xe_read_siblings", "cross_eval", "strict/property", results[1], property_violations=[leaked] if leaked else [])
    assert results[0].correct, results[0].feedback
    assert not leaked, f"the reader saw its siblings:\n{leaked}"


@pytest.mark.parametrize("name", TIME_FORGERS)
def test_timing_forger_gains_nothing(gyms, undo, name):
    """A cheat that runs the honest kernel and only lies about time must not come out faster than the same
    honest kernel (`candidates/honest_relu.py`, the same Triton code) measured in the same evaluator, unless it
    is flagged. Three evaluations each, alternating; medians compared with a 0.75 margin (CPU timings on a
    loaded 2-core machine spread by 2-3x between evaluations, so a single pair would be flaky)."""
    ev = gyms["runtime"]
    p = load_problem("relu")
    honest = Candidate(p.id, (FIXTURES / "candidates" / "honest_relu.py").read_text(), "triton")
    cheat = load(CHEATS_DIR, name, p)
    h_ms, c_ms, flagged, last = [], [], [], None
    for seed in range(3):
        for cand, acc in ((honest, h_ms), (cheat, c_ms)):
            r = ev.evaluate(p, cand, seed=10 + seed)
            last = r if cand is cheat else last
            if cand is cheat and (r.flags or not r.correct):
                flagged.append(r.flags or r.error_kind)
            elif r.runtime is not None:
                acc.append(r.runtime.median_ms)
    import statistics
    ratio = statistics.median(c_ms) / statistics.median(h_ms) if c_ms and h_ms else None
    record(name, CHEATS[name]["cls"], "runtime/gain", last, honest_ms=h_ms, cheat_ms=c_ms, flagged=flagged, ratio=ratio)
    assert flagged or ratio is None or ratio >= 0.75, (
        f"{name} reported {statistics.median(c_ms):.3f} ms per call vs {statistics.median(h_ms):.3f} ms for the "
        f"same honest kernel ({1 / ratio:.2f}x forged speedup), unflagged")
