"""Who held the wait (released_calls.py): three mechanisms make the requests of one process wait over
the same stretch and resume together, and the spans tell them apart by what else was stretched.

- a lock held by one holder (a metrics scrape holding the registry mutex every few seconds, with no
  span of its own): only the work that takes the lock waits; the process's other work in flight runs
  on and starts and ends through the stretch: lock_contention;
- a stop of the whole process (a collector's stop-the-world pause): every piece of its work in flight
  is stretched to the stop's end and nothing starts or ends inside it: gc_pause;
- a stalled dependency (an untraced cache server that stops): the waits sit in the calls out to it,
  whose release says that *it* stopped, not that this process holds anything: no lock here.

Hand-built frames with the same stretches (150-300 ms every 2 s on each of three processes)."""

from __future__ import annotations

import numpy as np

from tailscope.analysis.diagnosis import diagnose_frame
from tests.mechanism_frames import Pauses, TraceBuilder, lognormal

N, RPS, PROCESSES, PERIOD = 3000, 150.0, 3, 2000.0


def _stretches(b: TraceBuilder, horizon: float, shared: bool) -> Pauses:
    """Per process, the held (or stopped) stretches: 150-300 ms at a fixed period (a scrape's), each
    process its own phase, or (`shared`: one server stalling every client) the same on all."""
    out: dict[str, list[tuple[float, float]]] = {}
    for k in range(PROCESSES):
        if shared and k:
            out[f"api/{k}"] = out["api/0"]
            continue
        t, spans = float(b.rng.uniform(0.0, PERIOD)), []
        while t < horizon:
            spans.append((t, t + float(b.rng.uniform(150.0, 300.0))))
            t += PERIOD
        out[f"api/{k}"] = spans
    return Pauses(out)


def scraped(seed: int = 3, how: str = "lock") -> TraceBuilder:
    """A gateway calls a ranking API (3 processes): a feature read (CLIENT, ~1.5 ms), the model's
    forward (INTERNAL, ~8 ms), then the counter bump (`Stats.record`, ~5 us) at the end. `how`: 'lock' -
    the bump waits while a scrape holds the mutex, then the waiters take it one after another (5 us
    each), all else runs on; 'stop' - every thread of the process stops over the same stretches (the
    work in flight makes no progress, replies are read after); 'client' - the bump is a call out to an
    untraced store (CLIENT) that stops over the same stretches on every process (one server stalling
    every client at once) and answers its queue after."""
    b = TraceBuilder(seed)
    arrivals = b.arrivals(N, RPS)
    held = _stretches(b, float(arrivals[-1]) + 2000.0, how == "client")
    stop = held if how == "stop" else Pauses()
    queued: dict[tuple[str, float], int] = {}
    for t in arrivals:
        b.new_trace()
        inst = f"api/{int(b.rng.integers(PROCESSES))}"
        call = b.span(None, "POST /rank", "Client", "gw/0", float(t), 0.0, service="gateway")
        start = stop.run(inst, float(t) + 0.3, 0.0)
        root = b.span(call, "POST /rank", "Server", inst, start, 0.0, service="rank-api")
        began = stop.run(inst, start + 0.1, 0.0)
        end = stop.run(inst, began + lognormal(b.rng, 1.5, 0.3), 0.0)  # the reply read when running
        b.span(root, "GET features", "Client", inst, began, end - began, service="rank-api")
        began = end
        end = stop.run(inst, began, lognormal(b.rng, 8.0, 0.2))
        b.span(root, "Model.forward", "Internal", inst, began, end - began, service="rank-api")
        began = end + 0.05
        end = stop.run(inst, began, 0.005 * float(b.rng.lognormal(0.0, 0.3)))
        if how != "stop":
            release = next((y for x, y in held.spans[inst] if x <= began < y), None)
            if release is not None:
                rank = queued.get((inst, release), 0)
                queued[(inst, release)] = rank + 1
                end = release + 0.005 * (rank + 1)
        b.span(root, "Stats.record", "Client" if how == "client" else "Internal", inst, began, end - began,
               service="rank-api")
        done = stop.run(inst, end + 0.1, 0.0)
        b.set_end(root, done)
        b.set_end(call, done + 0.3)
    return b


def _found(b: TraceBuilder) -> list[tuple[str, str | None, float]]:
    return [(f.pattern, f.span_name, round(f.confidence, 2)) for f in diagnose_frame(b.frame()).findings]


def test_a_lock_held_by_a_periodic_scrape_while_the_process_runs_on_is_lock_contention() -> None:
    """Before: gc_pause 0.9 at 'Stats.record' (read as the pause of one process every caller waits on),
    though the forwards in flight ran on through every stretch."""
    found = _found(scraped(how="lock"))
    assert found and found[0][:2] == ("lock_contention", "Stats.record") and found[0][2] >= 0.8, found
    assert not [f for f in found if f[0] == "gc_pause" and f[2] >= 0.5], found


def test_a_stop_of_the_whole_process_over_the_same_stretches_stays_a_pause() -> None:
    """The twin: the same stretches stop every thread (the forwards in flight stretched, nothing
    starting or ending inside): a pause of the process, not a lock."""
    found = _found(scraped(how="stop"))
    assert found and found[0][0] == "gc_pause" and found[0][2] >= 0.5, found
    assert not [f for f in found if f[0] == "lock_contention" and f[2] >= 0.5], found


def test_an_untraced_store_stalled_over_the_same_stretches_is_no_lock_of_ours() -> None:
    """The twin: the waits are calls out to a store that stops (a cache server stalled): that it
    stopped shows, not a resource this process holds."""
    found = _found(scraped(how="client"))
    assert not [f for f in found if f[0] in ("lock_contention", "gc_pause") and f[2] >= 0.5], found


def test_young_collections_reported_beside_the_holds_keep_it_a_lock() -> None:
    """The guard that keeps a reported stop a pause (released_calls._reported_in: a collection the
    runtime reports inside a release's silence says the process stopped there) reads only the releases'
    silences: short collections reported every ~1.5 s at their own phase, as any JVM's young pauses
    are, fall in a few of them by chance and leave the held mutex a lock."""
    b = scraped(how="lock")
    rng = np.random.default_rng(11)
    gc = [(f"api/{k}", float(t), float(t) + 4.0) for k in range(PROCESSES)
          for t in np.arange(float(rng.uniform(0.0, 1500.0)), N / RPS * 1000.0, 1500.0)]
    findings = diagnose_frame(b.frame(gc=gc)).findings
    found = [(f.pattern, f.span_name, round(f.confidence, 2)) for f in findings]
    assert found and found[0][:2] == ("lock_contention", "Stats.record") and found[0][2] >= 0.8, found
