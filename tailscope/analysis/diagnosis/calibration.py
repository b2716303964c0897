"""The calibration gate: a finding names a cause (>= 0.5) only where its mechanism's own signature is there.

Every detector measures a shape (a heavy tail, two modes, a correlation with the crowd, a gap) and most
also test for what only their mechanism leaves. Shape alone is what any busy, healthy service shows too:
every run's tail is carried by some call, many calls have two modes, every busy span has more in flight
when it is slow. So a finding whose mechanism's signature is absent stays at CAP (0.45: a possible
cause, listed, not named), saying so in its evidence (`stats.signature_absent`, and a sentence).

The signature each mechanism leaves, and who tests it:

- gc_pause: every span of one process in flight stretched across the same interval, no request holding
  it, in stretches where the process finished no work, or the runtime's own pause reports covering the
  tail (gc_pause.py, long_stalls.py, gc_reports.py gate on it).
- cpu_throttling: those stalls ending on the quota period's boundary (cpu_throttling.py).
- slow_dependency: the dependency slower than its own normal: an episode in time (its slow calls come
  and go over the run), one callee instance (a straggler), or a slow mode the calls take often (their
  mean pulled well above their median). A ceiling-less top 1 % alone is the shape of every heavy-tailed
  call (dependency_tail.signature_absent: the one test; slow_dependency caps on it and records why).
  A callee's time that is its own queue (queue-stage spans anywhere in its process under its SERVER
  span: dependency_tail.queued_below) is queueing's, not the dependency's work.
- cache_miss: the slow mode marked as the misses (a call made on it only, a hit/miss value), the rate
  not that of a working cache or of a response cache (cache_miss.py gates on both).
- queueing: waits that grow with the arrivals and drain after (queueing.py, burst_waits.py,
  accept_queue.py, callee_queue.py).
- lock_contention: a span's time growing with the number ahead of it on one instance, released one
  holder at a time (lock_contention.py: serialisation, hand-off, slots, time in calls out;
  pool_release.release_handoff for a pool's or a transaction's hand-off).
- cold_start: latency decaying with each instance's request index after it starts (cold_start.py).
- timeout_retry: attempts cut at one elapsed time and made again (timeout_retry.py).
- large_payload: time following a size that changed during the run or beyond its usual range
  (large_payload.py, size_change.py).
- network: client - server gaps that do not follow the server's state: jitter, a lost segment's
  retransmission timer with fixed quanta (retransmits.py), a long path's shift and spread (network.py
  discounts gaps in stalls and worker queues). Not gated here: two caps were tried (gaps in server
  stalls, no call delayed beyond the usual spread) and each capped a right finding of the own
  families (a lossy wire beside a pause; a long path to another region whose jitter is a spread).
- compute_bound: allowed anywhere (the model's own time is every inference run's); not gated.

One place decides that a named cause needs its signature, and each signature is tested once, in its
mechanism's module: a detector whose own test finds its signature absent caps its finding at
model.SIGNATURE_CAP and records why in `stats.signature_absent` (with the figure it had before, in
`stats.confidence_before_cap`). This gate reads that verdict and applies it again after the steps that
merge and arbitrate findings (runner.py), so that none of them lifts such a finding back over the cap;
it tests no signature itself. A finding judged part of another (`stats.part_of`) is left as the
arbitration set it.
"""

from __future__ import annotations

from tailscope.analysis.diagnosis.model import SIGNATURE_CAP, Finding

CAP = SIGNATURE_CAP  # a finding without its mechanism's signature: a possible cause at most


def gate(findings: list[Finding]) -> list[Finding]:
    """Hold at CAP every finding whose detector recorded its mechanism's signature absent
    (`stats.signature_absent`) and that a later step lifted over it (in place; the same list is
    returned)."""
    for fd in findings:
        stats = fd.evidence.get("stats", {})
        why = stats.get("signature_absent")
        if not why or fd.confidence <= CAP or stats.get("part_of"):
            continue
        stats.setdefault("confidence_before_cap", round(float(fd.confidence), 3))
        fd.confidence = CAP
        fd.evidence["summary"] = fd.evidence.get("summary", "") + (
            f" Its mechanism's own signature is absent ({why}): a possible cause, not a named one.")
    return findings
