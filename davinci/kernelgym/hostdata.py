"""Host-made data in a provenance record, as the supervisor judges it (the record itself: provenance.py).

The worker sends each record's events (a digest of the data, elements, what, which call) and the digests of the
kernels it launched; `read_record` turns them into a typed `Record`, and a malformed one reads as tampered with.
Data that is the same on other inputs is a constant (a table or a float built per call), so the accounting call
that would flag is run once more on other inputs (`accounting_verdict`, `_other_inputs`), the calls judged as one
record (`merge_records`: their op digests too, so glue whose numbers the data decided flags before any timing), and
only what changes counts; audit A (audit.py) is judged against what the accounting calls saw and against its own
calls (`provenance_from`). What still counts flags from one element and UNEXPLAINED_SHARE of the output.

    job.last_record = provenance_record(reply["evidence"])
    job.evidence.host_compute = accounting_verdict(job)      # after the accounting call
    provenance_from(provenance_record(audit_reply), job.prov_seen, job.prov_codes)
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Sequence

from davinci.kernelgym.provenance import MAX_EVENTS, MAX_OPS, UNEXPLAINED_SHARE

if TYPE_CHECKING:
    from davinci.kernelgym.job import Job

_OPS_READ = 32 * MAX_OPS  # op entries read from a reply at most (MAX_OPS per call)


@dataclass(frozen=True)
class Record:
    """One record's provenance as the supervisor reads it from the worker's reply."""
    events: tuple[tuple[str, int, str, int], ...]  # (hex digest of the data, elements, what, call) each
    output_elements: int
    unhooked: bool = False  # the hooks no longer held the record when the calls returned
    overflow: bool = False  # the store record overflowed: the kernels' loads and stores are incomplete
    codes: frozenset[str] = frozenset()  # digests of the kernels launched (code and compile-time constants)
    # (op, digest of its numbers, argument views and times run, weight, call) each: audit A only (provenance.py)
    ops: tuple[tuple[str, str, int, int], ...] = ()

    @property
    def digests(self) -> set[str]:
        return {d for d, _, _, _ in self.events}

    @property
    def repeated(self) -> set[str]:
        """Digests of data seen in two or more of the record's calls (each call has its own inputs)."""
        calls: dict[str, set[int]] = {}
        for d, _, _, c in self.events:
            calls.setdefault(d, set()).add(c)
        return {d for d, cs in calls.items() if len(cs - {-1}) >= 2}


def op_events(record: Record) -> list[tuple[int, str]]:
    """(elements, what) for each op whose numbers or argument views changed with the inputs: an entry no other call
    of the record repeats. What Python decided from the data (split sizes, which pieces a `cat` joins) passes
    host-made data through glue ops alone. An op run in one call only counts too: audit A comes after the
    correctness and accounting calls, so honest state (a cache, a workspace) is built already, and a candidate
    that runs other ops on alternate calls carries data in each set (cheats_v2/c2_fb_rt4_parity_rotation_rowsum).

    >>> sizes = lambda c, d: ("split_with_sizes", d, 8, c)
    >>> op_events(Record((), 8, ops=(sizes(0, "a"), sizes(1, "a"), ("view", "v", 8, 0), ("view", "v", 8, 1))))
    []
    >>> [n for n, _ in op_events(Record((), 8, ops=(sizes(0, "a"), sizes(1, "b"), ("zeros", "z", 4, 0))))]
    [8, 8, 4]
    """
    digest_calls: dict[tuple[str, str], set[int]] = {}
    for name, d, _, c in record.ops:
        digest_calls.setdefault((name, d), set()).add(c)
    return [(n, f"the numbers or argument views of {name} changed with the inputs (Python decided them from the "
                "data)") for name, d, n, c in record.ops if len(digest_calls[(name, d)]) < 2 and n]


def code_verdict(record: Record, known: set[str]) -> str | None:
    """`host_compute` evidence when a record launched kernels whose code or compile-time constants no earlier record
    ran (`known`), or None: code generated per call with the data baked in.

    >>> code_verdict(Record((), 8, codes=frozenset({"a"})), {"a"}) is None
    True
    >>> code_verdict(Record((), 8, codes=frozenset({"a", "b"})), {"a"})[:25]
    'a kernel ran whose code o'
    """
    new = record.codes - set(known)
    if not known or not new:
        return None
    return (f"a kernel ran whose code or compile-time constants differ from the ones run on other inputs ({len(new)} "
            "new): data baked into a kernel generated per call")


def provenance_verdict(record: Record, constant: set[str] = frozenset()) -> str | None:
    """`host_compute` evidence from a record, or None. Data whose digest is in `constant` (the same data seen on
    other inputs: a table built per call, a float constant), or that the record saw in two of its calls, is not
    counted; the rest counts from one element and UNEXPLAINED_SHARE of the outputs' elements.

    >>> r = Record((("a" * 32, 8, "kernel k loaded 8 elements ...", 0),), output_elements=8)
    >>> provenance_verdict(r)[:32]
    '8 elements came from the host, n'
    >>> provenance_verdict(r, constant={"a" * 32}) is None  # the same on other inputs
    True
    >>> provenance_verdict(Record((("b" * 32, 40, "...", 0),), output_elements=4096)) is None  # under 1% of 4096
    True
    """
    if record.unhooked:
        return "the provenance record was unhooked during the forward (the candidate reached the evaluator's objects)"
    if record.overflow:
        return ("the kernels' store record overflowed (over 1 GiB of loads and stores in one record): what they "
                "did could not be checked")
    same = set(constant) | record.repeated
    left = [(n, what) for d, n, what, _ in record.events if d not in same] + op_events(record)
    total = sum(n for n, _ in left)
    if not total or total < UNEXPLAINED_SHARE * record.output_elements:
        return None
    return (f"{total} elements came from the host, not from PyTorch's ops or the candidate's kernels, and change "
            f"with the inputs (NumPy, Python, ctypes): {'; '.join(dict.fromkeys(w for _, w in left))[:400]}")


def read_record(reply: dict[str, Any]) -> Record | None:
    """The `Record` in a worker reply (None when it sent none); fields of the wrong type raise ValueError (the
    reply is the candidate process's)."""
    if "unexplained" not in reply:
        return None
    try:
        events = tuple((str(d), int(n), str(w), int(c)) for d, n, w, c in list(reply.get("prov_events") or [])[:MAX_EVENTS])
        return Record(events, int(reply.get("output_elements") or 0), reply.get("provenance_unhooked") is not False,
                      reply.get("record_overflow") is not False,
                      frozenset(str(c) for c in list(reply.get("prov_codes") or [])[:MAX_EVENTS]),
                      tuple((str(o), str(d), int(n), int(c)) for o, d, n, c in list(reply.get("prov_ops") or [])[:_OPS_READ]))
    except (TypeError, ValueError) as exc:
        raise ValueError(f"malformed provenance record: {exc}") from None


def provenance_record(ev: dict[str, Any]) -> Record | None:
    """The provenance record in a reply (provenance.py), or None; a malformed one (the reply is the candidate
    process's) reads as a record that was tampered with."""
    try:
        return read_record(ev)
    except ValueError:
        return Record((), 0, unhooked=True)


def provenance_from(record: Record | None, constant: set[str] = frozenset(), codes: set[str] = frozenset()) -> str | None:
    """The verdict on a later record (audit A): its data against what the accounting calls saw, and its kernels
    against the ones they ran."""
    if record is None:
        return None
    return provenance_verdict(record, constant) or code_verdict(record, codes)


def ops_only(record: Record | None, constant: set[str] = frozenset(), codes: set[str] = frozenset()) -> bool:
    """Whether a record's verdict rests on its op digests alone: it flags, and would not without its ops (its data
    events and its kernels' code pass). Only then can more calls (`merge_records`) tell a rotating state apart.

    >>> sizes = lambda c, d: ("slice", d, 8, c)
    >>> ops_only(Record((), 8, ops=(sizes(0, "a"), sizes(1, "b"))))
    True
    >>> ops_only(Record((("e" * 32, 8, "...", 0),), 8, ops=(sizes(0, "a"), sizes(1, "b"))))  # host data too
    False
    """
    if record is None or provenance_from(record, constant, codes) is None:
        return False
    return provenance_from(replace(record, ops=()), constant, codes) is None


def merge_records(records: Sequence[Record], calls: int) -> Record:
    """The records of several audit requests, `calls` calls each, as one record (audit._more_calls): call c of the
    k-th becomes call k * calls + c (-1, outside any call, stays). Every call has its own inputs, so data does not
    repeat, and a state that rotates with the call count does within the window. Two rules keep the window from
    excusing what two calls would not:
      - an op counts as repeated only where a whole call repeats: the ops of a call whose set of op digests no other
        call of the window shares are made unique (`_whole_calls`). One op per bit of the answer, each with one of
        two digests, repeats op by op over 16 calls; the bits together do not (cheats_v2/c2_fb_rt5_bit_glue_rowsum);
      - what stays unexplained is weighed against the first record's outputs, not the window's: a longer window
        must not dilute one call's host-made data below UNEXPLAINED_SHARE (cheats_v2/c2_fb_rt5_replayed_glue_rowsum).

    >>> a = Record((("d" * 32, 4, "w", 0),), 8, ops=(("slice", "s0", 8, 1),))
    >>> b = Record((("d" * 32, 4, "w", 1),), 8, ops=(("slice", "s0", 8, 0),))
    >>> m = merge_records([a, b], 2)
    >>> [c for *_, c in m.ops], m.repeated == {"d" * 32}, m.output_elements
    ([1, 2], True, 8)
    """
    def at(c: int, k: int) -> int:
        return c if c < 0 else k * calls + c

    first = records[0]
    ops = tuple(o[:3] + (at(o[3], k),) for k, r in enumerate(records) for o in r.ops)
    return Record(tuple(e[:3] + (at(e[3], k),) for k, r in enumerate(records) for e in r.events),
                  first.output_elements, any(r.unhooked for r in records), any(r.overflow for r in records),
                  frozenset().union(*(r.codes for r in records)), _whole_calls(ops))


def _whole_calls(ops: tuple[tuple[str, str, int, int], ...]) -> tuple[tuple[str, str, int, int], ...]:
    """`ops` with the digests of each call whose whole set of (op, digest) no other call shares made unique to that
    call, all of them: an op that a repeated call ran too is no excuse, since a candidate could run every value's
    op in some calls, honestly computing there, and a subset of them as data in the others.

    >>> bit = lambda c, i, b: ("fill_", f"{i}:{b}", 1, c)
    >>> [d for _, d, _, _ in _whole_calls((bit(0, 0, 1), bit(0, 1, 0), bit(1, 0, 1), bit(1, 1, 1), bit(2, 0, 1),
    ...  bit(2, 1, 0)))]  # calls 0 and 2 repeat, call 1 does not
    ['0:1', '1:0', '0:1@1', '1:1@1', '0:1', '1:0']
    """
    sets: dict[int, frozenset[tuple[str, str]]] = {}
    for name, d, _, c in ops:
        sets[c] = sets.get(c, frozenset()) | {(name, d)}
    seen = Counter(sets.values())
    return tuple((name, d if seen[sets[c]] >= 2 else f"{d}@{c}", n, c) for name, d, n, c in ops)


# The accounting calls judged as one record at most (`accounting_verdict`): a state rotating with the call count
# repeats within them, data does not (audit.AUDIT_WINDOW_CALLS, the same window for audit A)
ACCOUNTING_WINDOW_CALLS = 16


def accounting_verdict(job: Job) -> str | None:
    """The accounting calls' provenance verdict, before any timing. Data the host made, or op digests (what Python
    decided for the glue) that would flag the first call are looked at again on other inputs (a second accounting
    call, `_other_inputs`), the two records judged as one (`merge_records`): what is the same there (a constant table
    built per call, a float constant, sizes) is not counted. When op digests alone still flag, more calls on other
    inputs follow, up to ACCOUNTING_WINDOW_CALLS, while they fit before the deadline: a rotating state repeats
    there. Judging the glue's numbers here, not only in audit A after the scored rounds, keeps a candidate that
    stalls in a timed round before the audits from leaving its glue unjudged (cheats_v2/c2_fb_glue_split_hang).
    The digests seen are kept for audit A's verdict."""
    first = job.last_record
    if first is None:
        return None
    job.prov_seen |= first.digests
    job.prov_codes |= first.codes
    if provenance_verdict(first) is None:
        return None
    if first.unhooked or first.overflow:  # tampering or an incomplete record: other inputs cannot explain it away
        return provenance_verdict(first)
    records: list[Record] = [first]
    while True:
        t0 = time.monotonic()
        more, answered = _other_inputs(job, f"provenance{len(records) - 1 or ''}")
        if not answered:  # a constant must be the same on inputs whose answer is checked: data replayed is not
            return ("on other inputs the accounting call's answer was wrong: the data the host made for the first "
                    "call was not computed for these")
        if more is None:
            return provenance_verdict(merge_records(records, 2))
        job.prov_seen |= more.digests
        records.append(more)
        merged = merge_records(records, 2)
        verdict = provenance_verdict(merged) or code_verdict(more, first.codes)
        took = time.monotonic() - t0
        if verdict is None or not ops_only(merged) or len(records) >= ACCOUNTING_WINDOW_CALLS or \
                time.monotonic() + 2.0 * took > job.run_deadline:
            return verdict


def _other_inputs(job: Job, label: str = "provenance") -> tuple[Record | None, bool]:
    """One more accounting call on other inputs (seeded by `label`): its provenance record (None if it sent none)
    and whether its answer matched the reference (a forward that failed or answered wrong did not)."""
    from davinci.kernelgym.job import POISON, _run_once, ask, derive_seed, ref  # job.py imports this module

    slot = tag = "acct2"
    kept = (job.last_kernel_share, job.acct_share_raw, job.last_input_share, job.last_torch_work, job.last_torch_hidden,
            job.last_record)
    alloc, _ = ask(job, {"op": "alloc", "slot": slot, "spec": job.info["spec"]})
    if not alloc.get("ok"):
        return None, True
    trial, fill_blobs = ref(job, {"op": "trial", "name": slot, "seed": derive_seed(job.trial_seeds[0], label),
                                  "dist": "native", "targets": alloc.get("descs")})
    saved = (job.error_kind, job.error)
    check = _run_once(job, slot, tag, POISON[0], trial.get("fill"), fill_blobs, account=True)
    record = job.last_record if check is not None else None
    answered = check is not None and bool(check["comparison"]["ok"])
    job.error_kind, job.error = saved
    (job.last_kernel_share, job.acct_share_raw, job.last_input_share, job.last_torch_work, job.last_torch_hidden,
     job.last_record) = kept
    ref(job, {"op": "drop", "trials": [slot], "kept": [tag]})
    ask(job, {"op": "release", "tags": [tag], "slots": [slot]})
    return record, answered
