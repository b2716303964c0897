"""The pauses of one process that its callers wait on (see levers.py): a server process inside an
instance (an Erlang GenServer with its own heap, an actor) that serves calls one at a time and
collects its own garbage, reporting nothing. While it is stopped, calls to it arrive and none ends;
when it resumes, the calls that waited are released together. Other processes of the instance run on,
so only the calls to it (and the requests waiting on them) lose the pause: not every span in flight
on the instance, as a stop-the-world pause's lever (`no_gc_stalls`) has it."""

from __future__ import annotations

from typing import Any

import numpy as np

from tailscope.analysis.diagnosis.frame import KIND_CLIENT, SPAN_KINDS
from tailscope.analysis.whatif.levers import SOFTWARE, Inputs, Lever, _draw, stall_overlap
from tailscope.analysis.whatif.retime import Edit

PAUSE_MIN_NS = 2_000_000  # a stretch with calls in flight and none ending, at least this long ...
PAUSE_RATIO = 20.0  # ... and this many times the calls' median time, is the process stopped
MIN_CALLS = 50  # calls on an instance to judge its process from
_OUTBOUND = (KIND_CLIENT, SPAN_KINDS.index("Producer"))  # calls out: their time is the callee's


def call_pauses(x: Inputs, spans: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per instance, the stretches in which its calls of `spans` (one name) were in flight and none
    ended, long enough to be the called process stopped: from the later of the previous call's end and
    the start of the call that ended it (the first released), to that call's end. (instance, start,
    end), ns."""
    f = x.frame
    out_i, out_s, out_e = [], [], []
    start, end = f.start[spans].astype(np.int64), (f.start[spans] + f.dur[spans]).astype(np.int64)
    inst = f.instance[spans]
    for i in np.unique(inst).tolist():
        sel = np.nonzero(inst == i)[0]
        if len(sel) < MIN_CALLS:
            continue
        order = sel[np.argsort(end[sel], kind="stable")]
        e, s = end[order], start[order]
        limit = max(PAUSE_MIN_NS, PAUSE_RATIO * float(np.median(e - s)))
        begin = np.maximum(e[:-1], s[1:])  # the stretch before each end with its call in flight
        k = np.nonzero(e[1:] - begin >= limit)[0]
        out_i.append(np.full(len(k), i, np.int64))
        out_s.append(begin[k])
        out_e.append(e[1:][k])
    if not out_i:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64)
    return np.concatenate(out_i), np.concatenate(out_s), np.concatenate(out_e)


def no_process_pauses(x: Inputs, finding: dict[str, Any]) -> Lever | None:
    """A pause finding that names a call span where the run shows no pause of a whole instance (no
    runtime reports, no stretch in which an instance did nothing): the called process's pauses, read
    from the calls (`call_pauses`), are removed from every call to it in flight through them, and each
    such call takes the time of a call that waited for none (the queue of calls released together is
    gone with the pause). The model's queue is replayed (the released requests no longer arrive at it
    together)."""
    if x.stalls is not None and len(x.stalls[0]):
        return None  # the instance's own pauses: `no_gc_stalls`
    name = finding.get("span_name")
    spans = x.spans_named(name)
    if len(spans) < MIN_CALLS:
        return None
    pauses = call_pauses(x, spans)
    if len(pauses[0]) == 0:
        return None
    f, lay = x.frame, x.lay
    start = f.start[spans].astype(np.int64)
    end = start + f.dur[spans]
    leaf = ~lay.has_children[spans]
    edit = Edit.none(len(f))
    inner_start = np.where(leaf, start, end - lay.trailing[spans])  # a parent: its time after its children
    lost = stall_overlap(pauses, f.instance[spans], inner_start, end)
    edit.cut_after[spans] = lost
    # a call that waited, released with the others, is then served in its turn: without the pause it
    # found the process as a call that waited for none does (drawn from the run)
    waited, calm = leaf & (lost > 0), leaf & (lost == 0)
    if calm.sum() >= MIN_CALLS:
        rows = spans[waited]
        edit.cut_after[rows] = 0.0
        edit.dur[rows] = np.minimum(_draw(x.rng(31), f.dur[spans[calm]], len(rows)), f.dur[rows])
    total = float((pauses[2] - pauses[1]).sum()) / 1e6
    return Lever(
        f"no_gc_stalls:{name}",
        f"No pauses of the process '{name}' calls",
        SOFTWARE,
        f"the stretches in which calls of '{name}' were in flight on an instance and none ended (the "
        "called process stopped: its own collections) are removed from those calls, each taking the "
        "time of a call that waited for none (drawn from the run); the rest of the instance ran on",
        edit,
        pattern="gc_pause",
        span_name=name,
        requeue=True,
        params={"stall_ms": round(total, 1), "pauses": len(pauses[0])},
    )


# ---- steps stretched by a concurrent collection (mark assists) ------------------------------------

STRETCH_RATIO = 10.0  # a step this many times its name's median on the service ...
STRETCH_MIN_NS = 2_000_000  # ... and at least this long was stretched by the collection
MIN_STEPS = 50  # steps of a name on the service to judge its usual time from


def stretched_steps(x: Inputs, finding: dict[str, Any]) -> Edit | None:
    """A concurrent collector (Go's, the JVM's concurrent phases) stops no process: while it marks,
    a goroutine that allocates is drafted into mark assist, or parked until the mark ends, and the
    rest run on. No stretch without span boundaries shows it (the stall lever's timing stalls catch a
    part); the process's own steps that allocate are stretched many times their usual time. Where the
    run reports no pause with its length, on the service the gc_pause finding names (its instances,
    else its service's): each step of the process's own work (a span with no children that is no call
    out) over 10x its name's median there (and over 2 ms) takes the time of one of its name that was
    not (drawn from the run); a span's own time after its last child likewise, cut to its name's
    median. None where no step is stretched."""
    f = x.frame
    if ((f.gc_instance >= 0) & (f.gc_dur > 0)).any():
        return None  # the runtime reports its pauses: the stall lever has them whole
    on = _finding_instances(f, finding)
    if not on.any():
        return None
    lay = x.lay
    edit = Edit.none(len(f))
    rng = x.rng(37)
    own = on & ~lay.has_children & ~np.isin(f.kind, _OUTBOUND)
    par = on & lay.has_children
    changed = False
    for code in np.unique(f.name[own | par]).tolist():
        steps = np.nonzero(own & (f.name == code))[0]
        if len(steps) >= MIN_STEPS:
            d = f.dur[steps].astype(np.float64)
            long = d > max(STRETCH_MIN_NS, STRETCH_RATIO * float(np.median(d)))
            if long.any() and (~long).sum() >= MIN_STEPS:
                edit.dur[steps[long]] = np.minimum(_draw(rng, d[~long], int(long.sum())), d[long])
                changed = True
        parents = np.nonzero(par & (f.name == code))[0]
        if len(parents) >= MIN_STEPS:
            t = lay.trailing[parents].astype(np.float64)
            usual = float(np.median(t))
            long = t > max(STRETCH_MIN_NS, STRETCH_RATIO * usual)
            if long.any():
                edit.cut_after[parents[long]] = t[long] - usual
                changed = True
    return edit if changed else None


def _finding_instances(f, finding: dict[str, Any]) -> np.ndarray:
    """Per span, whether it runs on an instance the finding names (else on its service's instances)."""
    stats = (finding.get("evidence") or {}).get("stats", {})
    named = [n for n in stats.get("instances") or [] if n in f.instances]
    if named:
        return np.isin(f.instance, [f.instances.index(n) for n in named])
    named = stats.get("services") or stats.get("service") or ""
    services = [s.strip() for s in (named.split(",") if isinstance(named, str) else named)]
    codes = [f.services.index(s) for s in services if s in f.services]
    return np.isin(f.service, codes)


def with_stretched_steps(x: Inputs, lever: Lever | None, findings: list[dict[str, Any]]) -> Lever | None:
    """The no-pauses lever with the steps a concurrent collection stretched (`stretched_steps`, per
    gc_pause finding in `findings`) re-timed too; that alone where no stall was found."""
    edits = [e for e in (stretched_steps(x, fd) for fd in findings) if e is not None]
    if not edits:
        return lever
    edit = edits[0]
    for more in edits[1:]:
        edit = edit.merged(more)
    model = ("the steps of the collected process stretched far past their usual time (a concurrent "
             "collector's mark assists: the allocating goroutine drafted or parked until the mark ends) "
             "take the time of its unstretched steps (drawn from the run)")
    if lever is None:
        return Lever("no_gc_stalls", "No GC pauses or process stalls", SOFTWARE, model, edit,
                     pattern="gc_pause", requeue=True)
    lever.edit = lever.edit.merged(edit)
    lever.model += "; " + model
    return lever
