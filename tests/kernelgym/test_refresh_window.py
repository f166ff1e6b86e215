"""The refresh window (GPU, CUDA IPC): the candidate is stopped while the reference worker rewrites its input slots.

The attack (red team 2026-11-26, rt2_10, GPU only): over IPC the reference worker writes the candidate's timing
slots in place before the supervisor sends the timed request; a thread of the candidate's that watches a few
elements of each slot computes the answers as soon as they change, and the timed call returns a copy: the work
happened before the request, outside the samples and the supervisor's wall clock. `job.fresh_inputs` stops
every candidate process (the twin aside) for the refresh and hands them back to be thawed right before the
timed request. The lane is a stand-in here (the IPC path needs a GPU); the freeze itself is the real
`Lane.freeze_children`, covered by the twin and freeze tests.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from davinci.kernelgym import job as jobmod


class _Lane:
    def __init__(self, transport: str) -> None:
        self.transport, self.events = transport, []

    def freeze_children(self, keep):
        self.events.append(("freeze", tuple(sorted(keep))))
        return ["candidate-process"]

    def thaw(self, procs):
        self.events.append(("thaw", tuple(procs)))


def _job(transport: str):
    return SimpleNamespace(lane=_Lane(transport), twin=SimpleNamespace(pids={42}), round_trips={})


def test_ipc_refresh_runs_with_the_candidate_stopped_and_leaves_it_stopped(monkeypatch) -> None:
    job = _job("ipc")
    monkeypatch.setattr(jobmod, "ref", lambda j, h: (j.lane.events.append(("refresh", h["op"])) or {"ok": True}, []))
    reply, blobs, held = jobmod.fresh_inputs(job, {"op": "refresh"})
    assert job.lane.events == [("freeze", (42,)), ("refresh", "refresh")]  # the twin keeps running; no thaw yet
    assert held == ["candidate-process"]


def test_a_failed_refresh_thaws_what_it_stopped(monkeypatch) -> None:
    job = _job("ipc")

    def boom(j, h):
        raise RuntimeError("reference worker died")

    monkeypatch.setattr(jobmod, "ref", boom)
    with pytest.raises(RuntimeError):
        jobmod.fresh_inputs(job, {"op": "refresh"})
    assert job.lane.events[-1] == ("thaw", ("candidate-process",))


def test_host_transport_needs_no_freeze(monkeypatch) -> None:
    job = _job("host")
    monkeypatch.setattr(jobmod, "ref", lambda j, h: ({"ok": True}, []))
    assert jobmod.fresh_inputs(job, {"op": "refresh"})[2] == [] and job.lane.events == []
