"""One run of the blind family `scala-akka` (scala_akka.py): requests in arrival order through the
cluster's pods, entities, Redis, the traffic service and Kafka (scala_akka_cluster.py), written as spans
(scala_akka_spans.py)."""

from __future__ import annotations

import random
from typing import Any

from reference_pipeline.simulate import scala_akka_spans as sp
from reference_pipeline.simulate.scala_akka_cluster import (
    Breaker,
    Node,
    Shards,
    g1_pauses,
    geo_search,
    recover,
    throttled_periods,
)
from reference_pipeline.simulate.trace_table import (
    NS_PER_MS,
    NS_PER_S,
    Stalls,
    TraceTable,
    lognormal_ms,
    merge_intervals,
    poisson_arrivals,
)

ASK_TIMEOUT = 300 * NS_PER_MS
TRAFFIC_TIMEOUT = 250 * NS_PER_MS
SHARDS = 120
PARTITIONS = 12
HOT = 7  # the chain restaurant's id
RESTAURANTS, COURIERS = 3000, 5000


def _node(rng: random.Random, k: int, s: dict[str, Any], parts: set[str], where: dict[str, tuple[int, ...]],
          horizon: float, born: float = 0.0, fresh: bool = False) -> Node:
    gc = "g1-old-gen" in parts and k in where["gc"]
    pauses = g1_pauses(rng, horizon, gc)
    if "cfs-throttling" in parts and k in where["throttled"]:
        throttled = throttled_periods(rng, horizon, 0.6, (20.0, 70.0))
    else:
        throttled = throttled_periods(rng, horizon, 0.01, (2.0, 8.0))
    if fresh:  # a new JVM's compiler threads and class loading burst the quota in its first seconds
        burst = throttled_periods(rng, horizon, 0.25, (5.0, 25.0))
        throttled += [(a, b) for a, b in burst if born < a < born + 2 * NS_PER_S]
    stalls = Stalls(merge_intervals([(a, b) for a, b, _ in pauses] + throttled))
    node = Node(k, s["cores"], stalls, pauses, served=0 if fresh else 100_000, born=born)
    node.jdbc_on_dispatcher = "jdbc-on-dispatcher" in parts and k in where["jdbc"]
    return node


def _hop(rng: random.Random, a: int, b: int, lossy: set[int]) -> float:
    """One Artery message between pods a and b (a local tell when a == b)."""
    if a == b:
        return lognormal_ms(rng, 0.02, 0.3)
    t = NS_PER_MS * rng.uniform(0.3, 1.0)
    if {a, b} == lossy:
        t += rng.uniform(15.0, 70.0) * NS_PER_MS if rng.random() < 0.5 else lognormal_ms(rng, 1.5, 0.5)
    return t


def _query(rng: random.Random) -> float:
    query = lognormal_ms(rng, 16.0, 0.45)
    if rng.random() < 0.004:  # the odd slow query (a cold page, autovacuum)
        query += rng.uniform(10.0, 30.0) * NS_PER_MS
    return query


def _held_queries(nodes: dict[int, Node], arrivals: list[float], pick: list[float],
                  queries: list[float]) -> dict[int, tuple[float, float]]:
    """The queries a pod runs on its default dispatcher, each holding a thread: placed before the
    requests are (in arrival order, a thread for each when one is not held), so that every callback,
    route and entity message on that pod, whichever request it serves, waits for a thread not held."""
    out = {}
    for r, t0 in enumerate(arrivals):
        node = nodes[int(pick[r] * len(nodes))]
        if node.jdbc_on_dispatcher:
            out[r] = node.block(t0 + 0.5 * NS_PER_MS, queries[r])
    return out


def _traffic_latency(rng: random.Random, t: float, run_ns: float, degraded: bool) -> float:
    if degraded and t > 0.25 * run_ns:
        ramp = min(1.0, (t - 0.25 * run_ns) / (0.25 * run_ns))
        return lognormal_ms(rng, 60.0 + 440.0 * ramp, 0.5)
    slow = rng.random() < 0.004
    return lognormal_ms(rng, 30.0 if slow else 5.0, 0.4)


def simulate(rng: random.Random, table: TraceTable, st: sp.Style, s: dict[str, Any], parts: set[str],
             requests: int, where: dict[str, tuple[int, ...]]) -> None:
    run_s = requests / s["rps"]
    run_ns = run_s * NS_PER_S
    n = s["nodes"]
    lunch = (0.3 * run_ns, 0.7 * run_ns) if "hot-restaurant-lunch" in parts else None
    bursts = ((0.3 * run_s, 0.4 * run_s, 1.4),) if lunch else ()
    arrivals = poisson_arrivals(rng, s["rps"], requests, bursts)
    horizon = arrivals[-1] + 5 * NS_PER_S
    nodes = {k: _node(rng, k, s, parts, where, horizon) for k in range(n)}
    live = {k: (0.0, float("inf")) for k in range(n)}
    res = sp.Resources(table, st)
    changes: list[tuple[float, str, int, int]] = []  # (when, join | deploy | leave, pod, pod it replaces)
    if "shard-rebalance" in parts:
        changes.append((0.3 * run_ns, "join", where["joined"][0], -1))
    if "deploy-cold-jit" in parts:
        for j, (new, old) in enumerate(zip(where["deployed"], where["replaced"], strict=True)):
            at = (0.35 + 0.08 * j) * run_ns
            changes += [(at, "deploy", new, old), (at + 1.0, "leave", old, -1)]
            res.generation[new] = 1
    changes.sort()
    shards = Shards(rng, SHARDS, list(range(n)))
    breaker = Breaker()
    lossy = set(where["link"]) if "artery-noisy-link" in parts else set()
    redis = Stalls(merge_intervals([(a, a + lognormal_ms(rng, 8.0, 0.4))
                                    for a in (rng.uniform(0.0, 3.0) * NS_PER_S + 3 * k * NS_PER_S
                                              for k in range(int(horizon / (3 * NS_PER_S)) + 1))]))
    move = (0.4 * run_ns, 0.58 * run_ns) if "kafka-leader-move" in parts else None
    hot_share = 0.0
    if lunch:  # the chain restaurant's asks at lunch: a little over what its one mailbox serves
        hot_share = 1.1 / (1.4 * s["rps"] * 8.3e-3)
    pick = [rng.random() for _ in arrivals]  # the ALB's choice among the pods in service
    queries = [_query(rng) for _ in arrivals]
    held = _held_queries(nodes, arrivals, pick, queries)
    for r, t0 in enumerate(arrivals):
        while changes and changes[0][0] <= t0:
            at, what, k, old = changes.pop(0)
            if what == "leave":
                live[k] = (live[k][0], at)
                continue
            nodes[k] = _node(rng, k, s, parts, where, horizon, born=at, fresh=True)
            live[k] = (at, float("inf"))
            if what == "join":  # the coordinator evens the shard counts out
                members = sum(1 for x in live.values() if x[1] > at)
                shards.move(k, None, SHARDS // members, at, 0.25 * NS_PER_S)
            else:  # the leaving pod hands all its shards over
                shards.move(k, {old}, SHARDS, at, 0.25 * NS_PER_S)
        targets = [k for k, (a, b) in live.items() if a <= t0 < b]
        k = targets[int(pick[r] * len(targets))]
        node = nodes[k]
        jit = node.jit()
        node.served += 1
        _rs, route_e = node.run(t0 + lognormal_ms(rng, 0.35, 0.2), lognormal_ms(rng, 0.12, 0.25) * jit)
        root_s = _rs
        at_lunch = lunch is not None and lunch[0] <= t0 < lunch[1]
        if at_lunch and rng.random() < hot_share:
            restaurant = HOT
        else:
            restaurant = int(RESTAURANTS * rng.random() ** 2.5)
            restaurant += 1 if restaurant == HOT else 0
        order = rng.randrange(10_000_000, 99_999_999)
        asks = []
        for kind, eid in (("Restaurant", restaurant), ("Courier", rng.randrange(COURIERS))):
            ent = shards.entity(kind, eid)
            shard = shards.shard(kind, eid)
            h = shards.home[shard]
            send = route_e + lognormal_ms(rng, 0.02, 0.3)
            arrive = max(send + _hop(rng, k, h, lossy), shards.handoff.get(shard, 0.0))
            home = nodes[h]
            t = max(arrive, ent.free)
            rec = None
            if not ent.loaded:
                rec = recover(rng, home, ent, t)
                t = rec.end
            if kind == "Restaurant":
                open_orders = 270 if eid == HOT and at_lunch else 3 + 40 * (1 - eid / RESTAURANTS) ** 6
                work = (0.2 + 0.03 * open_orders) * NS_PER_MS * rng.lognormvariate(0.0, 0.15)
            else:
                work = lognormal_ms(rng, 0.15, 0.3)
            _ps, pe = home.run(t, work * home.jit())
            home.served += 1
            ent.free = pe
            ent.events_since_snapshot += 1
            back = pe + _hop(rng, h, k, lossy)
            timed_out = back - send > ASK_TIMEOUT
            asks.append(sp.Ask(kind, eid, h, send, send + ASK_TIMEOUT if timed_out else back, timed_out, rec))
        query = queries[r]
        if r in held:
            js = max(held[r][0], route_e)
            jdbc = (js, max(held[r][1], js + 0.5 * query))
        else:
            js = route_e + lognormal_ms(rng, 0.04, 0.3)
            jdbc = (js, js + query)
        _cs, t = node.run(max(jdbc[1], *(a.end for a in asks)), lognormal_ms(rng, 0.1, 0.3) * jit)
        u = rng.random()
        area = "suburb" if "sparse-geo-radius" in parts and u < 0.4 else "edge" if u > 0.96 else "dense"
        geo = []
        g = t
        for radius, members in geo_search(rng, area):
            gs = g + lognormal_ms(rng, 0.03, 0.3)
            ge = redis.settle(gs + lognormal_ms(rng, 0.3, 0.3) + 0.004 * members * NS_PER_MS)
            geo.append((gs, ge, radius, members))
            _x, g = node.run(ge, lognormal_ms(rng, 0.02, 0.3) * jit)
        members = geo[-1][3]
        traffic, source, tr_e = None, "fallback", t + lognormal_ms(rng, 0.01, 0.3)
        cs = t + lognormal_ms(rng, 0.05, 0.3)
        if breaker.allows(cs):
            pod = rng.randrange(s["traffic_pods"])
            ss = cs + lognormal_ms(rng, 0.3, 0.3)
            se = ss + _traffic_latency(rng, cs, run_ns, "traffic-breaker" in parts)
            failed = se + 0.3 * NS_PER_MS - cs > TRAFFIC_TIMEOUT
            ce = cs + TRAFFIC_TIMEOUT if failed else se + lognormal_ms(rng, 0.3, 0.3)
            breaker.record(cs, ce, not failed)
            traffic, source = (cs, ce, failed, pod, ss, se), ("fallback" if failed else "live")
            tr_e = ce
        _fs, fe = node.run(max(g, tr_e), (0.1 + 0.003 * members) * NS_PER_MS * jit)
        predict = node.predict(fe, (0.3 + 0.06 * members) * NS_PER_MS * rng.lognormvariate(0.0, 0.1))
        ps = predict[1] + lognormal_ms(rng, 0.03, 0.3)
        partition = order % PARTITIONS
        ack = ps + rng.uniform(0.0, 5.0) * NS_PER_MS + lognormal_ms(rng, 2.0, 0.35)  # linger, then acks=all
        if move is not None and partition % 3 == 2 and ps < move[1] and ack > move[0]:
            ack = max(ack, move[1] + rng.uniform(0.0, 100.0) * NS_PER_MS + lognormal_ms(rng, 3.0, 0.3))
        _ws, root_e = node.run(ack, lognormal_ms(rng, 0.2, 0.3) * jit)
        pauses = [p for p in node.pauses if p[0] < root_e and p[1] > root_s]
        sp.write_request(table, res, sp.Timeline(
            k, order, restaurant, (root_s, root_e), asks, jdbc, geo, traffic, source, predict, members,
            (ps, ack, partition), pauses))
