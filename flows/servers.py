"""Local servers: the MLflow UI on the project's store, and a Prefect API server for schedules.

    davinci-kernel ui            # http://127.0.0.1:5000
    davinci-kernel serve         # starts a Prefect server if PREFECT_API_URL is unset, then serves deployments
"""

from __future__ import annotations

import os
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


def run_mlflow_ui(profile: str, host: str, port: int) -> int:
    home = Home.current()
    location = StoreLocation.resolve(home, load_profile(profile).tracking.tracking_uri)
    if not location.tracking_uri.startswith("sqlite"):
        print(f"the store is a tracking server ({location.tracking_uri}): open it in a browser directly")
        return 0
    cmd = [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", location.tracking_uri,
           "--host", host, "--port", str(port), "--workers", "1"]
    if location.artifact_root:
        cmd += ["--default-artifact-root", location.artifact_root]
    print(f"MLflow UI on http://{host}:{port} (store {location.tracking_uri}); Ctrl-C stops it", flush=True)
    return subprocess.call(cmd)


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
