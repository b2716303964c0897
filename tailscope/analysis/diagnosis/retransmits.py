"""network where the callee is not traced: a lost segment waits for the retransmission timer.

Mechanism. TCP resends a lost segment when its retransmission timeout fires: on a path of a few
milliseconds the timer sits at its floor (200 ms on Linux, 300 ms on Windows), doubling at each further
loss (200, then 200 + 400 ms). A call whose request or reply lost a segment takes its usual time plus
that fixed delay, whatever it asks and of whichever peer: the timer is the caller's kernel's. So on a
lossy path (a link between zones, a faulty NIC, an overloaded middlebox) the calls' excursions pile up
at one extra time, the same for every call name, and come from the callers behind that path. A slow
dependency spreads its slow calls over a continuous tail, one peer's calls; a deadline ends its calls at
one *duration* and fails them (timeout_retry); a lock or a queue gives waits that vary with the load. A
delayed ACK against Nagle makes the same kind of fixed extra time (~40 ms).

Statistic. CLIENT and PRODUCER spans inside requests, not failed, of names with >= 50 calls: the excess
over the name's median; excursions are excess >= max(3 x median, 10 ms). The pooled excursions' modal
excess (the most within ±2 %, >= 20 ms) is the timer; a call is *at the timer* within ±2 % of it or of
2x, 3x, 7x it (two lost segments; a segment lost twice, three times: 1 + 2 (+ 4)). Names sharing it:
>= 3 calls at the timer and >= 30 % of their excursions.
Strength = logistic(share of all excursions at the timer, 0.35, 0.08) x logistic(names sharing it, 1.5,
0.3) (one name at one extra time may be its peer's own fixed wait), the second term 1 where >= 10
calls' extra time is one of the kernel's or resolver's fixed quanta (within 3 %: the 40 ms delayed ACK,
Linux's 200 ms retransmission floor, the 1 s initial SYN timeout and its 3 s sum after a second drop,
glibc's 5 s resolver timeout): a peer's own wait has no reason to land on them, a timer's always does,
whatever the callee and whether it is traced. Weight: the timer calls' extra time
as a share of the tail excess (material_weight). The callers named are those whose calls hit the timer
>= 2x as often as the others'.

`settle`: a slow_dependency finding on a call whose tail excess is mostly (>= 50 %) the extra time of
its calls at the timer is the path's, not the dependency's: held at 0.45 and marked part of network.
"""

from __future__ import annotations

import numpy as np

from tailscope.analysis.diagnosis.attributes import error_flags
from tailscope.analysis.diagnosis.frame import KIND_CLIENT, SPAN_KINDS
from tailscope.analysis.diagnosis.model import Context, Finding
from tailscope.analysis.diagnosis.stats import clamp01, excess_share, logistic, material_weight, ms
from tailscope.analysis.diagnosis.where import main_service

PATTERN = "network"
MECHANISM = "a retransmission timer"
KIND_PRODUCER = SPAN_KINDS.index("Producer")
MIN_CALLS = 50
EXCURSION_X, EXCURSION_NS = 3.0, 10_000_000
MIN_TIMER_NS = 20_000_000
WIDTH = np.log(1.02)
HELD = 0.45
# the fixed waits a caller's own kernel or resolver adds (ns): delayed ACK, Linux's RTO floor, the
# initial SYN RTO and 1 + 2 s after a second drop, glibc's resolver timeout; seen on at least QUANTUM_CALLS
QUANTA_NS = (40e6, 200e6, 1e9, 3e9, 5e9)
QUANTUM_CALLS = 10
QUANTUM_WIDTH = np.log(1.03)
MULTIPLES = np.array([1.0, 2.0, 3.0, 7.0])  # the timer after 1, 2 separate, 2 and 3 successive losses
PART = 0.5
ADVICE = (
    "Calls from {where} lose packets: their slow calls take a fixed {timer:.0f} ms more than usual, the "
    "TCP retransmission timeout, on every kind of call alike. Find the lossy path (interface errors and "
    "drops, retransmission counters such as `netstat -s` / node_netstat_Tcp_RetransSegs, the link between "
    "zones or a saturated middlebox), keep chatty calls to stateful services in the caller's zone "
    "(zone-aware routing, a replica per zone), and where loss cannot be avoided lower its cost: a lower "
    "minimum RTO on the route (`ip route ... rto_min`), fewer round trips per request (pipelining, "
    "batching), or a hedged request after a deadline well below the timer."
)


def _at_timer(excess: np.ndarray, timer: float) -> np.ndarray:
    """Within WIDTH of the timer or of what further losses make of it: two lost segments (2x), the
    doubling back-off after a second and a third loss of one segment (1 + 2, 1 + 2 + 4)."""
    ok = excess > 0
    out = np.zeros(len(excess), bool)
    lg = np.log(np.maximum(excess[ok], 1.0))
    out[ok] = np.min(np.abs(lg[:, None] - np.log(timer * MULTIPLES)[None, :]), axis=1) <= WIDTH
    return out


def is_quantum(timer_ns: float) -> bool:
    """Whether an extra time is one of the kernel's or resolver's fixed timer values (QUANTA_NS)."""
    return bool(np.min(np.abs(np.log(timer_ns) - np.log(QUANTA_NS))) <= QUANTUM_WIDTH)


def _calls(ctx: Context) -> tuple[np.ndarray, np.ndarray] | None:
    """(call spans, their excess over their name's median) of the names judged, leaving out failed
    calls (an error status: a deadline's, not a resend's) of the names with large excursions."""
    f = ctx.frame
    sel = np.nonzero(((f.kind == KIND_CLIENT) | (f.kind == KIND_PRODUCER)) & (f.request >= 0))[0]
    if len(sel) == 0:
        return None
    counts = np.bincount(f.name[sel], minlength=len(f.names))
    sel = sel[counts[f.name[sel]] >= MIN_CALLS]
    if len(sel) == 0:
        return None
    med = np.zeros(len(f.names))
    for code in np.unique(f.name[sel]).tolist():
        med[code] = np.median(f.dur[sel[f.name[sel] == code]])
    excess = f.dur[sel] - med[f.name[sel]]
    big = excess >= np.maximum(EXCURSION_X * med[f.name[sel]], EXCURSION_NS)
    failed = np.zeros(len(f), bool)
    for code in np.unique(f.name[sel[big]]).tolist():  # attributes read only where it matters
        flags = error_flags(f, code)
        if flags is not None:
            failed[flags[0][flags[1]]] = True
    abandoned = ctx.notes.get("abandoned_attempts")
    if abandoned is not None and len(abandoned):
        failed[abandoned] = True
    keep = ~failed[sel]
    return sel[keep], excess[keep]


def find(ctx: Context) -> dict | None:
    """The timer, the calls at it and the names sharing it; None where the excursions share no fixed
    extra time. Cached in ctx.notes."""
    if "retransmits" in ctx.notes:
        return ctx.notes["retransmits"]
    ctx.notes["retransmits"] = None
    f = ctx.frame
    found = _calls(ctx)
    if found is None:
        return None
    calls, excess = found
    med = f.dur[calls] - excess
    big = (excess >= np.maximum(EXCURSION_X * med, EXCURSION_NS))
    if big.sum() < 10:
        return None
    lg = np.sort(np.log(excess[big].astype(np.float64)))
    near = np.searchsorted(lg, lg + WIDTH, side="right") - np.searchsorted(lg, lg - WIDTH)
    best = int(np.argmax(near))
    timer = float(np.exp(lg[best]))
    if timer < MIN_TIMER_NS:
        return None
    at = big & _at_timer(excess, timer)
    sharing = []
    for code in np.unique(f.name[calls[big]]).tolist():
        mine = f.name[calls] == code
        n_at, n_big = int((at & mine).sum()), int((big & mine).sum())
        if n_at >= 3 and n_at >= 0.3 * n_big:
            sharing.append(code)
    share_at = float(at.sum() / big.sum())
    mine = big & np.isin(f.name[calls], sharing)  # the sharing names' own excursions
    share_named = float((at & mine).sum() / max(int(mine.sum()), 1))
    out = {"calls": calls[at], "excess": excess[at], "timer": timer, "names": sharing,
           "share_at_timer": share_at, "share_of_names_at_timer": share_named, "excursions": int(big.sum()),
           "all_calls": calls, "all_excess": excess}
    ctx.notes["retransmits"] = out
    return out


def detect(ctx: Context) -> list[Finding]:
    f = ctx.frame
    if ctx.n_requests < 100:
        return []
    found = find(ctx)
    if found is None or not found["names"]:
        return []
    calls, extra, timer = found["calls"], found["excess"], found["timer"]
    per_request = np.bincount(f.request[calls], weights=extra.astype(np.float64), minlength=ctx.n_requests)
    share = clamp01(excess_share(per_request, ctx.split))
    # a kernel's timer value on one call name: that name's excursions judged (a slow store's on other
    # names are another cause beside it)
    quantum = is_quantum(timer) and len(calls) >= QUANTUM_CALLS
    at_share = max(found["share_at_timer"], found["share_of_names_at_timer"]) if quantum else \
        found["share_at_timer"]
    strength = logistic(at_share, 0.35, 0.08) * (1.0 if quantum else logistic(len(found["names"]), 1.5, 0.3))
    confidence = strength * material_weight(share)
    if confidence < 0.05:
        return []
    every = found["all_calls"]
    made = np.bincount(f.instance[every], minlength=len(f.instances)).astype(np.float64)
    hit = np.bincount(f.instance[calls], minlength=len(f.instances)).astype(np.float64)
    rate = hit / np.maximum(made, 1.0)
    overall = hit.sum() / max(made.sum(), 1.0)
    lossy = np.nonzero((hit > 0) & (rate >= 2.0 * overall))[0]
    if len(lossy) == 0:
        lossy = np.nonzero(hit > 0)[0]
    lossy = lossy[np.argsort(-hit[lossy])]
    instances = [f.instances[i] for i in lossy]
    caller_share = float(hit[lossy].sum() / max(hit.sum(), 1.0))
    calls_share = float(made[lossy].sum() / max(made.sum(), 1.0))
    service = main_service(f, calls)
    names = [f.names[c] for c in found["names"]]
    top = int(np.bincount(f.name[calls]).argmax())
    summary = (
        f"Calls from {service} take a fixed {ms(timer):.1f} ms more than usual now and then "
        f"({len(calls)} calls; {found['share_at_timer']:.0%} of all large excursions are within 2 % of it "
        f"or of 2x, 3x, 7x it), the same extra time on {len(names)} kinds of call ({', '.join(names[:5])}): "
        "a TCP retransmission timeout (a lost segment waits for the timer, whatever the call asks and of "
        "whom), "
        + ("one of the kernel's or resolver's fixed timer values (a lost SYN or segment, a lost DNS query), "
           if quantum else "")
        + f"not a slow dependency. {caller_share:.0%} of them come from {len(instances)} calling instances "
        f"that make {calls_share:.0%} of the calls: their path. They carry {share:.0%} of the tail excess."
    )
    stats = {"service": service, "instances": instances[:8], "timer_ms": ms(timer),
             "calls_at_timer": len(calls),
             "share_of_excursions_at_timer": round(found["share_at_timer"], 3),
             "names_at_timer": names, "lossy_callers_share_of_timer_calls": round(caller_share, 3),
             "lossy_callers_share_of_calls": round(calls_share, 3), "tail_excess_share": round(share, 3),
             "mechanism": MECHANISM, "timer_is_a_kernel_quantum": quantum}
    where = f"{service} ({', '.join(instances[:3])}{', ...' if len(instances) > 3 else ''})"
    return [Finding(PATTERN, clamp01(confidence), ctx.stage_of_name(top), f.names[top],
                    {"summary": summary, "stats": stats}, ADVICE.format(where=where, timer=ms(timer)))]


def settle(ctx: Context, findings: list[Finding]) -> list[Finding]:
    """slow_dependency on a call whose extra time is mostly in calls at the retransmission timer (with
    a network finding of this mechanism at >= 0.5) is the path's: held at HELD, part of network."""
    found = ctx.notes.get("retransmits")
    named = [fd for fd in findings if fd.pattern == PATTERN and fd.confidence >= 0.5
             and fd.evidence.get("stats", {}).get("mechanism") == MECHANISM]
    if found is None or not named:
        return findings
    f = ctx.frame
    at = np.zeros(len(f), bool)
    at[found["calls"]] = True
    every, excess = found["all_calls"], found["all_excess"].astype(np.float64)
    for fd in findings:
        if fd.pattern != "slow_dependency" or fd.confidence <= HELD or fd.span_name not in f.names:
            continue
        mine = every[f.name[every] == f.names.index(fd.span_name)]
        # the tail excess the call carries, and the part of it in its calls at the timer
        whole = excess_share(np.bincount(f.request[mine], weights=f.dur[mine].astype(np.float64),
                                         minlength=ctx.n_requests), ctx.split)
        timed = mine[at[mine]]
        extra = np.bincount(f.request[timed], weights=np.maximum(excess[np.isin(every, timed)], 0.0),
                            minlength=ctx.n_requests)
        part = excess_share(extra, ctx.split) / whole if whole > 0 else 0.0
        if part < PART:
            continue
        fd.confidence = HELD
        fd.evidence.setdefault("stats", {})["part_of"] = PATTERN
        fd.evidence["summary"] += (
            f" {part:.0%} of its calls' extra time is the retransmission timer's fixed "
            f"{ms(found['timer']):.0f} ms: part of the lossy path (network)."
        )
    return findings
