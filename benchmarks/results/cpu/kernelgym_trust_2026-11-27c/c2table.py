"""The table of a test_cheats_v2 run's C2_RESULTS lines (one JSON line per evaluation), with a tally per preset.

    python3 c2table.py c2.jsonl > kernelgym_trust_cpu.txt
"""
import json, sys
from collections import Counter
rows = [json.loads(l) for l in open(sys.argv[1])]
seen = {}
for r in rows:  # the last line per (name, preset) (a retried test appends again)
    seen[(r["name"], r["preset"])] = r
rows = sorted(seen.values(), key=lambda r: (r["preset"], r["cls"] == "honest", r["name"]))
tally = Counter()
lines = [f"{'preset':8} {'kind':7} {'name':40} {'verdict':8} {'correct':7} {'flags':60} error_kind"]
for r in rows:
    honest, prop = r["cls"] == "honest", r["preset"].endswith("/property")
    if r["cls"] == "cross_eval" and not prop:
        continue  # judged by the property rows (nothing it wrote is left, no other process changed)
    if prop:
        ok = not r.get("property_violations")
    elif r["preset"].endswith("/gain"):
        ok = not r.get("cheat_ms") or r.get("ratio") is None or r["ratio"] < 1.2
    else:
        ok = (r["correct"] and not r["flags"]) if honest else (not r["correct"] or bool(r["flags"]))
    kind = "honest" if honest else ("property" if prop else ("gain" if r["preset"].endswith("/gain") else "cheat"))
    tally[(r["preset"], kind, ok)] += 1
    lines.append(f"{r['preset']:8} {kind:7} {r['name']:40} {'ok' if ok else 'MISSED':8} "
                 f"{str(r['correct']):7} {','.join(r['flags'])[:60]:60} {r['error_kind'] or ''}")
print("\n".join(lines))
print()
for preset in sorted({p for p, _, _ in tally}):
    for kind in ("cheat", "honest", "property", "gain"):
        good, bad = tally[(preset, kind, True)], tally[(preset, kind, False)]
        if not good + bad:
            continue
        what = {"cheat": "caught (not correct, or flagged)", "honest": "clean (correct, no flags)",
                "property": "held (nothing left behind, no other process changed)",
                "gain": "without a timing gain over the honest twin"}[kind]
        print(f"{preset:8} {kind:7} {good}/{good + bad} {what}")
