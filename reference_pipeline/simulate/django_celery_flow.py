"""One credit-limit request of the blind family `django-celery` (django_celery.py), from the caller's
send to the gunicorn worker freeing up: its timeline through the model of django_celery_infra.py, and
its spans (django_celery_spans.py) in the seed's conventions."""

from __future__ import annotations

import heapq
import random
from dataclasses import dataclass

from reference_pipeline.simulate import django_celery_spans as sp
from reference_pipeline.simulate.django_celery_infra import (
    Cache,
    Celery,
    Net,
    Pod,
    ServerPool,
    Worker,
    bureau_ms,
    handshake_ns,
    history_of,
    statement_ms,
    task_work_ms,
)
from reference_pipeline.simulate.trace_table import NS_PER_MS, NS_PER_S, TraceTable, lognormal_ms

POLL_NS = 50 * NS_PER_MS  # AsyncResult.get(interval=0.05)
GET_TIMEOUT_NS = 2 * NS_PER_S
READ_TIMEOUT_NS = 400 * NS_PER_MS  # requests.post(..., timeout=(1.0, 0.4)), one retry
MAX_REQUESTS = 500
PHASES = 5  # where a full collection can fall: features, bureau, publish, after the wait, the write


@dataclass
class World:
    """Everything a request meets: the scenario's switches and the shared state."""

    style: sp.Style
    res: sp.Resources
    table: TraceTable
    net: Net
    pods: list[Pod]
    pool: ServerPool
    locks: dict[int, float]
    cache: Cache
    celery: Celery
    leak: float  # million objects a request leaks (gc-gen2-leak)
    slow_bureau: bool
    big_payload: bool
    edge_traced: bool


def _db(w: World, sp_: sp.Spans, parent: int, web: int, rng: random.Random, t: float, zone: int,
        statement: str, exec_ms: float, autocommit: bool = True) -> tuple[float, float]:
    """One psycopg statement in autocommit (its own transaction: a server connection for the
    statement) or inside the open transaction; returns (end, when the server finished)."""
    name = statement.split()[0]
    rtt = w.net.rtt(rng, zone)
    at_bouncer = t + rtt / 2
    served, heap = w.pool.take(at_bouncer) if autocommit else (at_bouncer, None)
    done = served + statement_ms(rng, exec_ms)
    if heap is not None:
        w.pool.give(heap, done)
    end = done + rtt / 2
    sp_.add(parent, name, "Client", web, sp.SCOPES["psycopg"], t, end, sp.db_attrs(w.style, statement),
            peer="pgbouncer")
    return end, done


def request(w: World, rng: random.Random, arrival: float, customer: int) -> None:
    st, res, out = w.style, w.res, sp.Spans()
    caller = res.get(sp.CALLER)
    c_root = out.add(None, "POST /v1/applications/{id}/offer", "Server", caller, sp.SCOPES["caller"],
                     arrival - lognormal_ms(rng, 1.5, 0.3))
    c_call = out.add(c_root, "POST", "Client", caller, sp.SCOPES["client"], arrival,
                     attrs={"http.request.method": "POST", "server.address": "credit-api.credit.svc",
                            "url.full": f"http://credit-api.credit.svc/api/v1/customers/{customer}/credit-limit"},
                     peer=sp.WEB)
    k = rng.randrange(len(w.pods))
    pod = w.pods[k]
    at_lb = arrival + lognormal_ms(rng, 0.5, 0.3)
    parent = c_call
    if w.edge_traced:
        parent = out.add(c_call, "frontend credit-api", "Server", res.get(sp.EDGE), sp.SCOPES["haproxy"],
                         at_lb, attrs={"haproxy.backend": "credit_api", "haproxy.server": sp.web_pod(k)})
    free_at, slot = heapq.heappop(pod.free)
    wk = pod.workers[slot]
    pickup = max(at_lb + lognormal_ms(rng, 0.25, 0.3), free_at)
    web = res.get(sp.WEB, k, wk.pid)
    zone = pod.zone
    root_s = pickup + lognormal_ms(rng, 0.1, 0.3)
    root = out.add(parent, st.root, "Server", web, sp.SCOPES["django"], root_s)
    t = root_s + lognormal_ms(rng, 1.1, 0.3)  # middleware: session, JWT auth, DRF's parser
    if wk.fresh:  # a fresh worker's first request: lazy imports, URL resolver, a new DB connection
        t += lognormal_ms(rng, 160.0, 0.3)
    pause = wk.allocate(rng, w.leak)
    gc_phase = rng.randrange(PHASES) if pause else -1
    pauses: list[tuple[float, float]] = []

    def collect(phase: int, t: float) -> float:
        if phase != gc_phase:
            return t
        pauses.append((t, t + pause))
        return t + pause

    # 1. features: the cache, or three ORM queries + the frame, written back with a TTL
    t = collect(0, t)
    hist = history_of(customer)
    feat = out.add(root, sp.LOAD_FEATURES, "Internal", web, sp.SCOPES["app"], t) if st.internals else root
    g_s = t + lognormal_ms(rng, 0.05, 0.3)
    hit = w.cache.hit(customer, g_s)
    blob = 900 + 2 * min(hist, 4000)
    g_e = g_s + w.net.rtt(rng, zone) + lognormal_ms(rng, 0.04, 0.4) + blob * 0.00002 * NS_PER_MS
    out.add(feat, "GET", "Client", web, sp.SCOPES["redis"], g_s, g_e,
            sp.redis_attrs(st, "GET", "?", blob if hit else None), peer="redis")
    t = g_e + lognormal_ms(rng, 0.1 if hit else 0.05, 0.3)
    if not hit:
        for statement, cost in (
                ("SELECT id, opened_at, segment FROM credit_customer WHERE id = %s", 0.3),
                ("SELECT mcc, sum(amount), count(*) FROM credit_transaction WHERE customer_id = %s "
                 "AND booked_at > %s GROUP BY mcc", 2.0 + 0.02 * hist),  # rows off disk: cold history
                ("SELECT status, count(*) FROM credit_repayment WHERE customer_id = %s GROUP BY status",
                 0.8 + 0.01 * hist)):
            t, _ = _db(w, out, feat, web, rng, t + lognormal_ms(rng, 0.15, 0.3), zone, statement, cost)
        t += lognormal_ms(rng, 12.0 + 0.03 * hist, 0.3)  # pandas: the feature frame
        s_s = t
        t += w.net.rtt(rng, zone) + lognormal_ms(rng, 0.05, 0.3)
        w.cache.store(customer, t)
        out.add(feat, "SETEX", "Client", web, sp.SCOPES["redis"], s_s, t,
                sp.redis_attrs(st, "SETEX", "? ? ?"),
                peer="redis")
    if st.internals:
        out.rows[feat][7] = {"cache.hit": hit, "app.history.length": hist}
        out.end(feat, t + lognormal_ms(rng, 0.05, 0.3))
    # 2. the bureau: requests over a keep-alive connection (a new one after 4 s idle or a timeout)
    t = collect(1, t + lognormal_ms(rng, 0.3, 0.3))
    for attempt in range(2):
        b_s = t + lognormal_ms(rng, 0.08, 0.3)
        connect = handshake_ns(rng) if wk.bureau_used < 0 or b_s - wk.bureau_used > 4 * NS_PER_S else 0.0
        answer = bureau_ms(rng, w.slow_bureau)
        ok = answer <= READ_TIMEOUT_NS
        b_e = b_s + connect + (answer if ok else READ_TIMEOUT_NS + lognormal_ms(rng, 0.3, 0.3))
        wk.bureau_used = b_e if ok else -1.0
        out.add(root, st.bureau, "Client", web, sp.SCOPES["requests"], b_s, b_e,
                sp.bureau_attrs(st, 200 if ok else None, attempt), "Unset" if ok else "Error",
                "" if ok else f"HTTPSConnectionPool(host='{sp.BUREAU_HOST}', port=443): Read timed out. "
                "(read timeout=0.4)", peer="bureau")
        t = b_e + lognormal_ms(rng, 0.1, 0.3)
        if ok:
            break
    # 3. score.apply_async: serialise, publish (with a confirm) to RabbitMQ
    t = collect(2, t + lognormal_ms(rng, 0.4, 0.3))
    kb = 0.5 * hist if w.big_payload else 1.6 + 0.001 * hist
    p_s = t
    ser = (0.15 + 0.045 * kb) * NS_PER_MS * rng.lognormvariate(0.0, 0.1)
    rtt = w.net.rtt(rng, zone)
    at_broker = p_s + ser + rtt / 2 + kb * 0.008 * NS_PER_MS
    p_e = at_broker + rtt / 2 + lognormal_ms(rng, 0.1, 0.3)
    msg = f"{rng.getrandbits(128):032x}"
    msg = f"{msg[:8]}-{msg[8:12]}-4{msg[13:16]}-a{msg[17:20]}-{msg[20:32]}"
    producer = out.add(root, f"apply_async/{sp.SCORE}", "Producer", web, sp.SCOPES["celery"], p_s, p_e,
                       sp.celery_attrs(st, "apply_async", sp.SCORE, msg, int(kb * 1024)), peer="rabbitmq")
    build, predict = task_work_ms(rng, kb)
    run = w.celery.execute(rng, at_broker, build + predict)
    worker_res = res.get(sp.WORKER, run.proc.pod, run.proc.pid, run.proc.gen)
    ready = run.end + lognormal_ms(rng, 0.35, 0.3)  # the result SET in the backend
    consumer = out.add(producer, f"run/{sp.SCORE}", "Consumer", worker_res, sp.SCOPES["celery"], run.start,
                       ready + lognormal_ms(rng, 0.05, 0.3),
                       sp.celery_attrs(st, "run", sp.SCORE, msg, int(kb * 1024)), own=st.linked)
    if st.internals:
        if run.load_end > run.start:
            out.add(consumer, sp.MODEL_LOAD, "Internal", worker_res, sp.SCOPES["worker"], run.start,
                    run.load_end,
                    {"model.name": "credit-limit-xgb", "model.version": "2026.11.2"}, own=st.linked)
        out.add(consumer, sp.BUILD, "Internal", worker_res, sp.SCOPES["worker"], run.load_end,
                run.load_end + build, {"features.count": int(kb * 1024 / 9)}, own=st.linked)
        out.add(consumer, sp.PREDICT, "Internal", worker_res, sp.SCOPES["worker"], run.load_end + build,
                run.end,
                {"model.trees": 400}, own=st.linked)
    # 4. AsyncResult.get(timeout=2, interval=0.05): GET the result key until it is there
    w_s = p_e + lognormal_ms(rng, 0.05, 0.3)
    wait = out.add(root, sp.WAIT, "Internal", web, sp.SCOPES["app"], w_s) if st.internals else root
    poll, timed_out = w_s, False
    while True:
        rtt = w.net.rtt(rng, zone)
        e = poll + rtt + lognormal_ms(rng, 0.03, 0.3)
        seen = poll + rtt / 2 >= ready
        out.add(wait, "GET", "Client", web, sp.SCOPES["redis"], poll, e,
                sp.redis_attrs(st, "GET", "celery-task-meta-?", 180 if seen else None), peer="redis")
        if seen:
            t = e
            break
        if e + POLL_NS - w_s > GET_TIMEOUT_NS:
            t, timed_out = e + POLL_NS, True
            break
        poll = e + POLL_NS * rng.lognormvariate(0.0, 0.01)
    if st.internals:
        out.end(wait, t + lognormal_ms(rng, 0.02, 0.3))
        out.rows[wait][7] = {"celery.task_id": msg, "celery.timeout_s": 2.0}
        if timed_out:
            out.rows[wait][8:10] = ["Error", "celery.exceptions.TimeoutError: The operation timed out."]
    t = collect(3, t + lognormal_ms(rng, 0.1, 0.3))
    # 5. the exposure write: atomic() { SELECT ... FOR UPDATE; recompute; UPDATE; INSERT } COMMIT
    t, held = _lock(w, out, root, web, rng, t, zone, customer)
    t = _exposure(w, out, root, web, rng, t, zone, customer, hist, held)
    t = collect(4, t)
    root_e = t + lognormal_ms(rng, 0.6, 0.3)  # DRF renders the decision
    out.rows[root][7] = sp.server_attrs(st, customer, 200, 420)
    out.end(root, root_e)
    if st.gc_events:
        for a, b in pauses:
            out.event(root, a, "python.gc",
                      {"gc.generation": 2, "gc.duration_ms": round((b - a) / NS_PER_MS, 2)})
    edge_e = root_e + lognormal_ms(rng, 0.15, 0.3)
    if w.edge_traced:
        out.end(parent, edge_e)
    out.end(c_call, edge_e + lognormal_ms(rng, 0.4, 0.3))
    out.end(c_root, edge_e + lognormal_ms(rng, 1.8, 0.3))
    out.write(w.table)
    _free(rng, pod, slot, wk, root_e)


def _lock(w: World, out: sp.Spans, root: int, web: int, rng: random.Random, t: float, zone: int,
          customer: int) -> tuple[float, list[float]]:
    """BEGIN + `SELECT ... FOR UPDATE`: a server connection from PgBouncer (transaction pooling: held
    to COMMIT), then the customer's exposure row lock (held to COMMIT)."""
    rtt = w.net.rtt(rng, zone)
    s = t + lognormal_ms(rng, 0.25, 0.3)
    server, heap = w.pool.take(s + rtt / 2)
    locked = max(server + lognormal_ms(rng, 0.1, 0.3), w.locks.get(customer, 0.0))
    e = locked + statement_ms(rng, 0.35) + rtt / 2
    out.add(root, "SELECT", "Client", web, sp.SCOPES["psycopg"], s, e, sp.db_attrs(
        w.style, "SELECT id, limit_amount, utilised FROM credit_exposure WHERE customer_id = %s FOR UPDATE"),
        peer="pgbouncer")
    return e, heap


def _exposure(w: World, out: sp.Spans, root: int, web: int, rng: random.Random, t: float, zone: int,
              customer: int, hist: int, heap: list[float]) -> float:
    """The rest of the exposure transaction, then COMMIT: the row lock and the connection go."""
    st = w.style
    t, _ = _db(w, out, root, web, rng, t + lognormal_ms(rng, 0.1, 0.3), zone,
               "SELECT sum(outstanding) FROM credit_line WHERE customer_id = %s AND status = 'open'",
               2.0 + 0.004 * hist, autocommit=False)
    t, _ = _db(w, out, root, web, rng, t + lognormal_ms(rng, 0.1, 0.3), zone,
               "SELECT count(*), sum(limit_amount) FROM credit_decision WHERE customer_id = %s AND "
               "created_at > now() - interval '24 hours'", 1.2, autocommit=False)  # the velocity check
    c_s = t + lognormal_ms(rng, 0.05, 0.3)
    t = c_s + lognormal_ms(rng, 5.0, 0.3)  # the policy: score, bureau flags, exposure -> limit
    if st.internals:
        out.add(root, sp.COMPUTE, "Internal", web, sp.SCOPES["app"], c_s, t)
    t, _ = _db(w, out, root, web, rng, t + lognormal_ms(rng, 0.1, 0.3), zone,
               "UPDATE credit_exposure SET limit_amount = %s, updated_at = %s WHERE id = %s", 0.5,
               autocommit=False)
    t, _ = _db(w, out, root, web, rng, t + lognormal_ms(rng, 0.1, 0.3), zone,
               "INSERT INTO credit_decision (customer_id, limit_amount, score, created_at) VALUES "
               "(%s, %s, %s, %s) RETURNING id", 0.45, autocommit=False)
    rtt = w.net.rtt(rng, zone)
    committed = t + rtt / 2 + lognormal_ms(rng, 0.6, 0.3)  # COMMIT: the WAL flush
    w.locks[customer] = committed
    w.pool.give(heap, committed)
    return committed + rtt / 2


def _free(rng: random.Random, pod: Pod, slot: int, wk: Worker, root_e: float) -> None:
    """The worker takes the next request from the backlog; at --max-requests (+ jitter) it exits and
    the master forks a fresh one, which imports Django before it accepts."""
    freed = root_e + lognormal_ms(rng, 0.25, 0.3)
    wk.served += 1
    wk.fresh = False
    if wk.served >= MAX_REQUESTS:
        pod.workers[slot] = Worker(pod.next_pid, 0, 0.35, 0.0, fresh=True)
        pod.next_pid += 1
        freed += lognormal_ms(rng, 1400.0, 0.2)
    heapq.heappush(pod.free, (freed, slot))


def consumer_only(w: World, rng: random.Random, t: float, task: str, work_ns: float) -> None:
    """A task published by an untraced producer (celery beat's portfolio rescore): its CONSUMER span
    is a trace's root."""
    run = w.celery.execute(rng, t, work_ns)
    out = sp.Spans()
    me = w.res.get(sp.WORKER, run.proc.pod, run.proc.pid, run.proc.gen)
    msg = f"{rng.getrandbits(64):016x}"
    out.add(None, f"run/{task}", "Consumer", me, sp.SCOPES["celery"], run.start, run.end + 0.4 * NS_PER_MS,
            sp.celery_attrs(w.style, "run", task, msg, None))
    out.write(w.table)

