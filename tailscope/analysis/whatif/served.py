"""Where a run's requests wait for the model and are served by it: per request, its forward span,
the wait before it (a queue-stage span ending where the forward starts, or, where no such span is
traced, the gap before the forward), the batch it was served in, and per instance how many batches
ran side by side (the servers). What the queue replay (replay.py) needs, read from timing."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tailscope.analysis.diagnosis.frame import TraceFrame
from tailscope.analysis.whatif.retime import Layout
from tailscope.vocabulary import ALL_STAGES

FORWARD = ALL_STAGES.index("model_forward")
QUEUE = ALL_STAGES.index("queue")
HOLE_MATERIAL = 0.05  # a gap before the forward is the queue (no span) when its median is >= 5 % of latency


@dataclass
class Served:
    request: np.ndarray  # request index of each served request (one row each)
    forward: np.ndarray  # its forward span
    queue: np.ndarray  # its queue span; -1 where the wait is the gap before the forward (no span)
    instance: np.ndarray  # the instance that served it
    size: np.ndarray  # its measured batch's size
    batch: np.ndarray  # its measured batch (a number per distinct forward interval of an instance)
    servers: dict[int, int]  # instance -> batches seen running at once
    max_batch: int
    window_ns: float  # the batcher's wait for more requests

    def wait(self, frame: TraceFrame, lay: Layout) -> np.ndarray:
        """The measured wait of each row (ns)."""
        hole = self.queue < 0
        return np.where(hole, lay.gap[self.forward], frame.dur[np.maximum(self.queue, 0)]).astype(np.float64)


def _setup_number(frame: TraceFrame, key: str) -> float | None:
    try:
        return float(frame.setup[key])
    except (KeyError, TypeError, ValueError):
        return None


def _servers(instance: np.ndarray, start: np.ndarray, end: np.ndarray) -> dict[int, int]:
    """Per instance: the most distinct batches running at one moment (a sweep over starts and ends)."""
    out: dict[int, int] = {}
    for inst in np.unique(instance).tolist():
        sel = instance == inst
        times = np.r_[start[sel], end[sel]]
        step = np.r_[np.ones(sel.sum(), np.int64), -np.ones(sel.sum(), np.int64)]
        order = np.lexsort((step, times))  # an end before a start at the same instant
        out[int(inst)] = max(int(np.cumsum(step[order]).max(initial=1)), 1)
    return out


def _wrapper(frame: TraceFrame, stage: np.ndarray, parent: np.ndarray, fwd: np.ndarray) -> np.ndarray:
    """Each forward span's parent where that parent wraps the batch's execution (it starts a few
    steps before the forward: an input copy, within a quarter of the forward's time; not a queue or
    forward span itself), else the forward span: the queue span may be the wrapper's sibling."""
    par = np.maximum(parent[fwd], 0)
    lead = frame.start[fwd] - frame.start[par]
    wraps = (parent[fwd] >= 0) & (lead <= np.maximum(frame.dur[fwd] // 4, 1000))
    wraps &= ~np.isin(stage[par], (QUEUE, FORWARD))
    return np.where(wraps, par, fwd)


SPILL_NS = 1_000  # a forward starting this close to its sibling forward's end ran right after it


def _first_of_spill(frame: TraceFrame, lay: Layout, every: np.ndarray, chosen: np.ndarray) -> np.ndarray:
    """Each request's forward span (`chosen`: its longest) moved back to the first of the chain it ends:
    a request whose rows spill over several batches runs them back to back (sibling forward spans,
    each starting as the one before it ends); its wait for the model is before the first, and the
    later ones' gaps are nothing. `every`: all the outermost forward spans."""
    order = np.lexsort((frame.start[every], lay.parent[every], frame.request[every]))
    every = every[order]
    pos = np.full(len(frame), -1, np.int64)
    pos[every] = np.arange(len(every))
    prev = np.r_[-1, every[:-1]]
    same = np.r_[False, (lay.parent[every][1:] == lay.parent[every][:-1])
                 & (frame.request[every][1:] == frame.request[every][:-1])]
    end_prev = np.where(same, frame.start[np.maximum(prev, 0)] + frame.dur[np.maximum(prev, 0)], 0)
    abuts = same & (np.abs(frame.start[every] - end_prev) <= SPILL_NS)
    # the chain's first: each span's index walks back over abutting predecessors (a running max of
    # the positions where a chain starts)
    head = np.maximum.accumulate(np.where(abuts, 0, np.arange(len(every))))
    return every[head[pos[chosen]]]


def served(frame: TraceFrame, stage: np.ndarray, lay: Layout) -> Served | None:
    """The run's served requests (None where no request has a model_forward span). `stage`: each
    span's stage as the diagnosis infers it (Context.stage)."""
    reqs = frame.requests
    n_req = len(reqs) if reqs is not None else 0
    is_fwd = (stage == FORWARD) & (frame.request >= 0)
    p = lay.parent
    is_fwd &= ~((p >= 0) & (stage[np.maximum(p, 0)] == FORWARD))  # the outermost forward span
    fwd = np.nonzero(is_fwd)[0]
    if n_req == 0 or len(fwd) == 0:
        return None
    order = np.lexsort((-frame.dur[fwd], frame.request[fwd]))  # one per request: its longest
    fwd = fwd[order]
    keep = np.r_[True, frame.request[fwd][1:] != frame.request[fwd][:-1]]
    fwd = _first_of_spill(frame, lay, np.nonzero(is_fwd)[0], fwd[keep])
    request = frame.request[fwd]
    # a queue span: a sibling in the queue stage ending where the forward starts (within 1 % of it),
    # or where the steps the batch runs before the forward start (an input copy: spans with no gap
    # between them and the forward, together under a quarter of its time): the last such
    q_cand = np.nonzero((stage == QUEUE) & (frame.request >= 0))[0]
    queue = np.full(len(fwd), -1, np.int64)
    if len(q_cand):
        pos = np.full(n_req, -1, np.int64)
        pos[request] = np.arange(len(fwd))
        row = pos[frame.request[q_cand]]
        ok = row >= 0
        q_cand, row = q_cand[ok], row[ok]
        q_end = frame.start[q_cand] + frame.dur[q_cand]
        for level in range(2):  # the forward's own siblings, then its wrapper's (Triton's `compute`)
            f_span = fwd[row] if level == 0 else _wrapper(frame, stage, p, fwd[row])
            tol = np.maximum(frame.dur[fwd[row]] // 100, 1000)
            lead = frame.start[f_span] - q_end
            steps = (lay.gap[f_span] <= tol) & (lead <= np.maximum(frame.dur[fwd[row]] // 4, tol))
            near = (p[q_cand] == p[f_span]) & (lead >= -tol) & ((lead <= tol) | steps)
            near &= queue[row] < 0
            order = np.argsort(q_end[near], kind="stable")  # the last-ending one wins
            queue[row[near][order]] = q_cand[near][order]
    hole = queue < 0
    if hole.any():  # no queue span: the gap before the forward is the wait, where it is material
        lat = reqs.latency[request[hole]].astype(np.float64)
        if np.median(lay.gap[fwd[hole]]) < HOLE_MATERIAL * np.median(lat):
            fwd, request, queue = fwd[~hole], request[~hole], queue[~hole]
    if len(fwd) == 0:
        return None
    inst = frame.instance[fwd]
    f_start, f_end = frame.start[fwd], frame.start[fwd] + frame.dur[fwd]
    key = np.stack([inst, f_start, f_end])
    _, batch, size = np.unique(key, axis=1, return_inverse=True, return_counts=True)
    batch = batch.reshape(-1)
    sizes = size[batch]
    first = np.unique(batch, return_index=True)[1]
    servers = _servers(inst[first], f_start[first], f_end[first])
    max_batch = _setup_number(frame, "tailscope.batch.max_size") or float(sizes.max())
    window = _setup_number(frame, "tailscope.batch.max_wait_ms")
    if window is not None:
        window_ns = window * 1e6
    else:
        window_ns = _window(frame, lay, fwd, queue, batch, sizes, int(max_batch))
    return Served(request, fwd, queue, inst, sizes, batch, servers, int(max(max_batch, 1)), window_ns)


def _window(frame, lay, fwd, queue, batch, sizes, max_batch: int) -> float:
    """The batching window where the setup does not say: the first member's wait in batches that left
    before filling up, at its lower decile (an idle server sends a batch when the window closes)."""
    wait = np.where(queue < 0, lay.gap[fwd], frame.dur[np.maximum(queue, 0)]).astype(np.float64)
    if max_batch <= 1:  # no batch seen with two: a window still shows where the waits sit at a ceiling
        return _ceiling(wait[queue >= 0])
    arrival = frame.start[fwd] - wait
    order = np.lexsort((arrival, batch))
    lead = order[np.r_[True, batch[order][1:] != batch[order][:-1]]]
    lead = lead[sizes[lead] < max_batch]
    return float(np.quantile(wait[lead], 0.1)) if len(lead) else 0.0


AT_CEILING = 0.98  # a wait within 2 % of the longest sits at the ceiling
CEILING_SHARE = 0.5  # ... and at least this share of a queue span's waits do: a timer, the window


def _ceiling(wait: np.ndarray) -> float:
    """A batcher's window read from its queue spans where no batch had two members (a window the
    traffic never fills: every request waits it out alone): the waits' ceiling, where at least half of
    them sit within 2 % of the longest; 0 where they do not (a queue, not a timer)."""
    if len(wait) < 20 or wait.max() <= 0:
        return 0.0
    top = wait >= AT_CEILING * wait.max()
    return float(np.median(wait[top])) if top.mean() >= CEILING_SHARE else 0.0


def replica_routing(s: Served, extra: int, seed: int) -> tuple[np.ndarray, dict[int, int], np.ndarray]:
    """Which server pool each row queues at, each pool's servers, and which rows moved. One
    instance: its servers grow. Several: `extra` more instances, each taking an even share of the
    requests (a request stays where it was with probability instances / (instances + extra), else
    goes to a new instance picked at random)."""
    pools = {k: v for k, v in s.servers.items()}
    moved = np.zeros(len(s.instance), bool)
    if extra <= 0:
        return s.instance, pools, moved
    if len(pools) == 1:
        only = next(iter(pools))
        return s.instance, {only: pools[only] + extra}, moved
    names = sorted(pools)
    typical = int(np.median([pools[k] for k in names]))
    new = np.arange(max(names) + 1, max(names) + 1 + extra)
    pools.update({int(k): typical for k in new})
    rng = np.random.default_rng([seed, 11])
    moved = rng.random(len(s.instance)) >= len(names) / (len(names) + extra)
    pool = s.instance.copy()
    pool[moved] = new[rng.integers(0, extra, int(moved.sum()))]
    return pool, pools, moved
