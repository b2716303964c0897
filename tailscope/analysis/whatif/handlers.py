"""The queue before a server's handler threads: a call that finds every thread of the instance busy
waits (in an executor's queue, no span of its own), and its SERVER span starts when a thread takes
it: as another call's SERVER span on that instance ends (but for the dispatch before a span opens).
The gap between the caller's CLIENT span and the SERVER span is then the network plus that wait. A
queue-fed consumer's messages wait in the broker for any process of the consumer's service (the
unit's wait span, from the publish, above its CONSUMER span: diagnosis/units.py); a process pulls the
next one once it has acked the last.

`handlers()` finds such queues from the run's own timings: the SERVER spans called across instances,
the calls that waited (they start as another ends while every thread was busy), each instance's
threads (the most SERVER spans it ran at once), the network part of each gap (the gap of a call that
did not wait, at most the median of those). `replay_handlers()` replays the calls'
arrivals through those threads with the (re-timed) service times, first come first served: a model,
stated as such."""

from __future__ import annotations

import heapq
from dataclasses import dataclass

import numpy as np

from tailscope.analysis.diagnosis.frame import KIND_CLIENT, KIND_SERVER, SPAN_KINDS, TraceFrame

# a waiting call's SERVER span starts as a thread frees: within the hand-off from the accept queue and
# the framework's dispatch before the span opens (a servlet container: tens of µs) and the clocks'
# rounding (Zipkin: µs); 2 µs missed every wait of a handler that opens its span after dispatch
TAKEN_NS = 200_000
PULLED_NS = 2_000_000  # a consumer process pulls the next waiting message once it has acked the last
KIND_CONSUMER = SPAN_KINDS.index("Consumer")
BACKLOG_FACTOR = 3.0  # a consumer's gap over this many times its shortest tenth's is no pull delay
MIN_WAITED = 0.005  # an instance whose calls waited this rarely has no queue worth replaying
QUIET_QUANTILE = 0.25  # every_call: a link's network time, the quieter quarter of its gaps


@dataclass
class Handlers:
    server: np.ndarray  # SERVER span rows whose instance's threads queued calls
    client: np.ndarray  # the CLIENT span each was called from
    # the pool it queues for: the server's instance, -1 - a consumer's service (a shared queue), or
    # -1 - len(services) - a process (a partitioned consumer's: _per_process)
    instance: np.ndarray
    slots: dict[int, int]  # threads per pool
    net: np.ndarray  # the network part of each call's gap (ns)
    waited: np.ndarray  # the call waited for a thread

    def wait(self, frame: TraceFrame) -> np.ndarray:
        """Each call's wait for a thread as measured (ns)."""
        gap = frame.start[self.server] - frame.start[self.client]
        return np.maximum(gap - self.net, 0).astype(np.float64)


def _concurrency(start: np.ndarray, end: np.ndarray) -> int:
    """The most intervals open at once (one ending as another starts: not both)."""
    t = np.r_[start, end]
    step = np.r_[np.ones(len(start)), -np.ones(len(end))]
    order = np.lexsort((step, t))
    return int(np.cumsum(step[order]).max(initial=0))


def _calls(frame: TraceFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(SERVER span, its CLIENT caller on another instance, pool) and, for queue-fed consumers, (the
    CONSUMER span, the unit's wait span above it: stage queue, from the publish, pool): a server's
    calls queue at their instance's threads; a consumer's messages wait in the broker for any of its
    service's processes (pool -1 - service). A proxy in front of the server (a sidecar's inbound
    SERVER span on another instance, the app's SERVER span its child) is a caller too: the request
    waits for a thread inside the proxy's span."""
    from tailscope.vocabulary import ALL_STAGES

    kid = np.nonzero(frame.parent >= 0)[0]
    par = frame.parent[kid]
    server = (frame.kind[kid] == KIND_SERVER) & np.isin(frame.kind[par], (KIND_CLIENT, KIND_SERVER))
    server &= frame.instance[par] != frame.instance[kid]
    consumer = (frame.kind[kid] == KIND_CONSUMER) & (frame.kind[par] == KIND_CONSUMER)
    consumer &= (frame.parent[par] < 0) & (frame.stage[par] == ALL_STAGES.index("queue"))
    pool = np.where(consumer, -1 - frame.service[kid], frame.instance[kid])
    keep = server | consumer
    return kid[keep], par[keep], pool[keep]


SHUTDOWN_NS = 2_000_000  # a worker's request shutdown after its span ends (span export, teardown)


def _taken_as_freed(start: np.ndarray, end: np.ndarray, threads: int, taken: float) -> np.ndarray:
    """Per call of one instance: it started within `taken` after another call's span ended, with
    every thread busy just before (as many calls open as the instance has threads)."""
    ends = np.sort(end)
    freed = np.searchsorted(ends, start + 1, side="left") - np.searchsorted(ends, start - taken, side="left")
    before = start - taken - 1
    open_before = np.searchsorted(np.sort(start), before, side="right") - np.searchsorted(
        ends, before, side="right"
    )
    return (freed > 0) & (open_before >= threads)


def handlers(frame: TraceFrame) -> Handlers | None:
    """The handler queues of the run (None where no instance's calls waited for a thread)."""
    kid, par, pool = _calls(frame)
    if len(kid) == 0:
        return None
    start = frame.start[kid].astype(np.int64)
    end = start + frame.dur[kid].astype(np.int64)
    gap = start - frame.start[par].astype(np.int64)
    waited = np.zeros(len(kid), bool)
    slots: dict[int, int] = {}
    inst = frame.instance[kid]
    for i in np.unique(inst).tolist():
        sel = np.nonzero(inst == i)[0]
        c = _concurrency(start[sel], end[sel])
        # and a gap longer than a call that did not wait: the instance's median gap; a consumer
        # process may spend most of the run backlogged (one that joined in a burst: all of it), so
        # for a consumer also any gap over three times its shortest tenth's
        longer = np.median(gap[sel])
        if pool[sel[0]] < 0:
            longer = min(longer, BACKLOG_FACTOR * float(np.quantile(gap[sel], 0.1)))
        taken = TAKEN_NS if pool[sel[0]] >= 0 else PULLED_NS
        waited[sel] = _taken_as_freed(start[sel], end[sel], c, taken) & (gap[sel] > longer)
        if pool[sel[0]] >= 0 and waited[sel].mean() < MIN_WAITED:  # a worker that ends its span
            # before its request's shutdown (PHP-FPM exports its spans then) takes the next later
            waited[sel] = _taken_as_freed(start[sel], end[sel], c, SHUTDOWN_NS) & (gap[sel] > longer)
        p = int(pool[sel[0]])
        slots[p] = slots.get(p, 0) + max(c, 1)
    keep = np.zeros(len(kid), bool)
    net = gap.astype(np.float64)
    link_typical = _link_typical(frame, kid, par, gap, waited)
    for p in list(slots):
        sel = np.nonzero(pool == p)[0]
        w = waited[sel]
        if w.mean() < MIN_WAITED:
            del slots[p]
            continue
        keep[sel] = True
        # the typical gap of a call that found a thread free: a gap beyond it is waiting (a call
        # not seen to wait may have waited for a stalled process: its gap is no network time)
        typical = float(np.median(gap[sel[~w]])) if (~w).any() else 0.0
        if p >= 0:  # an instance whose every call waited (for the process to start, say): the link's
            typical = min(typical, link_typical[sel[0]])
        net[sel] = np.minimum(gap[sel], typical)
        if p < 0:
            _per_process(frame, kid, pool, sel, slots, p)
    if not keep.any():
        return None
    return Handlers(kid[keep], par[keep], pool[keep], slots, net[keep], waited[keep])


def _link_typical(frame: TraceFrame, kid: np.ndarray, par: np.ndarray, gap: np.ndarray,
                  waited: np.ndarray) -> np.ndarray:
    """Per call: the median gap of the calls of its link (the caller's service to the callee's) that
    did not wait, over every instance of the callee (the network's time is the link's)."""
    link = frame.service[par] * (len(frame.services) + 1) + frame.service[kid]
    out = np.full(len(kid), np.inf)
    for code in np.unique(link).tolist():
        sel = link == code
        free = sel & ~waited
        if free.any():
            out[sel] = float(np.median(gap[free]))
    return out


def every_call(frame: TraceFrame, h: Handlers) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(SERVER span, its caller's span, the network part of the gap) for every call into the services
    whose instances h saw queueing calls, on any instance of them (and h's consumers' messages): a
    wait for a handler can show only as the gap, with no thread of the instance seen freeing for it
    (a pod's listening socket shared by its workers: the first worker with a free thread accepts, and
    the busy ones' queues never form), and a backlog that outlasts half the run leaves few calls
    seen waiting, so the median gap of the others is a wait too. The network part of a call into a
    server: the quieter quarter of its link's gaps (at most its own gap)."""
    kid, par, pool = _calls(frame)
    services = np.unique(frame.service[h.server[h.instance >= 0]])
    mine = (pool >= 0) & np.isin(frame.service[kid], services)
    kid, par = kid[mine], par[mine]
    gap = (frame.start[kid] - frame.start[par]).astype(np.float64)
    link = frame.service[par] * (len(frame.services) + 1) + frame.service[kid]
    net = gap.copy()
    for code in np.unique(link).tolist():
        sel = link == code
        net[sel] = np.minimum(gap[sel], np.quantile(gap[sel], QUIET_QUANTILE))
    queued = h.instance < 0  # a consumer's messages: as handlers() read them
    return np.r_[kid, h.server[queued]], np.r_[par, h.client[queued]], np.r_[net, h.net[queued]]


def _fcfs(arrival: np.ndarray, service: np.ndarray, servers: int) -> np.ndarray:
    """Each arrival's wait (ns) served first come first served by `servers` servers."""
    wait = np.zeros(len(arrival))
    order = np.argsort(arrival, kind="stable")
    free = [float("-inf")] * servers
    for r, a, s in zip(order.tolist(), arrival[order].tolist(), service[order].tolist(), strict=True):
        t = heapq.heappop(free)
        begin = a if a >= t else t
        wait[r] = begin - a
        heapq.heappush(free, begin + s)
    return wait


OWNED_SHARE = 0.9  # a partition's messages processed by its most common process at least this often
PARTITION_KEY = "partition"  # messaging.kafka.source.partition, messaging.destination.partition.id, ...


def _partitions(frame: TraceFrame, spans: np.ndarray) -> np.ndarray:
    """Each span's partition as its attributes name it (nan where none does)."""
    out = np.full(len(spans), np.nan)
    for code in np.unique(frame.name[spans]).tolist():
        for key, (idx, values) in frame.attributes(code).items():
            if PARTITION_KEY not in key.lower() or "count" in key.lower():
                continue
            value = np.full(len(frame), np.nan)
            ok = idx >= 0
            value[idx[ok]] = [_number(v) for v, good in zip(values, ok.tolist(), strict=True) if good]
            out = np.where(np.isnan(out), value[spans], out)
    return out


def _number(value) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return float("nan")


def _per_process(frame: TraceFrame, kid: np.ndarray, pool: np.ndarray, sel: np.ndarray,
                 slots: dict[int, int], p: int) -> None:
    """A consumer's messages wait for any of its service's processes (a shared queue: a process that
    frees takes the next), or each for the one process that owns its partition (Kafka, Kinesis: a
    message waits while another process idles). Where the messages name their partition and each
    partition's messages were processed by one process (but for rebalances), the consumer's pools
    become its processes, each with the threads it ran at once."""
    spans = kid[sel]
    inst = frame.instance[spans]
    part = _partitions(frame, spans)
    named = ~np.isnan(part)
    if named.mean() < 0.5 or len(np.unique(inst)) < 2:
        return
    pairs, counts = np.unique(np.column_stack((part[named], inst[named])), axis=0, return_counts=True)
    owner_count: dict[float, int] = {}
    for (partition, _), count in zip(pairs.tolist(), counts.tolist(), strict=True):
        owner_count[partition] = max(owner_count.get(partition, 0), count)
    if sum(owner_count.values()) < OWNED_SHARE * named.sum():
        return
    del slots[p]
    base = -1 - len(frame.services)  # below every service's shared pool
    start = frame.start[spans].astype(np.float64)
    end = start + frame.dur[spans]
    for i in np.unique(inst).tolist():
        mine = inst == i
        slots[base - i] = max(_concurrency(start[mine], end[mine]), 1)
    pool[sel] = base - inst


def replay_handlers(
    h: Handlers, arrival: np.ndarray, service: np.ndarray, extra_slots: int = 0,
    pools: np.ndarray | None = None,
) -> np.ndarray:
    """Each call's wait (ns) when the arrivals are served first come first served by its instance's
    threads (plus `extra_slots` each) with the given service times; `pools`: the pool each call is
    routed to instead (a key of `h.slots`)."""
    pool = h.instance if pools is None else pools
    wait = np.zeros(len(arrival))
    for i, c in h.slots.items():
        sel = np.nonzero(pool == i)[0]
        wait[sel] = _fcfs(arrival[sel], service[sel], c + extra_slots)
    return wait


ACCEPT_TOLERANCE_NS = 500_000


def merged_stalls(
    inst: np.ndarray, s: np.ndarray, e: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Stall intervals (instance, start, end) sorted, overlapping ones of an instance merged."""
    order = np.lexsort((s, inst))
    inst, s, e = inst[order], s[order], e[order]
    out_i, out_s, out_e = [], [], []
    for i, a, b in zip(inst.tolist(), s.tolist(), e.tolist(), strict=True):
        if out_i and out_i[-1] == i and a <= out_e[-1]:
            out_e[-1] = max(out_e[-1], b)
        else:
            out_i.append(i), out_s.append(a), out_e.append(b)
    return np.array(out_i, np.int64), np.array(out_s, np.int64), np.array(out_e, np.int64)


def accepted_late_tops(frame: TraceFrame, stalls, rows: np.ndarray) -> np.ndarray:
    """For each span row given: how much earlier its trace's top span would have started without the
    stalls. A top span that starts as a stall of its instance ends arrived during it and was read
    late, with the others that arrived meanwhile; they are spread evenly over the stall (Poisson
    arrivals), in their order."""
    top = np.nonzero(frame.parent < 0)[0]
    shift = np.zeros(len(top))
    si, ss, se = merged_stalls(*stalls)
    if len(si) and len(top):
        stride = int(max(se.max(), frame.start.max())) + 1
        key = si * stride + se
        inst, t = frame.instance[top].astype(np.int64), frame.start[top].astype(np.int64)
        k = np.searchsorted(key, inst * stride + t + ACCEPT_TOLERANCE_NS, side="right") - 1
        kk = np.maximum(k, 0)
        late = np.nonzero((k >= 0) & (si[kk] == inst) & (np.abs(t - se[kk]) <= ACCEPT_TOLERANCE_NS))[0]
        stall = kk[late]
        order = np.lexsort((t[late], stall))
        late, stall = late[order], stall[order]
        first = np.r_[True, stall[1:] != stall[:-1]]
        group_start = np.maximum.accumulate(np.where(first, np.arange(len(late)), 0))
        counts = np.bincount(stall, minlength=len(si))[stall]
        j = np.arange(len(late)) - group_start
        shift[late] = t[late] - (ss[stall] + (j + 0.5) / counts * (se[stall] - ss[stall]))
    traces = frame.trace.astype(np.int64)
    of_trace = np.zeros(int(traces.max(initial=0)) + 1)
    of_trace[traces[top]] = shift
    return of_trace[traces[rows]]
