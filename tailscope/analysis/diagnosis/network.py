"""network: time between a client's view of a call and the server's view of it.

Statistic. Wherever a CLIENT span has a SERVER child in another service (a load generator around the
request root, or a service calling a traced dependency), the gap = client duration - server duration
is the time on the wire and in the server's accept queue. Its weight is the share of the client-observed
tail excess the gap carries (for the request root: excess of client-observed latency; for an inner
call: excess of the request latency); its shape (p99 vs p50, and the share of calls with a gap beyond
5x the median, or far beyond its usual spread where the median is a long, steady trip to another
region) shows whether it is large for everyone or shifted for a subset. Large gaps that end in
bunches (several callers' calls starting on one server instance in the same millisecond) are a server
that stopped accepting and then took the held calls at once, not the wire: they discount the finding
as gaps inside known stalls do. Large gaps mostly before the SERVER span that grow with the calls the
server instance is already running are a queue for a worker slot (accept_queue.py): they discount the
finding and become a queueing finding.
"""

from __future__ import annotations

import re

import numpy as np

from tailscope.analysis.diagnosis.accept_queue import accept_wait, calm_gaps
from tailscope.analysis.diagnosis.caller_stalls import caller_stalled
from tailscope.analysis.diagnosis.frame import KIND_CLIENT, KIND_SERVER
from tailscope.analysis.diagnosis.model import Context, Finding
from tailscope.analysis.diagnosis.stats import clamp01, excess_share, logistic, ms, tail_split
from tailscope.analysis.diagnosis.usual_paths import usual_path_share

PATTERN = "network"
ADVICE = (
    "Time is lost between {client} and {server}, outside the server's own span: network latency or "
    "retransmits, connection setup (TLS handshakes, no keep-alive / connection pooling), or the server's "
    "accept queue. A step of about 40 ms is Nagle's algorithm meeting delayed ACKs: set TCP_NODELAY on "
    "the client and server sockets. Reuse connections, co-locate the client and server (same zone), "
    "check for packet loss "
    "and MTU issues on the affected hosts, and compare client- and server-side latency SLOs."
)


def detect(ctx: Context) -> list[Finding]:
    f = ctx.frame
    reqs = f.requests
    if len(reqs) < 50:
        return []
    srv = np.nonzero((f.kind == KIND_SERVER) & (f.parent >= 0))[0]
    cli = f.parent[srv]
    pair = (f.kind[cli] == KIND_CLIENT) & (f.service[cli] != f.service[srv])
    # a call answered by two or more attempts (a proxy's retry or hedge below the client span): the
    # client's time over one attempt's is the other attempts' and the backoff's, not the wire's
    pair &= np.bincount(cli[pair], minlength=len(f))[cli] == 1
    srv, cli = srv[pair], cli[pair]
    if len(srv) < 50:
        return []
    gap = np.maximum(f.dur[cli] - f.dur[srv], 0).astype(np.float64)
    findings: list[Finding] = []
    queue_findings: list[Finding] = []
    at_root = f.request[cli] < 0  # the client wraps the request root
    for label, sel in (("root", at_root), ("inner", ~at_root)):
        if sel.sum() < 50:
            continue
        g = gap[sel]
        # a server that was only starting (an environment's init before its first call) made the
        # caller wait: those gaps are cold_start's, left out here (set to the usual gap)
        first_calls = started_cold(f, srv[sel], large_gaps(g, float(np.median(g))))
        started = np.where(first_calls, g - float(np.median(g)), 0.0)
        g = g - started
        if label == "root":
            req = f.request[srv[sel]]
            client_lat = np.nan_to_num(reqs.client_latency, nan=0.0)
            np.subtract.at(client_lat, req[req >= 0], started[req >= 0])  # ... from what the client saw
            split = tail_split(client_lat)
            per_req = np.zeros(len(reqs))
            per_req[req] = g
            share = excess_share(per_req, split)
        else:
            share = ctx.share_of(np.isin(np.arange(len(f)), cli[sel]), _gap_values(f, cli[sel], g))
        p50, p99 = float(np.median(g)), float(np.quantile(g, 0.99))
        big = large_gaps(g, p50)
        shifted = float(big.mean())
        # a stalled server process (GC pause) delays accepting and writing too: gaps inside stalls are
        # the gc_pause finding's, not the network's
        in_stall = 0.0
        episodes = ctx.notes.get("gc_episodes")
        if episodes is not None and big.any():
            from tailscope.analysis.diagnosis.long_stalls import stall_overlap

            c_idx, s_idx = cli[sel][big], srv[sel][big]
            ov = stall_overlap(f.instance[s_idx], f.start[c_idx], f.end[c_idx], *episodes)
            # a stalled caller (a pause, a CPU quota) reads the reply late: not the wire either
            ov = np.maximum(ov, stall_overlap(f.instance[c_idx], f.start[c_idx], f.end[c_idx], *episodes))
            in_stall = float((ov > 0.5 * g[big]).mean())
        if len(f.gc_time) and big.any():
            # runtime GC events confirm: a pause on the server while the call was in flight
            from tailscope.analysis.diagnosis.long_stalls import stall_overlap

            c_idx, s_idx = cli[sel][big], srv[sel][big]
            ov = stall_overlap(f.instance[s_idx], f.start[c_idx], f.end[c_idx], *ctx.reported_pauses)
            in_stall = max(in_stall, float((ov > 0.5 * g[big]).mean()))
        proxy = ctx.notes.get("proxy_stalls")
        if proxy is not None and big.any():  # a paused caller reads its responses late: not the wire
            from tailscope.analysis.diagnosis.long_stalls import stall_overlap

            c_idx = cli[sel][big]
            ov = stall_overlap(f.instance[c_idx], f.start[c_idx], f.end[c_idx], *proxy)
            in_stall = max(in_stall, float((ov > 0.5 * g[big]).mean()))
        # a runtime that reports GC time per request (JMX deltas: no moment, only the request it fell
        # in): large gaps that wait while the server's requests report GC, more than calls at random do
        if big.any():
            in_stall = max(in_stall, gc_reported_lift(ctx, cli[sel], srv[sel], big))
        # a server that stopped accepting takes the calls held meanwhile at once: their server spans
        # start together on one instance, whichever caller sent them (the wire delays each on its own)
        released = released_together(f, srv[sel], big)
        # ... and one after the other, however spread their sends were
        drained = drained_together(f, cli[sel], srv[sel], big, g)
        # ... or a caller that stopped reads the replies that came meanwhile at once when it runs again
        read = read_together(f, cli[sel], srv[sel], big, g)
        # ... or a caller that stopped ended its calls as the requests that came meanwhile arrived
        stalled = caller_stalled(f, cli[sel], big, g)
        in_stall = max(in_stall, released, drained, read, stalled)
        # the part of the large gaps that follows the payload's size is transfer (large_payload's)
        wire = ctx.notes.get("wire_driven")
        if wire is not None and big.any():
            excess = np.maximum(g[big] - p50, 0.0)
            in_stall = max(in_stall, clamp01(float(np.minimum(wire[cli[sel]][big], excess).sum())
                                              / max(float(excess.sum()), 1.0)))
        # a subset of clients behind a slow network: the gap per calling instance
        c_inst = f.instance[cli[sel]]
        per_client = np.bincount(c_inst, weights=big, minlength=len(f.instances)) / np.maximum(
            np.bincount(c_inst, minlength=len(f.instances)), 1
        )
        callers = np.bincount(c_inst, minlength=len(f.instances)) > 0
        worst = np.argsort(-per_client)[: int(callers.sum())]
        affected = [f.instances[i] for i in worst if per_client[i] > max(0.2, 2 * shifted)]
        # a gap before the handler that grows with the calls the server is already running is a queue
        # for a worker slot, not the wire
        queued, queue_finding = accept_wait(ctx, cli[sel], srv[sel], big, share)
        queued = max(queued, calm_gaps(f, cli[sel], srv[sel], big))  # none while the server was calm
        if queue_finding is not None:
            queue_findings.append(queue_finding)
        # a far caller's every call crosses the same distance in every part of the run: the topology
        usual = usual_path_share(f, cli[sel], srv[sel], g, big, p50)
        strength = logistic(ms(p99 - p50), 2.0, 0.7)
        weight = logistic(share, 0.3, 0.08)
        confidence = strength * weight * (1 - in_stall) * (1 - queued) * (1 - usual)
        c_name = f.names[int(np.bincount(f.name[cli[sel]]).argmax())]
        client_service = f.services[int(np.bincount(f.service[cli[sel]]).argmax())]
        server_service = f.services[int(np.bincount(f.service[srv[sel]]).argmax())]
        summary = (
            f"Between {client_service} ('{c_name}') and {server_service}, the client sees more than the "
            "server: "
            f"gap p50 {ms(p50):.2f} ms, p99 {ms(p99):.2f} ms; {shifted:.1%} of calls have a gap far beyond "
            f"the usual one; the gap carries {share:.0%} of the "
            f"{'client-observed ' if label == 'root' else ''}tail excess"
            + (
                f"; the large gaps come from {len(affected)} of {int(callers.sum())} callers "
                f"({', '.join(affected[:4])})"
                if affected and len(affected) < callers.sum()
                else ""
            )
            + (
                f"; {in_stall:.0%} of the large gaps fall in server stalls (see gc_pause)"
                if in_stall > 0.2 and max(released, drained) < in_stall
                else ""
            )
            + (
                f"; {released:.0%} of the large gaps end in bunches, several callers' calls starting on "
                "one server instance at the same moment: the server stopped accepting and then took "
                "them at once (a stall, not the wire)"
                if released > 0.2 and released >= in_stall
                else ""
            )
            + (
                f"; {drained:.0%} of the large gaps' time is calls to one server instance that started "
                "one after the other although they were sent apart: the server process stopped and "
                "then took the calls held meanwhile (a stall or a full backlog, not the wire)"
                if drained > 0.2 and drained >= in_stall and drained > released
                else ""
            )
            + (
                f"; {read:.0%} of the large gaps' time is replies that one caller instance read one after "
                "the other although its callees answered apart: the caller's process stopped and read "
                "them when it ran again (a pause, not the wire)"
                if read > 0.2 and read >= max(released, drained)
                else ""
            )
            + (
                f"; {int(first_calls.sum())} more large gaps were before the first call an instance served "
                "(or one it marked as a cold start) and are left out: the server was starting (see "
                "cold_start), not the wire"
                if first_calls.any()
                else ""
            )
            + (
                f"; the large gaps are mostly a wait before the handler that grows with the server's load "
                f"(see queueing, {queued:.0%})"
                if queued > 0.3
                else ""
            )
            + (f"; {usual:.0%} of the large gaps' excess is their path's usual gap, the same in every part "
               "of the run (far callers' every call: the topology, not a change)" if usual > 0.3 else "")
            + (
                "; the large gaps sit near 40 ms, the signature of Nagle's algorithm meeting delayed ACKs"
                if big.any() and 35.0 <= ms(np.median(g[big])) <= 48.0
                else ""
            )
            + "."
        )
        stats = {
            "gap_p50_ms": ms(p50),
            "gap_p99_ms": ms(p99),
            "shifted_fraction": round(shifted, 4),
            "tail_excess_share": round(share, 3),
            "pairs": int(sel.sum()),
            "affected_callers": affected[:20],
            "large_gaps_in_server_stalls": round(in_stall, 3),
            "large_gaps_released_together": round(released, 3),
            "large_gaps_drained_together": round(drained, 3),
            "large_gaps_read_together": round(read, 3),
            "large_gaps_ended_with_arrivals_at_the_caller": round(stalled, 3),
            "large_gaps_queued_for_a_worker": round(queued, 3),
            "large_gaps_before_a_first_call_left_out": int(first_calls.sum()),
            "large_gaps_usual_for_their_path": round(usual, 3),
            "client_service": client_service,
            "server_service": server_service,
        }
        pick = np.linspace(0, len(g) - 1, min(len(g), 3000)).astype(np.int64)
        chart = {
            "kind": "network_gap",
            "server_ms": (f.dur[srv[sel]][pick] / 1e6).round(3).tolist(),
            "gap_ms": (g[pick] / 1e6).round(3).tolist(),
        }
        findings.append(
            Finding(
                PATTERN,
                clamp01(confidence),
                "ingress" if label == "root" else "downstream",
                c_name,
                {"summary": summary, "stats": stats, "chart": chart},
                ADVICE.format(client=client_service, server=server_service),
            )
        )
    findings.sort(key=lambda x: -x.confidence)
    queue_findings.sort(key=lambda x: -x.confidence)
    return findings[:1] + queue_findings[:1]


RELEASE_NS = 1_000_000  # server spans starting within the same millisecond were released together
RELEASE_BUNCH = 3  # ... three or more of them with a large gap


def released_together(f, srv: np.ndarray, big: np.ndarray) -> float:
    """Share of the large gaps whose server span starts in the same millisecond, on the same server
    instance, as at least two other large-gap calls from more than one caller."""
    if big.sum() < RELEASE_BUNCH:
        return 0.0
    s = srv[big]
    key = f.instance[s].astype(np.int64) * (int(f.end.max()) // RELEASE_NS + 2) + f.start[s] // RELEASE_NS
    _, inverse, counts = np.unique(key, return_inverse=True, return_counts=True)
    inverse = inverse.reshape(-1)
    callers = f.instance[np.maximum(f.parent[s], 0)]
    pairs = np.unique(np.c_[inverse, callers], axis=0)
    n_callers = np.bincount(pairs[:, 0], minlength=len(counts))
    bunched = (counts[inverse] >= RELEASE_BUNCH) & (n_callers[inverse] >= 2)
    return float(bunched.mean())


def read_together(f, cli: np.ndarray, srv: np.ndarray, big: np.ndarray, g: np.ndarray) -> float:
    """drained_together on the caller's side: how much more often the large-gap calls of one caller
    instance end close to another one than their callees' SERVER spans ended close to one another
    (same window and weights), as a share of what is left. A caller process that stopped (a pause)
    reads the replies that came meanwhile one after the other once it runs again; the wire delays
    each reply on its own, so the calls end as spread as their callees answered. 0 where too few."""
    if big.sum() < 2 * RELEASE_BUNCH:
        return 0.0
    window = max(0.1 * float(np.median(g[big])), float(RELEASE_NS))
    inst = f.instance[cli[big]].astype(np.int64)
    scale = int(f.end.max()) + 4 * int(window) + 2

    def near(t: np.ndarray) -> np.ndarray:  # another big call of the caller instance within the window
        key = inst * scale + t
        ordered = np.sort(key)
        around = np.searchsorted(ordered, key + window, side="right") - np.searchsorted(
            ordered, key - window, side="left")
        return around >= 2

    weight = np.maximum(g[big] - float(np.median(g)), 1.0)
    ended = float((weight * near(f.end[cli[big]])).sum() / weight.sum())
    answered = float((weight * near(f.end[srv[big]])).sum() / weight.sum())
    return clamp01((ended - answered) / max(1.0 - answered, 1e-9))


def drained_together(f, cli: np.ndarray, srv: np.ndarray, big: np.ndarray, g: np.ndarray) -> float:
    """How much more often the large-gap calls to one server instance start close to another one than
    they were sent close to another one (within a tenth of their median gap, at least 1 ms; weighed by
    the time each gap adds over the median), as a share of what is left: a process that stopped (a
    pause, a full backlog) takes the calls held meanwhile one after the other once it runs again,
    however spread their sends were; the wire delays each call on its own, so the starts are as
    spread as the sends. 0 where too few."""
    if big.sum() < 2 * RELEASE_BUNCH:
        return 0.0
    window = max(0.1 * float(np.median(g[big])), float(RELEASE_NS))
    inst = f.instance[srv[big]].astype(np.int64)
    scale = int(f.end.max()) + 4 * int(window) + 2

    def near(t: np.ndarray) -> np.ndarray:  # another big call on the instance within the window
        key = inst * scale + t
        ordered = np.sort(key)
        around = np.searchsorted(ordered, key + window, side="right") - np.searchsorted(
            ordered, key - window, side="left")
        return around >= 2

    weight = np.maximum(g[big] - float(np.median(g)), 1.0)  # by the time each gap adds
    started = float((weight * near(f.start[srv[big]])).sum() / weight.sum())
    sent = float((weight * near(f.start[cli[big]])).sum() / weight.sum())
    return clamp01((started - sent) / max(1.0 - sent, 1e-9))


COLD_KEY = re.compile(r"cold_?start", re.IGNORECASE)


def started_cold(f, srv: np.ndarray, big: np.ndarray) -> np.ndarray:
    """Which of the large gaps (mask over `srv`) wait for a SERVER span that is the first span its
    instance ran in the trace, or that says it started cold (a `faas.coldstart`-like attribute that
    is true): a process, container or function environment starts (init, imports, loading) before it
    takes its first call, and the caller waits for that inside the gap. The wire delays any call, not
    the first one of each instance."""
    out = np.zeros(len(srv), bool)
    if not big.any():
        return out
    s = srv[big]
    first_start = np.full(len(f.instances), np.iinfo(np.int64).max, np.int64)
    np.minimum.at(first_start, f.instance, f.start)
    cold = f.start[s] <= first_start[f.instance[s]]
    for code in np.unique(f.name[s]).tolist():
        for key, (idx, values) in f.attributes(code).items():
            if not COLD_KEY.search(key):
                continue
            marked = np.zeros(len(f), bool)
            marked[np.asarray(idx, np.int64)] = [str(v).lower() in ("true", "1") for v in values]
            cold |= marked[s]
    out[np.nonzero(big)[0][cold]] = True
    return out


def large_gaps(g: np.ndarray, p50: float) -> np.ndarray:
    """Gaps far beyond the usual one: over 5x the median, or (where the median itself is long, a
    steady trip to another region) more than 10 interquartile ranges and 5 ms above it."""
    q25, q75 = np.quantile(g, [0.25, 0.75])
    return (g > 5 * max(p50, 100_000)) | (g - p50 > max(10 * float(q75 - q25), 5_000_000))


def _gap_values(f, cli: np.ndarray, g: np.ndarray) -> np.ndarray:
    values = np.zeros(len(f))
    values[cli] = g
    return values


GC_TIME_KEY = re.compile(r"gc.*(time|duration|pause)|(time|duration|pause).*gc", re.IGNORECASE)


def gc_reported_lift(ctx: Context, cli: np.ndarray, srv: np.ndarray, big: np.ndarray) -> float:
    """Where request roots report GC time over the request (a numeric attribute such as
    `jvm.gc.collection_time_ms.delta`), the share of the large gaps whose wait (client start to server
    start) overlaps a request on the server instance that reported GC time, beyond the share of all
    calls that do (chance): q in p_big = q + (1 - q) p_all. 0 where no root reports GC time."""
    f = ctx.frame
    roots = f.requests.root
    windows = np.zeros(len(roots), bool)
    for code in np.unique(f.name[roots]).tolist():
        for key, (idx, values) in f.attributes(code).items():
            if not GC_TIME_KEY.search(key) or len(values) < 50:
                continue  # parse only the keys that name GC time
            try:
                reported = np.asarray(values, dtype=str).astype(np.float64) > 0
            except (TypeError, ValueError):
                continue
            mark = np.zeros(len(f), bool)
            mark[np.asarray(idx)[reported]] = True
            windows |= mark[roots]
    if not windows.any() or windows.all():
        return 0.0
    gc_roots = roots[windows]
    horizon = int(f.end.max()) + 2
    starts = np.sort(f.instance[gc_roots].astype(np.int64) * horizon + f.start[gc_roots])
    ends = np.sort(f.instance[gc_roots].astype(np.int64) * horizon + f.end[gc_roots])
    base = f.instance[srv].astype(np.int64) * horizon
    a, b = base + f.start[cli], base + np.maximum(f.start[srv], f.start[cli])
    # windows that started before the wait ended and ended after it started
    overlapping = np.searchsorted(starts, b, side="right") - np.searchsorted(ends, a, side="left")
    hit = overlapping > 0
    p_all, p_big = float(hit.mean()), float(hit[big].mean())
    return clamp01((p_big - p_all) / max(1.0 - p_all, 1e-9))
