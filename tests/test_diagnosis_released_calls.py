"""gc_pause of one process every caller waits on (released_calls.py): a server process with its own
heap stops for its collection; the calls sent to it meanwhile wait and end together when it runs
again, after a stretch in which none ended. No runtime GC report, and nothing else on the instance
stops, so the cross-name stall test sees one slow name. Hand-built frames: the pause, and the shapes
whose slow calls also wait (a lock handed on one waiter at a time, a batcher releasing its members).
Where the released calls are the instance's own work (INTERNAL) the instance ran on through the pause:
that is named lock_contention (a resource held), see tests/test_diagnosis_held_wait.py."""

from __future__ import annotations

import numpy as np
from hand_frames import hand_frame

from tailscope.analysis.diagnosis.runner import diagnose_frame


def _requests(n: int, seed: int) -> tuple[np.random.Generator, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    arrive = np.cumsum(rng.exponential(8.0, n))  # ~125 requests/s over two instances
    return rng, arrive, rng.integers(0, 2, n)


def _rows(arrive, inst, call_end, rng, call="Flags.get", kind="Internal", below=False) -> list[tuple]:
    """Per request: the root, the call (of `kind`; with `below`, an in-process wrapper whose time is a
    call out to a store under it), then the request's own work."""
    rows: list[tuple] = []
    for j, (a, i, e) in enumerate(zip(arrive.tolist(), inst.tolist(), call_end, strict=True)):
        work = 6.0 * rng.lognormal(0.0, 0.2)
        base = len(rows)
        rows += [
            (j, -1, "GET /recs", "Server", i, a, e - a + work + 0.4),
            (j, base, call, kind, i, a + 0.1, e - a - 0.1),
        ]
        if below:
            rows.append((j, base + 1, "GET flags", "Client", i, a + 0.11, e - a - 0.12))
        rows.append((j, base, "Ranker.score", "Internal", i, e + 0.1, work))
    return rows


def paused(n: int = 2000, seed: int = 5, kind: str = "Internal", below: bool = False) -> list[tuple]:
    """Each instance's flag process collects for 250-400 ms every 1-2 s; a call answers in 0.05 ms,
    and calls that came during a collection are answered one after another (0.03 ms each) after it."""
    rng, arrive, inst = _requests(n, seed)
    horizon = float(arrive[-1]) + 1000.0
    pauses = {}
    for i in (0, 1):
        t, out = rng.uniform(0, 500), []
        while t < horizon:
            length = rng.uniform(250.0, 400.0)
            out.append((t, t + length))
            t += length + rng.uniform(1000.0, 2000.0)
        pauses[i] = out
    ends = []
    queued: dict[tuple[int, int], int] = {}
    for a, i in zip(arrive.tolist(), inst.tolist(), strict=True):
        sent = a + 0.1
        end = sent + 0.05 * rng.lognormal(0.0, 0.3)
        for k, (p0, p1) in enumerate(pauses[i]):
            if p0 <= sent < p1:
                rank = queued.get((i, k), 0)
                queued[(i, k)] = rank + 1
                end = p1 + 0.03 * (rank + 1)
                break
        ends.append(end)
    return _rows(arrive, inst, ends, rng, kind=kind, below=below)


def locked(n: int = 2000, seed: int = 5) -> list[tuple]:
    """The same calls behind a mutex (one at a time per instance, 4 ms each under a load that backs
    them up now and then): the waits are long, and each waiter leaves one hold after the last."""
    rng, arrive, inst = _requests(n, seed)
    free = {0: 0.0, 1: 0.0}
    ends = []
    for a, i in zip(arrive.tolist(), inst.tolist(), strict=True):
        start = max(a + 0.1, free[i])
        free[i] = start + 4.0 * rng.lognormal(0.0, 0.6)
        ends.append(free[i])
    return _rows(arrive, inst, ends, rng)


def batched(n: int = 2000, seed: int = 5) -> list[tuple]:
    """The calls join a batch that runs when 5 ms have passed since it opened and the last batch is
    done (8 ms a run, slower now and then): every member leaves with its batch, slow or fast."""
    rng, arrive, inst = _requests(n, seed)
    free = {0: 0.0, 1: 0.0}
    batch_end: dict[int, tuple[float, float]] = {}
    ends = []
    for a, i in zip(arrive.tolist(), inst.tolist(), strict=True):
        sent = a + 0.1
        open_batch = batch_end.get(i)
        if open_batch is None or sent > open_batch[0]:  # a new batch opens
            start = max(sent + 5.0, free[i])
            free[i] = start + 8.0 * rng.lognormal(0.0, 0.8)
            batch_end[i] = (start, free[i])
        ends.append(batch_end[i][1] + 0.01 * rng.random())
    return _rows(arrive, inst, ends, rng, call="Ranker.batch")


def _gc(rows: list[tuple]) -> list[tuple[str, str | None, float]]:
    found = diagnose_frame(hand_frame(rows)).findings
    return [(f.pattern, f.span_name, round(f.confidence, 2)) for f in found]


def test_calls_to_a_paused_process_released_together_are_its_pause() -> None:
    """The flag process's calls are INTERNAL spans of an instance that runs on through each pause: in
    the spans a resource of that instance held for the pause (a mutex held as long reads the same), so
    the release is named lock_contention (diag28; gc_pause 0.9 before it), never a stop of the process."""
    found = _gc(paused())
    # before released_calls: nothing named (the stall test sees one slow name; no runtime report)
    assert found and found[0][:2] == ("lock_contention", "Flags.get") and found[0][2] >= 0.8, found
    assert not [f for f in found if f[0] == "gc_pause" and f[2] >= 0.5], found


def test_a_lock_handing_on_one_waiter_at_a_time_is_no_pause() -> None:
    found = _gc(locked())
    assert not [f for f in found if f[0] == "gc_pause" and f[2] >= 0.5], found


def test_a_batcher_releasing_every_batch_together_is_no_pause() -> None:
    found = _gc(batched())
    assert not [f for f in found if f[0] == "gc_pause" and f[2] >= 0.5], found


def test_calls_to_a_stopped_store_that_is_not_traced_are_no_pause_of_ours() -> None:
    """The same releases on calls out to a store with no span of its own (a Redis blocked on its disk,
    a vendor): that the store stops shows, not why; before: gc_pause 0.9 on the call."""
    found = _gc(paused(kind="Client"))
    assert not [f for f in found if f[0] == "gc_pause" and f[2] >= 0.5], found


def test_a_release_that_waited_on_a_call_further_down_is_not_that_span_s_stop() -> None:
    """An in-process wrapper whose time is a call out to a stopped store: its spans end together too,
    but they waited on the call below them; before: gc_pause 0.9 on the wrapper."""
    found = _gc(paused(below=True))
    assert not [f for f in found if f[0] == "gc_pause" and f[2] >= 0.5], found
