"""Traces rooted at a client: a phone, a browser, a batch caller (a service that only calls out).

What the trace shows. The client's span wraps the service's requests: its time is the client's own leg
(the connection, the upload of the request over the client's link, the reply's download) around the
service's. On a client behind a wide-area last mile (a cellular or home link), that leg is a large part
of every request, not only of the slow ones (its median is at least the service's), and its spread
is the link's ordinary spread (the request's size over the link's rate, which varies from client to
client and moment to moment): a server-side cause moves the end-to-end tail by a few per cent. A user
who traces from the client still wants the service's own tail diagnosed, and the client's leg must not
be blamed for it.

Relays. A tier between the client and the service that makes no call of its own and hands each request
to one SERVER span of another service (a buffering edge proxy: TLS, then the body, then the forward;
its span starts before the body has arrived) is part of the client's leg: its time before the forward
is the body's transfer from the client. The service's entry is the SERVER span it hands the request to
(`entries`).

Populations (`populations`, runner.py). Where the clients are end users whose leg is in the ordinary
request (as above) and a relay stands in front of the service, the run is diagnosed twice, as units.py
does for a queue's consumers: the requests as the first server sees them (the client's leg and the
relay: their findings on spans outside the service's entry, `outside`), and the service's own requests
(the entry's subtree, as its own population: its latency distribution, its tail vs body). unit_merge.py
names each finding's entry point and ranks the named causes of both by their ms of tail excess.

The client's leg itself. A finding on it (network on the client's call) is the first population's
and keeps its own detector's confidence: a jittery or lossy link that every path shares is a real
network cause of what the user feels, and nothing in the leg's timings alone tells it from the link's
ordinary spread (session 16's hold on it, which asked for one path slower than its peers, lost a real
shared jitter and was reverted). The service's own population says whether the service has a tail of
its own.
"""

from __future__ import annotations

import numpy as np

from tailscope.analysis.diagnosis import units
from tailscope.analysis.diagnosis.frame import KIND_CLIENT, KIND_SERVER, TraceFrame

LEG_AT_MEDIAN = 1.0  # the client's leg is at least the service's time in the ordinary request
END_USER_SHARE = 0.5  # ... for most requests
RELAYED = 0.9  # a tier relays when it hands this share of its requests to one server span, and no more
MAX_RELAYS = 4


def end_user(frame: TraceFrame) -> np.ndarray:
    """Per request: its root's caller is a CLIENT span of a service with no SERVER span in the run."""
    f = frame
    cli = f.requests.client_span
    out = cli >= 0
    if not out.any():
        return out
    serves = np.zeros(len(f.services) + 1, bool)
    serves[f.service[f.kind == KIND_SERVER]] = True
    out[out] = ~serves[f.service[cli[out]]]
    return out


def entries(frame: TraceFrame) -> np.ndarray | None:
    """Per request: the service's entry (span index): the request root, below the relays in front of
    it (module docstring); None where the run has no end-user clients, no relay, or a client's leg
    shorter than the service's own time in the ordinary request."""
    f = frame
    users = end_user(f)
    if users.mean() < END_USER_SHARE if len(users) else True:
        return None
    n = len(f)
    has_parent = f.parent >= 0
    n_children = np.bincount(f.parent[has_parent], minlength=n)
    only_child = np.full(n, -1, np.int64)
    kids = np.nonzero(has_parent)[0]
    only_child[f.parent[kids]] = kids  # the last one written; meaningful where n_children == 1
    entry = f.requests.root.copy()
    moved = np.zeros(len(entry), bool)
    for _ in range(MAX_RELAYS):
        child = np.where(n_children[entry] == 1, only_child[entry], -1)
        via = (child >= 0) & (f.kind[np.maximum(child, 0)] == KIND_CLIENT)
        hop = child.copy()
        hop[via] = np.where(n_children[child[via]] == 1, only_child[child[via]], -1)
        ok = (hop >= 0) & users
        ok[ok] = (f.kind[hop[ok]] == KIND_SERVER) & (f.service[hop[ok]] != f.service[entry[ok]])
        if ok.mean() < RELAYED:
            break
        entry[ok] = hop[ok]
        moved |= ok
    if not moved.any():
        return None
    # the client's leg (its span less the service's) is in the ordinary request: a last mile, not a
    # load generator's wire in the service's own zone (whose relays' time is the service's side)
    cli = f.requests.client_span[users & moved]
    leg = np.median(f.dur[cli] - f.dur[entry[users & moved]])
    return entry if leg >= LEG_AT_MEDIAN * np.median(f.dur[entry[users & moved]]) else None


def populations(frame: TraceFrame) -> list[units.Population] | None:
    """The requests as the first server sees them and the service's own requests (below the relays),
    each a units.Population; None where the run is not rooted at end users behind a relay."""
    entry = entries(frame)
    if entry is None:
        return None
    is_head = np.zeros(len(frame), bool)
    is_head[entry] = True
    spans = np.nonzero(units._unit_of(frame.parent, is_head) >= 0)[0]
    sub = units._subframe(frame, spans, np.sort(entry), frame.start[np.sort(entry)], roots_given=True)
    if sub.requests is None or len(sub.requests) == 0:
        return None
    return [units.Population("request", units._entry(frame), frame),
            units.Population("request", units._entry(sub), sub)]


def outside(frame: TraceFrame, service_frame: TraceFrame, findings: list) -> list:
    """The first population's findings that speak for the client's leg or the relay: those on a span
    name seen outside the service's entries (the service's own are its population's)."""
    inside = set(service_frame.names[c] for c in np.unique(service_frame.name).tolist())
    entry = entries(frame)
    mine = np.zeros(len(frame), bool)
    if entry is not None:
        is_head = np.zeros(len(frame), bool)
        is_head[entry] = True
        mine = units._unit_of(frame.parent, is_head) >= 0
    beyond = set(frame.names[c] for c in np.unique(frame.name[~mine]).tolist())
    return [fd for fd in findings
            if fd.span_name is not None and (fd.span_name in beyond or fd.span_name not in inside)]
