"""Proxy tiers: request roots moved from a service that only forwards (an API gateway, a sidecar, a
front end) to the span of the service it forwards to (see frame.py's docstring). Pure numpy over a
frame's span columns; the span kinds' codes are passed in (frame.py owns them)."""

from __future__ import annotations

import numpy as np

from tailscope.analysis.diagnosis.stats import excess_share, tail_split
from tailscope.analysis.diagnosis.structure import distinct_per_owner, fan_out_roots, outer_calls

PROXY_COVERAGE = 0.6  # a root mostly covered by one forwarded call (median) is a proxy tier
PROXY_COVERAGE_SEVERAL = 0.8  # ... where it calls several services: all but a fifth of it
PROXY_TAIL = 0.5  # ... or one whose forwarded call carries most of its tail excess
PROXY_CALLEE = 0.8  # a root calling several services forwards to one of them in most requests
OWN_CALLS = 3  # a root making this many distinct calls of its own (traced or not) calls several services


def _mode_share(values: np.ndarray) -> float:
    return float(np.unique(values, return_counts=True)[1].max() / max(len(values), 1))


def _nearest_server_above(parent: np.ndarray, is_server: np.ndarray, spans: np.ndarray) -> np.ndarray:
    """For each span of `spans`: its nearest SERVER ancestor (-1 where none)."""
    out = np.full(len(spans), -1, np.int64)
    cur = parent[spans].copy()
    todo = np.arange(len(spans))
    for _ in range(256):
        alive = cur[todo] >= 0
        todo = todo[alive]
        if len(todo) == 0:
            break
        hit = is_server[cur[todo]]
        out[todo[hit]] = cur[todo[hit]]
        todo = todo[~hit]
        cur[todo] = parent[cur[todo]]
    return out


def descend_proxies(
    frame, parent: np.ndarray, is_root: np.ndarray, kind_server: int, kind_client: int
) -> np.ndarray:
    """Request roots moved from proxy tiers to the span of the service they forward to (see frame.py's
    docstring). Returns the span indices of the roots that moved (their new position)."""
    is_server = frame.kind == kind_server
    servers = np.nonzero(is_server & (parent >= 0))[0]
    if len(servers) == 0:
        return np.zeros(0, np.int64)
    above = _nearest_server_above(parent, is_server, servers)
    via_client = frame.kind[parent[servers]] == kind_client
    has_children = np.bincount(parent[parent >= 0], minlength=len(frame)) > 0
    moved_all = []
    for _ in range(4):  # a gateway in front of a router in front of the model server, at most
        fan_out = fan_out_roots(parent, frame.kind, frame.service, frame.start, frame.dur, is_root,
                                kind_server, kind_client)
        ok = (above >= 0) & via_client
        ok[ok] = is_root[above[ok]] & (frame.service[servers[ok]] != frame.service[above[ok]])
        cand, root = servers[ok], above[ok]
        if len(cand) == 0:
            break
        callees = distinct_per_owner(root, frame.service[cand], len(frame))
        # the calls it makes of its own, to dependencies traced or not (a rate limiter, an object
        # store, a database): a service that works between several calls is no forwarder, even where
        # one traced callee holds the run's tail (a surge queued in the model server)
        own, own_root = outer_calls(parent, frame.kind, is_root, kind_server, kind_client)
        own_calls = distinct_per_owner(own_root, frame.name[own], len(frame))
        # one forwarded call per root: the longest
        order = np.lexsort((frame.dur[cand], root))
        cand, root = cand[order], root[order]
        last = np.r_[root[1:] != root[:-1], True]
        cand, root = cand[last], root[last]
        call = frame.dur[parent[cand]]  # the time handed on: the CLIENT span (with the wire and accept)
        cover = call / np.maximum(frame.dur[root], 1)
        roots = np.nonzero(is_root)[0]
        group_codes = frame.service[roots] * (len(frame.names) + 1) + frame.name[roots]
        groups, group_of = np.unique(group_codes, return_inverse=True)
        coverage = np.zeros(len(frame), np.float64)
        coverage[root] = cover
        # the tail handed on ends when the callee's answer leaves it: a reply read late (the caller
        # paused, or the wire back) is the caller's own tail, not the callee's
        call_dur = np.zeros(len(frame), np.float64)
        call_dur[root] = frame.start[cand] + frame.dur[cand] - frame.start[parent[cand]]
        traced_work = np.zeros(len(frame), bool)  # the callee's own spans are traced: its work is visible
        traced_work[root] = has_children[cand]
        callee_of = np.full(len(frame), -1, np.int64)
        callee_of[root] = frame.service[cand]
        proxy = np.zeros(len(groups), bool)
        for g in range(len(groups)):
            members = roots[group_of == g]
            if traced_work[members].mean() < 0.5 or fan_out[members].mean() >= 0.5:
                continue  # an aggregator's latency is its slowest call, not one callee's: not a proxy
            if _mode_share(callee_of[members]) < PROXY_CALLEE:
                # its longest call goes to one service in some requests and another in the rest (in
                # turn, or on a conditional path): an orchestrator of its own work, not a forward
                continue
            several = np.median(callees[members]) >= 2 or np.median(own_calls[members]) >= OWN_CALLS
            covered = np.median(coverage[members]) >= (PROXY_COVERAGE_SEVERAL if several else PROXY_COVERAGE)
            if several and not covered:
                # calls several services and its longest call leaves a real part of it: it works
                # between the calls (a service of its own), even where one callee owns its tail
                continue
            tail_share = excess_share(call_dur[members], tail_split(frame.dur[members]))
            proxy[g] = covered or tail_share >= PROXY_TAIL
        position = np.full(len(frame), -1, np.int64)
        position[roots] = group_of
        move = proxy[position[root]]
        if not move.any():
            break
        is_root[root[move]] = False
        is_root[cand[move]] = True
        moved_all.append(cand[move])
    return np.concatenate(moved_all) if moved_all else np.zeros(0, np.int64)
