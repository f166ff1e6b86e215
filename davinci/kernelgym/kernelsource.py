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
  between launches): a global that is not a Triton module, a @jit function, or an object of `triton.language` as
  it was before the candidate was imported (`frontend.language_state`, so a function added to `tl` is no such
  object); a constexpr global that holds anything but a number, a string or a dtype; a builtin the code generator
  does not provide; a closure cell held to the same rule; a dotted name through a module resolved the same way;
- an attribute the compiled kernel cannot have: a dunder, or `handle` (the interpreter's storage of a block, a NumPy
  array there, an IR value on a GPU); `getattr`/`hasattr` only with a literal name held to the same rule;
- a kernel whose source cannot be read (the interpreter would run its code object as plain Python).

The @jit helpers a kernel names are checked the same way. The AST facts are read once per function.

    facts: dict = {}
    err = source_error(kernel, facts, language_state())   # None when within what the GPU compiler accepts
"""

from __future__ import annotations

import ast
import inspect
import textwrap
import types
from dataclasses import dataclass
from typing import Any

MATH_MODULES = ("math",)  # besides Triton's own: its constants fold at compile time (`math.pi`, `math.log2(e)`)
# expressions the code generator has no rule for (statements are read off CodeGenerator's visit_ methods)
_NO_EXPR = (ast.Lambda, ast.GeneratorExp, ast.DictComp, ast.SetComp, ast.Await, ast.Yield, ast.YieldFrom)


@dataclass(frozen=True)
class SourceFacts:
    """What a kernel's source holds, read once: an error found in the syntax alone, or the free names it loads
    (`chains`: each dotted name from a free name, e.g. ("tl", "math", "exp")) and the @jit-callable free names."""

    error: str | None
    chains: tuple[tuple[str, ...], ...] = ()


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
    if pristine is None:  # a caller that took no state before the candidate: triton.language as it is now
        from davinci.kernelgym.frontend import language_state

        pristine = facts.setdefault("language_now", language_state())
    known = _pristine_ids(pristine, facts)
    for chain in found.chains:
        value, where = _resolve(fn, chain, pristine)
        problem = _disallowed(value, known)
        if problem:
            return f"kernel {fn.__name__}: `{where}` {problem}"
        if _is_jit(value) and id(getattr(value, "fn", None)) not in known:
            inner = source_error(value, facts, pristine, depth + 1)
            if inner:
                return inner
    return None


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
    chains = []
    for node in ast.walk(root):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id not in bound:
            chains.append(_chain(node, root))
    return SourceFacts(None, tuple(dict.fromkeys(chains)))


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


def _chain(node: ast.Name, root: ast.AST) -> tuple[str, ...]:
    """The dotted name that starts at `node` (its enclosing Attribute loads), e.g. ("tl", "math", "exp")."""
    parents = {id(child): parent for parent in ast.walk(root) for child in ast.iter_child_nodes(parent)}
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
    for attr in chain[1:]:
        if not isinstance(value, types.ModuleType):
            break
        state = (pristine or {}).get(value)
        value = state.get(attr, _MISSING) if state is not None else getattr(value, attr, _MISSING)
        used.append(attr)
    return value, ".".join(used)


def _disallowed(value: Any, known: set[int]) -> str | None:
    """Why a free name's value is outside the code generator's scope rules, or None."""
    from triton.language import core

    if value is _BUILTIN or id(value) in known or _is_jit(value):
        return None
    if value is _MISSING:
        return "is not defined where the kernel is compiled (nor in triton.language before the candidate ran)"
    if isinstance(value, types.ModuleType):
        ok = value.__name__.split(".")[0] == "triton" or value.__name__ in MATH_MODULES
        return None if ok else f"is module {value.__name__}, which a compiled kernel cannot call into"
    if isinstance(value, core.constexpr):
        inner = value.value
        ok = inner is None or isinstance(inner, (bool, int, float, str, core.dtype))
        return None if ok else f"is a constexpr holding a {type(inner).__name__}, not a number, string or dtype"
    if isinstance(value, core.dtype):
        return None
    return (f"is a {type(value).__name__}: a kernel may name only Triton modules, @jit functions, triton.language "
            "and constexpr globals")


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
_BUILTIN = object()  # a builtin the code generator provides itself (range, min, max, len, ...)
