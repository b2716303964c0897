"""gc_pause of one process that every caller waits on: its callers are released together.

Mechanism. A server process with its own heap (an Erlang GenServer, an actor, a single-threaded
sidecar) that collects its garbage stops for as long as the collection lasts; nothing else stops (the
runtime reports nothing, other processes run on), so gc_pause's cross-name test sees one name slow
and nothing aligns. What the calls to that process show is the release: every call that came in
during the pause waits, and when the process runs again it answers its mailbox at once, so calls
*sent at different moments end together*, right after a stretch in which no call of that name ended
on the instance (a stopped process answers nothing). A lock hands itself on one waiter at a time
(ends spaced by the hold, and calls keep ending meanwhile); a slow callee answers each call after its
own work; a batcher releases its members together at every batch, the fast ones as well, and its
batches keep ending while a backlog waits.

Statistic, per span name inside requests (not the request root, not a batch or queue stage), per
instance: the slow spans (above the name's p90, >= 3 x its median and >= 1 ms over it), ordered by
end, chained while ends are <= TOL of their median duration apart (at least 0.2 ms); a chain of >= 3
whose starts spread >= 5 x as long as its ends is a *release*, a *silent* one where no span of the
name ended on the instance for half the chain's median duration before it, while other names' spans
started or ended there (the rest of the instance ran on: a whole process stopped by its collector or
a CPU quota starts and ends nothing, and is gc_pause's cross-name stall). Batched names are left out:
where the name's other spans end within that tolerance of another beyond 3 x chance + 5 %.
Strength = logistic(silent releases, 3, 0.7) x logistic(share of the slow spans' excess in them, 0.5,
0.1); weight: the released spans' excess over the name's median as a share of the tail excess. At most
0.9: without reported collections a lock held for as long reads alike (lock_contention is accepted).

Where the stop is. A release shows at every level above the process that stopped: a caller's calls to
a server whose workers all wait on a stopped dependency end together too, and so do the server's spans.
Released spans whose extra time is mostly (>= half) spent in calls out further down (CLIENT spans below
them, each over its name's median) waited on something below them: the name is not the stopped one.
The calls to the stopped process itself, where that process is not traced (a CLIENT span with nothing
below it: a database, a cache, a vendor), show that *it* stops, not why (its collector, a blocking
command, its disk): at most 0.45, and the call's tail is slow_dependency's to name. So are releases
all on one instance of three or more serving the name: a collector is the code's, and replicas under
the same traffic collect alike; one replica's stalls are its own resource's (a store's write stall).

Who held the wait. A stop of a whole process (gc_pause's reading) stretches every piece of its work
in flight; a release is only read where the instance's other work started or ended inside the silence
(above), so that stop is ruled out by construction. Where the released spans are the instance's own
work (not calls out: INTERNAL, SERVER, CONSUMER spans), the wait sat inside an instance that ran on:
one resource there was held and every piece of work that needed it waited, the rest did not. That is
a lock's signature whoever held it (a mutex held by a periodic task without a span, such as a metrics
scrape; a single-mailbox process stopped by its own collection is the same wait in the spans): named
lock_contention, with the release as its evidence. Calls out to a process of their own stay a pause of
that process (the whole callee stopped), capped as above where it is not traced. Where the runtime
reports collections (events on the instance) inside the releases' silences, the process did stop there
(work that starts at arrival, a request's root or queue span, can still start in the stop): gc_pause.
"""

from __future__ import annotations

import numpy as np

from tailscope.analysis.diagnosis.frame import KIND_CLIENT, SPAN_KINDS
from tailscope.analysis.diagnosis.gc_pause import ADVICE, PATTERN
from tailscope.analysis.diagnosis.model import Context, Finding
from tailscope.analysis.diagnosis.slow_dependency import stalled_time
from tailscope.analysis.diagnosis.stats import logistic, material_weight, ms
from tailscope.analysis.diagnosis.where import main_service

TOL = 0.02  # ends this close, as a share of the chain's spans' median duration, leave together
MIN_TOL_NS = 200_000
SPREAD = 5.0  # starts spread this many times as long as the ends: sent apart, released together
MIN_SLOW = 10
CAP = 0.9
UNTRACED_CAP = 0.45  # the stopped process is an untraced callee: that it stops, not why
BELOW = 0.5  # released spans whose extra time is this much in calls further down waited on those
LONE_OF = 3  # releases on one instance of at least this many serving the name: that instance's stall
HELD_IF = 0.3  # fewer releases than this share with a reported collection in them: no stop reported
_OUTBOUND = (KIND_CLIENT, SPAN_KINDS.index("Producer"))  # calls out: their wait is another process's
HELD = "lock_contention"
HELD_ADVICE = (
    "Work on one process waits for a resource inside it that something holds for hundreds of "
    "milliseconds at a time, while the rest of the process runs on: not a pause of the process. Find "
    "the holder: a periodic task that takes the lock (a metrics scrape or exporter walking every series "
    "under the registry mutex, a cron, a cache rebuild), or a single process every caller needs (an "
    "actor or GenServer) stopped by its own work or collection. Keep the critical section short (copy "
    "under the lock, serialise outside it), shard the lock or use lock-free counters, or give the "
    "single process's state to an ETS table or a pool of workers."
)


def _releases(starts: np.ndarray, ends: np.ndarray, all_ends: np.ndarray, others: np.ndarray,
              tol: float) -> list[np.ndarray]:
    """The silent releases among one instance's slow spans (indices into starts/ends), see the module
    docstring; all_ends: every end of the name on the instance, sorted; others: the ends of the other
    names' spans there and their starts, sorted (work that went on while this process was silent)."""
    order = np.argsort(ends)
    e = ends[order]
    chain = np.r_[0, np.cumsum(np.diff(e) > tol)]
    size = np.bincount(chain)
    first = np.r_[0, np.cumsum(size)]
    out = []
    for c in np.nonzero(size >= 3)[0].tolist():  # chains are in end order: one slice each
        g = np.arange(first[c], first[c + 1])
        idx = order[g]
        ends_spread = float(e[g[-1]] - e[g[0]])
        starts_spread = float(starts[idx].max() - starts[idx].min())
        if starts_spread < SPREAD * max(ends_spread, 1.0):
            continue
        k = int(np.searchsorted(all_ends, e[g[0]])) - 1
        before = all_ends[k] if k >= 0 else all_ends[0] - 10**18
        if e[g[0]] - before < 0.5 * float(np.median(ends[idx] - starts[idx])):
            continue
        # the rest of the instance ran on: other work started or ended inside the silence (a whole process
        # stopped by its collector or a CPU quota starts and ends nothing: gc_pause's, cpu_throttling's)
        lo, hi = before + 0.1 * (e[g[0]] - before), e[g[0]] - 0.1 * (e[g[0]] - before)
        if np.searchsorted(others, hi) - np.searchsorted(others, lo) >= 1:
            out.append(idx)
    return out


def _batched(ends_by_instance: list[np.ndarray], tol: float, rate: float) -> bool:
    """Whether the name's ends share their moment beyond chance (a batcher's members leave together)."""
    near = total = 0
    for e in ends_by_instance:
        if len(e) < 2:
            continue
        close = np.diff(e) <= tol
        near += int((np.r_[close, False] | np.r_[False, close]).sum())
        total += len(e)
    chance = 1.0 - np.exp(-2.0 * rate * tol)
    return total > 0 and near / total > 3.0 * chance + 0.05


def _in_episodes(ctx: Context, released: list[np.ndarray]) -> float:
    """The share of the releases whose last silent stretch (their calls' latest start to their first
    end) overlaps a stall episode of the whole process on their instance (notes' gc_episodes)."""
    episodes = ctx.notes.get("gc_episodes")
    if episodes is None or not len(episodes[0]) or not released:
        return 0.0
    f = ctx.frame
    inst, t0, t1 = episodes
    hit = 0
    for idx in released:
        i, lo, hi = f.instance[idx[0]], int(f.start[idx].max()), int(f.end[idx].min())
        hit += bool(((inst == i) & (t0 < hi) & (t1 > lo)).any())
    return hit / len(released)


def _reported_in(ctx: Context, released: list[np.ndarray], spans: np.ndarray) -> float:
    """The share of the releases whose silence (from the name's last end on the instance before them to
    their first end) holds a collection the runtime reported on their instance: the process itself
    stopped there (work that starts at arrival can start inside a stop). spans: the released name's."""
    f = ctx.frame
    if not len(f.gc_time) or not released:
        return 0.0
    g0, g1 = f.gc_time, f.gc_time + f.gc_dur
    end = f.start[spans] + f.dur[spans]
    hit = 0
    for idx in released:
        i, hi = f.instance[idx[0]], int(f.end[idx].min())
        prior = end[(f.instance[spans] == i) & (end < hi)]
        lo = int(prior.max()) if len(prior) else int(f.start[idx].min())
        hit += bool(((f.gc_instance == i) & (g0 <= hi) & (g1 >= lo)).any())
    return hit / len(released)


def _below(ctx: Context, released: np.ndarray, med: float) -> float:
    """The share of the released spans' extra time (over their name's median) spent in calls out of
    the process below them (CLIENT spans of their request inside them, over their own name's median)."""
    f = ctx.frame
    calls = np.nonzero(np.isin(f.kind, _OUTBOUND) & (f.request >= 0))[0]
    if not len(calls) or not len(released):
        return 0.0
    d = f.dur[calls].astype(np.float64)
    order = np.lexsort((d, f.name[calls]))
    counts = np.bincount(f.name[calls], minlength=len(f.names))
    first = np.r_[0, np.cumsum(counts)[:-1]]
    medians = d[order][np.minimum(first + counts // 2, len(d) - 1)]
    over = np.maximum(d - medians[f.name[calls]], 0.0)
    by_req = np.argsort(f.request[calls], kind="stable")
    calls, over, req = calls[by_req], over[by_req], f.request[calls][by_req]
    lo = np.searchsorted(req, f.request[released], side="left")
    hi = np.searchsorted(req, f.request[released], side="right")
    extra = np.maximum(f.dur[released].astype(np.float64) - med, 0.0)
    inside = np.zeros(len(released))
    for k, s in enumerate(released.tolist()):
        c = calls[lo[k]:hi[k]]
        mine = (c != s) & (f.start[c] >= f.start[s]) & (f.end[c] <= f.end[s])
        inside[k] = min(float(over[lo[k]:hi[k]][mine].sum()), extra[k])
    return float(inside.sum() / max(extra.sum(), 1.0))


def detect(ctx: Context) -> list[Finding]:
    f = ctx.frame
    if len(f.requests) < 100:
        return []
    end = f.start + f.dur
    is_root = np.zeros(len(f), bool)
    is_root[f.requests.root] = True
    skip = ctx.span_stage_mask("queue") | ctx.span_stage_mask("model_forward") | is_root
    inside = (f.request >= 0) & ~skip
    best: Finding | None = None
    for code in np.unique(f.name[inside]).tolist():
        spans = np.nonzero(inside & (f.name == code))[0]
        if len(spans) < 100:
            continue
        d = f.dur[spans].astype(np.float64)
        med = float(np.median(d))
        slow = (d > np.quantile(d, 0.9)) & (d >= 3 * med) & (d - med >= 1e6)
        if slow.sum() < MIN_SLOW:
            continue
        tol = max(MIN_TOL_NS, TOL * float(np.median(d[slow])))
        fast = spans[~slow]
        insts = np.unique(f.instance[spans]).tolist()
        span_ns = max(float(end[spans].max() - end[spans].min()), 1.0)
        fast_ends = [np.sort(end[fast[f.instance[fast] == i]]) for i in insts]
        if _batched(fast_ends, tol, len(fast) / len(insts) / span_ns):
            continue
        released: list[np.ndarray] = []
        for i in insts:
            mine = spans[slow & (f.instance[spans] == i)]
            if len(mine) < 3:
                continue
            all_ends = np.sort(end[spans[f.instance[spans] == i]])
            on = (f.instance == i) & (f.request >= 0) & (f.name != code)
            others = np.sort(np.r_[end[on], f.start[on]])
            released += [mine[g] for g in _releases(f.start[mine], end[mine], all_ends, others, tol)]
        if not released:
            continue
        out = np.concatenate(released)
        mask = np.zeros(len(f), bool)
        mask[out] = True
        # calls held through the whole process's own stalls (gc_pause's cross-name episodes, a CPU
        # quota's: every name stopped, the notes' gc_episodes) are that stall's, not one process's
        if _in_episodes(ctx, released) >= 0.3 or stalled_time(ctx, mask)[out].sum() >= 0.5 * max(
                float(f.dur[out].sum()), 1.0):
            continue
        below = _below(ctx, out, med)
        if below >= BELOW:  # they waited on calls further down: the stop is below this name
            continue
        untraced = float(np.mean(np.isin(f.kind[out], _OUTBOUND) & f.leaf[out])) >= 0.5
        # the released spans are the instance's own work, and the instance ran on: a resource held
        # unless the runtime reported its own collections inside the silences: then it did stop there
        held = (float(np.mean(~np.isin(f.kind[out], _OUTBOUND))) >= 0.5
                and _reported_in(ctx, released, spans) < HELD_IF)
        # every release on one replica of the >= 3 serving the name: that replica's own resource stalls
        # (its embedded store's writes, its disk), not the code's collector, which every replica runs alike
        lone = len(insts) >= LONE_OF and len(np.unique(f.instance[out])) == 1
        excess = np.maximum(f.dur.astype(np.float64) - med, 0.0)
        slow_excess = float(excess[spans[slow]].sum())
        in_releases = float(excess[out].sum()) / max(slow_excess, 1.0)
        share = ctx.share_of(mask, excess)
        strength = logistic(len(released), 3, 0.7) * logistic(in_releases, 0.5, 0.1)
        confidence = min(strength * material_weight(share), UNTRACED_CAP if untraced or lone else CAP)
        if best is not None and confidence <= best.confidence:
            continue
        name = f.names[code]
        stats = {
            "releases": len(released),
            "released_calls": len(out),
            "slow_excess_released": round(in_releases, 3),
            "median_release_wait_ms": ms(float(np.median(f.dur[out]))),
            "name_median_ms": ms(med),
            "tail_excess_share": round(share, 3),
            "instances": sorted({f.instances[i] for i in f.instance[out].tolist()}),
            "service": main_service(f, out),
            "released_extra_in_calls_below": round(below, 3),
            "untraced_callee": untraced,
            "one_replica_of": len(insts) if lone else None,
            "held_in_process": held,
        }
        summary = (
            f"'{name}' waits on one process that stops now and then: {len(released)} times, calls sent "
            f"over up to {stats['median_release_wait_ms']} ms (usually {ms(med)} ms) all ended together "
            f"after a stretch in which no call of it ended on the instance ({in_releases:.0%} of its slow "
            f"calls' extra time); a stopped process answers nothing, then its whole mailbox at once, while "
            f"other work runs on: the pause of that one process (its own heap's collection, no runtime "
            f"report), carrying {share:.0%} of the tail excess."
            + (" The stopped process is a callee that is not traced: that it stops shows, not why (its "
               "collector, a blocking command, its disk); see slow_dependency for the call."
               if untraced else "")
            + (f" Every release is on one of the {len(insts)} instances serving it: a stall of that "
               "instance's own resource (an embedded store's write stall, its disk), not a collector, which "
               "the same code under the same traffic runs on every replica alike." if lone else "")
        )
        if held:
            summary = _held_summary(name, stats, in_releases)
        best = Finding(HELD if held else PATTERN, confidence, ctx.stage_of_name(code), name,
                       {"summary": summary, "stats": stats}, HELD_ADVICE if held else ADVICE)
    return [best] if best is not None and best.confidence >= 0.05 else []


def _held_summary(name: str, stats: dict, in_releases: float) -> str:
    """The release read as a resource held inside an instance that ran on (see the module docstring)."""
    return (
        f"'{name}' waits for something its own process holds: {stats['releases']} times, spans started "
        f"over up to {stats['median_release_wait_ms']} ms (usually {stats['name_median_ms']} ms) all ended "
        f"together after a stretch in which none of them ended on the instance ({in_releases:.0%} of its "
        "slow spans' extra time), while the instance's other work started and ended through it: the "
        "process did not stop (a stop stretches all of its work in flight), one resource in it was held "
        "and only the work that needs it waited, until the holder let go (a lock held by a task without "
        "a span, such as a metrics scrape, or a single process every caller needs, stopped by its own "
        f"collection); carrying {stats['tail_excess_share']:.0%} of the tail excess."
    )
