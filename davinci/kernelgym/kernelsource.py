"""A kernel's source against what Triton's GPU code generator accepts, checked without lowering it (CPU only).

`frontend.frontend_error` lowers a kernel with Triton's code generator, but in a process where the interpreter has
run the lowering fails for reasons that are not the code's (Triton's own @jit library is interpreted there,
`tl.zeros` among it), so it refuses only a NameError and skips the check on any other failure. A candidate can put
such a failure first and run Python after it: an unsupported `try:` (cheats_v2/c2_fb_rt7_frontend_try_skip_relu),
a `tl.zeros` (c2_fb_rt8_frontend_op_first_relu), or no global at all and NumPy reached through the loaded block
(c2_fb_rt8_handle_data_relu). This check needs no lowering, so it fails closed. It reads the kernel's source (the
one the interpreter's rewrite is made from, frontend.Rewrites) and refuses

- a statement the code generator has no rule for (`try`, `raise`, `global`, `import`, `del`, `break`, a nested
  `def` or `class`; whatever `CodeGenerator` has no `visit_` method for) and the expressions it cannot lower
  (`lambda`, comprehensions other than a list's, generators, `await`, `yield`);
- a name outside the code generator's scope rules, with the value it has at this launch (a global can be rebound
  between launches): a global that is not a module, a @jit function or an object of `triton`, `math` or
  `triton.language` as captured before the candidate was imported (`frontend.language_state`; a module the
  candidate made, or a function it added to `tl`, is none of them); a constexpr global that holds anything but
  numbers, strings or dtypes; a builtin the code generator does not provide; a closure cell held to the same rule;
  a dotted name resolved attribute by attribute through the captured state, never by asking the live object
  (whose `__getattr__` is the candidate's); a subclass of a dtype or of constexpr (its `__call__` is Python);
- an attribute the compiled kernel cannot have: a dunder, or `handle` (the interpreter's storage of a block, a NumPy
  array there, an IR value on a GPU); `getattr`/`hasattr` only with a literal name held to the same rule;
- a kernel whose source cannot be read (the interpreter would run its code object as plain Python).

The @jit helpers a kernel names are checked the same way. The AST facts are read once per function.
`argument_error` holds a launch's arguments to what a GPU launch passes (no plain Python function as a constexpr,
no subclass of a number or a string, whose repr the candidate chooses).

    facts: dict = {}
    err = source_error(kernel, facts, language_state())   # None when within what the GPU compiler accepts
    err = argument_error(kernel, args, kwargs, facts, language_state())
"""

from __future__ import annotations

import ast
import inspect
import textwrap
import types
from dataclasses import dataclass
from typing import Any

# expressions the code generator has no rule for (statements are read off CodeGenerator's visit_ methods)
_NO_EXPR = (ast.Lambda, ast.GeneratorExp, ast.DictComp, ast.SetComp, ast.Await, ast.Yield, ast.YieldFrom)


@dataclass(frozen=True)
class SourceFacts:
    """What a kernel's source holds, read once: an error found in the syntax alone, or the free names it loads
    (`chains`: each dotted name from a free name, e.g. ("tl", "math", "exp")) and the @jit-callable free names."""

    error: str | None
    chains: tuple[tuple[str, ...], ...] = ()
    arg_chains: tuple[tuple[str, ...], ...] = ()  # in parameter defaults and annotations


def source_error(kernel: Any, facts: dict, pristine: dict | None, depth: int = 0) -> str | None:
    """The first thing in `kernel`'s source (or a @jit helper's it names) that Triton's GPU code generator would not
    accept, or None. `facts` caches `SourceFacts` per function; `pristine` is `frontend.language_state()` taken
    before the candidate was imported (None: taken now)."""
    fn = getattr(kernel, "fn", None)
    if not isinstance(fn, types.FunctionType) or depth > 4:
        return None
    key = (fn, fn.__code__)
    if key not in facts:
        facts[key] = read_facts(fn)
    found = facts[key]
    if found.error:
        return f"kernel {fn.__name__}: {found.error}"
    for default in (*(fn.__defaults__ or ()), *(fn.__kwdefaults__ or {}).values()):
        problem = _argument_problem(default, facts, pristine, 1)
        if problem:
            return f"kernel {fn.__name__}: a parameter's default {problem}"
    if pristine is None:  # a caller that took no state before the candidate: triton.language as it is now
        from davinci.kernelgym.frontend import language_state

        pristine = facts.setdefault("language_now", language_state())
    known = _pristine_ids(pristine, facts)
    for chain in (*found.chains, *found.arg_chains):
        value, where = _resolve(fn, chain, pristine)
        problem = _disallowed(value, known, pristine)
        if problem and chain in found.arg_chains:  # a default may name any global a launch could pass
            problem = problem if value is _MISSING else _argument_problem(value, facts, pristine, 1)
        if problem:
            return f"kernel {fn.__name__}: `{where}` {problem}"
        if _is_jit(value) and id(getattr(value, "fn", None)) not in known:
            inner = source_error(value, facts, pristine, depth + 1)
            if inner:
                return inner
    return None


def argument_error(kernel: Any, args: tuple, kwargs: dict, facts: dict, pristine: dict | None) -> str | None:
    """The first argument of a launch that is not what a launch passes on a GPU: tensors, numbers, strings and
    None of the built-in types (a subclass chooses its own repr: cheats_v2/c2_fb_rt8_float_repr_arg_hinge), NumPy
    scalars, Triton dtypes, @jit functions (their source checked like the kernel's) and tuples of them. A plain
    Python function passed as a `tl.constexpr` ran NumPy on the loaded block (c2_fb_rt8_constexpr_param_fn_relu)."""
    from davinci.kernelgym.launchdata import kernel_params

    fn = getattr(kernel, "fn", None)
    if not isinstance(fn, types.FunctionType):
        return None
    params = kernel_params(kernel)
    named = [*zip(params, args), *((k, v) for k, v in kwargs.items() if k in params)]
    for where, value in named:
        problem = _argument_problem(value, facts, pristine, 0)
        if problem:
            return f"argument {where} of kernel {fn.__name__} {problem}"
    return None


def _argument_problem(value: Any, facts: dict, pristine: dict | None, depth: int) -> str | None:
    import torch
    from triton.language import core

    from davinci.kernelgym.launchdata import numpy_scalar

    if isinstance(value, torch.Tensor) or type(value) in (int, float, bool, str, type(None)) or numpy_scalar(value):
        return None
    if type(value) in (tuple, list, torch.Size) and depth < 3:
        return next((p for p in (_argument_problem(v, facts, pristine, depth + 1) for v in value) if p), None)
    if type(value) is core.constexpr:
        return _argument_problem(value.value, facts, pristine, depth + 1)
    if _a_dtype(value):
        return None
    if _is_jit(value):
        return source_error(value, facts, pristine, 1)
    if type(value).__qualname__ == "TensorDescriptor" and type(value).__module__.startswith("triton."):
        return None  # Triton's host-side tensor descriptor (a base tensor, its shape, strides and block shape)
    return (f"is a {type(value).__module__}.{type(value).__qualname__}: a launch passes tensors, numbers, strings, "
            "dtypes, @jit functions and tuples of them")


def read_facts(fn: types.FunctionType) -> SourceFacts:
    """The syntax check and the free names of `fn`'s source, as the interpreter's rewriter reads it."""
    try:
        tree = ast.parse(_source(fn))
    except (OSError, TypeError, SyntaxError, IndexError) as exc:
        return SourceFacts(f"its source cannot be read ({type(exc).__name__}), so it cannot be compiled for a GPU")
    root = next((n for n in tree.body if isinstance(n, ast.FunctionDef)), None)
    if root is None:
        return SourceFacts("its source holds no function definition")
    error = _syntax_error(root)
    if error:
        return SourceFacts(error)
    bound = {a.arg for a in (*root.args.posonlyargs, *root.args.args, *root.args.kwonlyargs)}
    bound |= {a.arg for a in (root.args.vararg, root.args.kwarg) if a is not None}
    bound |= {n.id for n in ast.walk(root) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    in_args = {id(n) for n in ast.walk(root.args)}  # defaults and annotations: evaluated when the def runs
    parents = {id(child): parent for parent in ast.walk(root) for child in ast.iter_child_nodes(parent)}
    chains, arg_chains = [], []
    for node in ast.walk(root):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id not in bound:
            (arg_chains if id(node) in in_args else chains).append(_chain(node, parents))
    return SourceFacts(None, tuple(dict.fromkeys(chains)), tuple(dict.fromkeys(arg_chains)))


def _source(fn: types.FunctionType) -> str:
    lines, _ = inspect.getsourcelines(fn)
    first = max((i for i, ln in enumerate(lines) if ln.strip().startswith("def ")), default=0)  # as the rewriter
    return textwrap.dedent("".join(lines[first:]))


def _syntax_error(root: ast.FunctionDef) -> str | None:
    from triton.compiler.code_generator import CodeGenerator

    for node in ast.walk(root):
        if node is not root and isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            return f"a nested `{type(node).__name__}` (line {node.lineno}), which Triton's compiler does not allow"
        if isinstance(node, ast.stmt) and not hasattr(CodeGenerator, f"visit_{type(node).__name__}"):
            return f"a `{type(node).__name__}` statement (line {node.lineno}), which Triton's compiler does not support"
        if isinstance(node, _NO_EXPR):
            return f"a `{type(node).__name__}` expression (line {node.lineno}), which Triton's compiler cannot lower"
        if isinstance(node, ast.Attribute) and _bad_attribute(node.attr):
            return (f"attribute `.{node.attr}` (line {node.lineno}): a compiled kernel has no such attribute (the "
                    "interpreter's storage of a block or Python's object internals)")
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("getattr", "hasattr"):
            name = node.args[1] if len(node.args) > 1 else None
            if not (isinstance(name, ast.Constant) and isinstance(name.value, str)) or _bad_attribute(name.value):
                return f"`{node.func.id}` (line {node.lineno}) with a name that is not a literal the compiler allows"
    return None


def _bad_attribute(name: str) -> bool:
    return name == "handle" or (name.startswith("__") and name.endswith("__"))


def _chain(node: ast.Name, parents: dict[int, ast.AST]) -> tuple[str, ...]:
    """The dotted name that starts at `node` (its enclosing Attribute loads, through `parents`: id -> parent node),
    e.g. ("tl", "math", "exp")."""
    chain, here = [node.id], node
    while isinstance(parents.get(id(here)), ast.Attribute) and parents[id(here)].value is here:
        here = parents[id(here)]
        chain.append(here.attr)
    return tuple(chain)


def _resolve(fn: types.FunctionType, chain: tuple[str, ...], pristine: dict | None) -> tuple[Any, str]:
    """The value a free dotted name has now: a closure cell's, a global's or a builtin's, then through modules only
    (a module of `triton.language` read as it was before the candidate was imported)."""
    import builtins

    from triton.compiler.code_generator import CodeGenerator

    name = chain[0]
    cells = dict(zip(fn.__code__.co_freevars, fn.__closure__ or ()))
    if name in cells:
        value = _cell(cells[name])
    elif name in fn.__globals__:
        value = fn.__globals__[name]
    else:
        value = getattr(builtins, name, _MISSING)
        allowed = getattr(CodeGenerator, "builtin_namespace", {})
        return (_BUILTIN if name in allowed and allowed[name] is value else value), name
    used = [name]
    for attr in chain[1:]:  # through what was captured before the candidate, never the live objects
        found = _captured_attr(value, attr, pristine or {})
        if found is _NOT_CAPTURED:
            break  # not Triton's (a module here is refused by its own check): the chain ends
        value = found
        used.append(attr)
        if value is _MISSING:
            break
    return value, ".".join(used)


def _captured_attr(obj: Any, attr: str, pristine: dict) -> Any:
    """`obj.attr` as `frontend.language_state` captured it: a captured module's or instance's own attribute, or
    the first captured class along its MRO that has it; `_MISSING` when a captured object has no such attribute
    (one added since: cheats_v2/c2_fb_rt8_dtype_attr_fn_relu), `_NOT_CAPTURED` for an object it did not capture."""
    from davinci.kernelgym.frontend import Held

    own = pristine.get(obj) if isinstance(obj, (type, types.ModuleType)) else pristine.get(Held(obj))
    if own is None:
        if isinstance(obj, types.ModuleType) or not any(c in pristine for c in type(obj).__mro__):
            return _NOT_CAPTURED
    elif attr in own:
        return own[attr]
    if isinstance(obj, types.ModuleType):
        return _MISSING
    for cls in (obj.__mro__ if isinstance(obj, type) else type(obj).__mro__):
        if cls in pristine and attr in pristine[cls]:
            return pristine[cls][attr]
    return _MISSING


def _disallowed(value: Any, known: set[int], pristine: dict) -> str | None:
    """Why a free name's value is outside the code generator's scope rules, or None."""
    from triton.language import core

    if value is _BUILTIN or _is_jit(value):
        return None
    if isinstance(value, types.ModuleType):  # only one captured before the candidate (not one it made and named
        # "triton...", whose __getattr__ answers one thing to the check and another in the launch:
        # cheats_v2/c2_fb_rt8_module_getattr_toctou_relu)
        ok = value in pristine
        return None if ok else f"is module {value.__name__}, which a compiled kernel cannot call into"
    if id(value) in known:
        return None
    if value is _MISSING:
        return "is not defined where the kernel is compiled (nor in triton.language before the candidate ran)"
    # Triton's own classes only: a subclass's `__call__` is the candidate's Python (c2_fb_rt8_dtype_subclass_global_relu)
    if type(value) is core.constexpr:
        inner = value.value
        ok = _constant(inner)
        return None if ok else f"is a constexpr holding a {type(inner).__name__}, not a number, string or dtype"
    if _a_dtype(value):
        return None
    return (f"is a {type(value).__name__}: a kernel may name only Triton modules, @jit functions, triton.language "
            "and constexpr globals")


def _constant(value: Any, depth: int = 0) -> bool:
    """A number, a string, None or a Triton dtype of the built-in and Triton's own types, or a tuple of them."""
    if value is None or type(value) in (bool, int, float, str) or _a_dtype(value):
        return True
    return type(value) in (tuple, list) and depth < 3 and all(_constant(v, depth + 1) for v in value)


def _a_dtype(value: Any) -> bool:
    """A dtype of one of triton.language's own classes (not a subclass defined elsewhere)."""
    from triton.language import core

    return isinstance(value, core.dtype) and type(value).__module__.startswith("triton.language")


def _is_jit(value: Any) -> bool:
    from triton.runtime.interpreter import InterpretedFunction
    from triton.runtime.jit import JITFunction

    return isinstance(value, (JITFunction, InterpretedFunction))


def _pristine_ids(pristine: dict | None, facts: dict) -> set[int]:
    """Identities of every value of `triton.language` before the candidate ran (and the @jit functions' Python
    functions among them: Triton's own library is not re-read)."""
    cached = facts.get("pristine_ids")
    if cached is None or cached[0] is not pristine:
        ids: set[int] = set()
        for attrs in (pristine or {}).values():
            for v in attrs.values():
                ids.add(id(v))
                if isinstance(getattr(v, "fn", None), types.FunctionType):
                    ids.add(id(v.fn))
        cached = facts["pristine_ids"] = (pristine, ids)
    return cached[1]


def _cell(cell: Any) -> Any:
    try:
        return cell.cell_contents
    except ValueError:  # an empty cell
        return _MISSING


_MISSING = object()
_NOT_CAPTURED = object()
_BUILTIN = object()  # a builtin the code generator provides itself (range, min, max, len, ...)
