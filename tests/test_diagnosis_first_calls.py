"""cold_start where many short-lived instances each pay their start in their first request (a serverless
function scaling out in a burst, first_calls.py), against what makes the same timing otherwise: a queue
in the burst (every request then waits, a new instance's first one no more than its neighbours), new
instances now and then at random moments (a platform's usual recycling), and a callee that throttles
and is retried (callee_queue.py: not a wait for its workers)."""

from __future__ import annotations

import numpy as np

from tailscope.analysis.diagnosis import callee_queue, cold_start, first_calls
from tailscope.analysis.diagnosis.model import Context
from tailscope.analysis.diagnosis.runner import diagnose_frame
from tests.mechanism_frames import TraceBuilder, by_pattern, lognormal

N, RPS = 2000, 100.0


def _arrivals(b: TraceBuilder, burst: bool) -> np.ndarray:
    """Poisson arrivals; with `burst`, an 8x flash crowd for 4 % of the run at 40 %."""
    t = b.arrivals(N, RPS)
    if not burst:
        return t
    span = t[-1]
    extra = b.rng.uniform(0.40 * span, 0.44 * span, int(7 * RPS * 0.04 * span / 1000.0))
    return np.sort(np.r_[t, extra])[:N + len(extra)]


def _function(init_ms: float, burst: bool, recycle: int = 0, queue: bool = False, seed: int = 1,
              pool: int = 12):
    """An API whose request calls a function: one invoke at a time per environment; an arrival that
    finds none idle starts a new one (its init before the handler's span: the caller's call holds it),
    or, with `queue`, waits for the next free one (new ones join the pool with no init during the
    burst). `recycle`: environments retired at random moments, replaced by a new one."""
    b = TraceBuilder(seed=seed)
    times = _arrivals(b, burst)
    free: list[float] = [0.0] * pool  # busy-until per environment
    born = [True] * pool  # True: already serving before the run
    retire = set(b.rng.choice(np.arange(len(times)), recycle, replace=False).tolist()) if recycle else set()
    joined = False
    for k, t in enumerate(times):
        b.new_trace()
        api = f"api/{k % 3}"
        root = b.span(None, "POST /checkout", "Server", api, t, 0.0)
        call_start = t + 0.5
        if k in retire:  # one environment retires, the next arrival that needs one starts a new one
            free.pop(int(b.rng.integers(len(free))))
            born.pop(0)
        idle = [i for i, until in enumerate(free) if until <= call_start]
        if queue and burst and not joined and t > 0.40 * times[-1]:
            free += [call_start] * 10  # the pool scales out without a start cost
            born += [False] * 10
            joined = True
        if idle:
            env, begin = idle[int(b.rng.integers(len(idle)))], call_start + 1.0
        elif queue:
            env = int(np.argmin(free))
            begin = max(free[env], call_start) + 1.0
        else:
            free.append(call_start)
            born.append(False)
            env, begin = len(free) - 1, call_start + 1.0 + lognormal(b.rng, init_ms, 0.1)
        work = lognormal(b.rng, 45.0, 0.25)
        call = b.span(root, "POST /score", "Client", api, call_start, 0.0)
        srv = b.span(call, "score", "Server", f"fn/{env}", begin, work + 2.0)
        b.span(srv, "build_features", "Internal", f"fn/{env}", begin + 1.0, work)
        free[env] = begin + work + 2.0
        b.set_end(call, begin + work + 3.0)
        b.set_end(root, begin + work + 4.0)
    return b.frame()


def test_a_scale_out_storm_of_cold_environments_is_cold_start_not_network() -> None:
    found = by_pattern(diagnose_frame(_function(1200.0, burst=True)).findings)
    assert found.get("cold_start", 0.0) >= 0.8, found
    assert all(v < 0.5 for k, v in found.items() if k not in ("cold_start", "compute_bound")), found


def test_a_queue_in_the_burst_is_not_cold_start() -> None:
    """The same burst and scale-out, but the new instances start with no init and every request of the
    burst waits for a worker: a new instance's first request is as slow as its neighbours."""
    found = by_pattern(diagnose_frame(_function(0.0, burst=True, queue=True)).findings)
    assert found.get("cold_start", 0.0) < 0.5, found


def test_environments_recycled_now_and_then_are_the_usual_cost() -> None:
    """No burst: environments retire at random moments and their replacements start cold (each first
    request slow all the same): the platform's usual cost, not a cause."""
    frame = _function(1200.0, burst=False, recycle=14, pool=8)
    fresh = first_calls.detect(Context(frame), cold_start.ADVICE)
    assert fresh and fresh[0].evidence["stats"]["new_instances"] >= first_calls.MIN_INSTANCES, fresh
    assert fresh[0].evidence["stats"]["start_dispersion"] < first_calls.STORM
    found = by_pattern(diagnose_frame(frame).findings)
    assert found.get("cold_start", 0.0) < 0.5, found


def _untraced_callee(retried: bool, seed: int = 2):
    """A service calling an untraced store that is slower while a burst lasts: a worker queue (one
    attempt, a longer wait) or a throttle answered by retries with backoff (a retry count on the call)."""
    b = TraceBuilder(seed=seed)
    times = _arrivals(b, burst=True)
    lo, hi = 0.40 * times[-1], 0.44 * times[-1]
    for k, t in enumerate(times):
        b.new_trace()
        api = f"api/{k % 3}"
        root = b.span(None, "POST /score", "Server", api, t, 0.0)
        in_burst = lo <= t <= hi + 300.0
        base = lognormal(b.rng, 6.0, 0.2)
        attempts = 0
        extra = 0.0
        if in_burst:
            if retried:
                attempts = int(b.rng.integers(1, 5))
                extra = sum(25.0 * 2 ** n * b.rng.uniform(0.5, 1.0) + 5.0 for n in range(attempts))
            else:
                extra = 20.0 + 200.0 * (t - lo) / (hi - lo + 300.0)
        b.span(root, "BatchGetItem", "Client", api, t + 0.5, base + extra, retry_attempts=attempts,
               server__address="store")
        work = lognormal(b.rng, 20.0, 0.2)
        b.span(root, "predict", "Internal", api, t + 1.0 + base + extra, work)
        b.set_end(root, t + 2.0 + base + extra + work)
    return b.frame()


def test_a_throttled_and_retried_callee_is_not_a_worker_queue() -> None:
    queue = callee_queue.detect(Context(_untraced_callee(retried=False)))
    assert queue and queue[0].confidence >= 0.5, queue
    throttled = callee_queue.detect(Context(_untraced_callee(retried=True)))
    assert all(fd.confidence < 0.5 for fd in throttled), [fd.confidence for fd in throttled]
