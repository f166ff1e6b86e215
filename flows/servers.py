"""Local servers: the MLflow UI on the project's store, and Prefect API servers (for schedules and runs).

    davinci-kernel ui [--port 5001]   # http://127.0.0.1:<tracking.ui_port>; a busy port is an error, not a hang
    davinci-kernel serve              # starts a Prefect server if PREFECT_API_URL is unset, then serves deployments

Choices:
- `ui` checks the port before starting MLflow (a busy port is one `error:` line, exit 2) and prints the URL
  of the newest pipeline run on the real port; Ctrl-C stops it quietly (nothing to resume).
- `run` / `stage` without PREFECT_API_URL use Prefect's temporary API server, started here in its own
  session (`detached_prefect_api`): a terminal's Ctrl-C reaches the whole process group, and a server that
  died with it left flow runs "Running" forever because nothing could report the crash.
"""

from __future__ import annotations

import ctypes
import os
import socket
import subprocess
import sys
import time
import urllib.request
from contextlib import contextmanager
from typing import Iterator

from artifacts.home import Home
from artifacts.store import StoreLocation
from davinci.config import load_profile
from davinci.errors import DavinciError


def port_in_use(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return True
    return False


def run_mlflow_ui(profile: str, host: str, port: int | None) -> int:
    from flows.context import newest_run_url, open_store

    loaded = load_profile(profile)
    port = port or loaded.tracking.ui_port
    location = StoreLocation.resolve(Home.current(), loaded.tracking.tracking_uri)
    if not location.tracking_uri.startswith("sqlite"):
        print(f"the store is a tracking server ({location.tracking_uri}): open it in a browser directly")
        return 0
    if port_in_use(host, port):
        raise DavinciError(f"port {port} on {host} is already in use (another MLflow UI or server?)",
                           f"pass a free port, e.g. `davinci-kernel ui --port {port + 1}`, or stop what listens on {port}")
    cmd = [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", location.tracking_uri,
           "--host", host, "--port", str(port), "--workers", "1"]
    if location.artifact_root:
        cmd += ["--default-artifact-root", location.artifact_root]
    base = f"http://{host}:{port}"
    print(f"MLflow UI on {base} (store {location.tracking_uri}); Ctrl-C stops it", flush=True)
    newest = newest_run_url(open_store(loaded), base)
    if newest:
        print(f"  newest pipeline run: {newest}", flush=True)
    # Its own session: a terminal's Ctrl-C reaches only this process, which stops the server with SIGTERM
    # (a SIGINT makes uvicorn print a CancelledError traceback).
    server = subprocess.Popen(cmd, start_new_session=True)
    try:
        return server.wait()
    except KeyboardInterrupt:
        server.terminate()
        try:
            server.wait(timeout=15)
        except subprocess.TimeoutExpired:
            server.kill()
        print("\nMLflow UI stopped", flush=True)
        return 0


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=2) as resp:
            return resp.status == 200
    except Exception:
        return False


@contextmanager
def prefect_server(port: int, timeout_s: float = 120.0) -> Iterator[str]:
    """Yield a Prefect API URL: the configured one, or a server started here for the duration."""
    configured = os.environ.get("PREFECT_API_URL")
    if configured:
        yield configured
        return
    url = f"http://127.0.0.1:{port}/api"
    proc = subprocess.Popen([sys.executable, "-m", "prefect", "server", "start", "--host", "127.0.0.1", "--port", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + timeout_s
        while not _healthy(url):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise DavinciError(
                    f"the Prefect server on port {port} did not start",
                    f"check that port {port} is free (or pass --port), or start one yourself with "
                    "`prefect server start` and set PREFECT_API_URL",
                )
            time.sleep(1)
        os.environ["PREFECT_API_URL"] = url
        print(f"Prefect server on {url.removesuffix('/api')} (UI) ", flush=True)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()


def _detach_and_die_with_parent() -> None:
    """In the child before exec: own session (no terminal SIGINT), SIGTERM when the parent dies (Linux)."""
    os.setsid()
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, 15)  # PR_SET_PDEATHSIG, SIGTERM
    except Exception:
        pass


def detached_prefect_api() -> None:
    """Start Prefect's temporary API server now, in its own session, unless PREFECT_API_URL names one.

    Prefect looks its temporary server up as a singleton, so every client of this process uses this one."""
    if os.environ.get("PREFECT_API_URL"):
        return
    from prefect.server.api.server import SubprocessASGIServer

    class _Detached(SubprocessASGIServer):
        def _run_uvicorn_command(self) -> subprocess.Popen:
            popen = subprocess.Popen
            subprocess.Popen = lambda *a, **kw: popen(*a, preexec_fn=_detach_and_die_with_parent, **kw)  # type: ignore[misc]
            try:
                return super()._run_uvicorn_command()
            finally:
                subprocess.Popen = popen  # type: ignore[misc]

    _Detached().start()
