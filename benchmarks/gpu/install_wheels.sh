#!/usr/bin/env bash
# Install the wheels carried in .whl/ (the GPU machine has no package index) once per machine, whoever asks first.
#   .whl/*.whl          into /tmp/site (put on PYTHONPATH by the caller): rank-bm25, dask, ...
#   .whl/system/*.whl   into the machine's own Python: packages that kernelgym's lanes must see too, since a lane
#                       starts with a clean environment (no PYTHONPATH), e.g. a NumPy that the machine's Triton
#                       interpreter supports (numpy<2.4 for Triton 3.6)
# Several suites start side by side (run_streams.sh): they take a lock, and the first installs while the others wait,
# then find the stamp and skip; two pip processes writing one --target folder at once delete each other's files.
#   bash benchmarks/gpu/install_wheels.sh && export PYTHONPATH=/tmp/site:$PYTHONPATH
set -eu
cd "$(dirname "$0")/../.."
{ ls .whl/*.whl || ls .whl/system/*.whl; } >/dev/null 2>&1 || exit 0
stamp=/tmp/site/.installed
want="$(ls -l .whl/*.whl .whl/system/*.whl 2>/dev/null | md5sum | cut -c1-32)"
mkdir -p /tmp/site
exec 9>/tmp/site.lock
flock 9
[ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && exit 0
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
fi
if ls .whl/system/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-cache-dir .whl/system/*.whl
fi
echo "$want" > "$stamp"
