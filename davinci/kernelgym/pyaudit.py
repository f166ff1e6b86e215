"""Python's audit hooks in the candidate's process: the interpreter's frames and objects kept from its code.

A candidate that walks the call stack (`sys._getframe`, a traceback's `tb_frame`, a generator's `gi_frame`),
scans the garbage collector (`gc.get_objects`, `get_referrers`, `get_referents`), installs a trace or profile
function, or reads raw memory through ctypes reaches the harness's own objects in the same process: the launch
and provenance records, the timer, the channel (cheats_open/c3_f2_vouch_own_scratch found the live provenance
record among its caller frames and vouched for a NumPy-made buffer). Every one of those operations raises a
CPython audit event before it happens, whatever name the code reached it by (`getattr` on built strings,
`inspect`, `traceback`, `logging.currentframe`), and an audit hook, once added, cannot be removed from Python.

`install` adds one hook before the candidate's module is imported, and routes through it the C functions that
hand frames to a callback with no audit event of their own (PEP 523 frame evaluation, signal handlers, and
`_imp.create_builtin`, which would make new instances of their modules: FRAME_HANDING). While code of the
candidate is on the calling thread's stack (its module's file, a file under the folders it can write, code it
compiled itself), the hook refuses (raises `RuntimeError` before the operation runs) and records:
- a frame handed out (`sys._getframe`, `sys._current_frames`, `tb_frame`, `gi_frame`, `cr_frame`, `ag_frame`),
  unless the code that asked is a library function that only reads a module name or a file and line from it
  (`CONSUMERS`: `collections.namedtuple`, `enum`, `typing._caller`, `torch.library`, `logging`'s
  `findCaller`, ...: honest code reaches these by creating a named tuple, an enum or a custom op, or by
  logging; `traceback`'s functions that give back text, as `torch.cuda` does to record a lazy call's stack), or a
  library module's own top-level code that the candidate's import of it runs (PyTorch and Triton import modules
  lazily during a first forward). The functions that only pass a frame on (`inspect`, `traceback.walk_stack` and
  `walk_tb`, `logging.currentframe`) are looked through to the code that asked them. Both are known by
  their code objects, taken at install time, never by file name: code the candidate compiles under a
  library's file name is another object. A consumer is trusted only as it was at install (`consumer_snapshots`:
  its own module's namespace, the globals and builtins it names, its module's classes' attributes), since it
  hands the frame on to them;
- a garbage-collector scan, `sys._current_frames`, `sys.settrace`, `sys.setprofile`, and a FRAME_HANDING function
  called with a callable (a frame-evaluation callback, a signal handler);
- ctypes reading or writing memory at an address or calling a foreign function.

Two things count as the candidate's even with none of its code on the stack: a thread started after the hook
was added (its target may be a C function, `list.extend` over `iter(sys._current_frames, None)`), and, for the
SEALED events (frames, heap scans, trace and profile functions, which no code of the harness's asks for), any
stack at all: a callback of C functions that the candidate leaves behind (a finalizer, a weakref callback) runs
under the harness's frames, so for those events the harness's own code is not an exception either.

The refusals are the evidence (`refused()`, reported with the integrity request; the runtime check
`interpreter_access` flags them under every preset). What this cannot see: a reference the candidate follows
without an audited step (a harness function's `__closure__`, a module's globals); those objects stay guarded
by the identity and state comparisons of guards.py, and the verdict-critical figures are measured outside the
process. Measured on the honest corpus (tests/kernelgym/test_pyaudit.py): no refusal.

    refused = pyaudit.install([candidate_path], writable=[job_dir, build_dir])
    ...
    refused()  # ["sys._getframe from candidate_x.py:12 (_records)", ...]
"""

from __future__ import annotations

import _thread
import builtins
import importlib
import os
import stat
import sys
import types
from typing import Any, Callable, Iterable

# events that hand out a frame: refused unless a CONSUMER (or a library module's import) asked
FRAME_EVENTS = frozenset({"sys._getframe"})
FRAME_ATTRS = frozenset({"tb_frame", "gi_frame", "cr_frame", "ag_frame"})
# the event a FRAME_HANDING function's wrapper raises (guard_frame_hooks)
FRAME_HOOK = "kernelgym.frame_hook"
# events refused whenever the candidate's code is on the stack, whoever asked
ALWAYS = frozenset({FRAME_HOOK, "gc.get_objects", "gc.get_referrers", "gc.get_referents", "sys._current_frames",
                    "sys.settrace", "sys.setprofile", "ctypes.cdata", "ctypes.cdata/buffer", "ctypes.string_at",
                    "ctypes.wstring_at", "ctypes.call_function", "ctypes.addressof"})
# C functions that hand frames to a Python callback and raise no audit event of their own, routed through FRAME_HOOK
# (guard_frame_hooks): (module, function names, or None for every function of the module)
# - PEP 523 frame evaluation (torch.compile's extension): the callback is handed every frame about to run in the
#   thread, with its locals (cheats_v2/c2_hp_rt11_eval_frame_vouch_relu);
# - a signal handler is called with the frame the signal interrupted: the candidate's own when it raises the
#   signal itself, whose `f_back` leads to the harness's frames (cheats_v2/c2_hp_rt11_signal_frame_vouch_relu).
# - a new instance of such a module (`importlib.util.module_from_spec` on `_signal`'s spec) has functions of its own,
#   which no reference scan at install time saw: `_imp.create_builtin` making one is refused to the candidate
#   (cheats_v2/c2_hp_rt12_fresh_signal_module_vouch_relu).
FRAME_HANDING = (("torch._C._dynamo.eval_frame", None), ("_signal", ("signal",)), ("_imp", ("create_builtin",)))
CREATE_BUILTIN = "_imp.create_builtin"
# events that no code of the harness's asks for once the hook is in place (frames, heap scans, trace and profile
# functions): judged even with none of the candidate's code on the stack (a callback of C functions the candidate
# left behind, run by a library or the harness: a finalizer, a weakref callback), and never let through because
# the harness's code asked; only a CONSUMER or a library module's own import passes, and ALWAYS events never do
SEALED = FRAME_EVENTS | frozenset({"object.__getattr__", "sys._current_frames", "gc.get_objects", "gc.get_referrers",
                                   "gc.get_referents", "sys.settrace", "sys.setprofile"})
# events whose target becomes the candidate's code when the candidate's code asked for it
COMPILING = frozenset({"compile", "exec", "code.__new__"})
WATCHED = FRAME_EVENTS | ALWAYS | COMPILING

# library functions that take a frame and keep only a module name, a file or a line: (module, attribute path)
CONSUMERS = (("collections", "namedtuple"), ("enum", "EnumType._create_"), ("enum", "EnumMeta._create_"),
             ("typing", "_caller"), ("typing_extensions", "_caller"),
             ("typing_extensions", "_has_generic_or_protocol_as_origin"), ("logging", "Logger.findCaller"),
             ("torch.library", "Library.__init__"), ("torch.library", "Library._register_fake"),
             ("torch._library.utils", "get_source"), ("torch.fx._symbolic_trace", "wrap"))
# modules whose functions take frames and give back only text, names and line numbers (traceback.extract_stack,
# format_stack, format_exc: torch.cuda records the stack of a lazy call this way), less the ones in PASSING
CONSUMER_MODULES = ("traceback",)
# functions that hand a frame on to their caller: looked through to the code that called them
PASSER_MODULES = ("inspect",)
PASSING = (("traceback", "walk_stack"), ("traceback", "walk_tb"), ("traceback", "_walk_tb_with_full_positions"),
           ("logging", "currentframe"))  # (a generator that yields frames passes them on: c2_hp_rt14_walk_tb_*)
LIMIT = 32  # refusals kept (the first ones say what happened)


def _codes(obj: Any) -> set[types.CodeType]:
    """The code objects of a function, a class's functions, or a module's, with the code nested in them."""
    found: set[types.CodeType] = set()
    if isinstance(obj, types.ModuleType):
        items = [v for v in vars(obj).values() if getattr(v, "__module__", None) == obj.__name__]
    elif isinstance(obj, type):
        items = list(vars(obj).values())
    else:
        items = [obj]
    stack = []
    for item in items:
        item = getattr(item, "__func__", item)  # a method, a staticmethod or a classmethod: its function
        if isinstance(item, types.FunctionType):
            stack.append(item.__code__)
        elif isinstance(item, type) and not isinstance(obj, type):
            found |= _codes(item)
    while stack:
        code = stack.pop()
        found.add(code)
        stack += [c for c in code.co_consts if isinstance(c, types.CodeType)]
    return found


def _resolve(module: str, path: str) -> Any:
    try:
        obj: Any = importlib.import_module(module)
        for part in path.split("."):
            obj = getattr(obj, part)
        return obj
    except (ImportError, AttributeError):  # another version of the library: nothing to allow
        return None


def _namespaces(obj: Any) -> dict[types.CodeType, dict]:
    """Each code object of `_codes(obj)` with the globals its functions run with (a module's own namespace)."""
    if isinstance(obj, types.ModuleType):
        return dict.fromkeys(_codes(obj), vars(obj))
    fn = getattr(obj, "__func__", obj)
    space = getattr(fn, "__globals__", None)
    if space is None and isinstance(obj, type):
        space = vars(sys.modules[obj.__module__])
    return dict.fromkeys(_codes(obj), space)


def consumer_snapshots(spaces: dict[types.CodeType, dict]) -> dict[types.CodeType, tuple]:
    """For each consumer's code: (its globals, the (name, value) pairs of the globals it names, the builtins'
    namespace, the pairs of the builtins it names, its `__builtins__`, its module's classes' attributes).
    A consumer is trusted with a frame only while it runs in its own module's namespace and calls what it called
    at install: run under the candidate's globals (`types.FunctionType(code, globals)`) or with a name it calls
    rebound, it would hand the frame on to the candidate's code (c2_hp_rt14_findcaller_*)."""
    out, classes = {}, {}
    for code, space in spaces.items():
        if space is None:
            continue
        if id(space) not in classes:  # the classes its module defines, attribute by attribute (a consumer hands
            # frames to their methods: traceback.extract_stack to StackSummary.extract, c2_hp_rt14_consumer_callee_*)
            classes[id(space)] = tuple((vars(c), tuple(vars(c).items())) for c in list(space.values())
                                       if isinstance(c, type) and c.__module__ == space.get("__name__"))
        holder = space.get("__builtins__")
        table = vars(holder) if isinstance(holder, types.ModuleType) else holder
        names = set(code.co_names)
        own = tuple((n, space[n]) for n in names if n in space)
        built = tuple((n, table[n]) for n in names if n not in space and isinstance(table, dict) and n in table)
        out[code] = (space, own, table, built, holder, classes[id(space)])
    return out


def trusted_codes() -> tuple[dict, frozenset, frozenset]:
    """(consumers with their namespaces, passers, import machinery): code objects, taken now (before the
    candidate exists)."""
    passers = set().union(*(_codes(importlib.import_module(m)) for m in PASSER_MODULES))
    for module, path in PASSING:
        obj = _resolve(module, path)
        if obj is not None:
            passers |= _codes(obj)
    consumers: dict[types.CodeType, dict] = {}
    for m in CONSUMER_MODULES:
        consumers.update(_namespaces(importlib.import_module(m)))
    consumers = {c: g for c, g in consumers.items() if c not in passers}
    for module, path in CONSUMERS:
        obj = _resolve(module, path)
        if obj is not None:
            consumers.update(_namespaces(obj))
    bootstrap = sys.modules.get("_frozen_importlib")
    loading = {bootstrap._find_and_load.__code__} if bootstrap is not None else set()
    return consumer_snapshots(consumers), frozenset(passers), frozenset(loading)


def guard_frame_hooks() -> tuple[dict[str, Any], types.CodeType | None]:
    """Route the loaded FRAME_HANDING functions through the audit hook: every reference to one that the garbage
    collector knows (a module's or a function's namespace, a closure cell, a list) is replaced with a wrapper that
    holds only the function's name and raises FRAME_HOOK, whose handler (in `install`) calls the function. The
    references are found by identity, not by name. Returns (originals by name, the wrappers' code object): the
    originals stay only in the hook's closure, which Python cannot reach, so no wrapper attribute leads back to
    them. Honest uses pass no callable (`torch._disable_dynamo`'s wrappers set None; a handler of SIG_DFL or
    SIG_IGN is a number). Costs one scan of the heap per candidate process (~35 ms on a 2-core box)."""
    import gc

    originals: dict[str, Any] = {}
    for module_name, names in FRAME_HANDING:
        module = sys.modules.get(module_name)
        if module is not None:
            originals.update({f"{module_name}.{k}": v for k, v in vars(module).items()
                              if isinstance(v, types.BuiltinFunctionType) and (names is None or k in names)})
    audit = sys.audit

    def wrapper_for(name: str) -> Callable[..., Any]:
        def guarded(*args: Any, **kwargs: Any) -> Any:
            box: list[Any] = []
            audit(FRAME_HOOK, name, args, kwargs, box)
            if not box:
                raise RuntimeError(f"kernelgym: {name} did not run (its audit hook is missing)")
            return box[0]
        guarded.__name__ = guarded.__qualname__ = name.rsplit(".", 1)[1]
        return guarded

    by_id = {id(fn): wrapper_for(name) for name, fn in originals.items()}  # the originals are alive: ids are theirs
    for holder in gc.get_referrers(*originals.values()) if originals else ():
        if holder is originals or isinstance(holder, types.FrameType):
            continue
        if isinstance(holder, dict):
            for key, value in list(holder.items()):
                if id(value) in by_id:
                    holder[key] = by_id[id(value)]
        elif isinstance(holder, types.CellType) and id(holder.cell_contents) in by_id:
            holder.cell_contents = by_id[id(holder.cell_contents)]
        elif isinstance(holder, list):
            holder[:] = [by_id.get(id(v), v) for v in holder]
    code = next(iter(by_id.values())).__code__ if by_id else None
    return originals, code


def library_roots() -> tuple[str, ...]:
    """The sys.path folders that the modules loaded so far came from, and the interpreter's own: code from a
    file under none of them is the candidate's (a module it wrote to /tmp or to its job folder and imported)."""
    entries = {os.path.realpath(p) for p in sys.path if p and os.path.isdir(p)}
    used = {os.path.realpath(p) for p in {sys.prefix, sys.base_prefix, sys.exec_prefix}}
    folders = {os.path.dirname(name) for module in list(sys.modules.values())
               if isinstance(name := getattr(module, "__file__", None), str) and name.startswith("/")}
    for folder in folders:  # resolved once per folder, not per module: this runs in every candidate process
        real = os.path.realpath(folder) + "/"
        used.update(p for p in entries if real.startswith(p + "/"))
    return tuple(sorted(p.rstrip("/") + "/" for p in used))


def _folders(paths: Iterable[str]) -> tuple[str, ...]:
    return tuple(os.path.realpath(r).rstrip("/") + "/" for r in paths)


def _named(files: Iterable[str]) -> dict[str, bool]:
    """The verdict table's first entries: the candidate's files, as given and resolved."""
    files = list(files)
    return {**{f: True for f in files}, **{os.path.realpath(f): True for f in files}}


def resolver() -> Callable[[str], str]:
    """`os.path.realpath` for an absolute path, made only of C functions taken now (`os.lstat`, `os.readlink`,
    `stat.S_ISLNK`): posixpath's own version looks up its helpers in module namespaces that the candidate can
    rebind, and a resolver that lies makes the candidate's files look like a library's."""
    lstat, readlink, is_link = os.lstat, os.readlink, stat.S_ISLNK
    error = OSError

    def resolve(path: str) -> str:
        parts, done, hops = path.split("/")[::-1], "", 0  # components still to walk, last first
        while parts:
            part = parts.pop()
            if part == "" or part == ".":
                continue
            if part == "..":
                done = done[:done.rfind("/")]
                continue
            step = done + "/" + part
            try:
                link = is_link(lstat(step).st_mode)
            except error:  # not there (yet): the rest of the path as written, as realpath does
                link = False
            if link and hops < 40:
                hops += 1
                target = readlink(step)
                parts.extend(target.split("/")[::-1])
                if target.startswith("/"):
                    done = ""
                continue
            done = step
        return done or "/"
    return resolve


def install(candidate_files: Iterable[str], writable: Iterable[str] = ()) -> Callable[[], list[str]]:
    """Add the audit hook (for the life of the process) and return the reader of its refusals.

    candidate_files: the candidate's module file(s); writable: folders it can write inside the library roots
    (its job and build folders), whose files are its code too.

    The hook runs inside the candidate's process, so everything it calls is bound now, in its closure: this
    module's constants and helpers, the builtins, a resolver of C functions. Rebinding a name in a module's
    namespace (`pyaudit.WATCHED`, `builtins.next`, `posixpath._joinrealpath`) changes nothing it does
    (cheats_v2/c2_hp_rt12_module_globals_vouch_relu). It reads the event's arguments by exact type, so no
    method of a candidate's object (a `str` subclass's `__hash__`) runs inside it, and it lets an event through
    unjudged only on the thread that is inside its own `sys._getframe` call (c2_hp_rt12_busy_hash_frame_vouch_relu).
    """
    # the builtins the hook calls, as locals of this call: the closures below look up no global name
    any, callable, dict, enumerate, getattr, len, list, tuple, type = (
        builtins.any, builtins.callable, builtins.dict, builtins.enumerate, builtins.getattr, builtins.len,
        builtins.list, builtins.tuple, builtins.type)
    library = library_roots()
    harness = os.path.realpath(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))) + "/"  # davinci/
    mine = _folders(writable)
    verdicts = _named(candidate_files)
    consumers, passers, loading = trusted_codes()
    originals, wrapper_code = guard_frame_hooks()
    refused: list[str] = []
    inside: set[int] = set()  # threads running the hook's own sys._getframe (its one audited step)
    getframe, resolve, thread_id, exact = sys._getframe, resolver(), _thread.get_ident, str.__str__
    code_type, type_error, value_error, runtime_error = types.CodeType, TypeError, ValueError, RuntimeError
    namespace = types.SimpleNamespace
    watched, frame_attrs, always, compiling, sealed = WATCHED, FRAME_ATTRS, ALWAYS, COMPILING, SEALED
    frame_hook, create_builtin, limit = FRAME_HOOK, CREATE_BUILTIN, LIMIT
    handing_modules = frozenset(m for m, _ in FRAME_HANDING)
    harness_files: dict[str, bool] = {}
    missing = object()  # a namespace's answer for a name it does not hold
    # the threads that exist now are the harness's; one started later runs only what the candidate (or a library on
    # its behalf) gave it, so its whole stack counts as called by the candidate, even with no frame of the
    # candidate's code on it (a thread whose target is a C function: cheats_v2/c2_hp_rt13_thread_*)
    harness_threads = frozenset(sys._current_frames())

    def text(value: Any) -> str | None:
        """An exact `str` copy of a `str` (of a subclass too: its methods never run), else None."""
        try:
            return exact(value)
        except type_error:
            return None

    def stack(frame: Any) -> tuple[list[types.CodeType], list[Any]]:
        codes, spaces = [], []
        while frame is not None:
            codes.append(frame.f_code)
            spaces.append(frame.f_globals)
            frame = frame.f_back
        return codes, spaces

    def consumer(code: types.CodeType, space: Any) -> bool:
        """A frame consumer running in its own namespace and calling what it called at install."""
        # consumer_snapshots' tuple, read by position: a named type would be a class the candidate can reach
        found = consumers.get(code)
        if found is None or space is not found[0]:
            return False
        for name, value in found[1]:
            if space.get(name, missing) is not value:
                return False
        table = found[2]
        if space.get("__builtins__", missing) is not found[4]:
            return False
        for name, value in found[3]:
            if table.get(name, missing) is not value:
                return False
        for attributes, pairs in found[5]:
            if len(attributes) != len(pairs):
                return False
            for name, value in pairs:
                if attributes.get(name, missing) is not value:
                    return False
        return True

    def caller_codes(depth: int) -> tuple[list[types.CodeType], list[Any]]:
        me = thread_id()
        inside.add(me)
        try:
            frame = getframe(depth + 1)
        except value_error:  # no Python frame below the hook: a thread whose target is a C function
            frame = None
        finally:
            inside.discard(me)
        return stack(frame)

    def candidate(code: types.CodeType) -> bool:
        name = text(code.co_filename) or ""
        found = verdicts.get(name)
        if found is None:  # "<frozen ...>", "<string>": a library's, unless the candidate compiled it (below)
            real = resolve(name) if name.startswith("/") else ""
            found = real != "" and (real.startswith(mine) or not real.startswith(library))
            verdicts[name] = found
        return found

    def in_harness(code: types.CodeType) -> bool:
        name = text(code.co_filename) or ""
        found = harness_files.get(name)
        if found is None:
            found = harness_files[name] = name.startswith("/") and resolve(name).startswith(harness)
        return found

    def verdict(event: str, args: tuple, codes: list[types.CodeType], spaces: list[Any]) -> str | None:
        at = None
        for i, c in enumerate(codes):
            if candidate(c):
                at = i
                break
        started, sealed_event = thread_id() not in harness_threads, event in sealed
        if at is None:
            if not (started or sealed_event):
                return None
            # a thread started after install: below its stack is the candidate's request (what a library compiles
            # there stays the library's: run anywhere else, its code is judged where it runs); a SEALED event with
            # none of the candidate's code on the stack: judged as if the whole stack were called by the candidate
            # (a callback it left for the harness to run, c3_rt13_finalizer_frame_vouch_relu)
            at = len(codes)
        if event in compiling:
            if at == 0:  # the candidate's own compile: what it made is the candidate's code too
                target = args[0] if event == "exec" and len(args) > 0 else None
                name = text(target.co_filename) if type(target) is code_type else (
                    text(args[1]) if len(args) > 1 else None)
                if name:
                    verdicts[name] = True
            return None
        asker = 0
        for i, c in enumerate(codes):
            if c not in passers:
                asker = i
                break
        if not codes:
            return f"{event} from a thread with no Python frame"
        code = codes[asker]
        if asker < at and in_harness(code) and not sealed_event:
            return None  # the harness's own records (provenance digests, guards) at work inside a candidate call
        label = event if event != "object.__getattr__" else "." + (text(args[1]) or "?")
        where = f"{label} from {(text(code.co_filename) or '?').rsplit('/', 1)[-1]}:{code.co_firstlineno} ({code.co_name})"
        if event in always:
            return where
        if asker < at and consumer(code, spaces[asker]):
            return None  # a library reading a module name from the frame
        if asker < at and not (text(code.co_filename) or "").startswith("<frozen importlib") and any(
                c in loading for c in codes[asker:at]):
            return None  # a library module's own import (never the import system's own code: what it asks for
            # goes to the finders and the module objects, which may be the candidate's: c2_hp_rt14_import_path_*)
        return where

    def refuse(reason: str) -> None:
        if len(refused) < limit:
            refused.append(reason)
        raise runtime_error(f"kernelgym refuses {reason}: the candidate's code may not reach the interpreter's "
                            "frames, objects or memory (the harness's records live in this process)")

    def frame_hook_call(args: tuple) -> None:
        """A FRAME_HANDING function, called through its wrapper (or by FRAME_HOOK raised directly): with a
        callable among its arguments (a callback that would be handed frames), or asked to make a new instance of
        a module whose functions hand frames (`_imp.create_builtin`), it is refused while the candidate's code is
        on the stack; otherwise it runs and its result goes back in the wrapper's box."""
        if len(args) != 4 or type(args[1]) is not tuple or type(args[2]) is not dict or type(args[3]) is not list:
            refuse(f"{frame_hook} with arguments its wrapper does not pass")
        name, call_args, call_kwargs, box = text(args[0]), args[1], args[2], args[3]
        fn = originals.get(name) if name else None
        if fn is None:
            refuse(f"{frame_hook} with an unknown function {name!r}")
        risky = any(callable(a) for a in (*call_args, *call_kwargs.values()))
        if name == create_builtin:  # a module spec: its name read once, the function handed a spec of that name
            spec = text(getattr(call_args[0], "name", None)) if len(call_args) == 1 and not call_kwargs else None
            if spec is None:
                refuse(f"{name} with an argument that is not a module spec")
            call_args, risky = (namespace(name=spec),), spec in handing_modules
        if risky:
            codes, spaces = caller_codes(2)
            keep = [i for i, c in enumerate(codes) if c is not wrapper_code]
            reason = verdict(frame_hook, (name,), [codes[i] for i in keep], [spaces[i] for i in keep])
            if reason:
                what = f"making a new {call_args[0].name}" if name == create_builtin else "with a callback"
                refuse(f"{name} {what}{reason[len(frame_hook):]}")
        box.append(fn(*call_args, **call_kwargs))

    def hook(event: str, args: tuple) -> None:
        event = text(event) or ""
        if event == frame_hook:
            return frame_hook_call(args)
        if not (event in watched or event == "object.__getattr__" and len(args) > 1 and text(args[1]) in frame_attrs):
            return
        if event == "sys._getframe" and thread_id() in inside:  # the hook's own getframe (caller_codes)
            return
        codes, spaces = caller_codes(1)
        reason = verdict(event, args, codes, spaces)
        if reason:
            refuse(reason)

    sys.addaudithook(hook)
    return lambda: list(refused)
