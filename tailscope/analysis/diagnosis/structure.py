"""Request structure beyond parent links: detached children, the instance that did a request's work,
and the spans that wrap a request's work. Pure numpy over span columns (used by frame.build_frame
and the detectors); nothing here knows a span name.

- A *detached* child runs mostly outside its parent: a message queue's CONSUMER span is the child of
  the PRODUCER span that published the message but starts after the publish has ended (OpenTelemetry
  messaging), and so does work a span hands to a thread it does not await. Its time is not the
  parent's to subtract; it is subtracted from the nearest ancestor that holds it, so the wait between
  the two (a broker's hand-off, a backlog) stays the exclusive time of that ancestor.
- The *work instance* of a request is the instance whose spans below the root hold most of its
  exclusive time, not counting callees (spans at or below a SERVER span reached through a CLIENT
  call) nor the root's own time (which holds waits: a message waiting for a paused worker). It is the root's
  instance for a service that does its own work, the worker's for a request handed on through a queue.
- A *wrapper* is a span with children that covers most of its request (a controller or handler span
  under the root, a queue consumer that runs the work): its uncovered time is the request's own, as
  the root's is (a batch queue without a span shows there).
"""

from __future__ import annotations

import numpy as np

DETACHED = 0.5  # a child with less than half of its time inside its parent is detached
WRAPS = 0.8  # a wrapper covers at least this share of its request's latency (median over its name)
WRAPPER_PRESENCE = 0.9  # ... in at least this share of the requests


def containing_parent(parent: np.ndarray, start: np.ndarray, dur: np.ndarray) -> np.ndarray:
    """Per span: the nearest ancestor that holds at least half of it (its parent, unless detached;
    -1 where none does)."""
    eff = parent.astype(np.int64).copy()
    end = start + dur
    todo = np.nonzero(eff >= 0)[0]
    for _ in range(64):
        if len(todo) == 0:
            break
        p = eff[todo]
        inside = np.minimum(end[todo], end[p]) - np.maximum(start[todo], start[p])
        detached = np.maximum(inside, 0) < DETACHED * dur[todo]
        todo = todo[detached]
        eff[todo] = parent[eff[todo]]
        todo = todo[eff[todo] >= 0]
    return eff


def callee_mask(
    parent: np.ndarray, kind: np.ndarray, depth: np.ndarray, server: int, client: int
) -> np.ndarray:
    """Spans at or below a SERVER span whose parent is a CLIENT span (another service's side of a call)."""
    has_p = parent >= 0
    flag = np.zeros(len(parent), bool)
    flag[has_p] = (kind[has_p] == server) & (kind[parent[has_p]] == client)
    for d in range(1, int(depth.max(initial=0)) + 1):
        sel = np.nonzero((depth == d) & has_p)[0]
        flag[sel] |= flag[parent[sel]]
    return flag


def work_instances(
    request: np.ndarray, instance: np.ndarray, excl: np.ndarray, own: np.ndarray, root_instance: np.ndarray
) -> np.ndarray:
    """Per request: the instance of `own` spans holding most of its exclusive time (the root's
    instance where all its own spans run there)."""
    sel = own & (request >= 0)
    req, inst = request[sel], instance[sel]
    if len(req) == 0 or (inst == root_instance[req]).all():
        return root_instance.copy()
    n_inst = int(max(instance.max(initial=0), root_instance.max(initial=0))) + 1
    keys, inverse = np.unique(req.astype(np.int64) * n_inst + inst, return_inverse=True)
    sums = np.bincount(inverse.reshape(-1), weights=excl[sel].astype(np.float64))
    key_req = keys // n_inst
    order = np.lexsort((sums, key_req))
    last = order[np.r_[key_req[order][1:] != key_req[order][:-1], True]]
    out = root_instance.copy()
    out[key_req[last]] = keys[last] % n_inst
    return out


def wrapper_spans(
    request: np.ndarray,
    name: np.ndarray,
    dur: np.ndarray,
    leaf: np.ndarray,
    roots: np.ndarray,
    latency: np.ndarray,
) -> np.ndarray:
    """Span indices of wrappers (see the module docstring), roots excluded."""
    is_root = np.zeros(len(request), bool)
    is_root[roots] = True
    cand = np.nonzero((request >= 0) & ~leaf & ~is_root)[0]
    if len(cand) == 0 or len(roots) == 0:
        return cand
    cover = dur[cand] / np.maximum(latency[request[cand]], 1)
    out = []
    for code in np.unique(name[cand]).tolist():
        mine = name[cand] == code
        if len(np.unique(request[cand[mine]])) < WRAPPER_PRESENCE * len(roots):
            continue
        if np.median(cover[mine]) >= WRAPS:
            out.append(cand[mine])
    return np.concatenate(out) if out else np.zeros(0, np.int64)


FAN_OVERLAP = 0.5  # a call side by side with the longest: at least half of it runs during the longest


def outer_calls(parent: np.ndarray, kind: np.ndarray, is_root: np.ndarray, kind_server: int, kind_client: int
                ) -> tuple[np.ndarray, np.ndarray]:
    """(call, root): each request root's outermost CLIENT calls, those with no SERVER or CLIENT span
    between them and the root (its own calls, not its callees')."""
    is_client = kind == kind_client
    calls = np.nonzero(is_client & (parent >= 0))[0]
    stop = (kind == kind_server) | is_client
    holder = np.full(len(calls), -1, np.int64)  # nearest SERVER or CLIENT ancestor of each call
    cur = parent[calls].copy()
    todo = np.arange(len(calls))
    for _ in range(256):
        todo = todo[cur[todo] >= 0]
        if len(todo) == 0:
            break
        hit = stop[cur[todo]]
        holder[todo[hit]] = cur[todo[hit]]
        todo = todo[~hit]
        cur[todo] = parent[cur[todo]]
    keep = holder >= 0
    keep[keep] = is_root[holder[keep]]
    return calls[keep], holder[keep]


def fan_out_roots(
    parent: np.ndarray, kind: np.ndarray, service: np.ndarray, start: np.ndarray, dur: np.ndarray,
    is_root: np.ndarray, kind_server: int, kind_client: int,
) -> np.ndarray:
    """Per span: whether it is a request root that calls two services side by side (an aggregator: its
    latency is the slowest of several calls, not one callee's time). The root's outermost CLIENT calls
    (none between them and the root but non-call spans) are compared with the longest of them: another
    one, to another service (its SERVER child's, where traced), that runs at least half of its time
    during the longest makes the root a fan-out. Calls one after the other (a retry, an auth check
    then the forward) do not."""
    n = len(parent)
    out = np.zeros(n, bool)
    is_client = kind == kind_client
    calls, root = outer_calls(parent, kind, is_root, kind_server, kind_client)
    if len(calls) < 2:
        return out
    callee = np.full(n, -1, np.int64)  # the service a call reaches (-1: not traced)
    servers = np.nonzero((kind == kind_server) & (parent >= 0))[0]
    servers = servers[is_client[parent[servers]]]
    callee[parent[servers]] = service[servers]
    order = np.lexsort((dur[calls], root))
    calls, root = calls[order], root[order]
    last = np.r_[root[1:] != root[:-1], True]
    longest = np.full(n, -1, np.int64)
    longest[root[last]] = calls[last]
    big = longest[root]
    end = start + dur
    overlap = np.minimum(end[calls], end[big]) - np.maximum(start[calls], start[big])
    other = (calls != big) & ((callee[calls] != callee[big]) | (callee[calls] < 0))
    side = other & (overlap >= FAN_OVERLAP * np.maximum(dur[calls], 1))
    out[root[side]] = True
    return out


def distinct_per_owner(owner: np.ndarray, value: np.ndarray, n: int) -> np.ndarray:
    """Per span index (0..n-1): how many distinct values its owned items carry (the services a root's
    forwarded calls reach)."""
    if len(owner) == 0:
        return np.zeros(n, np.int64)
    low = int(value.min())
    width = int(value.max()) - low + 1
    pairs = np.unique(owner.astype(np.int64) * width + (value.astype(np.int64) - low))  # one flat key:
    return np.bincount(pairs // width, minlength=n)  # np.unique(axis=1) sorted rows as records, 5x slower
