"""network: a cost paid once per new connection (a name lookup, a TCP or TLS handshake).

Mechanism. A client that finds no idle connection in its pool opens one before its call can go out:
it resolves the peer's name (under Kubernetes' `ndots:5` a name with fewer dots is first tried with
each search domain, an NXDOMAIN round trip to the resolver each, before the name as given), then
makes the TCP handshake (and TLS's, and a protocol's hello or login). That time is a fixed number of
round trips to the resolver and the peer, paid by the calls that dial and by none of the others, and
it does not grow with how busy the peer or the caller is. Its weight in the latency is that fixed
cost times the dial rate: a pool that keeps too few idle connections, a client that dials per call,
a resolver that is slow or asked several times per name raise it for every request at once, so it
shows as much in the median as in the tail.

What timing shows. Where the client traces its connection set-up, the set-up is a child of the call
span (not its callee's SERVER span) at the very start of the call, one per call, present on only the
calls that dialled; those calls take about the usual call's time after it (the exchange on the new
connection is an ordinary one). A wait for a connection from a bounded pool sits there too, but its
length grows with the calls already in flight on the instance (lock_contention's); a retransmission
timer's fixed 1 s or 3 s on a lost SYN is retransmits.py's; a process's first connections piled in
its first requests are its cold start.

Statistic, per (set-up name): the calls of the parents' names inside requests, the share that carry
one (the dial rate, at most MAX_RATE: a child every call has is the call's own step), the set-ups'
offset from the call's start (within START_SLACK), the calls' time after the set-up against the calls
without one (within FIXED_RATIO either way); not a pool's wait: Spearman of the set-up's length with
the same-name calls in flight on its instance at its start, and how much more often than chance a
set-up ends within HANDOFF_NS after another of the calls ends on its instance (a connection given
back), each discounting (logistic at 0.3). What the set-ups add to a request: per parent of the calls
(a fan-out's join), the last call's end minus the last end without the set-ups, each counted up to
FIXED_OVER x their median (exact for calls in parallel, a lower bound for calls in sequence; a set-up far
beyond the others is a lost query's or SYN's timer, not the fixed cost). Weight: that as a share of the
tail excess (where the tail is material: unexplained.material), or, where every request pays it, what it
adds to the mean request over the median latency (0.5 at 5 %), as gc_assists weighs a slowdown of every
request.
"""

from __future__ import annotations

import numpy as np

from tailscope.analysis.diagnosis.frame import KIND_CLIENT, KIND_SERVER
from tailscope.analysis.diagnosis.lock_contention import concurrency_at_start
from tailscope.analysis.diagnosis.long_stalls import warm_up_mask
from tailscope.analysis.diagnosis.model import Context, Finding
from tailscope.analysis.diagnosis.stats import clamp01, excess_share, logistic, material_weight, ms, spearman
from tailscope.analysis.diagnosis.unexplained import material
from tailscope.analysis.diagnosis.where import busiest, main_service

PATTERN = "network"
MECHANISM = "connection set-up"
MIN_SETUPS = 30
MAX_RATE = 0.97  # a child nearly every call has is a step of the call, not a dial
MIN_SINGLE = 0.95  # the calls with a set-up that have exactly one
START_SLACK_NS, START_SHARE = 200_000, 0.25  # the set-up starts within max(0.2 ms, 25 % of a plain call)
FIXED_RATIO = 2.0  # the dialled calls' time after the set-up vs a plain call's, either way
FIXED_OVER = 3.0  # a set-up counts up to this many times the set-ups' median
WARM_PILE = 3.0  # set-ups this much likelier in the instances' warm-up requests: a cold start's
HANDOFF_NS = 300_000  # a pooled connection given back is taken within 0.3 ms
CAP = 0.9
MIN_CONFIDENCE = 0.2  # below: a pool that dials now and then (~3 % of the mean request), its ordinary cost
ADVICE = (
    "Calls from {where} open a new connection {rate:.0%} of the time, and each new connection costs "
    "{cost:.1f} ms before the call goes out (median; a plain call takes {plain:.2f} ms): a name lookup, "
    "a TCP and TLS handshake. Keep connections: a pool with enough idle connections for the peaks "
    "(min idle, max idle, idle timeout above the gaps between bursts), keep-alive, one long-lived "
    "multiplexed connection where the protocol allows. Make each new one cheaper: resolve once (a fully "
    "qualified name with a trailing dot, or `ndots` lowered in the pod's dnsConfig, so that the search "
    "domains' NXDOMAIN round trips are skipped; a node-local DNS cache; the client's own resolver cache), "
    "TLS session resumption, connecting to the peer's IP where it is stable."
)


def _setups(ctx: Context) -> list[tuple[int, np.ndarray]]:
    """(set-up name, its spans) for each name of non-SERVER children of CLIENT calls inside requests."""
    f = ctx.frame
    up = np.maximum(f.parent, 0)
    inside = (f.parent >= 0) & (f.request >= 0)
    sel = np.nonzero(inside & (f.kind != KIND_SERVER) & (f.kind[up] == KIND_CLIENT))[0]
    out = []
    counts = np.bincount(f.name[sel], minlength=len(f.names))
    for code in np.nonzero(counts >= MIN_SETUPS)[0].tolist():
        out.append((code, sel[f.name[sel] == code]))
    return out


def _at_timer(ctx: Context) -> np.ndarray:
    """Per span: a call retransmits.py found at the TCP retransmission timer (a lost SYN's 1 s)."""
    at = np.zeros(len(ctx.frame), bool)
    found = ctx.notes.get("retransmits")
    if found is not None:
        at[found["calls"]] = True
    return at


def judge(ctx: Context, code: int, setups: np.ndarray) -> dict | None:
    """One set-up name's test and weight (see the module docstring); None where it is no set-up."""
    f = ctx.frame
    calls_of = np.unique(f.name[f.parent[setups]])
    calls = np.nonzero(np.isin(f.name, calls_of) & (f.request >= 0))[0]
    per_call = np.bincount(f.parent[setups], minlength=len(f))
    dialled = np.unique(f.parent[setups])
    rate = len(dialled) / max(len(calls), 1)
    if rate > MAX_RATE or float((per_call[dialled] == 1).mean()) < MIN_SINGLE:
        return None
    plain = calls[per_call[calls] == 0]
    if len(plain) < MIN_SETUPS // 3:
        return None
    plain_ns = float(np.median(f.dur[plain]))
    offset = f.start[setups] - f.start[f.parent[setups]]
    if float(np.quantile(offset, 0.9)) > max(START_SLACK_NS, START_SHARE * plain_ns):
        return None
    setups = setups[~_at_timer(ctx)[setups]]  # a lost SYN's timer: retransmits.py's
    if len(setups) < MIN_SETUPS:
        return None
    after = f.dur[f.parent[setups]] - f.dur[setups]
    ratio = float(np.median(after)) / max(plain_ns, 1.0)
    if not 1.0 / FIXED_RATIO <= ratio <= FIXED_RATIO:
        return None
    warm = warm_up_mask(ctx)
    in_warm = float(warm[f.request[setups]].mean())
    calls_warm = float(warm[f.request[calls]].mean())
    if in_warm > WARM_PILE * max(calls_warm, 1e-3) and in_warm >= 0.5:
        return None
    ahead = concurrency_at_start(ctx, f.parent[setups]).astype(np.float64)
    rho_pool = spearman(f.dur[setups].astype(np.float64), ahead) if np.ptp(ahead) > 0 else 0.0
    handoff = _handoff(ctx, setups, calls)
    # what the set-ups add to each request: its calls' join, with and without them; each set-up counted up
    # to FIXED_OVER x their median (the fixed round trips: one far beyond is a lost query's or SYN's timer)
    cost = np.zeros(len(f))
    cost[f.parent[setups]] = np.minimum(f.dur[setups], FIXED_OVER * float(np.median(f.dur[setups])))
    parent = f.parent[calls]
    has = parent >= 0
    last = np.full(len(f), np.iinfo(np.int64).min)
    np.maximum.at(last, parent[has], f.end[calls[has]])
    last_without = np.full(len(f), np.iinfo(np.int64).min)
    np.maximum.at(last_without, parent[has], (f.end[calls[has]] - cost[calls[has]]).astype(np.int64))
    joins = np.unique(parent[has])
    added = (last[joins] - last_without[joins]).astype(np.float64)
    per_req = np.bincount(f.request[joins], weights=added, minlength=ctx.n_requests)
    share = clamp01(excess_share(per_req, ctx.split))
    over_median = float(per_req.mean() / max(float(np.median(f.requests.latency)), 1.0))
    # the share of a tail that is no tail (unexplained.material) names nothing; what every request pays does
    weight = max(material_weight(share) if material(ctx) else 0.0, logistic(over_median, 0.05, 0.015))
    not_pool = (1.0 - logistic(rho_pool, 0.3, 0.08)) * (1.0 - logistic(handoff, 0.3, 0.08))
    return {
        "confidence": CAP * weight * not_pool, "code": code, "setups": setups, "calls_of": calls_of,
        "rate": rate, "cost_ns": float(np.median(f.dur[setups])), "plain_ns": plain_ns, "ratio": ratio,
        "rho_pool": rho_pool, "handoff": handoff, "share": share, "over_median": over_median,
        "in_warm": in_warm,
        "calls_warm": calls_warm, "per_req": per_req,
    }


def _handoff(ctx: Context, setups: np.ndarray, calls: np.ndarray) -> float:
    """How much more often than chance a set-up ends within HANDOFF_NS after a call of the names made
    for another request ends on its instance: (observed - chance) / (1 - chance). A wait for a pooled
    connection ends when another caller gives one back; a dial ends when its round trips are done."""
    f = ctx.frame
    scale = int(f.end.max()) + 2 * HANDOFF_NS

    def ends_before(group: np.ndarray, at_group: np.ndarray) -> np.ndarray:
        ends = np.sort(group.astype(np.int64) * scale + f.end[calls])
        at = at_group.astype(np.int64) * scale + f.end[setups]
        return np.searchsorted(ends, at, side="right") - np.searchsorted(ends, at - HANDOFF_NS, side="left")

    req = f.request[f.parent[setups]]
    hit = ends_before(f.instance[calls], f.instance[setups]) - ends_before(f.request[calls], req)
    observed = float((hit >= 1).mean())
    per_inst = np.bincount(f.instance[calls], minlength=len(f.instances)).astype(np.float64)
    first = np.full(len(f.instances), np.inf)
    last = np.zeros(len(f.instances))
    np.minimum.at(first, f.instance[calls], f.start[calls].astype(np.float64))
    np.maximum.at(last, f.instance[calls], f.end[calls].astype(np.float64))
    rate = per_inst / np.maximum(last - np.where(np.isfinite(first), first, 0.0), 1.0)
    chance = float(np.mean(1.0 - np.exp(-rate[f.instance[setups]] * HANDOFF_NS)))
    return max(0.0, (observed - chance) / max(1.0 - chance, 1e-9))


def detect(ctx: Context) -> list[Finding]:
    if ctx.n_requests < 100:
        return []
    best = None
    for code, setups in _setups(ctx):
        found = judge(ctx, code, setups)
        if found is not None and (best is None or found["confidence"] > best["confidence"]):
            best = found
    if best is None or best["confidence"] < MIN_CONFIDENCE:
        return []
    return [_finding(ctx, best)]


def _finding(ctx: Context, found: dict) -> Finding:
    f = ctx.frame
    setups = found["setups"]
    name = f.names[found["code"]]
    calls = ", ".join(repr(f.names[c]) for c in found["calls_of"])
    service = main_service(f, setups)
    instances = busiest(f, f.instance[setups], f.dur[setups].astype(np.float64))
    cost, plain = ms(found["cost_ns"]), ms(found["plain_ns"])
    mean_added = float(found["per_req"].mean()) / 1e6
    summary = (
        f"{found['rate']:.0%} of the {calls} calls open a new connection first ('{name}', at the start "
        f"of the call, {len(setups)} of them), and each costs {cost:.1f} ms (median) before the call goes "
        f"out, {cost / max(plain, 1e-3):.1f}x a whole call on an open connection ({plain:.2f} ms); after "
        f"it the call takes its usual time ({found['ratio']:.2f}x). The set-up does not lengthen with the "
        f"calls in flight (Spearman {found['rho_pool']:.2f}) and does not end as another call gives its "
        f"connection back ({found['handoff']:.0%} beyond chance): a fixed cost per new connection (name "
        f"lookup, handshakes), not a wait for a pool. It adds {mean_added:.2f} ms to the mean request "
        f"({found['over_median']:.0%} of the median latency) and carries {found['share']:.0%} of the tail "
        "excess."
    )
    stats = {
        "mechanism": MECHANISM, "service": service, "instances": instances, "setup_span": name,
        "call_names": [f.names[c] for c in found["calls_of"]], "dial_rate": round(found["rate"], 3),
        "setups": len(setups), "setup_p50_ms": round(cost, 3), "plain_call_p50_ms": round(plain, 3),
        "call_after_setup_over_plain": round(found["ratio"], 3), "rho_setup_with_calls_in_flight":
        round(found["rho_pool"], 3), "setups_ending_at_a_release": round(found["handoff"], 3),
        "setups_in_warm_up": round(found["in_warm"], 3),
        "calls_in_warm_up": round(found["calls_warm"], 3), "tail_excess_share": round(found["share"], 3),
        "added_over_median_latency": round(found["over_median"], 3),
    }
    where = f"{service} ({', '.join(instances[:3])})"
    advice = ADVICE.format(where=where, rate=found["rate"], cost=cost, plain=plain)
    return Finding(PATTERN, clamp01(found["confidence"]), ctx.stage_of_name(found["code"]), name,
                   {"summary": summary, "stats": stats}, advice)
