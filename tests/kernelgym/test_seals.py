"""Namespace seals (davinci/kernelgym/seals.py): a write to a sealed namespace is reported even when it was undone
before the check, reads are never reported, and rebinding the seals module's own names does not blind the check.

In-process on purpose: sealing reads dict tags and installs no audit hook. Every write a test makes is undone in a
`finally`, as a candidate would undo it. The end-to-end cases (a candidate swapping the record's method, digest or
`os.urandom` for one forward) are cheats_v2/c2_*_rt15_* in test_cheats_v2.py."""

from __future__ import annotations

import os
import sys

import numpy
import pytest

from davinci.kernelgym import launchdata, provenance, seals


@pytest.fixture()
def written():
    if not seals.available():
        pytest.skip("this interpreter keeps no dict version tags where seals.py reads them")
    return seals.seal()


def test_tags_are_readable_on_this_interpreter() -> None:
    # the suite runs on 64-bit CPython 3.11 to 3.13, where PEP 509's tag sits after the item count
    assert seals.available()


def test_nothing_is_written_by_reads_calls_and_cached_imports(written) -> None:
    launchdata.kernel_params(provenance.Provenance)
    getattr(os, "urandom")(4)
    import numpy.ma  # noqa: F401  (settled before sealing: already in NumPy's dict)
    assert written() == []


def test_a_module_global_swapped_and_put_back_is_reported(written) -> None:
    original = os.urandom
    try:
        os.urandom = lambda n: b"\0" * n
    finally:
        os.urandom = original
    assert os.urandom is original  # the value is back: only the write count tells
    assert written() == ["os"]


def test_a_harness_method_swapped_and_put_back_is_reported(written) -> None:
    cls = provenance.Provenance
    original = cls.__dict__["before_launch"]
    try:
        cls.before_launch = lambda self, *a, **k: original(self, *a, **k)
    finally:
        cls.before_launch = original
    assert written() == ["davinci.kernelgym.provenance.Provenance"]


def test_a_harness_module_global_added_and_deleted_is_reported(written) -> None:
    try:
        provenance.__dict__["_probe_global"] = 1
    finally:
        del provenance.__dict__["_probe_global"]
    assert written() == ["davinci.kernelgym.provenance"]


def test_rebinding_the_seals_module_does_not_blind_the_check(written) -> None:
    saved = dict(vars(seals))
    try:
        seals._tag = lambda d: 0
        seals._TAG_OFFSET = 0
        original = os.urandom
        os.urandom = original
        os.__dict__["urandom"] = lambda n: b"\0" * n
        os.__dict__["urandom"] = original
        found = written()
    finally:
        for name in ("_tag", "_TAG_OFFSET"):
            setattr(seals, name, saved[name])
    assert "os" in found and "davinci.kernelgym.seals" in found


def test_a_package_dict_is_not_sealed(written) -> None:
    # importing a submodule for the first time sets an attribute on its package: that write is the import
    # system's, and the harness never looks its code up through a package
    package = sys.modules["davinci.kernelgym"]
    try:
        package.__dict__["_probe_submodule"] = 1
    finally:
        del package.__dict__["_probe_submodule"]
    assert written() == []


def test_without_readable_tags_nothing_is_sealed(monkeypatch) -> None:
    monkeypatch.setattr(seals, "_probe", lambda: None)
    check = seals.seal()
    original = os.urandom
    try:
        os.urandom = lambda n: b"\0" * n
    finally:
        os.urandom = original
    assert not seals.available() and check() == []


def test_settle_puts_numpys_lazy_submodules_in_its_dict() -> None:
    seals.settle()
    lazy = sorted(getattr(numpy, "__numpy_submodules__", ()))
    present = [name for name in lazy if f"numpy.{name}" in sys.modules]
    assert present and all(name in vars(numpy) for name in present)
