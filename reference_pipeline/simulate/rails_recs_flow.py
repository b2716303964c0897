"""What one request of the `rails-recs` family does on its Puma thread (rails_recs.py): the generators
that rails_recs_puma.Puma runs, the fragment cache (an LRU in Memcached) and the dependencies' times.

Every duration is drawn here; the waits (the socket backlog, the GVL, GC pauses, the connection pool)
come from the runtime, so a span recorded around a blocking call ends when its thread resumes.
"""

from __future__ import annotations

import random
from collections import OrderedDict
from dataclasses import dataclass, field
from itertools import accumulate

from reference_pipeline.simulate.rails_recs_puma import Flow, Request, Worker
from reference_pipeline.simulate.trace_table import NS_PER_MS, lognormal_ms

PAGE_SIZES = (8, 12, 20, 24, 30, 40, 48)  # `limit` the clients ask for (mobile, web, TV)
CANDIDATES = 200  # hits Elasticsearch returns for the model to score
CATALOG = 12_000  # products
DNS_TIMEOUT_MS = 5000.0  # resolv.conf `options timeout:5`


class FragmentCache:
    """Memcached's LRU for the product-card fragments (one slab class: items of one size). `read`
    touches the hits and returns them; `write` stores misses, evicting the least recently used."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.lru: OrderedDict[int, None] = OrderedDict()
        self.reads = self.hits = 0

    def read(self, ids: list[int]) -> list[bool]:
        out = []
        for pid in ids:
            hit = pid in self.lru
            if hit:
                self.lru.move_to_end(pid)
            out.append(hit)
        self.reads += len(ids)
        self.hits += sum(out)
        return out

    def write(self, ids: list[int]) -> None:
        for pid in ids:
            self.lru[pid] = None
            self.lru.move_to_end(pid)
            if len(self.lru) > self.capacity:
                self.lru.popitem(last=False)


@dataclass
class Env:
    """The run's conditions: which mechanisms are on, and the shared state requests meet."""

    rng: random.Random
    parts: frozenset[str]
    checkout_timeout_ns: float
    cache: FragmentCache
    slow_query: tuple[float, float]  # window (ns) of the slow products query, or (0, 0)
    dns_pod: int  # the pod whose resolver loses lookups, or -1
    dns_loss: float  # the share of its lookups that lose a reply
    model_pods: int
    fragment_kb: float
    popularity: list[float] = field(default_factory=list)  # cumulative Zipf weights over the catalog

    def __post_init__(self) -> None:
        self.popularity = list(accumulate(1.0 / (k + 1) ** 0.95 for k in range(CATALOG)))

    def products(self, n: int) -> list[int]:
        return list(dict.fromkeys(self.rng.choices(range(CATALOG), cum_weights=self.popularity, k=n)))

    def warm(self) -> None:
        """The cache as a fleet that has served for hours leaves it: the popular cards, the most
        popular most recently used (where an LRU under a Zipf load settles)."""
        self.cache.write(list(range(min(self.cache.capacity, CATALOG) - 1, -1, -1)))


def ms(rng: random.Random, median: float, sigma: float = 0.3) -> float:
    return lognormal_ms(rng, median, sigma)


def query(
    env: Env,
    req: Request,
    parent: int,
    table: str,
    server_ns: float,
    rows: int,
    cpu_ms: float,
    statement: str,
) -> Flow:
    """One ActiveRecord query: the first of the request leases a connection (held to the request's
    end); the pg span covers the round trip; instantiating the rows is Ruby after it. Returns the
    time, or None when the checkout timed out (ActiveRecord::ConnectionTimeoutError)."""
    r = env.rng
    if not req.conn:
        _t, ok, fresh = yield ("checkout", env.checkout_timeout_ns)
        if not ok:
            return None
        req.conn = True
        if fresh:  # a new process opens its connection: TCP, TLS, SCRAM
            yield ("io", ms(r, 32.0, 0.25))
    t = yield ("cpu", ms(r, 0.07))
    start = t
    t = yield ("io", ms(r, 0.25, 0.2) + server_ns + 0.004 * NS_PER_MS * rows)
    req.span("db", parent, start, t, {"table": table, "statement": statement, "rows": rows})
    t = yield ("cpu", cpu_ms * NS_PER_MS * r.lognormvariate(0, 0.2))
    return t


def _fail(req: Request, root: int) -> Flow:
    """rescue_from renders a 500 for a pool checkout that timed out."""
    t = yield ("cpu", 1.2 * NS_PER_MS)
    span = req.spans[root]
    span[3], span[5], span[6] = t, "Error", "ActiveRecord::ConnectionTimeoutError"
    span[4]["status"] = 500
    span[8].append(
        (
            t - 1.0 * NS_PER_MS,
            "exception",
            {
                "exception.type": "ActiveRecord::ConnectionTimeoutError",
                "exception.message": "could not obtain a connection from the pool within 5.000 seconds; "
                "all pooled connections were in use",
            },
        )
    )


def _template(w: Worker, name: str, compile_ms: float) -> float:
    """ActionView compiles a template the first time a process renders it."""
    if name in w.compiled:
        return 0.0
    w.compiled.add(name)
    return compile_ms * NS_PER_MS


def recs(env: Env, req: Request, w: Worker) -> Flow:
    """GET /recs/:user_id: user, candidates from Elasticsearch, scores from the model server, the
    top items' products and prices, a JSON page of product-card fragments (read_multi)."""
    r, n = env.rng, req.params["items"]
    t = yield ("cpu", 0.04 * NS_PER_MS)
    root = req.span("root", -1, t, 0.0, {"items": n, "status": 200})
    t = yield ("cpu", ms(r, 1.1))  # middleware, routing, authentication
    t = yield from query(
        env,
        req,
        root,
        "users",
        ms(r, 0.6, 0.35),
        1,
        0.15,
        "SELECT users.* FROM users WHERE users.id = $1 LIMIT $2",
    )
    if t is None:
        yield from _fail(req, root)
        return
    t = yield ("cpu", ms(r, 0.3))
    # candidate retrieval: the search waits for the slowest shard copy it was routed to
    took = ms(r, 11.0, 0.35) + (ms(r, 35.0, 0.5) if r.random() < 0.01 else 0.0)
    slow_copy = "slow-shard" in env.parts and r.random() < 0.45
    if slow_copy:
        took = max(took, ms(r, 85.0, 0.45) + (ms(r, 150.0, 0.6) if r.random() < 0.08 else 0.0))
    start = t
    t = yield ("io", took + ms(r, 1.4, 0.2))
    req.span("es", root, start, t, {"hits": CANDIDATES, "took_ms": round(took / NS_PER_MS)})
    t = yield ("cpu", ms(r, 0.4 + 0.012 * CANDIDATES, 0.15))  # parse the hits
    # scoring: a new stub (channel) per request resolves and connects before the call
    t = yield ("cpu", ms(r, 0.6))
    start = t
    dns = ms(r, 0.35, 0.3)
    if req.pod == env.dns_pod and r.random() < env.dns_loss:  # the A/AAAA race drops a reply: retry after 5 s
        dns += DNS_TIMEOUT_MS * NS_PER_MS
    srv_start = start + dns + ms(r, 0.5, 0.3) + ms(r, 0.25, 0.2)
    run = ms(r, 6.0 + 0.02 * CANDIDATES, 0.2) + (ms(r, 15.0, 0.5) if r.random() < 0.01 else 0.0)
    run_start = srv_start + ms(r, 0.3, 0.2)
    srv_end = run_start + run + ms(r, 0.25, 0.2)
    t = yield ("io", srv_end - start + ms(r, 0.25, 0.2))
    server = r.randrange(env.model_pods)
    call = req.span("model.client", root, start, t, {"candidates": CANDIDATES})
    srv = req.span("model.server", call, srv_start, srv_end, {"candidates": CANDIDATES}, server=server)
    req.span("model.run", srv, run_start, run_start + run, {"batch": CANDIDATES}, server=server)
    t = yield ("cpu", ms(r, 0.3 + 0.004 * CANDIDATES))
    ids = env.products(n)
    slow = env.slow_query[0] <= t < env.slow_query[1]
    server_ns = ms(r, 1.0 + 0.025 * n, 0.3) + (ms(r, 100.0, 0.5) if slow else 0.0)
    t = yield from query(
        env,
        req,
        root,
        "products",
        server_ns,
        len(ids),
        0.05 * len(ids),
        "SELECT products.* FROM products WHERE products.id IN ($1, $2, ...)",
    )
    if "n-plus-one" in env.parts:  # `includes(:price)` dropped: one query per item as the view asks
        for _pid in ids:
            t = yield from query(
                env,
                req,
                root,
                "prices",
                ms(r, 0.5, 0.3),
                1,
                0.2,
                "SELECT prices.* FROM prices WHERE prices.product_id = $1 LIMIT $2",
            )
    else:
        t = yield from query(
            env,
            req,
            root,
            "prices",
            ms(r, 0.8 + 0.01 * len(ids), 0.3),
            len(ids),
            0.02 * len(ids),
            "SELECT prices.* FROM prices WHERE prices.product_id IN ($1, ...)",
        )
    # the JSON page: product cards from the fragment cache, misses rendered and written back
    t = yield ("cpu", ms(r, 0.3) + _template(w, "recommendations/index", 45.0))
    render = req.span("render", root, t, 0.0, {"template": "recommendations/index.json.jbuilder"})
    read = req.span("cache.read_multi", render, t, 0.0, {"keys": len(ids)})
    t = yield ("cpu", ms(r, 0.1 + 0.004 * len(ids)))  # cache keys: record versions + template digest
    start = t
    kb = env.fragment_kb * len(ids)
    t = yield (
        "io",
        ms(r, 0.35 + 0.01 * len(ids), 0.25)
        + 0.004 * NS_PER_MS * kb
        + (ms(r, 6.0, 0.5) if r.random() < 0.01 else 0.0),
    )
    hits = env.cache.read(ids)
    misses = [p for p, hit in zip(ids, hits, strict=True) if not hit]
    req.span("memcached.get_multi", read, start, t, {"keys": len(ids)})
    req.spans[read][3] = t
    req.spans[read][4]["hits"] = len(ids) - len(misses)
    if misses:
        t = yield ("cpu", ms(r, 2.5 * len(misses), 0.15) + _template(w, "products/_card", 25.0))
        start = t
        t = yield (
            "io",
            ms(r, 0.3 + 0.01 * len(misses), 0.25) + 0.006 * NS_PER_MS * env.fragment_kb * len(misses),
        )
        env.cache.write(misses)
        req.span("memcached.set_multi", render, start, t, {"keys": len(misses)})
    t = yield ("cpu", ms(r, 0.9 + 0.05 * len(ids), 0.2))  # assemble and dump the JSON (Oj)
    req.spans[render][3] = t
    yield ("checkin",)
    t = yield ("cpu", ms(r, 0.3))
    req.spans[root][3] = t


def product(env: Env, req: Request, w: Worker) -> Flow:
    """GET /products/:id: one row, one cached card."""
    r = env.rng
    t = yield ("cpu", 0.04 * NS_PER_MS)
    root = req.span("root", -1, t, 0.0, {"status": 200})
    t = yield ("cpu", ms(r, 0.9))
    t = yield from query(
        env,
        req,
        root,
        "products",
        ms(r, 0.5, 0.3),
        1,
        0.1,
        "SELECT products.* FROM products WHERE products.id = $1 LIMIT $2",
    )
    if t is None:
        yield from _fail(req, root)
        return
    (pid,) = env.products(1)
    start = t
    t = yield ("io", ms(r, 0.3, 0.25))
    req.span("memcached.get", root, start, t, {"keys": 1})
    if not env.cache.read([pid])[0]:
        t = yield ("cpu", ms(r, 2.5, 0.15) + _template(w, "products/_card", 25.0))
        start = t
        t = yield ("io", ms(r, 0.3, 0.25))
        env.cache.write([pid])
        req.span("memcached.set", root, start, t, {"keys": 1})
    t = yield ("cpu", ms(r, 0.8) + _template(w, "products/show", 20.0))
    yield ("checkin",)
    req.spans[root][3] = t


def catalog(env: Env, req: Request, w: Worker) -> Flow:
    """GET /api/v1/catalog?per_page=N: a page of products as JSON, rendered by ActiveSupport's
    to_json: pure Ruby, about 0.2 ms per product (the partners' exports ask for 2000)."""
    r, per_page = env.rng, req.params["per_page"]
    t = yield ("cpu", 0.04 * NS_PER_MS)
    root = req.span("root", -1, t, 0.0, {"per_page": per_page, "status": 200})
    t = yield ("cpu", ms(r, 0.8))
    t = yield from query(
        env,
        req,
        root,
        "products",
        ms(r, 1.5 + 0.004 * per_page, 0.3),
        per_page,
        0.03 * per_page,
        "SELECT products.* FROM products ORDER BY products.id LIMIT $1 OFFSET $2",
    )
    if t is None:
        yield from _fail(req, root)
        return
    render = req.span("render", root, t, 0.0, {"template": "api/v1/catalog#to_json"})
    t = yield ("cpu", ms(r, 0.2 * per_page, 0.15))
    req.spans[render][3] = t
    yield ("checkin",)
    t = yield ("cpu", ms(r, 0.2))
    req.spans[root][3] = t
