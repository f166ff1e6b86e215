"""Ctrl-C / SIGTERM that leave the stores true: open MLflow runs KILLED, Prefect flow runs Crashed, one line.

Choices:
- Flows register the MLflow runs they hold open (`track_run`) and their Prefect flow runs. At the first
  signal a helper thread marks every open MLflow run KILLED at once (before Prefect has even unwound), and
  prints one line: what is saved and the exact command that resumes. The main thread gets KeyboardInterrupt
  as usual, so Prefect's engine reports its flow runs Crashed and `stage_run` / the pipeline mark theirs.
- The same helper thread then sets the Prefect flow runs of those MLflow runs Crashed where Prefect's engine
  has not (yet). A watchdog makes the process exit within `INTERRUPT_GRACE_S` whatever happens below (a
  child process that ignores the signal, a retrying HTTP client, slow exit handlers). A second signal exits
  at once, after the same bookkeeping.
- The local Prefect API server runs in its own session (`detached_prefect_api`), so a terminal's Ctrl-C,
  which reaches the whole process group, does not kill the server Prefect must report the crash to.
- Commands that cannot resume (`ui`, `runs`, ...) say that they stopped, never "rerun to resume".

    from flows.interrupt import install_interrupt_handler, track_run
    install_interrupt_handler(resume_hint="davinci-kernel run --profile tiny")
"""

from __future__ import annotations

import _thread
import os
import signal
import sys
import threading
from dataclasses import dataclass
from contextlib import contextmanager
from typing import Any, Callable, Iterator

INTERRUPT_GRACE_S = 4.0


@dataclass(frozen=True)
class OpenRun:
    store: Any  # artifacts.store.TrackingStore
    run_id: str
    label: str
    flow_run_id: str = ""


_OPEN: dict[str, OpenRun] = {}
_LOCK = threading.Lock()
_STATE: dict[str, Any] = {"hint": "", "said": False, "killed": []}


def track_run(store: Any, run_id: str, label: str, flow_run_id: str = "") -> None:
    with _LOCK:
        _OPEN[run_id] = OpenRun(store, run_id, label, flow_run_id)


def untrack_run(run_id: str) -> None:
    with _LOCK:
        _OPEN.pop(run_id, None)


def is_tracked(run_id: str) -> bool:
    """Whether a signal now would mark this run KILLED (it is open and registered)."""
    with _LOCK:
        return run_id in _OPEN


@contextmanager
def tracked_status(store: Any, run_id: str, label: str, flow_run_id: str = "") -> Iterator[None]:
    """An open MLflow run for the block: tracked for Ctrl-C, ended FINISHED, FAILED (an error) or KILLED."""
    track_run(store, run_id, label, flow_run_id)
    status = "FAILED"
    try:
        yield
        status = "FINISHED"
    except KeyboardInterrupt:
        status = "KILLED"
        raise
    finally:
        untrack_run(run_id)
        store.set_status(run_id, status)


def kill_open_runs() -> list[str]:
    """Mark every tracked MLflow run KILLED (best effort, each at most once); returns their labels."""
    with _LOCK:
        runs = list(_OPEN.values())
        _OPEN.clear()
    for run in runs:
        try:
            run.store.set_status(run.run_id, "KILLED")
            _STATE["killed"].append(run)
        except Exception:
            pass
    return [r.label for r in runs]


def crash_flow_runs(runs: list[OpenRun], message: str = "interrupted by a signal") -> None:
    """Set the Prefect flow runs of killed stages Crashed where Prefect did not get to it (best effort)."""
    ids = [r.flow_run_id for r in runs if r.flow_run_id]
    if not ids:
        return
    try:
        from prefect.client.orchestration import get_client
        from prefect.states import Crashed

        with get_client(sync_client=True) as client:
            for flow_run_id in ids:
                if client.read_flow_run(flow_run_id).state_type.value in ("RUNNING", "PENDING"):
                    client.set_flow_run_state(flow_run_id, Crashed(message=message), force=True)
    except Exception:
        pass


def interrupted_line(killed: list[str]) -> str:
    marked = f"MLflow runs {', '.join(killed)} marked KILLED; " if killed else ""
    if not _STATE["hint"]:
        return f"\ninterrupted: {marked}stopped"
    return (f"\ninterrupted: {marked}finished stages, completed tasks and checkpoints are saved; "
            f"resume with: {_STATE['hint']}")


def say_interrupted(killed: list[str]) -> None:
    if not _STATE["said"]:
        _STATE["said"] = True
        print(interrupted_line(killed), file=sys.stderr, flush=True)


def _record_interrupt() -> None:
    """At once, beside the unwinding main thread: MLflow runs KILLED, the line, Prefect flow runs Crashed."""
    say_interrupted(kill_open_runs())
    crash_flow_runs(list(_STATE["killed"]))


def _exit_now() -> None:
    """The watchdog: no more waiting on anything (a server may be gone by now); the line is said if not yet."""
    say_interrupted(kill_open_runs())
    os._exit(130)


def _start(fn: Callable[[], None], delay: float = 0.0) -> None:
    timer = threading.Timer(delay, fn)
    timer.daemon = True
    timer.start()


def install_interrupt_handler(resume_hint: str = "", grace_s: float = INTERRUPT_GRACE_S) -> None:
    """SIGINT / SIGTERM: runs KILLED at once, KeyboardInterrupt in the main thread, exit within `grace_s`.

    A signal that lands while the interpreter runs a finalizer or weakref callback raises KeyboardInterrupt
    where Python can only print it and drop it; the unraisable hook hides that one and delivers the
    interrupt again in ordinary code."""
    _STATE["hint"] = resume_hint

    def second(signum: int, frame: Any) -> None:
        _record_interrupt()
        os._exit(130)

    def again(signum: int, frame: Any) -> None:
        signal.signal(signal.SIGINT, second)
        raise KeyboardInterrupt

    def first(signum: int, frame: Any) -> None:
        _start(_record_interrupt)
        _start(_exit_now, grace_s)
        signal.signal(signal.SIGINT, second)
        signal.signal(signal.SIGTERM, second)
        raise KeyboardInterrupt

    default_hook = sys.unraisablehook

    def unraisable(info: Any) -> None:
        if info.exc_type is not KeyboardInterrupt:
            default_hook(info)
            return
        signal.signal(signal.SIGINT, again)
        # From another thread, a moment later: tripped while this hook runs, the signal would be dropped again.
        _start(lambda: _thread.interrupt_main(signal.SIGINT), 0.05)

    signal.signal(signal.SIGINT, first)
    signal.signal(signal.SIGTERM, first)
    sys.unraisablehook = unraisable
