"""Services whose work grows with size or takes a cache's slow path, steady or changed during the run
(test_diagnosis_changes.py): the same physics in both, so that what tells a cause from the service's
normal cost is the change alone, as it is in production traces."""

from __future__ import annotations

import numpy as np

from tests.mechanism_frames import TraceBuilder, lognormal
from tests.mechanism_services import BASE, work_spans

N = 3000


def sized_work_service(seed: int, shifted: bool):
    """Answers of lognormal length (median 100 items, capped at 512, as a max-token limit caps an
    LLM's answers), 8 ms per item: the slowest requests are the longest answers in every run. With
    `shifted`, from 40 % of the run on half the requests come from a new client version that asks
    for 8x larger answers (a second population that grows the tail)."""
    b = TraceBuilder(seed)
    for i, t in enumerate(b.arrivals(N, 100)):
        b.new_trace()
        inst = f"api/{int(b.rng.integers(3))}"
        root = b.span(None, "POST /answer", "Server", inst, t, 0.0)
        items = int(np.clip(100 * np.exp(b.rng.normal(0.0, 0.8)), 4, 512))
        if shifted and i >= 0.4 * N and b.rng.random() < 0.5:
            items = int(items * 8 * np.exp(b.rng.normal(0.0, 0.2)))
        cur = work_spans(b, root, inst, t + 0.05, BASE[:2])
        d = 5.0 + 8.0 * items * lognormal(b.rng, 1.0, 0.05)
        b.span(root, "generate", "Client", inst, cur, d, answer__items=items)
        b.set_end(root, cur + d + 0.05)
    return b.frame()


def cache_service(
    seed: int, rate_before: float, rate_after: float, at: float = 0.3, store_nested: bool = False
):
    """A lookup in front of a store: a hit costs ~1 ms (a Redis GET), a miss also queries the store
    (~40 ms) under the lookup. The miss rate is `rate_before` until `at` of the run, `rate_after`
    after (a flush or an expiry wave when it jumps). With `store_nested` the lookup's Redis GET sits
    in its own span below the lookup and is itself slow 1 % of the time (a rare slow Redis call, at
    random moments: not the cache's misses)."""
    b = TraceBuilder(seed)
    for i, t in enumerate(b.arrivals(N, 120)):
        b.new_trace()
        inst = f"api/{int(b.rng.integers(3))}"
        root = b.span(None, "POST /score", "Server", inst, t, 0.0)
        cur = t + 0.05
        miss = b.rng.random() < (rate_before if i < at * N else rate_after)
        get = lognormal(b.rng, 1.0, 0.15) * (8.0 if b.rng.random() < 0.01 else 1.0)
        store = lognormal(b.rng, 40.0, 0.2) if miss else 0.0
        look = b.span(root, "load_profile", "Internal", inst, cur, get + store + 0.1)
        if store_nested:
            b.span(look, "GET", "Client", inst, cur + 0.02, get, db__system="redis")
        if miss:
            b.span(look, "SELECT profiles", "Client", inst, cur + get + 0.05, store, db__system="postgresql")
        cur = work_spans(b, root, inst, cur + get + store + 0.15)
        b.set_end(root, cur + 0.05)
    return b.frame()


def response_cache_service(seed: int, gateway: bool = True, flushed: bool = False):
    """A gateway (untraced where not `gateway`) in front of an answering service whose handler first
    asks a response cache (a Redis GET, ~1 ms): a hit answers at once; a miss (40 % of requests, at
    random, all run: new questions) does the work, a call of ~800 ms. With `flushed`, the cache is
    emptied 30 % of the way in: 90 % of the requests miss after it."""
    b = TraceBuilder(seed)
    for i, t in enumerate(b.arrivals(N, 30)):
        b.new_trace()
        inst = f"app/{int(b.rng.integers(3))}"
        root = b.span(None, "GET /ask", "Server", "gateway/0", t, 0.0) if gateway else None
        handler = b.span(root, "POST /ask", "Server", inst, t + 0.3, 0.0)
        cur = t + 0.4
        get = lognormal(b.rng, 1.0, 0.15)
        b.span(handler, "GET", "Client", inst, cur, get, db__system="redis")
        cur += get + 0.05
        if b.rng.random() < (0.9 if flushed and i >= 0.3 * N else 0.4):
            d = lognormal(b.rng, 800.0, 0.5)
            b.span(handler, "generate", "Client", inst, cur, d)
            cur += d + 0.05
        b.set_end(handler, cur + 0.05)
        if root is not None:
            b.set_end(root, cur + 0.2)
    return b.frame()


def expiry_wave_service(seed: int):
    """Feature hydration for 64 ids per request from an in-process cache; the missed ids are fetched
    in one batch call whose time grows with the ids it asks for (0.25 ms each). The hot set was
    loaded at once and expires together a third into the run: before, a request misses 0-2 ids now
    and then; after, most requests miss most ids until refilled (over the next fifth of the run)."""
    b = TraceBuilder(seed)
    for i, t in enumerate(b.arrivals(N, 120)):
        b.new_trace()
        inst = f"api/{int(b.rng.integers(3))}"
        root = b.span(None, "GET /feed", "Server", inst, t, 0.0)
        cur = t + 0.05
        x = i / N
        if x < 1 / 3:
            p_miss = 0.002
        else:
            p_miss = max(0.9 * (1 - (x - 1 / 3) / 0.2), 0.002) if x < 1 / 3 + 0.2 else 0.002
        ids = int(b.rng.binomial(64, p_miss))
        local = lognormal(b.rng, 0.4, 0.2)
        fetch = 2.0 + 0.25 * ids * lognormal(b.rng, 1.0, 0.1) if ids else 0.0
        hyd = b.span(root, "hydrate", "Internal", inst, cur, local + fetch + 0.05)
        if ids:
            b.span(hyd, "FeatureStore/BatchGet", "Client", inst, cur + local, fetch, featurestore__keys=ids)
        cur = work_spans(b, root, inst, cur + local + fetch + 0.1)
        b.set_end(root, cur + 0.05)
    return b.frame()


def request_kind_service(seed: int):
    """Two kinds of requests: `explore` ones score 4x the candidates (their scoring 4x as long), and
    their share grows from 10 % to 60 % 40 % of the way in. Every request hydrates features from an
    in-process cache that records its (few, steady) misses: a cache nearby, not what splits the
    requests in two."""
    b = TraceBuilder(seed)
    for i, t in enumerate(b.arrivals(N, 120)):
        b.new_trace()
        inst = f"api/{int(b.rng.integers(3))}"
        explore = b.rng.random() < (0.1 if i < 0.4 * N else 0.6)
        root = b.span(None, "GET /feed", "Server", inst, t, 0.0)
        cur = t + 0.05
        surface = "explore" if explore else "home"
        page = b.span(root, "build_feed", "Internal", inst, cur, 0.0, feed__surface=surface)
        look = lognormal(b.rng, 0.5, 0.2)
        b.span(page, "hydrate", "Internal", inst, cur, look, feature__cache__misses=int(b.rng.poisson(0.3)))
        score = lognormal(b.rng, 24.0 if explore else 6.0, 0.15)
        b.span(page, "score", "Internal", inst, cur + look + 0.02, score, candidates=800 if explore else 200)
        end = cur + look + score + 0.05
        b.set_end(page, end)
        b.set_end(root, end + 0.05)
    return b.frame()


def _embedded_request(b: TraceBuilder, t: float, route: str) -> tuple[int, str, float]:
    """A new request on one of three API instances that first calls the embedder (three replicas,
    ~5 ms) through an HTTP client span named `POST`: (its root span, its instance, when the call ended)."""
    b.new_trace()
    inst = f"api/{int(b.rng.integers(3))}"
    root = b.span(None, route, "Server", inst, t, 0.0)
    cur = t + 0.05
    d = lognormal(b.rng, 5.0, 0.2)
    call = b.span(root, "POST", "Client", inst, cur, d, server__address="embedder")
    b.span(call, "POST /embed", "Server", f"embedder/{int(b.rng.integers(3))}", cur + 0.2, d - 0.4)
    return root, inst, cur + d + 0.05


def one_client_name_service(seed: int):
    """Each request calls an embedder (three replicas, ~5 ms) and then a moderation service (one
    replica, median 400 ms with a Pareto tail) through one HTTP client whose spans are all named
    `POST`; the moderation call has a 1.5 s deadline (error status) and one retry. The moderation
    replica is slower than the embedder's replicas, as a different service is: not a straggler."""
    b = TraceBuilder(seed)
    for t in b.arrivals(2000, 20):
        root, inst, cur = _embedded_request(b, t, "POST /chat")
        for _ in range(2):
            queued = b.rng.random() < 0.25  # a quarter wait behind others on the CPU nodes
            callee = lognormal(b.rng, 400.0, 0.3) + (900.0 * (b.rng.pareto(1.1) + 1) if queued else 0.0)
            cut = callee > 1500.0
            d = 1500.0 + b.rng.uniform(0.0, 0.5) if cut else callee + 0.4
            attrs = {"otel.status_code": "Error"} if cut else {}
            call = b.span(root, "POST", "Client", inst, cur, d, server__address="moderation", **attrs)
            b.span(call, "POST /moderate", "Server", "moderation/0", cur + 0.2, callee)
            cur += d + 0.05 + (250.0 if cut else 0.0)
            if not cut:
                break
        b.set_end(root, cur + 0.05)
    return b.frame()


def two_services_one_client_name(seed: int):
    """Each request calls an embedder (three replicas, ~5 ms) and then a ranking service (two replicas
    alike, median 60 ms, a heavy tail: a tenth of calls wait behind a slow scan) through one HTTP
    client whose spans are all named `POST`, no deadline. The ranker's replicas are slower than the
    embedder's, as a different service is; neither of its own replicas is a straggler."""
    b = TraceBuilder(seed)
    for t in b.arrivals(2000, 20):
        root, inst, cur = _embedded_request(b, t, "POST /rank")
        scan = 400.0 * (b.rng.pareto(1.5) + 1) if b.rng.random() < 0.1 else 0.0
        callee = lognormal(b.rng, 60.0, 0.2) + scan
        call = b.span(root, "POST", "Client", inst, cur, callee + 0.4, server__address="ranker")
        b.span(call, "POST /rank", "Server", f"ranker/{int(b.rng.integers(2))}", cur + 0.2, callee)
        b.set_end(root, cur + callee + 0.5)
    return b.frame()
