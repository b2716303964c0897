"""Whether a dependency's heavy tail is out of the ordinary (slow_dependency names only such a tail).

Every dependency has a tail, and some call carries every run's tail: a tail that is the dependency's
usual one - the same over the run, on every callee instance, ending near its p99 (a rare slow path of
bounded cost: a rebuilt profile, a cold read) - names no cause. A tail is out of the ordinary where its
slow calls come and go over the run, cost the calls a material part of their time, have no ceiling, or
come from one straggler instance; and it is the dependency's only where the callers share it: a tail
that is out of the ordinary only in the calls of a few callers is their path's (see network).
"""

from __future__ import annotations

import numpy as np

from tailscope.analysis.diagnosis.model import SIGNATURE_CAP
from tailscope.analysis.diagnosis.stats import ms

# A heavy tail that is the dependency's usual one - the same over the run, on every callee instance,
# ending near its p99 (a rare slow path of bounded cost: a rebuilt profile, a cold read) - is where
# every run's tail goes and names no cause: a possible one at most.
USUAL_TAIL_CAP = SIGNATURE_CAP
WINDOWS = 8  # eighths of the run, for a tail that changes over it
CHANGED_DISPERSION = 4.0  # chi-square per degree of freedom of slow calls over the windows (p ~ 1e-4)
UNBOUNDED_RATIO = 2.0  # the slowest 1 % of calls average this many times their p99: no ceiling
COSTLY_MEAN = 1.3  # the calls' mean (each counted up to 20x the median) over their median
CALLER_Z = 3.0  # a caller's share of the slowest calls, binomial standard deviations over its share of calls
TAIL_ONLY_MEDIAN, TAIL_ONLY_SHARE, TAIL_ONLY_OVER = 1.3, 0.7, 2.0  # a straggler in its tail only
SIZE_FOLLOWS = 0.6  # Spearman of a call's time per request with the request's size: the call grows with it

STRAGGLER, EPISODE, COSTLY, UNBOUNDED = "straggler", "episode", "costly", "unbounded"  # abnormal_tail's kinds
# the kinds that say the dependency is slower than its own normal (slow_dependency's signature); a
# ceiling-less top 1 % alone (UNBOUNDED) is the shape of any heavy-tailed call
SIGNATURE_KINDS = (STRAGGLER, EPISODE, COSTLY)


def straggler(f, server: np.ndarray) -> tuple[str, float, float, str] | None:
    """(instance, its median or p99 ms, the other instances' same ms, "median" or "p99") where one callee
    instance adds most (>= 50 %) of the time the calls spend over their median and answers at least
    twice as slowly as the other instances of its own service at the median: a straggler replica; or,
    with its median as theirs (within TAIL_ONLY_MEDIAN), adds TAIL_ONLY_SHARE of that time, at least
    TAIL_ONLY_OVER times its share of the calls, among >= 2 peers: its slow excursions are its own (a
    host's stalls: memory compaction, a noisy neighbour), the calls the others serve do not have them.
    (One client span name may call several services, as HTTP clients name spans by method: a slower
    service is no straggler.)"""
    d = f.dur[server].astype(np.float64)
    inst = f.instance[server]
    added = np.bincount(inst, weights=np.maximum(d - float(np.median(d)), 0), minlength=len(f.instances))
    worst = int(np.argmax(added))
    mine = inst == worst
    if added.sum() <= 0 or added[worst] < 0.5 * added.sum() or mine.sum() < 10:
        return None
    service = int(np.bincount(f.service[server][mine]).argmax())
    peers = (f.service[server] == service) & ~mine
    if not peers.any():
        return None
    own, rest = float(np.median(d[mine])), float(np.median(d[peers]))
    if own >= 2.0 * rest:
        return f.instances[worst], ms(own), ms(rest), "median"
    calls_share = float(mine.sum()) / float((mine | peers).sum())
    if len(np.unique(inst[peers])) >= 2 and own <= TAIL_ONLY_MEDIAN * rest and \
            added[worst] >= max(TAIL_ONLY_SHARE, TAIL_ONLY_OVER * calls_share) * added.sum():
        p99 = (ms(float(np.quantile(d[sel], 0.99))) for sel in (mine, peers))
        return f.instances[worst], *p99, "p99"
    return None


def signature_absent(kind: str | None) -> str | None:
    """Why a call's tail lacks slow_dependency's signature (the dependency slower than its own normal:
    an episode, a straggler, a slow mode taken often), or None where it has it: the one test, read by
    slow_dependency (which caps at SIGNATURE_CAP) and applied again by calibration.gate."""
    if kind in SIGNATURE_KINDS:
        return None
    if kind == UNBOUNDED:
        return ("its only unusual trait is a ceiling-less top 1 %, the shape of any heavy-tailed call: no "
                "episode in time, no straggler instance, no slow mode the calls take often")
    return ("its tail looks like its usual one: as heavy over the whole run, on every callee instance, and "
            "ending near its p99 (a rare slow path of bounded cost)")


def abnormal_tail(start: np.ndarray, d: np.ndarray, far_d: np.ndarray,
                  straggler_found: bool) -> tuple[str, str] | None:
    """Why a call's heavy tail is not its usual one, as (kind, sentence), or None: the share of slow
    calls (over the call's p95) changes over the run (a chi-square over eighths of it, >=
    CHANGED_DISPERSION per degree of freedom); the slow calls cost the calls a material part of their
    time (the far side's mean, each call counted up to 20x the median, >= COSTLY_MEAN times its median:
    a slow path taken often or long, where a usual tail - a rare slow path - leaves the mean near the
    median); the tail has no ceiling (the far side's slowest 1 % average >= UNBOUNDED_RATIO times its
    p99, each counted up to 10x: a queue or a struggling callee, or any heavy-tailed call); or one
    callee instance is a straggler. The kind (STRAGGLER, EPISODE, COSTLY, UNBOUNDED) says which test
    held: a ceiling-less top 1 % alone is the shape of any heavy-tailed call (signature_absent does not
    take it for a changed dependency)."""
    if straggler_found:
        return STRAGGLER, "one callee instance is a straggler"
    if len(d) >= 20 * WINDOWS:
        slow = d > np.quantile(d, 0.95)
        span = max(int(start.max() - start.min()), 1)
        window = np.minimum((start - start.min()) * WINDOWS // span, WINDOWS - 1).astype(np.int64)
        calls = np.bincount(window, minlength=WINDOWS).astype(np.float64)
        expected = calls * float(slow.mean())
        seen = np.bincount(window[slow], minlength=WINDOWS)
        used = expected >= 1.0
        if used.sum() >= 4:
            dispersion = float(((seen - expected)[used] ** 2 / expected[used]).sum() / (used.sum() - 1))
            if dispersion >= CHANGED_DISPERSION:
                rate = seen[used] / calls[used]
                return EPISODE, (f"its slow calls come and go over the run ({rate.min():.0%} to "
                                 f"{rate.max():.0%} of the calls over its p95 between eighths of it)")
    if len(far_d) >= 200:
        median = max(float(np.median(far_d)), 1.0)
        costly = float(np.minimum(far_d, 20 * median).mean()) / median
        if costly >= COSTLY_MEAN:
            return COSTLY, ("its slow calls are no rare excursion: they bring its mean call to "
                            f"{costly:.1f}x its median")
        p99 = float(np.quantile(far_d, 0.99))
        top = far_d[far_d >= p99]
        ratio = float(np.minimum(top, 10 * p99).mean() / max(p99, 1.0))
        if ratio >= UNBOUNDED_RATIO:
            return UNBOUNDED, f"its tail has no ceiling (its slowest 1 % average {ratio:.1f}x its p99)"
    return None


def caller_side(f, spans: np.ndarray, d: np.ndarray) -> tuple[float, float, list[str]] | None:
    """(share of the slowest 1 % of calls made by the callers that make them most often, those callers'
    share of all calls, their instances) where the slowest calls (>= 10) come mostly (>= 75 %, and
    3 binomial standard deviations above their share of the calls) from callers that make at most
    60 % of the calls; None otherwise."""
    slow = d >= np.quantile(d, 0.99)
    if slow.sum() < 10:
        return None
    inst = f.instance[spans]
    calls = np.bincount(inst, minlength=len(f.instances))
    slow_calls = np.bincount(inst[slow], minlength=len(f.instances))
    affected = (calls > 0) & (slow_calls > 1.5 * float(slow.mean()) * calls)
    concentration = float(slow_calls[affected].sum() / slow.sum())
    call_share = float(calls[affected].sum() / len(spans))
    # beyond chance: as many of the slowest calls from those callers as their share of the calls gives
    z = (concentration - call_share) * np.sqrt(slow.sum() / max(call_share * (1 - call_share), 1e-9))
    if concentration < 0.75 or call_share > 0.6 or z < 3.0:
        return None
    order = np.argsort(-slow_calls)
    return concentration, call_share, [f.instances[i] for i in order if affected[i]]


def usual_without_callers(f, spans: np.ndarray, d: np.ndarray) -> tuple[list[str], float, float] | None:
    """(the callers, their share of the slowest 1 % of calls, their share of the calls) where the
    slowest calls come from some calling instances beyond chance (each >= CALLER_Z binomial standard
    deviations over its share of the calls, together <= 60 % of the calls) and the calls of the other
    callers have their usual tail (abnormal_tail finds nothing in them); None otherwise."""
    slow = d >= np.quantile(d, 0.99)
    if slow.sum() < 10:
        return None
    inst = f.instance[spans]
    calls = np.bincount(inst, minlength=len(f.instances)).astype(np.float64)
    seen = np.bincount(inst[slow], minlength=len(f.instances)).astype(np.float64)
    share = calls / len(spans)
    z = (seen - slow.sum() * share) / np.sqrt(np.maximum(slow.sum() * share * (1 - share), 1e-9))
    affected = (calls > 0) & (z >= CALLER_Z)
    call_share = float(share[affected].sum())
    if not affected.any() or call_share > 0.6:
        return None
    rest = ~affected[inst]
    if abnormal_tail(f.start[spans][rest], d[rest], d[rest], False) is not None:
        return None
    order = np.argsort(-seen)
    return ([f.instances[i] for i in order if affected[i]], float(seen[affected].sum() / slow.sum()),
            call_share)


def queued_below(f, server: np.ndarray, queue: np.ndarray, depth: int = 8) -> np.ndarray:
    """The queue-stage spans (`queue`: a mask over the frame) inside the callee's process under the
    SERVER spans `server`: their nearest SERVER or CLIENT ancestor is one of them (a call out of the
    callee starts another process's time), the outermost of nested ones only."""
    from tailscope.analysis.diagnosis.frame import KIND_CLIENT, KIND_SERVER

    is_server = np.zeros(len(f), bool)
    is_server[server] = True
    spans = np.nonzero(queue & (f.parent >= 0))[0]
    found = np.zeros(len(spans), bool)
    inner = np.zeros(len(spans), bool)  # under another queue span below the SERVER span
    alive = np.ones(len(spans), bool)
    cur = f.parent[spans]
    for _ in range(depth):
        alive &= cur >= 0
        if not alive.any():
            break
        at = np.maximum(cur, 0)
        hit = alive & is_server[at]
        found |= hit
        boundary = alive & ~hit & ((f.kind[at] == KIND_SERVER) | (f.kind[at] == KIND_CLIENT))
        inner |= alive & ~hit & queue[at]
        alive &= ~hit & ~boundary
        cur = np.where(alive, f.parent[at], -1)
    return spans[found & ~inner]


def grows_with_size(notes: dict, per_request: np.ndarray) -> tuple[str, float, float] | None:
    """(size key, Spearman, large_payload's confidence on it) where a call's time per request follows
    the size of the request (>= SIZE_FOLLOWS) that another step's time follows closely (large_payload's
    notes["request_sizes"]: the candidates re-ranked, the items rendered): a query fetching the rows
    of those items grows with them, its long calls are the large requests' and not a slow dependency;
    None otherwise."""
    from tailscope.analysis.diagnosis.stats import spearman

    best = None
    for key, (size, confidence) in notes.get("request_sizes", {}).items():
        ok = np.isfinite(size)
        if ok.sum() < 100:
            continue
        rho = spearman(size[ok], per_request[ok])
        if rho >= SIZE_FOLLOWS and (best is None or rho > best[1]):
            best = (key.removeprefix("root:"), rho, confidence)
    return best


def settle_forward(findings: list) -> list:
    """compute_bound on a model server's span that a slow_dependency finding (>= 0.5) names with one
    instance's own excursions in its tail (straggler at its p99, its median as its peers'): a model's
    work per batch is the same on every host, so excursions on one host only are that host's stalls
    (memory compaction, a neighbour), not the model's compute; part of the slow dependency, below it."""
    hosts = [fd for fd in findings if fd.pattern == "slow_dependency" and fd.confidence >= 0.5
             and fd.evidence.get("stats", {}).get("straggler_at") == "p99"]
    for fd in findings:
        host = next((h for h in hosts if h.span_name == fd.span_name), None)
        if fd.pattern != "compute_bound" or host is None or "part_of" in fd.evidence.get("stats", {}):
            continue
        fd.confidence = min(fd.confidence, 0.9 * host.confidence)
        fd.evidence.setdefault("stats", {})["part_of"] = "slow_dependency"
        fd.evidence["summary"] += (
            f" Its tail is one host's excursions ({host.evidence['stats']['straggler_instance']}, its median "
            "as its peers'): that host's stalls, not the model's work (part of slow_dependency).")
    return findings
