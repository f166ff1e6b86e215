"""The audit hook of the candidate's process (davinci/kernelgym/pyaudit.py): what it refuses to the candidate's
code, what it lets honest code and libraries do.

An audit hook cannot be removed once added, so every case runs in one fresh interpreter (`_run`): a "candidate"
module written to a temporary folder and imported after `pyaudit.install`, a "library" folder on sys.path that
provided a module before the hook was added, and one line of JSON per case: what the call returned or the error
it raised. The evaluator-level attacks are cheats_v2/c2_hp_rt10_*, c2_hp_rt11_* and c2_hp_rt12_* (test_cheats_v2)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

CANDIDATE = '''
import collections, enum, gc, inspect, logging, sys, traceback, typing

def direct():
    return type(sys._getframe(0)).__name__

def through_inspect():
    return type(inspect.currentframe()).__name__

def through_traceback():
    return [type(f).__name__ for f, _ in traceback.walk_stack(None)][:1]

def through_exception():
    try:
        raise ValueError
    except ValueError as exc:
        return type(getattr(getattr(exc, "__trace" + "back__"), "tb_" + "frame")).__name__

def through_generator():
    def gen():
        me = yield
        yield getattr(me, "gi_" + "frame")
    g = gen()
    next(g)
    return type(g.send(g)).__name__

def gc_scan():
    return len(getattr(sys.modules["g" + "c"], "get_" + "objects")()) > 0

def as_typing():
    ns = {"_sys": sys}
    exec(compile("def _caller(depth=1):\\n    return _sys._getframe(depth + 1)\\n", typing.__file__, "exec"), ns)
    return type(ns["_caller"](0)).__name__

def honest():
    Point = collections.namedtuple("Point", "x y")
    Color = enum.Enum("Color", "RED GREEN")
    T = typing.TypeVar("T")
    logging.getLogger("cand").warning("a log line from the candidate")
    import torch
    torch.manual_seed(0)  # torch.cuda records the stack of its lazy seed call (traceback.format_stack)
    lines = traceback.format_stack()
    return [Point(1, 2).y, Color.RED.value, T.__name__, isinstance(lines[-1], str)]

def imports_library():
    import libmod_b
    return libmod_b.NAME

def imports_own_module(folder):
    import importlib, os
    with open(os.path.join(folder, "own_mod.py"), "w") as f:
        f.write("import sys\\nFRAME = type(sys._getframe(0)).__name__\\n")
    sys.path.insert(0, folder)
    return importlib.import_module("own_mod").FRAME

def caught():
    try:
        return direct()
    except RuntimeError:
        return "carried on"

def _frame_module():
    return getattr(getattr(getattr(sys.modules["tor" + "ch"], "_C"), "_dy" + "namo"), "eval_" + "frame")

def eval_frame_callback():
    """PEP 523 through torch's C extension: the callback would be handed every frame about to run."""
    ef = _frame_module()
    prior = getattr(ef, "set_eval_" + "frame")(lambda frame, *rest: None)
    getattr(ef, "set_eval_" + "frame")(prior)
    return "installed"

def eval_frame_from_dynamo_module():
    import torch._dynamo.eval_frame as python_side  # the name torch._dynamo imported, the same function
    prior = python_side.set_eval_frame(lambda frame, *rest: None)
    python_side.set_eval_frame(prior)
    return "installed"

def frame_hook_event_raised_directly():
    box = []
    sys.audit("kernelgym.frame_hook", "torch._C._dynamo.eval_frame.set_eval_frame", (lambda f, *r: None,), {}, box)
    return "installed"

def signal_handler_frame():
    """A handler is called with the frame the signal interrupted: raised by the candidate, its own."""
    import signal
    got = []
    prior = signal.signal(signal.SIGUSR2, lambda signum, frame: got.append(type(frame).__name__))
    signal.raise_signal(signal.SIGUSR2)
    signal.signal(signal.SIGUSR2, prior)
    return got

def honest_signal_ignore():
    import signal
    prior = signal.signal(signal.SIGUSR2, signal.SIG_IGN)  # a number, not a callback
    signal.signal(signal.SIGUSR2, prior)
    return "ignored"

def wrapper_cells():
    """What the routed function's own attributes hold: nothing that leads back to the C function."""
    fn = getattr(_frame_module(), "set_eval_" + "frame")
    cells = getattr(fn, "__clo" + "sure__") or ()
    return sorted(type(getattr(c, "cell_" + "contents")).__name__ for c in cells)

def rebound_module_globals():
    """The hook's module constants and helpers rebound to nothing (a module attribute write raises no event)."""
    mod = sys.modules["davinci.kernelgym.py" + "audit"]
    names = ["WATCHED", "ALWAYS", "FRAME_ATTRS", "COMPILING", "FRAME_HOOK", "LIMIT"]
    saved = {n: getattr(mod, n) for n in names}
    try:
        for n in names:
            setattr(mod, n, frozenset() if n != "LIMIT" else 0)
        return direct()
    finally:
        for n, v in saved.items():
            setattr(mod, n, v)

def str_subclass_file_name():
    """A compile under a file name whose __hash__ asks for a frame: the hook never runs it, and the code
    compiled under that name is the candidate's."""
    seen = []
    class Name(str):
        def __hash__(self):
            try:
                seen.append(type(sys._getframe(0)).__name__)
            except RuntimeError:
                seen.append("refused")
            return str.__hash__(self)
    code = compile("__import__('sys')._getframe(0)", Name("<made by the candidate>"), "eval")
    try:
        got = type(eval(code)).__name__
    except RuntimeError:
        got = "refused"
    return ["frame" in seen, got]

def fresh_signal_instance():
    """A second instance of _signal: functions of its own that no scan at install time saw."""
    import importlib.util
    spec = importlib.util.find_spec("_sig" + "nal")
    module = importlib.util.module_from_spec(spec)
    return type(module).__name__

def honest_builtin_import():
    """A built-in module not loaded yet, imported by the candidate: made through the routed create_builtin."""
    import importlib
    fresh = [m for m in sys.builtin_module_names if m not in sys.modules and not m.startswith("_sig")][:3]
    return [importlib.import_module(m).__name__ == m for m in fresh] or [True]

def thread_of_c_functions(kind):
    """A thread whose target is a C function chain: no frame of the candidate's code on its stack."""
    import itertools, threading
    asks = {"frames": sys._current_frames, "scan": getattr(sys.modules["g" + "c"], "get_" + "objects"),
            "raw": sys._current_frames}
    got = []
    if kind == "raw":  # no Python frame at all below the hook
        import _thread
        done = threading.Event()
        def after(*_):
            done.set()
        _thread.start_new_thread(got.extend, (itertools.islice(iter(asks[kind], None), 1),))
        threading.Timer(0.5, after).start()
        done.wait(5)
    else:
        t = threading.Thread(target=got.extend, args=(itertools.islice(iter(asks[kind], None), 1),))
        t.start()
        t.join()
    return len(got)

def thread_frames():
    return thread_of_c_functions("frames")

def thread_scan():
    return thread_of_c_functions("scan")

def thread_raw():
    return thread_of_c_functions("raw")

def honest_thread():
    """An honest thread building a named tuple and logging: consumers of a frame, let through in any thread."""
    import collections, logging, threading
    out = []
    def work():
        out.append(collections.namedtuple("P", "x")(3).x)
        logging.getLogger("cand").warning("from a thread")
    t = threading.Thread(target=work)
    t.start()
    t.join()
    return out

def consumer_under_own_globals():
    """logging's findCaller (a consumer) run with the candidate's globals: its frame walk handed to the candidate."""
    import logging, types
    got = []
    space = dict(vars(logging))
    space["_is_internal_frame"] = lambda f: got.append(f) or True
    fn = types.FunctionType(logging.Logger.findCaller.__code__, space)
    try:
        fn(logging.getLogger("x"), False, 100)
    except RuntimeError:
        pass
    return len(got)

def consumer_callee_rebound():
    """traceback.extract_stack (a consumer) hands walk_stack(f) to StackSummary.extract, replaced for the call."""
    import traceback
    got, prior = [], vars(traceback.StackSummary)["extract"]
    def take(cls, frames, **kwargs):
        got.extend(f for f, _ in frames)
        return prior.__func__(cls, iter(()), **kwargs)
    traceback.StackSummary.extract = classmethod(take)
    try:
        traceback.extract_stack()
    except RuntimeError:
        pass
    finally:
        traceback.StackSummary.extract = prior
    return len(got)

def frames_yielded_by_traceback():
    import traceback
    try:
        raise ValueError
    except ValueError as exc:
        return [type(f).__name__ for f, _ in traceback._walk_tb_with_full_positions(exc.__traceback__)]

def import_system_asks():
    """A package in sys.modules whose __path__ is sys._getframe: read by the import system's own code."""
    class Parent(int):
        __path__ = property(sys._getframe)
        __spec__ = None
    sys.modules["fake_parent_pkg"] = Parent(0)
    try:
        __import__("fake_parent_pkg.sub")
    except ModuleNotFoundError:
        return "not found"
    finally:
        del sys.modules["fake_parent_pkg"]

def honest_format_exc():
    import traceback
    try:
        raise ValueError("x")
    except ValueError:
        return traceback.format_exc().splitlines()[-1]

PENDING, GOT = [], []

def leave_callbacks():
    """Callbacks made of C functions only, left on objects the harness drops later: a weakref callback (called
    under whatever frame runs when the object dies) and a finalizer (weakref.finalize.__call__, a library's)."""
    import functools, itertools, weakref
    class Box:
        pass
    a, b = Box(), Box()
    take = lambda: itertools.islice(iter(sys._getframe, None), 1)
    PENDING.append(weakref.ref(a, functools.partial(next, map(GOT.extend, [take()]))))
    weakref.finalize(b, GOT.extend, take())
    PENDING.extend([a, b])
    return "left"

def honest_dynamo_disable():
    """torch._disable_dynamo's wrappers (torch.manual_seed among them) set no callback: None."""
    import torch
    torch.manual_seed(1)
    return torch._dynamo.disable(lambda: 3)()
'''

DRIVER = '''
import importlib.util, json, sys
sys.path.insert(0, {lib!r})
import libmod_a  # the library folder provided a module before the hook: a library root
import torch, torch._dynamo  # as the harness: torch's frame-evaluation extension is loaded before the hook
sys.path.insert(0, {root!r})
from davinci.kernelgym import pyaudit
refused = pyaudit.install([{cand!r}], writable=[])
spec = importlib.util.spec_from_file_location("cand", {cand!r})
cand = importlib.util.module_from_spec(spec)
spec.loader.exec_module(cand)
for name, args in {cases!r}:
    before = len(refused())
    try:
        out = {{"value": getattr(cand, name)(*args)}}
    except Exception as exc:
        out = {{"error": type(exc).__name__ + ": " + str(exc)}}
    out["refused"] = refused()[before:]
    print(json.dumps({{"case": name, **out}}))
from torch._dynamo.types import ConvertFrameReturn
prior = torch._C._dynamo.eval_frame.set_eval_frame(lambda frame, *rest: ConvertFrameReturn())  # the harness itself
torch._C._dynamo.eval_frame.set_eval_frame(prior)
import signal
signal.signal(signal.SIGUSR2, signal.signal(signal.SIGUSR2, lambda signum, frame: None))  # the harness's handler
def asks(fn):
    try:
        return fn()
    except RuntimeError:
        return "refused"
print(json.dumps({{"case": "harness", "value": [asks(lambda: type(sys._getframe(0)).__name__),
                                              asks(lambda: len(__import__("gc").get_objects()) > 0)],
                  "refused": refused()}}))
before = len(refused())
cand.PENDING.clear()  # the candidate's weakref callback and finalizer run now, under the harness's frame
print(json.dumps({{"case": "left_behind", "value": len(cand.GOT), "refused": refused()[before:]}}))
'''

# as_typing last: from then on typing.py's file name stands for the candidate's code in this process, and the
# real typing._caller is refused to it too (a candidate that compiles under a library's name loses the library)
CASES = [("direct", ()), ("through_inspect", ()), ("through_traceback", ()), ("through_exception", ()),
         ("through_generator", ()), ("gc_scan", ()), ("honest", ()), ("imports_library", ()),
         ("imports_own_module", ()), ("caught", ()), ("eval_frame_callback", ()), ("eval_frame_from_dynamo_module", ()),
         ("frame_hook_event_raised_directly", ()), ("wrapper_cells", ()), ("honest_dynamo_disable", ()),
         ("signal_handler_frame", ()), ("honest_signal_ignore", ()), ("rebound_module_globals", ()),
         ("str_subclass_file_name", ()), ("fresh_signal_instance", ()), ("honest_builtin_import", ()),
         ("thread_frames", ()), ("thread_scan", ()), ("thread_raw", ()), ("honest_thread", ()),
         ("leave_callbacks", ()), ("consumer_under_own_globals", ()), ("consumer_callee_rebound", ()),
         ("frames_yielded_by_traceback", ()), ("import_system_asks", ()), ("honest_format_exc", ()),
         ("as_typing", ())]


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> dict[str, dict]:
    base = tmp_path_factory.mktemp("pyaudit")
    lib = base / "lib"
    lib.mkdir()
    (lib / "libmod_a.py").write_text("VALUE = 1\n")
    (lib / "libmod_b.py").write_text("import sys\nNAME = sys._getframe(0).f_globals['__name__']\n")
    cand = base / "cand.py"
    cand.write_text(CANDIDATE)
    own = base / "own"
    own.mkdir()
    cases = [(n, (str(own),) if n == "imports_own_module" else a) for n, a in CASES]
    script = DRIVER.format(lib=str(lib), root=str(ROOT), cand=str(cand), cases=cases)
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(script)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return {r["case"]: r for r in map(json.loads, proc.stdout.splitlines())}


@pytest.mark.parametrize("case", ["direct", "through_inspect", "through_traceback", "through_exception",
                                  "through_generator", "gc_scan", "as_typing", "imports_own_module",
                                  "eval_frame_callback", "eval_frame_from_dynamo_module",
                                  "frame_hook_event_raised_directly", "signal_handler_frame",
                                  "rebound_module_globals", "fresh_signal_instance", "frames_yielded_by_traceback",
                                  "import_system_asks"])
def test_the_candidates_code_is_refused_a_frame_or_a_scan(results, case):
    r = results[case]
    assert "kernelgym refuses" in r.get("error", ""), r
    assert len(r["refused"]) == 1, r


def test_the_refusal_names_the_event_and_the_code_that_asked(results):
    assert results["direct"]["refused"][0].startswith("sys._getframe from cand.py:")
    assert results["through_exception"]["refused"][0].startswith(".tb_frame from cand.py:")
    assert results["gc_scan"]["refused"][0].startswith("gc.get_objects from cand.py:")
    # code compiled under typing's file name is not typing's code: it is the candidate's
    assert results["as_typing"]["refused"][0].startswith("sys._getframe from typing.py:1 (_caller)")


def test_honest_library_use_is_not_refused(results):
    """namedtuple, a functional Enum, a TypeVar and logging read the caller's module name from a frame;
    torch.manual_seed and traceback.format_stack read the stack as text."""
    assert results["honest"] == {"case": "honest", "value": [2, 1, "T", True], "refused": []}


def test_a_library_modules_own_import_is_not_refused(results):
    assert results["imports_library"] == {"case": "imports_library", "value": "libmod_b", "refused": []}


def test_a_refusal_the_candidate_catches_is_still_reported(results):
    r = results["caught"]
    assert r["value"] == "carried on" and len(r["refused"]) == 1


def test_the_harness_outside_the_candidates_calls_is_not_refused_what_it_does(results):
    """A frame-evaluation callback and a signal handler of the harness's own pass; frames and heap scans are
    nobody's once the hook is in place (the harness never asks for them), so they are refused to it too."""
    r = results["harness"]
    assert r["value"] == ["refused", "refused"]
    # the twenty-one refused cases, the caught one, the compiled code's frame, and the harness's two asks
    assert len(r["refused"]) == 25, r["refused"]
    assert [x.split(":")[0] for x in r["refused"][-2:]] == ["sys._getframe from <string>", "gc.get_objects from <string>"]


def test_callbacks_the_candidate_leaves_behind_get_no_frame(results):
    """Run after its call has returned, with only the harness's and weakref's frames on the stack."""
    r = results["left_behind"]
    assert r["value"] == 0, r
    assert sorted(x.split(" (")[0].rsplit(":", 1)[0] for x in r["refused"]) == [
        "sys._getframe from <string>", "sys._getframe from weakref.py"], r


def test_a_frame_evaluation_callback_is_refused_whichever_way_it_is_installed(results):
    """torch's PEP 523 extension would hand the callback every frame about to run (the harness's with their
    locals): refused through the C module, through torch._dynamo's imported name, and as the event itself."""
    for case in ("eval_frame_callback", "eval_frame_from_dynamo_module", "frame_hook_event_raised_directly"):
        assert results[case]["refused"][0].startswith("torch._C._dynamo.eval_frame.set_eval_frame with a callback"), \
            results[case]


def test_a_signal_handler_is_refused_and_a_disposition_is_not(results):
    """A handler would be called with the interrupted frame (the candidate's own, then `f_back`); SIG_IGN is a
    number and passes."""
    assert results["signal_handler_frame"]["refused"][0].startswith("_signal.signal with a callback from signal.py")
    assert results["honest_signal_ignore"] == {"case": "honest_signal_ignore", "value": "ignored", "refused": []}


def test_the_routed_function_holds_nothing_that_leads_back_to_it(results):
    """The wrapper's closure holds its name and sys.audit; the C function lives only in the hook's closure."""
    assert results["wrapper_cells"] == {"case": "wrapper_cells", "value": ["builtin_function_or_method", "str"],
                                        "refused": []}


def test_dynamo_disable_and_manual_seed_still_run(results):
    assert results["honest_dynamo_disable"] == {"case": "honest_dynamo_disable", "value": 3, "refused": []}


def test_compiling_under_a_librarys_name_makes_that_name_the_candidates(results):
    """Code the candidate compiles under typing.py's name and `_caller` is not typing._caller: it is refused."""
    assert results["as_typing"]["refused"] == ["sys._getframe from typing.py:1 (_caller)"]


def test_rebinding_the_hooks_module_names_changes_nothing(results):
    """Its constants are bound in the hook's closure at install: emptied in the module, the frame is still refused."""
    assert results["rebound_module_globals"]["refused"][0].startswith("sys._getframe from cand.py:")


@pytest.mark.parametrize("case", ["thread_frames", "thread_scan", "thread_raw"])
def test_a_thread_the_candidate_starts_is_the_candidates_even_with_none_of_its_code(results, case):
    """Its target a C function chain (list.extend over iter(sys._current_frames, None)): threading.py's frames on
    its stack, or none at all; refused, and nothing reached the candidate."""
    r = results[case]
    assert r["value"] == 0 and len(r["refused"]) == 1, r
    assert r["refused"][0].startswith(("sys._current_frames from", "gc.get_objects from")), r


def test_an_honest_thread_using_frame_consumers_is_not_refused(results):
    assert results["honest_thread"] == {"case": "honest_thread", "value": [3], "refused": []}


def test_no_method_of_the_candidates_objects_runs_inside_the_hook(results):
    """A str subclass as a compiled file name: its __hash__ never got a frame, and the code is the candidate's."""
    r = results["str_subclass_file_name"]
    assert r["value"] == [False, "refused"], r
    assert r["refused"] == ["sys._getframe from <made by the candidate>:1 (<module>)"], r


def test_a_new_instance_of_a_frame_handing_module_is_refused_and_other_builtins_import(results):
    assert results["fresh_signal_instance"]["refused"][0].startswith("_imp.create_builtin making a new _signal "
                                                                    "from "), results["fresh_signal_instance"]
    assert results["honest_builtin_import"]["refused"] == [] and all(results["honest_builtin_import"]["value"])


def _nested_codes(code):
    for const in code.co_consts:
        if hasattr(const, "co_code"):
            yield const
            yield from _nested_codes(const)


def test_the_hook_looks_up_no_global_name_when_it_runs():
    """Every function the hook calls after install is a closure over names bound at install: no LOAD_GLOBAL (a
    module attribute or a builtin the candidate could rebind) in any of them or in the resolver."""
    import dis

    from davinci.kernelgym import pyaudit

    hook_codes = list(_nested_codes(pyaudit.install.__code__)) + list(_nested_codes(pyaudit.resolver.__code__))
    assert {c.co_name for c in hook_codes} >= {"hook", "verdict", "candidate", "frame_hook_call", "refuse", "resolve"}
    found = {c.co_name: [i.argval for i in dis.get_instructions(c) if i.opname in ("LOAD_GLOBAL", "LOAD_NAME")]
             for c in hook_codes}
    assert {k: v for k, v in found.items() if v} == {}


def test_the_resolver_agrees_with_realpath(tmp_path):
    """Links (relative, absolute, chained, to a parent), `..`, `.`, doubled slashes, a path that does not exist."""
    import os

    from davinci.kernelgym import pyaudit

    (tmp_path / "real" / "deep").mkdir(parents=True)
    (tmp_path / "real" / "deep" / "f.py").write_text("")
    os.symlink("real/deep", tmp_path / "rel")
    os.symlink(str(tmp_path / "rel"), tmp_path / "abs")
    os.symlink("..", tmp_path / "real" / "up")
    resolve = pyaudit.resolver()
    for path in [f"{tmp_path}/abs/f.py", f"{tmp_path}/rel/../deep/./f.py", f"{tmp_path}//real/up/abs/f.py",
                 f"{tmp_path}/missing/../abs/f.py", f"{tmp_path}/abs/missing/x.py", "/", sys.executable]:
        assert resolve(path) == os.path.realpath(path), path


@pytest.mark.parametrize("case", ["consumer_under_own_globals", "consumer_callee_rebound"])
def test_a_consumer_is_trusted_only_as_it_was_at_install(results, case):
    """Its own namespace, the globals and builtins it calls, its module's classes' attributes: otherwise the
    frame it takes would go on to the candidate's code. Refused, and nothing reached the candidate."""
    r = results[case]
    assert r["value"] == 0 and len(r["refused"]) == 1, r


def test_frames_yielded_by_a_traceback_generator_are_refused(results):
    r = results["frames_yielded_by_traceback"]
    assert "kernelgym refuses .tb_frame" in r.get("error", ""), r


def test_the_import_systems_own_code_gets_no_frame(results):
    r = results["import_system_asks"]
    assert r["refused"] and r["refused"][0].startswith("sys._getframe from <frozen importlib._bootstrap>"), r


def test_format_exc_still_gives_text(results):
    assert results["honest_format_exc"] == {"case": "honest_format_exc", "value": "ValueError: x", "refused": []}
