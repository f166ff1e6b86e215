"""Namespace seals: which of the harness's namespaces were written since the harness sealed them, even when the
write was undone before anyone looked.

The harness in the candidate's process looks names up at call time: a module global (`provenance._blake2b`,
`os.urandom`), a method on its class (`Provenance.before_launch`). `guards.changed` compares those objects' identities
at the integrity request, so a candidate that swaps one for the length of a forward and puts it back is never seen
(cheats_v2/c2_hp_rt15_transient_method_vouch_relu, c2_hp_rt15_module_digest_relu, c2_fb_rt15_urandom_outside_relu).
Counting writes, not comparing values, closes that: CPython gives every dict a version tag (PEP 509's
`ma_version_tag`, 64 bits after the object header and the item count) that takes a new, larger value from one
process-wide counter on every insertion, replacement or deletion, and never goes back. A tag that differs from the
one read at sealing time means a write happened in between, whatever the dict holds now.

Sealed (`seal()`, called by `guards.capture` before the candidate's module is imported):
  - the dict of every evaluator module loaded (`davinci.kernelgym.*`), packages excepted: importing a submodule
    later sets an attribute on its package, and the harness never looks its own code up through a package;
  - the dict of every class those modules define (the real dict behind `vars(cls)`, read through the
    mappingproxy's one field);
  - the standard and NumPy modules the record's code reads attributes of at call time (`EXTERNAL`), once NumPy's
    lazily loaded submodules are in its dict (`settle`).
Nothing legitimate writes any of them after sealing: the honest corpus (tests/kernelgym/test_cheats_v2.py, the
built-in solutions) comes back with no namespace written.

Choices:
  - the tag is read with ctypes at a fixed offset, checked by a probe at sealing time (the tag must move on each
    write of a fresh dict, and the item count sit where it is expected); where the probe fails (another Python
    layout, a 32-bit build) nothing is sealed, `available()` says so and the identity checks still stand;
  - a write is reported by namespace (`seal:<module>` / `seal:<module>.<Class>`), never judged by value: a write that
    stores the same object again does not move the tag, and nothing legitimate writes these dicts.

    written = seal()           # before the candidate's module is imported
    written()                  # ["davinci.kernelgym.provenance.Provenance", ...]: written since
"""

from __future__ import annotations

import ctypes
import importlib
import sys
import types
from typing import Callable

HARNESS = "davinci.kernelgym"
EXTERNAL = ("os", "numpy")
_TAG_OFFSET = 24  # PyDictObject: ob_refcnt, ob_type, ma_used, ma_version_tag
_USED_OFFSET = 16


def _tag(d: dict) -> int:
    return ctypes.c_uint64.from_address(id(d) + _TAG_OFFSET).value


def _probe() -> int | None:
    """How many low bits of a tag are not the version (None if this interpreter keeps no tag where `_tag` reads, or
    does not move it on every write). 3.12 keeps dict-watcher bits there and steps the version by 1 << 12 (a dict
    watched later changes those bits, not the version); 3.11 steps it by one."""
    if ctypes.sizeof(ctypes.c_void_p) != 8:
        return None
    try:
        d: dict[str, int] = {}
        if ctypes.c_ssize_t.from_address(id({"a": 1, "b": 2}) + _USED_OFFSET).value != 2:
            return None
        seen = [_tag(d)]
        for write in (lambda: d.__setitem__("a", 1), lambda: d.__setitem__("a", 2), lambda: d.pop("a")):
            write()
            seen.append(_tag(d))
    except (ValueError, OSError):
        return None
    steps = [b - a for a, b in zip(seen, seen[1:])]
    if min(steps) <= 0:
        return None
    low = min(steps) & -min(steps)  # the lowest bit any write moved
    return low.bit_length() - 1


def available() -> bool:
    return _probe() is not None


def _class_dict(cls: type) -> dict | None:
    """The dict behind `vars(cls)` (a mappingproxy's one field, after the object header)."""
    proxy = vars(cls)
    try:
        inner = ctypes.cast(ctypes.c_void_p.from_address(id(proxy) + 16).value, ctypes.py_object).value
    except (ValueError, OSError):
        return None
    return inner if type(inner) is dict and inner.keys() == proxy.keys() else None


def _namespaces() -> dict[str, dict]:
    out: dict[str, dict] = {}
    for name, module in list(sys.modules.items()):
        if module is None or not (name == HARNESS or name.startswith(HARNESS + ".")) or hasattr(module, "__path__"):
            continue
        out[name] = vars(module)
        for attr, obj in list(vars(module).items()):
            if isinstance(obj, type) and obj.__module__ == name:
                inner = _class_dict(obj)
                if inner is not None:
                    out[f"{name}.{attr}"] = inner
    for name in EXTERNAL:
        module = sys.modules.get(name)
        if isinstance(module, types.ModuleType):
            out[name] = vars(module)
    return out


def settle() -> None:
    """Import what the sealed modules would otherwise add to their own dicts later: NumPy's lazily loaded
    submodules (`numpy.ma` appears in its dict the first time an honest evaluation reaches it). The zygote calls
    this once before it forks; `seal` again, which costs a dictionary lookup per name there."""
    numpy = sys.modules.get("numpy")
    for name in sorted(getattr(numpy, "__numpy_submodules__", ())):
        try:
            importlib.import_module(f"numpy.{name}")
        except Exception:  # noqa: BLE001 - a submodule this NumPy lists but cannot import is never added either
            continue


def seal() -> Callable[[], list[str]]:
    """The sealing, as a function that lists the namespaces written since (their labels, in sealing order).

    Everything it calls is bound now, in its closure (the ctypes reader, the value descriptor, `id`): a candidate
    that rebinds a name in this module or in ctypes changes nothing it looks up. Where tags cannot be read
    (`available`), it seals nothing and always answers []."""
    shift = _probe()
    if shift is None:
        return lambda: []
    settle()
    read, value = ctypes.c_uint64.from_address, vars(ctypes._SimpleCData)["value"].__get__
    ident, offset = id, _TAG_OFFSET
    entries = tuple((label, d, _tag(d)) for label, d in _namespaces().items())

    def written() -> list[str]:
        return [label for label, d, tag in entries if value(read(ident(d) + offset)) >> shift != tag >> shift]

    return written
