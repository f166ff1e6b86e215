"""The build cache is listed only when a lane's ledger says the cap may be near (`builddirs.BuildLedger`).

Listing the cache costs a stat and a read per folder; listed after every evaluation, it grew with the cache (an
RL epoch adds a folder per distinct candidate) to over a second per evaluation on a GPU host. Hand-computed
schedules, and the property the ledger must keep: a cache past its cap is still evicted.
"""

from __future__ import annotations

import os
from types import SimpleNamespace

from davinci.kernelgym import builddirs
from davinci.kernelgym.builddirs import RESCAN_EVERY, BuildLedger, evict_when_due


def test_ledger_lists_first_then_every_64_evaluations_under_the_cap():
    ledger = BuildLedger()
    assert ledger.due(10, 16_000)  # never listed
    ledger.listed(100)
    dues = [ledger.due(10, 16_000) for _ in range(RESCAN_EVERY)]
    assert dues == [False] * (RESCAN_EVERY - 1) + [True]  # 100 + 640 bytes stay far under the cap


def test_ledger_lists_when_its_own_additions_pass_a_sixteenth_of_the_cap_or_the_cap():
    ledger = BuildLedger()
    ledger.listed(0)
    assert not ledger.due(1000, 16_000)  # 1000 <= 16000 // 16
    assert ledger.due(1, 16_000)  # 1001 > 1000
    ledger.listed(15_500)
    assert not ledger.due(400, 16_000)  # 15,900 <= 16,000
    assert ledger.due(200, 16_000)  # 16,100 > 16,000: the cap may be passed


def _lane(root):
    return SimpleNamespace(build_root=root, build_ledger=BuildLedger())


def _record(root, name, size, mtime):
    (root / name).mkdir()
    (root / name / "blob").write_bytes(b"x" * size)
    (root / f"{name}.size").write_text(str(size))
    os.utime(root / f"{name}.size", (mtime, mtime))


def test_200_small_evaluations_list_the_cache_4_times(tmp_path, monkeypatch):
    lane, calls = _lane(tmp_path), []
    real = builddirs._evict
    monkeypatch.setattr(builddirs, "_evict", lambda *a: calls.append(a) or real(*a))
    for i in range(200):
        _record(tmp_path, f"h{i:03d}", 10, 1000 + i)
        evict_when_due(lane, f"h{i:03d}", 10, 1 << 20)
    assert len(calls) == 4  # evaluations 1, 65, 129, 193


def test_a_cache_past_its_cap_is_still_evicted_oldest_first(tmp_path):
    lane = _lane(tmp_path)
    evicted = []
    for i in range(40):  # 40 folders of 100 bytes against a cap of 1,600: the ledger must notice
        _record(tmp_path, f"h{i:02d}", 100, 1000 + i)
        evicted += evict_when_due(lane, f"h{i:02d}", 100, 1600)
    left = sorted(p.name[:-5] for p in tmp_path.glob("*.size"))
    assert sum(100 for _ in left) <= 1600 + 1600 // 16  # within the ledger's slack of the cap
    assert evicted and evicted == sorted(evicted) and "h39" in left  # oldest first; the newest stays
    assert all(not (tmp_path / h).exists() for h in evicted)
