"""One model host's stalls are that host's, not the model's compute (diag37, feast-redis class 3): a model
server exports one span per request, its forward inside it untraced; on one host of three, 12 % of the
requests stall ~45 ms (transparent huge pages' direct compaction allocating the batch's tensors) while
its median stays its peers'. Read before as compute_bound 0.99 on feast-redis thp-compaction s0
(dependency_tail.straggler's tail form, settle_forward). A model whose long forwards are large inputs on
every host, or a host slower at its median (slower memory or CPU), stays compute."""

from __future__ import annotations

import pytest

from tailscope.analysis.diagnosis import diagnose_frame
from tests.mechanism_frames import TraceBuilder, by_pattern, lognormal

HOSTS = 3


def model_service(seed: int, kind: str, n: int = 3000, rps: float = 100.0):
    """Three API instances call `Predict` on three model hosts (round robin); the host's SERVER span is
    the forward (~4 ms). `kind`: "stalls" (host 1: 12 % of requests +45 ms, log-normal), "inputs" (every
    host: the forward grows with the request's items, heavy-tailed) or "slower" (host 1 2.5x slower)."""
    b = TraceBuilder(seed)
    b.stages["Predict"] = "model_forward"
    for i, t in enumerate(b.arrivals(n, rps)):
        b.new_trace()
        inst, host = f"api/{int(b.rng.integers(3))}", i % HOSTS
        root = b.span(None, "POST /score", "Server", inst, t, 0.0)
        items = int(min(400, 20 * lognormal(b.rng, 1.0, 0.8))) if kind == "inputs" else 20
        work = lognormal(b.rng, 4.0, 0.15) * items / 20
        if host == 1 and kind == "stalls" and b.rng.random() < 0.12:
            work += lognormal(b.rng, 45.0, 0.5)
        if host == 1 and kind == "slower":
            work *= 2.5
        sent = t + lognormal(b.rng, 0.5, 0.2)
        call = b.span(root, "Predict", "Client", inst, sent, work + 0.6, rpc__system="grpc", items=items)
        b.span(call, "Predict", "Server", f"model/{host}", sent + 0.3, work, rpc__system="grpc", items=items)
        b.set_end(root, sent + work + 0.6 + lognormal(b.rng, 0.3, 0.2))
    return b.frame()


def test_one_hosts_stalls_in_the_forward_are_that_host() -> None:
    result = diagnose_frame(model_service(1, "stalls"))
    top = result.findings[0]
    assert top.pattern == "slow_dependency" and top.confidence >= 0.5, by_pattern(result.findings)
    assert top.evidence["stats"]["straggler_instance"] == "model/1", top.evidence["stats"]
    forward = [fd for fd in result.findings if fd.pattern == "compute_bound"]
    assert all(fd.evidence["stats"].get("part_of") == "slow_dependency" for fd in forward), forward


@pytest.mark.parametrize("kind", ["inputs", "slower"])
def test_long_inputs_or_a_slower_host_stay_the_models_compute(kind: str) -> None:
    result = diagnose_frame(model_service(1, kind))
    forward = [fd for fd in result.findings if fd.pattern == "compute_bound"]
    assert forward, by_pattern(result.findings)
    assert all("part_of" not in fd.evidence["stats"] for fd in forward), by_pattern(result.findings)
