"""Content-keyed reuse of a candidate's JIT-built extension (`load_inline`), independent of ninja.

A candidate that calls `torch.utils.cpp_extension.load_inline` asks ninja to bring its build folder up to
date. Ninja decides from file times and the dependency files the compiler wrote, and on the H100 every fresh
candidate process rebuilt the same CUDA extension (~65 s each: nvcc's dependency list does not survive the
per-job temporary folder; the same happens outside kernelgym, pytorch/pytorch#124454). So the evaluator
keys a finished build by content instead: after ninja succeeds, `<build>/.kernelgym-built` records a hash of
`build.ninja` (every flag and path), the sources torch wrote next to it and the torch version; when a later
process finds the same key and the build's outputs, ninja is not run and torch loads the library directly.

Installed once in the zygote (`install()`), so every candidate process and every pre-build inherits it.
It only skips work that would produce the same bytes: any change of source, flag, compiler binary or torch
version changes the key, and the marker also holds the library's own hash, so a library replaced after its
build is rebuilt. Only builds whose sources all lie in the folder (`load_inline`) are keyed; `load()` of
files elsewhere is left to ninja. Limits: headers from `extra_include_paths` are not in the key, and a
candidate running under the evaluator's own uid (the GPU default, CUDA IPC) can rewrite any file that uid
can, marker included; per-code build folders plus the per-code lock (`builddirs.lock_build_folder`) keep honest
concurrent evaluations apart, and a read-only cache mount or a per-candidate uid is the structural fix.

    python -c "from davinci.kernelgym import extcache; extcache.install()"   # idempotent
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
from pathlib import Path
from typing import Any, Callable

MARKER = ".kernelgym-built"
_SOURCE_SUFFIXES = {".cpp", ".cc", ".cu", ".cuh", ".h", ".hpp", ".ninja"}


def build_key(build_dir: Path, torch_version: str) -> str:
    """sha256 over build.ninja, the sources beside it, the compilers it names and the torch version."""
    digest = hashlib.sha256()
    _frame(digest, torch_version.encode())
    for path in sorted(p for p in build_dir.iterdir() if p.is_file() and p.suffix in _SOURCE_SUFFIXES):
        _frame(digest, path.name.encode())
        _frame(digest, path.read_bytes())
    for compiler in _compilers(build_dir):  # an upgraded toolkit at the same path changes size or time
        st = compiler.stat()
        _frame(digest, f"{compiler}:{st.st_size}:{st.st_mtime_ns}".encode())
    return digest.hexdigest()


def outputs_key(build_dir: Path) -> str:
    """sha256 over the default outputs' bytes: a library replaced after the build does not match."""
    digest = hashlib.sha256()
    for path in default_outputs(build_dir):
        _frame(digest, path.name.encode())
        _frame(digest, path.read_bytes())
    return digest.hexdigest()


def _frame(digest: Any, data: bytes) -> None:
    digest.update(len(data).to_bytes(8, "big") + data)


def _ninja_lines(build_dir: Path) -> list[str]:
    """build.ninja's lines; none when it is missing or unreadable."""
    try:
        return (build_dir / "build.ninja").read_text().splitlines()
    except OSError:
        return []


def _compilers(build_dir: Path) -> list[Path]:
    found = []
    for line in _ninja_lines(build_dir):
        name, _, value = line.partition(" = ")
        if name.strip() in ("cxx", "nvcc") and value.split():
            exe = shutil.which(value.split()[0])
            if exe:
                found.append(Path(exe).resolve())
    return found


def default_outputs(build_dir: Path) -> list[Path]:
    """The targets of build.ninja's `default` line (the library torch will import)."""
    names = [name for line in _ninja_lines(build_dir) if line.startswith("default ") for name in line.split()[1:]]
    return [build_dir / name for name in names]


def self_contained(build_dir: Path) -> bool:
    """True when every source the build compiles lies in the build folder itself (the `load_inline` case).

    `load(sources=[...])` compiles files from elsewhere, and headers beside them, which the key cannot see:
    such builds are left to ninja.
    """
    inputs = []
    for line in _ninja_lines(build_dir):
        if line.startswith("build ") and ": " in line:
            tokens = [t for t in re.split(r"(?<!\$) ", line.split(": ", 1)[1]) if t and t not in ("|", "||")]
            inputs += [t.replace("$ ", " ").replace("$:", ":") for t in tokens[1:]]  # tokens[0]: the rule
    top = build_dir.resolve()
    return bool(inputs) and all(not Path(t).is_absolute() or Path(t).resolve().parent == top for t in inputs)


def is_fresh(build_dir: Path, torch_version: str) -> bool:
    """True when the marker matches the folder's inputs and its outputs' bytes, and every output exists."""
    outputs = default_outputs(build_dir)
    try:
        recorded = (build_dir / MARKER).read_text().split()
        if not outputs or not all(p.is_file() for p in outputs):
            return False
        return recorded == [build_key(build_dir, torch_version), outputs_key(build_dir)]
    except OSError:
        return False


def cached_runner(run_ninja: Callable[..., Any], torch_version: str) -> Callable[..., Any]:
    """Wrap torch's `_run_ninja_build(build_directory, verbose, error_prefix)` with the content check."""

    def run(build_directory: str, *args: Any, **kwargs: Any) -> Any:
        folder = Path(build_directory)
        if not self_contained(folder):
            return run_ninja(build_directory, *args, **kwargs)
        if is_fresh(folder, torch_version):
            return None
        (folder / MARKER).unlink(missing_ok=True)  # a build interrupted from here on must not look finished
        result = run_ninja(build_directory, *args, **kwargs)  # raises on a failed build: nothing recorded
        try:
            tmp = folder / f"{MARKER}.{os.getpid()}"
            tmp.write_text(f"{build_key(folder, torch_version)} {outputs_key(folder)}\n")
            os.replace(tmp, folder / MARKER)
        except OSError:
            pass  # a read-only folder only costs the next process a ninja run
        return result

    run.__wrapped__ = run_ninja  # type: ignore[attr-defined]
    return run


def install() -> None:
    """Patch torch.utils.cpp_extension in this process (idempotent)."""
    import torch
    import torch.utils.cpp_extension as cpp

    current = getattr(cpp, "_run_ninja_build", None)
    if current is None or hasattr(current, "__wrapped__"):
        return
    cpp._run_ninja_build = cached_runner(current, torch.__version__)
