"""The discrete-event run of `vision-moderation` (vision_moderation.py): requests through the gateway
up to the Triton call, Triton's batchers, then the verdict's write through PgBouncer and the audit
event. Writes the spans with vision_moderation_spans' conventions."""

from __future__ import annotations

import random
from collections import defaultdict
from typing import Any

from reference_pipeline.simulate.trace_table import (
    NS_PER_MS,
    NS_PER_S,
    Stalls,
    TraceTable,
    WorkerPool,
    lognormal_ms,
    merge_intervals,
    poisson_arrivals,
)
from reference_pipeline.simulate.vision_moderation_runtime import (
    PERIOD_NS,
    GoRuntime,
    dynamic_batcher,
    gc_cycles,
    tcp_loss,
    throttle_stalls,
)
from reference_pipeline.simulate.vision_moderation_spans import GATEWAY, TRITON, resource
from reference_pipeline.simulate.vision_moderation_write import write_request

EMBED = {"max_batch": 8, "delay_ns": 2.0 * NS_PER_MS, "base_ms": 8.0, "per_item_ms": 2.5}
HEAD = {"max_batch": 8, "delay_ns": 0.5 * NS_PER_MS, "base_ms": 0.9, "per_item_ms": 0.12}
EMBED_CAPACITY = EMBED["max_batch"] / (EMBED["base_ms"] + EMBED["per_item_ms"] * EMBED["max_batch"]) * 1000
REGIONS = (("us-east-1", 0.60, 0.0), ("us-east-2", 0.25, 11.0), ("ca-central-1", 0.15, 17.0))
PHONE = ((1080, 1350), (1920, 1080), (1280, 720), (1080, 1080), (1170, 1560), (1440, 1080))
CLIENTS = ("ModApp/5.1.3 (iOS 17.5)", "ModApp/5.1.3 (Android 14)", "moderation-sdk-go/2.4.0")
NEW_CLIENT = "ModApp/5.2.0 (iOS 17.5)"


def _images(rng: random.Random, arrivals: list[float], large: bool) -> list[dict[str, Any]]:
    """What each request uploads: phone-resized JPEGs; originals for 0.2 % (and, with `large`, for 40 %
    of requests from 30 % of the run: the client release that stopped resizing)."""
    change = arrivals[int(len(arrivals) * 0.3)]
    out = []
    for t in arrivals:
        new_client = large and t >= change and rng.random() < 0.4
        if new_client or rng.random() < 0.002:
            w, h = rng.choice(((4032, 3024), (4000, 3000), (3024, 4032)))
            bpp = rng.uniform(0.32, 0.5)
        else:
            w, h = rng.choice(PHONE)
            bpp = rng.uniform(0.11, 0.24)
        client = NEW_CLIENT if new_client else rng.choice(CLIENTS)
        out.append({"w": w, "h": h, "bytes": int(w * h * bpp), "client": client})
    return out


def _runtimes(rng: random.Random, parts: set[str], s: dict[str, Any], reqs: list[dict[str, Any]],
              horizon: float) -> list[GoRuntime]:
    """Each gateway pod's GC cycles (from its allocations) and stalls (STW phases and CFS throttling
    from its CPU demand per period)."""
    pods = s["pods"]
    gomaxprocs = 8
    quota = 6.0
    if "cpu-throttle" in parts:
        quota = 1.0
    end = reqs[-1]["t0"]
    spike_at = end * 0.35 if "gc-assist" in parts else float("inf")
    allocs: list[list[tuple[float, float]]] = [[] for _ in range(pods)]
    scan: list[list[float]] = [[] for _ in range(pods)]
    cpu: list[list[tuple[float, float]]] = [[] for _ in range(pods)]
    for r in reqs:
        mp = r["w"] * r["h"] / 1e6
        mb = mp * 1.5 + 0.59 + r["bytes"] * 2 / 1e6 + 0.88 + 0.3
        t = r["t0"] + 30 * NS_PER_MS
        spiked = t >= spike_at
        if spiked:
            mb += mp * 32.0
        allocs[r["pod"]].append((t, mb))
        scan[r["pod"]].append(60.0 + (min((t - spike_at) / (0.2 * end), 1.0) * 240.0 if spiked else 0.0))
        cpu[r["pod"]].append((t, (mp * 9.0 + 1.5) * NS_PER_MS))
    out = []
    for k in range(pods):
        busy = sum(w for _, w in cpu[k]) / max(end, 1.0)
        cycles = gc_cycles(rng, allocs[k], scan[k], 120.0, 100.0, gomaxprocs, busy)
        demand = [0.0] * (int(horizon // PERIOD_NS) + 2)
        offset = rng.uniform(0, PERIOD_NS)
        for t, w in cpu[k]:
            demand[int((t - offset) // PERIOD_NS) + 1] += w
        for c in cycles:
            mark = c.mark_end - c.start
            per_ns = (c.background_cpu_ms + c.assist_cpu_ms) * NS_PER_MS / max(mark, 1.0)
            i = int((c.start - offset) // PERIOD_NS) + 1
            while i < len(demand) and offset + (i - 1) * PERIOD_NS < c.mark_end:
                a = max(c.start, offset + (i - 1) * PERIOD_NS)
                b = min(c.mark_end, offset + i * PERIOD_NS)
                demand[i] += max(b - a, 0.0) * per_ns
                i += 1
        throttled = throttle_stalls(rng, demand[1:], quota, gomaxprocs, offset)
        stw = [(c.start, c.start + c.sweep_term_ns) for c in cycles]
        stw += [(c.mark_end, c.mark_end + c.mark_term_ns) for c in cycles]
        out.append(GoRuntime(cycles, Stalls(merge_intervals(stw + throttled)), throttled))
    return out


def simulate(parts: set[str], requests: int, seed: int, s: dict[str, Any],
             gw_pods: list[tuple[str, str, str, int]], tr_pods: list[tuple[str, str, str, int]],
             lossy: int) -> TraceTable:
    rng = random.Random(seed * 7_368_787 + 0x71A)
    table = TraceTable(seed, 0x7A11)
    duration = requests / s["rps"]
    bursts: tuple[tuple[float, float, float], ...] = ()
    if "triton-queueing" in parts:
        surge = 1.3 * EMBED_CAPACITY * s["tritons"] / s["rps"]
        bursts = ((0.4 * duration, 0.15 * duration, surge),)
    arrivals = poisson_arrivals(rng, s["rps"], requests, bursts)
    horizon = arrivals[-1] + 5 * NS_PER_S
    reqs = [{"t0": t, **img} for t, img in zip(arrivals, _images(rng, arrivals, "large-images" in parts),
                                                 strict=True)]
    for r in reqs:
        r["pod"] = rng.randrange(s["pods"])
    runtimes = _runtimes(rng, parts, s, reqs, horizon)
    gw_res = [resource(table, s, GATEWAY, name, uid, ip, port, f"ip-10-52-{k}-7.ec2.internal")
              for k, (name, uid, ip, port) in enumerate(gw_pods)]
    tr_res = [] if s["triton_spans"] == "none" else [
        resource(table, s, TRITON, name, uid, ip, port, f"gpu-node-{k}") for k, (name, uid, ip, port)
        in enumerate(tr_pods)]
    cold = "triton-cold" in parts
    scale_at = arrivals[int(len(arrivals) * 0.4)] if cold else float("inf")
    region_tail = "s3-region-tail" in parts
    rr = [0] * s["pods"]  # each gateway pod's gRPC round_robin balancer
    for r in reqs:  # the gateway, up to the Triton call
        go = runtimes[r["pod"]]
        loss = 0.12 if r["pod"] == lossy and "node-packet-loss" in parts else 0.0002
        r["root_s"] = t = go.stalls.settle(r["t0"])
        r["limit_s"] = t = go.cpu(t, lognormal_ms(rng, 0.04, 0.3), False)
        r["redis_s"] = t = go.cpu(t, lognormal_ms(rng, 0.02, 0.3), False)
        wait = lognormal_ms(rng, 0.35, 0.3) + tcp_loss(rng, loss / 6)
        if rng.random() < 0.004:
            wait += rng.uniform(4, 20) * NS_PER_MS
        r["redis_e"] = t = go.stalls.settle(t + wait)
        r["limit_e"] = t = go.cpu(t, lognormal_ms(rng, 0.02, 0.3), False)
        r["fetch_s"] = t = go.cpu(t, lognormal_ms(rng, 0.05, 0.3), False)
        region = rng.choices(REGIONS, weights=[share for _, share, _ in REGIONS])[0]
        r["region"] = region[0]
        r["s3_s"] = t = go.cpu(t, lognormal_ms(rng, 0.04, 0.3), True)
        ttfb = lognormal_ms(rng, 16.0, 0.35) + region[2] * NS_PER_MS + tcp_loss(rng, loss / 2)
        if rng.random() < 0.01:
            ttfb += 40 * NS_PER_MS * rng.paretovariate(2.5)
        if region_tail and region[0] == "us-east-2" and rng.random() < 0.25:
            ttfb += min(100 * NS_PER_MS * rng.paretovariate(1.8), 1.5 * NS_PER_S)
        r["s3_e"] = t = go.stalls.settle(t + ttfb)
        transfer = r["bytes"] / (85e6 * rng.lognormvariate(0.0, 0.2)) * NS_PER_S + tcp_loss(rng, loss / 2)
        r["fetch_e"] = t = go.cpu(t + transfer, r["bytes"] / 4e9 * NS_PER_S, True)
        mp = r["w"] * r["h"] / 1e6
        r["decode_s"] = t = go.cpu(t, lognormal_ms(rng, 0.03, 0.3), False)
        r["decode_e"] = t = go.cpu(t, mp * 6.0 * NS_PER_MS * rng.lognormvariate(0.0, 0.08), True)
        r["resize_s"] = t = go.cpu(t, lognormal_ms(rng, 0.02, 0.3), False)
        r["resize_e"] = t = go.cpu(t, (mp * 3.0 + 0.5) * NS_PER_MS * rng.lognormvariate(0.0, 0.08), True)
        r["infer_s"] = t = go.cpu(t, lognormal_ms(rng, 0.03, 0.3), False)
        sent = go.cpu(t, lognormal_ms(rng, 0.9, 0.15), True)  # marshal the 0.9 MB fp16 tensor
        ready = len(tr_pods) if r["t0"] >= scale_at else len(tr_pods) - (1 if cold else 0)
        r["triton"] = rr[r["pod"]] % ready
        rr[r["pod"]] += 1
        r["server_s"] = sent + lognormal_ms(rng, 0.9, 0.15) + tcp_loss(rng, loss)
        r["loss"] = loss
    _triton(rng, reqs, len(tr_pods), scale_at if cold else None)
    pool = WorkerPool(s["pool"])
    end = arrivals[-1]
    slow = (0.35 * end, 0.75 * end) if "pgbouncer-exhaustion" in parts else (0.0, 0.0)
    for r in reqs:
        go = runtimes[r["pod"]]
        back = r["server_e"] + lognormal_ms(rng, 0.15, 0.2) + tcp_loss(rng, r["loss"])
        r["infer_e"] = go.cpu(back, lognormal_ms(rng, 0.05, 0.3), True)
        r["save_s"] = go.cpu(r["infer_e"], lognormal_ms(rng, 0.06, 0.3), False)
        r["begin_s"] = go.cpu(r["save_s"], lognormal_ms(rng, 0.02, 0.3), False)
    for r in sorted(reqs, key=lambda x: x["begin_s"]):  # PgBouncer hands out server connections FIFO
        go = runtimes[r["pod"]]
        at_bouncer = r["begin_s"] + lognormal_ms(rng, 0.2, 0.2) + tcp_loss(rng, r["loss"] / 6)
        conn = pool.acquire(at_bouncer)
        r["begin_e"] = t = go.stalls.settle(conn + lognormal_ms(rng, 0.35, 0.2))
        r["insert_s"] = t = go.cpu(t, lognormal_ms(rng, 0.03, 0.3), False)
        r["insert_e"] = t = go.stalls.settle(t + lognormal_ms(rng, 0.7, 0.3) + tcp_loss(rng, r["loss"] / 6))
        r["commit_s"] = t = go.cpu(t, lognormal_ms(rng, 0.02, 0.3), False)
        commit = lognormal_ms(rng, 1.2, 0.35)
        if slow[0] <= t < slow[1]:
            commit = lognormal_ms(rng, 85.0, 0.45)
        elif rng.random() < 0.005:
            commit += rng.uniform(6, 25) * NS_PER_MS
        done = t + lognormal_ms(rng, 0.2, 0.2) + commit
        pool.release(done)
        back = done + lognormal_ms(rng, 0.2, 0.2) + tcp_loss(rng, r["loss"] / 6)
        r["commit_e"] = t = go.stalls.settle(back)
        r["save_e"] = t = go.cpu(t, lognormal_ms(rng, 0.03, 0.3), False)
        r["publish_s"] = t = go.cpu(t, lognormal_ms(rng, 0.08, 0.3), True)
        r["publish_e"] = t + lognormal_ms(rng, 3.5, 0.5) + tcp_loss(rng, r["loss"] / 6)
        r["root_e"] = go.cpu(t, lognormal_ms(rng, 0.15, 0.3), True)
    for r in reqs:
        write_request(table, s, r, gw_res[r["pod"]], tr_res[r["triton"]] if tr_res else None,
                      runtimes[r["pod"]], tr_pods)
    return table


def _triton(rng: random.Random, reqs: list[dict[str, Any]], pods: int, cold_from: float | None) -> None:
    """Each Triton pod's ensemble: the embedder's batcher, then the head's; fills each request's
    server_e and its two models' (arrival, batch) pairs."""
    by_pod: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for r in reqs:
        by_pod[r["triton"]].append(r)
    for pod, mine in by_pod.items():
        cold = cold_from if cold_from is not None and pod == pods - 1 else None
        mine.sort(key=lambda x: x["server_s"])
        for r in mine:
            r["embed_at"] = r["server_s"] + lognormal_ms(rng, 0.12, 0.2)
        at = [r["embed_at"] for r in mine]
        for r, batch in zip(mine, dynamic_batcher(rng, at, cold_from=cold, **EMBED), strict=True):
            r["embed"] = batch
            r["head_at"] = batch.end + lognormal_ms(rng, 0.08, 0.2)
        mine.sort(key=lambda x: x["head_at"])
        at = [r["head_at"] for r in mine]
        for r, batch in zip(mine, dynamic_batcher(rng, at, cold_from=cold, **HEAD), strict=True):
            r["head"] = batch
            r["server_e"] = batch.end + lognormal_ms(rng, 0.1, 0.2)

