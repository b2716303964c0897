"""A model server whose forward time grows with the items each request sends, built from the mechanism
(tests/test_diagnosis_grown_requests.py): either a client rollout makes the requests larger from some
moment on (the payload changed: large_payload), or more requests arrive at the same sizes (the model
runs out of time: compute_bound). Both make the forward and the queue before it grow mid-run."""

from __future__ import annotations

from tests.mechanism_frames import TraceBuilder, lognormal


def ranking_service(seed: int, larger_requests: bool, n: int = 4000, rate: float = 40.0, more: float = 2.2):
    """Requests (`POST /rank`, root attribute `request.items`, ~240 items) read the user and their
    history (`SELECT users`, `SELECT history`, ~5 ms), build their input (0.004 ms per item), then call
    a model server (`Rank`, two pods, one executor each, FIFO) whose forward (`model.forward`) takes
    3 ms + 0.06 ms per item; the response is then assembled (`assemble`, ~12 ms). From 40 % of the run,
    with `larger_requests`, 60 % of requests send 2.3x the items; otherwise the arrival rate rises
    `more` times at the same sizes."""
    b = TraceBuilder(seed)
    b.stages.update(
        {
            "model.forward": "model_forward",
            "Rank": "downstream",
            "build_input": "preprocessing",
            "assemble": "postprocessing",
        }
    )
    free = {"model/0": 0.0, "model/1": 0.0}
    t, horizon = 0.0, n / rate * 1000.0
    for i in range(n):
        later = t > 0.4 * horizon
        t += b.rng.exponential(1000.0 / (rate * (more if later and not larger_requests else 1.0)))
        b.new_trace()
        items = int(lognormal(b.rng, 240.0, 0.3))
        if larger_requests and later and b.rng.random() < 0.6:
            items = int(items * 2.3)
        pod = f"api/{i % 3}"
        root = b.span(None, "POST /rank", "Server", pod, t, 0.0, request__items=items)
        d = lognormal(b.rng, 3.0, 0.2)
        b.span(root, "SELECT users", "Client", pod, t + 0.05, d, db__system="postgresql")
        cur = t + d + 0.1
        d = lognormal(b.rng, 2.0, 0.2)
        b.span(root, "SELECT history", "Client", pod, cur, d, db__system="postgresql")
        cur += d + 0.05
        d = 0.2 + 0.004 * items * float(b.rng.lognormal(0.0, 0.1))
        b.span(root, "build_input", "Internal", pod, cur, d)
        cur += d + 0.05
        model = f"model/{i % 2}"
        cli = b.span(root, "Rank", "Client", pod, cur, 0.0, request__items=items)
        srv = b.span(cli, "Rank", "Server", model, cur + 0.3, 0.0)
        go = max(cur + 0.35, free[model])
        work = (3.0 + 0.06 * items) * float(b.rng.lognormal(0.0, 0.08))
        b.span(srv, "model.forward", "Internal", model, go, work)
        free[model] = go + work
        b.set_end(srv, go + work + 0.05)
        b.set_end(cli, go + work + 0.4)
        d = lognormal(b.rng, 12.0, 0.2)
        b.span(root, "assemble", "Internal", pod, go + work + 0.5, d)
        b.set_end(root, go + work + d + 0.6)
    return b.frame()
