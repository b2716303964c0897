"""Calls that run slower for a while are many at once, not slower because many are ahead
(server_queue.within_time). A front end calls one of two resolver replicas, reported as one SERVER span
each; from 30 % to 80 % of the run one replica's handler is slow (a bad rollout: ~200 ms instead of 5,
each call on its own, no queue): its calls overlap more while each lasts longer, so over the run the
calls ahead and the duration rise together, which the crowd test reads as a wait for capacity. Within a
stretch of time they do not: no queueing finding. A single-slot server (a real queue) stays queueing
(test_diagnosis_server_queue)."""

from __future__ import annotations

import numpy as np
from mechanism_frames import TraceBuilder

from tailscope.analysis.diagnosis import diagnose_frame


def _slow_rollout(seed: int = 3, n: int = 3000):
    b = TraceBuilder(seed)
    times = b.arrivals(n, rps=150.0)
    horizon = float(times[-1])
    for t in times:
        b.new_trace()
        fe = f"frontend/{b.trace % 3}"
        root = b.span(None, "POST /classify", "Server", fe, t, 0.0)
        b.span(root, "infer", "Internal", fe, t + 0.2, 8.0 * float(b.rng.lognormal(0.0, 0.2)))
        replica = int(b.rng.integers(2))
        slow = replica == 0 and 0.3 * horizon <= t < 0.8 * horizon
        work = float(b.rng.lognormal(np.log(200.0 if slow else 5.0), 0.5 if slow else 0.3))
        begin = t + 8.6
        call = b.span(root, "POST", "Client", fe, begin, work + 0.6)
        b.span(call, "POST /v2/resolve", "Server", f"resolver/{replica}", begin + 0.3, work)
        b.set_end(root, begin + work + 1.0)
    return b.frame()


def test_a_replica_slower_for_a_while_is_not_a_queue_for_capacity() -> None:
    findings = diagnose_frame(_slow_rollout()).findings
    assert not [fd for fd in findings if fd.pattern == "queueing" and fd.confidence >= 0.5]
    assert findings[0].pattern == "slow_dependency"
