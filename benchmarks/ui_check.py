"""Browser check of the MLflow UI on a finished pipeline run: the pages a researcher opens first render.

What it does: starts `davinci-kernel ui` on a free port over a project home with a finished pipeline run,
opens five pages in headless Chromium (the Debian package; `--dump-dom` after the app's requests settle)
and checks that each shows what it should: the experiment's run list (the pipeline run by name, under
"Training runs", not the GenAI dashboard), the pipeline run page, the eval run's fast_p table, the
traces list (an episode trace with its problem and verdict), and the skills run's library table.
With `--screenshots DIR` it also saves a PNG of each page there.

    PYTHONPATH=. .venv/bin/python benchmarks/ui_check.py --home . --screenshots benchmarks/results/cpu/ui
    # tests/flows/test_pipeline_integration.py runs `check_pages` on its own finished run (skips without Chromium)
"""

from __future__ import annotations

import argparse
import html
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BROWSERS = ("chromium", "chromium-browser", "google-chrome")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]


@dataclass(frozen=True)
class Page:
    name: str
    url: str
    expect: tuple[str, ...]


@dataclass(frozen=True)
class PageCheck:
    page: Page
    missing: tuple[str, ...]
    screenshot: str = ""


def browser() -> str | None:
    return next((path for name in BROWSERS if (path := shutil.which(name))), None)


def _run_browser(args: list[str], budget_ms: int) -> str:
    with tempfile.TemporaryDirectory() as profile:
        cmd = [browser() or "chromium", *FLAGS, f"--user-data-dir={profile}", f"--virtual-time-budget={budget_ms}", *args]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=budget_ms / 1000 + 60).stdout


def page_text(url: str, budget_ms: int = 20000) -> str:
    """The rendered page as plain text (scripts and styles dropped)."""
    dom = _run_browser(["--dump-dom", url], budget_ms)
    text = re.sub(r"<script.*?</script>|<style.*?</style>", "", dom, flags=re.S)
    return re.sub(r"\s+", " ", html.unescape(re.sub(r"<[^>]+>", " ", text)))


def screenshot(url: str, path: Path, budget_ms: int = 20000) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    _run_browser([f"--screenshot={path}", "--window-size=1440,1000", "--hide-scrollbars", url], budget_ms)


def pages(home: Path, base: str) -> list[Page]:
    """The pages of the newest finished pipeline run in `home`'s store, with what each must show."""
    from mlflow.tracking import MlflowClient

    import mlflow

    uri = f"sqlite:///{home / 'mlruns' / 'mlflow.db'}"
    mlflow.set_tracking_uri(uri)
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name("davinci-kernel").experiment_id
    parent = client.search_runs([exp], "tags.stage = 'pipeline' and attributes.status = 'FINISHED'",
                                order_by=["attributes.start_time DESC"], max_results=1)[0]
    children = {r.data.tags["stage"]: r for r in client.search_runs(
        [exp], f"tags.`mlflow.parentRunId` = '{parent.info.run_id}'", order_by=["attributes.start_time ASC"])}
    version = int(children["skills"].data.metrics["version"])
    run_url = f"{base}/#/experiments/{exp}/runs"
    name = parent.info.run_name
    return [
        Page("runs", f"{base}/#/experiments/{exp}/runs", ("Training runs", name[:40])),
        Page("pipeline_run", f"{run_url}/{parent.info.run_id}", (name[:40], "fast_1_eager")),
        Page("fast_p_table", f"{run_url}/{children['eval'].info.run_id}/artifacts/fast_p/fast_p_table.json",
             ("fast_p_table.json", "baseline", "fast_1", "geomean_speedup")),
        Page("traces", f"{base}/#/experiments/{exp}/traces", ("problem_id", "turn_scores", "stage: rl", "episode_id")),
        Page("skill_library", f"{run_url}/{children['skills'].info.run_id}/artifacts/library/v{version}.json",
             (f"library/v{version}.json", "title", "admitted")),
    ]


def check_pages(home: Path, base: str, shots: Path | None = None) -> list[PageCheck]:
    results = []
    for page in pages(home, base):
        text = page_text(page.url)
        missing = tuple(e for e in page.expect if e not in text)
        shot = ""
        if shots is not None:
            screenshot(page.url, shots / f"{page.name}.png")
            shot = str(shots / f"{page.name}.png")
        results.append(PageCheck(page, missing, shot))
    return results


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_ui(home: Path) -> tuple[subprocess.Popen, str]:
    """`davinci-kernel ui` on a free port over `home`; returns the process and its base URL once healthy."""
    port = _free_port()
    env = {**os.environ, "DAVINCI_HOME": str(home)}
    env.pop("MLFLOW_TRACKING_URI", None)
    proc = subprocess.Popen([sys.executable, "-m", "flows.cli", "ui", "--port", str(port)], cwd=ROOT, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            with urllib.request.urlopen(f"{base}/health", timeout=2):
                return proc, base
        except OSError:
            time.sleep(1)
    stop_ui(proc)
    raise RuntimeError(f"the MLflow UI did not start on {base}")


def stop_ui(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--home", default=".", help="project home with a finished pipeline run")
    parser.add_argument("--screenshots", default="", help="folder for one PNG per page")
    args = parser.parse_args()
    if browser() is None:
        print("error: no Chromium found\n  fix: apt-get install -y chromium", file=sys.stderr)
        return 2
    proc, base = start_ui(Path(args.home).resolve())
    try:
        checks = check_pages(Path(args.home).resolve(), base, Path(args.screenshots) if args.screenshots else None)
    finally:
        stop_ui(proc)
    for c in checks:
        print(f"{c.page.name:14s} {'ok' if not c.missing else 'MISSING ' + ', '.join(c.missing):40s} {c.screenshot}")
    return 0 if all(not c.missing for c in checks) else 1


if __name__ == "__main__":
    sys.exit(main())
