"""The content-keyed extension reuse (`davinci.kernelgym.extcache`).

Unit tests run on any machine; the last test builds a real C++ extension with torch's `load_inline`
(needs a C++ compiler and ninja, skipped without them) and checks that a later process whose ninja state
says "stale" loads the existing library instead of rebuilding it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from davinci.kernelgym import extcache


def _folder(tmp_path: Path, source: str = "int f() { return 1; }\n") -> Path:
    d = tmp_path / "ext"
    d.mkdir(exist_ok=True)
    (d / "main.cpp").write_text(source)
    (d / "build.ninja").write_text("rule cc\n  command = c++ -c $in -o $out\nrule link\n  command = c++ $in -o $out\n"
                                   f"build main.o: cc {d / 'main.cpp'}\nbuild my.so: link main.o\ndefault my.so\n")
    return d


class FakeNinja:
    """Stands in for torch's `_run_ninja_build`: counts calls and writes the default output."""

    def __init__(self, fail: bool = False) -> None:
        self.calls, self.fail = 0, fail

    def __call__(self, build_directory: str, verbose: bool, error_prefix: str) -> None:
        self.calls += 1
        if self.fail:
            raise RuntimeError(error_prefix)
        (Path(build_directory) / "my.so").write_bytes(b"lib")


def test_second_build_of_the_same_content_skips_ninja(tmp_path: Path) -> None:
    d, ninja = _folder(tmp_path), FakeNinja()
    run = extcache.cached_runner(ninja, "2.11.0")
    run(str(d), False, "err")
    run(str(d), False, "err")
    assert ninja.calls == 1


def test_a_changed_source_rebuilds(tmp_path: Path) -> None:
    d, ninja = _folder(tmp_path), FakeNinja()
    run = extcache.cached_runner(ninja, "2.11.0")
    run(str(d), False, "err")
    (d / "main.cpp").write_text("int f() { return 2; }\n")
    run(str(d), False, "err")
    assert ninja.calls == 2


def test_another_torch_version_rebuilds(tmp_path: Path) -> None:
    d, ninja = _folder(tmp_path), FakeNinja()
    extcache.cached_runner(ninja, "2.11.0")(str(d), False, "err")
    extcache.cached_runner(ninja, "2.12.0")(str(d), False, "err")
    assert ninja.calls == 2


def test_a_missing_library_rebuilds_even_with_a_matching_marker(tmp_path: Path) -> None:
    d, ninja = _folder(tmp_path), FakeNinja()
    run = extcache.cached_runner(ninja, "2.11.0")
    run(str(d), False, "err")
    (d / "my.so").unlink()
    run(str(d), False, "err")
    assert ninja.calls == 2


def test_a_library_replaced_after_its_build_is_rebuilt(tmp_path: Path) -> None:
    d, ninja = _folder(tmp_path), FakeNinja()
    run = extcache.cached_runner(ninja, "2.11.0")
    run(str(d), False, "err")
    (d / "my.so").write_bytes(b"planted")  # marker left alone: its library hash no longer matches
    run(str(d), False, "err")
    assert ninja.calls == 2 and (d / "my.so").read_bytes() == b"lib"


def test_an_interrupted_rebuild_does_not_leave_a_matching_marker(tmp_path: Path) -> None:
    d = _folder(tmp_path)
    extcache.cached_runner(FakeNinja(), "2.11.0")(str(d), False, "err")
    (d / "main.cpp").write_text("int f() { return 2; }\n")  # v2: its build dies after linking
    with pytest.raises(RuntimeError):
        extcache.cached_runner(FakeNinja(fail=True), "2.11.0")(str(d), False, "err")
    (d / "main.cpp").write_text("int f() { return 1; }\n")  # back to v1: must rebuild, not trust the folder
    assert not extcache.is_fresh(d, "2.11.0")


def test_a_failed_build_records_nothing(tmp_path: Path) -> None:
    d = _folder(tmp_path)
    with pytest.raises(RuntimeError):
        extcache.cached_runner(FakeNinja(fail=True), "2.11.0")(str(d), False, "boom")
    assert not (d / extcache.MARKER).exists()


def test_sources_outside_the_build_folder_are_left_to_ninja(tmp_path: Path) -> None:
    """`load(sources=[...])`: the key cannot see those files (or headers beside them), so ninja always runs."""
    d, ninja = _folder(tmp_path), FakeNinja()
    outside = tmp_path / "src" / "op.cpp"
    outside.parent.mkdir()
    outside.write_text("int g() { return 3; }\n")
    ninja_file = d / "build.ninja"
    ninja_file.write_text(ninja_file.read_text().replace(str(d / "main.cpp"), str(outside)))
    run = extcache.cached_runner(ninja, "2.11.0")
    run(str(d), False, "err")
    run(str(d), False, "err")
    assert ninja.calls == 2 and not (d / extcache.MARKER).exists()


def test_install_is_idempotent() -> None:
    import torch.utils.cpp_extension as cpp

    before = cpp._run_ninja_build
    try:
        extcache.install()
        once = cpp._run_ninja_build
        extcache.install()
        assert cpp._run_ninja_build is once and hasattr(once, "__wrapped__")
    finally:
        cpp._run_ninja_build = before


LOAD = textwrap.dedent("""
    import sys
    from davinci.kernelgym import extcache
    extcache.install()
    from torch.utils.cpp_extension import load_inline
    mod = load_inline(name="kg_extcache_probe", cpp_sources="int answer() { return 42; }", functions=["answer"])
    assert mod.answer() == 42
""")


@pytest.mark.slow
@pytest.mark.skipif(not (shutil.which("c++") and shutil.which("ninja")), reason="needs a C++ compiler and ninja")
def test_real_extension_is_loaded_not_rebuilt_when_ninja_thinks_it_stale(tmp_path: Path) -> None:
    env = dict(os.environ, TORCH_EXTENSIONS_DIR=str(tmp_path), PYTHONPATH=str(Path(__file__).resolve().parents[2]),
               MAX_JOBS="2")
    subprocess.run([sys.executable, "-c", LOAD], env=env, check=True, timeout=600)
    folder = tmp_path / "kg_extcache_probe"
    library = next(folder.glob("*.so"))
    built_at = library.stat().st_mtime_ns
    for name in (".ninja_log", ".ninja_deps"):  # what a lost dependency list looks like to ninja: rebuild
        (folder / name).unlink(missing_ok=True)
    for obj in folder.glob("*.o"):
        obj.unlink()
    subprocess.run([sys.executable, "-c", LOAD], env=env, check=True, timeout=600)
    assert library.stat().st_mtime_ns == built_at
