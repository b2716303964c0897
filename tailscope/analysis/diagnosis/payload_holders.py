"""Stalls held by work that grew with its payload are the payload's (a settle step after the detectors).

Mechanism. In a process with one interpreter lock, a thread decoding or parsing a large input keeps
the lock for a slice at a time, and every other thread waits for its turn: their spans stretch
together, as in a pause (interpreter_lock.py names the work that runs across the stalls: the holder).
Where that holder is the work large_payload finds growing with a size that changed during the run (a
new client sending larger images, larger pages), the stalls come from the larger inputs: fix the
payload (resize, compress, cap, move the decode out of the process) and they go. So the
interpreter-lock finding on that holder is part of the large_payload finding (0.9 x its confidence at
most), and a gc_pause finding on the same stalls, where the runtime's reported collections do not
cover them (< 30 % of the tail excess), keeps (1 - the held share) of its confidence: a collector
stops every thread whatever runs, a lock's stall comes with its holder.
"""

from __future__ import annotations

from tailscope.analysis.diagnosis.interpreter_lock import MECHANISM as HELD_LOCK
from tailscope.analysis.diagnosis.model import NAMED, Finding

REPORTED = 0.3  # reported collections covering this share of the tail excess: the stalls are GC's


def settle(findings: list[Finding]) -> list[Finding]:
    grown = {fd.span_name: fd for fd in findings if fd.pattern == "large_payload" and fd.confidence >= NAMED
             and fd.evidence.get("stats", {}).get("sizes_changed")}
    if not grown:
        return findings
    for lock in findings:
        stats = lock.evidence.get("stats", {})
        payload = grown.get(stats.get("holder"))
        if stats.get("mechanism") != HELD_LOCK or payload is None:
            continue
        held = float(stats.get("held_share") or 0.0)
        lock.confidence = min(lock.confidence, 0.9 * payload.confidence)
        stats["part_of"] = "large_payload"
        lock.evidence["summary"] += (
            f" '{payload.span_name}' grew with {payload.evidence['stats'].get('size_attribute')} during the "
            "run (see large_payload): the stalls are the larger inputs' turns on the lock, part of that "
            "finding."
        )
        for fd in findings:
            own = fd.evidence.get("stats", {})
            if fd.pattern != "gc_pause" or (own.get("tail_excess_share_in_reported_gc") or 0.0) >= REPORTED:
                continue
            fd.confidence *= 1.0 - held
            if held >= 0.5:
                own["part_of"] = "large_payload"
            fd.evidence["summary"] += (
                f" {held:.0%} of the stalls are held by '{payload.span_name}', which grew with its payload "
                "(see large_payload): part of that."
            )
        break
    return findings
