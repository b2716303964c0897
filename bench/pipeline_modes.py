"""bench_pipeline.py's sections on tracing modes, front-end scaling and the hand-off (issue 28).

modes: the service's CPU per completed request with tracing off, a span per stage, light mode and
  sampled mode (spans, 10 % head-sampled, slow requests kept), at a fixed closed-loop load. The CPU is
  the service's processes' own (utime + stime from /proc, front ends included), counted only while
  the measured load runs (start-up and warm-up excluded): less sensitive to the shared machine's
  load than throughput. Modes rotate within each repeat; each traced mode is also compared with the
  untraced run of its own repeat (paired). waterfall, both: bench/pipeline_both.py.
frontends: throughput and CPU per request with 1 and 2 front-end processes before one model
  process, tracing off, a small model (--layers, default 1), closed loop.
handoff: CPU per round trip of one request's hand-off (token ids and features out, output back)
  over a Unix socketpair with asyncio streams and over a pipe pair, echoed by a second process.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CLK_TCK = os.sysconf("SC_CLK_TCK")
ALL_STAGES = (
    "ingress", "queue", "parsing", "feature_hydration", "preprocessing", "model_forward",
    "postprocessing", "downstream", "serialization", "unattributed",
)  # fmt: skip


def _cpu_stats(pattern: str):
    """(entry name, parent pid, CPU seconds user + system) of each /proc stat file `pattern` matches
    that is still there to read."""
    for stat in Path("/proc").glob(pattern):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        yield stat.parent.name, int(fields[1]), (int(fields[11]) + int(fields[12])) / CLK_TCK


def cpu_split_s(pid: int) -> tuple[float, float]:
    """CPU seconds (user + system) of `pid` itself and of its live children, from /proc."""
    own = children = 0.0
    for name, parent, seconds in _cpu_stats("[0-9]*/stat"):
        if name == str(pid):
            own += seconds
        elif parent == pid:
            children += seconds
    return own, children


def busiest_s(pid: int) -> dict[str, float]:
    """CPU seconds of each thread of `pid` ("t<tid>") and of each live child process ("p<pid>"), from
    /proc: the deltas over a window say which one thread or process ran at a full core."""
    out = {f"t{tid}": seconds for tid, _, seconds in _cpu_stats(f"{pid}/task/[0-9]*/stat")}
    out.update({f"p{name}": seconds for name, parent, seconds in _cpu_stats("[0-9]*/stat") if parent == pid})
    return out


def busiest_cores(before: dict[str, float], after: dict[str, float], wall_s: float) -> tuple[float, float]:
    """(the model process's busiest thread, the busiest front end), in cores over the window."""
    delta = {key: after[key] - before.get(key, 0.0) for key in after}
    thread = max((v for k, v in delta.items() if k.startswith("t")), default=0.0)
    child = max((v for k, v in delta.items() if k.startswith("p")), default=0.0)
    return thread / wall_s, child / wall_s


def tree_cpu_s(pid: int) -> float:
    """CPU seconds of `pid` and its live children."""
    return sum(cpu_split_s(pid))


def measure_service(cfg, load, warm_s: float, tmp: Path, seed: int = 1) -> dict:
    """Start the service (`cfg`: ServiceConfig), warm it for warm_s under the same load, then drive
    `load` (LoadShape) and book the service's CPU over exactly that load."""
    from reference_pipeline import span_model as sm
    from reference_pipeline.loadgen_pool import drive_here
    from reference_pipeline.runner import Child
    from reference_pipeline.scenarios import LoadShape

    child = Child(
        "service",
        ["reference_pipeline.service", "--config-json", cfg.to_json(), "--trace-out", str(tmp / "svc.jsonl")],
        tmp / "service.log",
    )
    try:
        url = f"http://127.0.0.1:{child.wait_ready(600)}{sm.ROUTE}"
        setup = cfg.resource_attributes(None, None, None)
        options = dict(setup=setup, otlp_endpoint=None, n_entities=cfg.n_entities)
        warm = LoadShape(rps=load.rps, duration_s=warm_s, concurrency=load.concurrency)
        drive_here(url, warm, part=tmp / "warm.jsonl", seed=seed + 100, **options)
        before, wall = cpu_split_s(child.proc.pid), time.perf_counter()
        result = drive_here(url, load, part=tmp / "load.jsonl", seed=seed, **options)
        after, wall_s = cpu_split_s(child.proc.pid), time.perf_counter() - wall
        own_s, children_s = after[0] - before[0], after[1] - before[1]
        cpu_s = own_s + children_s
    finally:
        code = child.stop(grace_s=60)
    if code not in (0, -15):
        raise SystemExit(f"service exited with {code}:\n{child.tail()}")
    summary = result.summary()
    completed = max(summary["requests"] - summary["errors"], 1)
    summary["cpu_ms_per_req"] = 1000 * cpu_s / completed
    summary["front_cpu_ms_per_req"] = 1000 * children_s / completed  # front ends (0: one process)
    summary["main_cpu_ms_per_req"] = 1000 * own_s / completed  # the service or model process
    summary["service_cores"] = cpu_s / wall_s
    return summary


MODES = {
    "off": dict(tracing=False),
    "spans": dict(tracing_mode="spans"),
    "light": dict(tracing_mode="light"),
    "sampled": dict(tracing_mode="spans", sample_rate=0.1, keep_slower_than_ms=250.0),
    "light+sampled": dict(tracing_mode="light", sample_rate=0.1, keep_slower_than_ms=250.0),
}


def layers_text(args) -> str:
    return f"{6 if args.layers is None else args.layers}-layer model"


def base_config(args, **overrides):
    from reference_pipeline.scenarios import ServiceConfig

    values = dict(torch_threads=1, max_batch=8, max_wait_ms=5.0, n_entities=5000, model_layers=args.layers)
    return ServiceConfig(**{**values, **overrides})


def bench_modes(args, machine: str) -> None:
    from reference_pipeline.scenarios import LoadShape

    load = LoadShape(rps=0, duration_s=args.duration, concurrency=args.concurrency)
    print(
        f"service CPU per request by tracing mode (closed loop, {args.concurrency} clients, "
        f"{args.duration:g} s measured after {args.warm:g} s warm-up, batch 8/5 ms, steady, no "
        f"downstream, {layers_text(args)}) — {machine}, load before: {os.getloadavg()[0]:.1f}\n"
    )
    cpu: dict[str, list[float]] = {m: [] for m in MODES}
    paired: dict[str, list[float]] = {m: [] for m in MODES if m != "off"}
    rps: dict[str, list[float]] = {m: [] for m in MODES}
    for repeat in range(args.repeats):
        for mode, options in MODES.items():
            with tempfile.TemporaryDirectory() as tmp:
                s = measure_service(base_config(args, **options), load, args.warm, Path(tmp))
            cpu[mode].append(s["cpu_ms_per_req"])
            rps[mode].append(s["throughput_rps"])
            print(
                f"  repeat {repeat + 1} {mode}: {s['cpu_ms_per_req']:.3f} CPU ms/req, "
                f"{s['throughput_rps']} req/s, load {os.getloadavg()[0]:.1f}",
                flush=True,
            )
        for mode in paired:
            paired[mode].append(100 * (cpu[mode][-1] - cpu["off"][-1]) / cpu["off"][-1])
    off = statistics.median(cpu["off"])
    print("\n| mode | service CPU ms/request (median) | vs off | paired vs off (median; each) | req/s |")
    print("|---|---|---|---|---|")
    for mode in MODES:
        med = statistics.median(cpu[mode])
        pair = (
            f"{statistics.median(paired[mode]):+.1f} % ({', '.join(f'{p:+.1f}' for p in paired[mode])})"
            if mode in paired
            else "—"
        )
        print(
            f"| {mode} | {med:.3f} ({', '.join(f'{c:.3f}' for c in cpu[mode])}) | "
            f"{100 * (med - off) / off:+.1f} % | {pair} | {statistics.median(rps[mode]):.0f} |"
        )
    print(f"\nload average after: {os.getloadavg()[0]:.1f}")


def bench_frontends(args, machine: str) -> None:
    from reference_pipeline.scenarios import LoadShape

    load = LoadShape(rps=0, duration_s=args.duration, concurrency=args.concurrency)
    print(
        f"front-end scaling (closed loop, {args.concurrency} clients, {args.duration:g} s after "
        f"{args.warm:g} s warm-up, tracing off, {layers_text(args)}, batch 8/5 ms) — {machine}\n"
    )
    print(
        "| layout | completed req/s | client p50 ms | service CPU ms/req (front ends + model process) "
        "| service cores busy | capacity bound on 2 cores, req/s | load |"
    )
    print("|---|---|---|---|---|---|---|")
    for repeat in range(args.repeats):
        for frontends in (0, 1, 2):
            with tempfile.TemporaryDirectory() as tmp:
                cfg = base_config(args, tracing=False, frontends=frontends)
                s = measure_service(cfg, load, args.warm, Path(tmp), seed=repeat + 1)
            layout = "one process" if frontends == 0 else f"{frontends} front end(s) + model process"
            print(
                f"| {layout} | {s['throughput_rps']} | {s['p50_ms']} | {s['cpu_ms_per_req']:.3f} "
                f"({s['front_cpu_ms_per_req']:.3f} + {s['main_cpu_ms_per_req']:.3f}) | "
                f"{s['service_cores']:.2f} | {capacity_bound(s, frontends, 2):.0f} | "
                f"{os.getloadavg()[0]:.1f} |",
                flush=True,
            )


def capacity_bound(summary: dict, frontends: int, cores: int) -> float:
    """Requests/s the service could serve on `cores` idle cores from its measured CPU per request:
    each process runs its Python on one core at a time (the GIL; the forward pass aside), so one
    process serves at most 1 / (its CPU per request), N front ends N times that, and all together
    at most cores / (total CPU per request)."""
    total, front, main = (
        summary[k] / 1000 for k in ("cpu_ms_per_req", "front_cpu_ms_per_req", "main_cpu_ms_per_req")
    )
    if frontends == 0:
        return min(1 / total, cores / total)
    return min(frontends / front, 1 / main, cores / total)


ECHO = r"""
import os, struct, sys, socket
kind = sys.argv[1]
if kind == "socket":
    s = socket.socket(fileno=int(sys.argv[2])); rd = s.makefile("rb"); wr = s.makefile("wb")
else:
    rd = os.fdopen(int(sys.argv[2]), "rb"); wr = os.fdopen(int(sys.argv[3]), "wb")
while head := rd.read(4):
    body = rd.read(struct.unpack("<I", head)[0])
    wr.write(head + body); wr.flush()
"""


async def _round_trips(kind: str, ends: tuple, echo_pid: int, n: int, message: list) -> tuple[float, float]:
    """n round trips through the echo; (CPU s of both processes, wall s) at the last one."""
    from reference_pipeline.handoff import frame, read_frame

    loop = asyncio.get_running_loop()
    if kind == "socket":
        reader, writer = await asyncio.open_unix_connection(sock=ends[0])
    else:
        reader = asyncio.StreamReader()
        read_pipe, write_pipe = os.fdopen(ends[0], "rb"), os.fdopen(ends[1], "wb")
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), read_pipe)
        transport, protocol = await loop.connect_write_pipe(asyncio.streams.FlowControlMixin, write_pipe)
        writer = asyncio.StreamWriter(transport, protocol, reader, loop)
    cpu0, wall0 = time.process_time() + tree_cpu_s(echo_pid), time.perf_counter()
    for _ in range(n):
        writer.write(frame(message))
        await read_frame(reader)
    cpu, wall = time.process_time() + tree_cpu_s(echo_pid) - cpu0, time.perf_counter() - wall0
    writer.close()
    return cpu, wall


def bench_handoff(args, machine: str) -> None:
    """Round trips of one request-sized message (64 token ids, 16 features) through an echoing
    process: CPU of both processes per round trip, and wall time."""
    import socket

    message = [0, 1, 2**63, 2**62, 2**61, 1, time.time_ns(), list(range(1000, 1064)), [0.25] * 16]
    n = args.requests
    print(f"hand-off round trips ({n}, one in flight, a 64-token request) — {machine}\n")
    print("| transport | CPU µs per round trip (both processes) | wall µs per round trip |")
    print("|---|---|---|")
    for kind in ("socket", "pipe"):
        if kind == "socket":
            mine, theirs = socket.socketpair()
            fds, ends = (theirs.fileno(),), (mine,)
        else:
            to_echo_r, to_echo_w = os.pipe()
            from_echo_r, from_echo_w = os.pipe()
            fds, ends = (to_echo_r, from_echo_w), (from_echo_r, to_echo_w)
        echo = subprocess.Popen([sys.executable, "-c", ECHO, kind, *map(str, fds)], pass_fds=fds)
        for fd in fds:
            os.close(fd)
        cpu, wall = asyncio.run(_round_trips(kind, ends, echo.pid, n, message))
        echo.wait(10)
        print(f"| {kind} + asyncio streams | {1e6 * cpu / n:.1f} | {1e6 * wall / n:.1f} |", flush=True)


# each stage's stand-in work (~1-2 µs of CPU here): every stage lasts over light mode's 0.5 µs floor,
# so a light request span carries the attributes of all its stages, as a real request's does
STAGE_WORK = 60


def _one_request_of_spans(tracer) -> None:
    """The 10 spans the service makes for a steady request (no downstream), made the way it makes them
    (the root through `tracer`, the rest through tailscope.instrument on the provider set by `ts.use`)."""
    from opentelemetry.trace import SpanKind

    from reference_pipeline import span_model as sm
    from tailscope import instrument as ts

    root_attrs = ts.stage_attributes(
        sm.STAGE_OF[sm.ROOT_SPAN], attributes={"http.request.method": "POST", "http.route": sm.ROUTE}
    )
    with (
        tracer.start_as_current_span(sm.ROOT_SPAN, kind=SpanKind.SERVER, attributes=root_attrs) as root,
        ts.request(root),  # light mode: the stages below tally onto the root; spans mode: nothing
    ):
        for name, current in (
            (sm.RECEIVE, False),
            (sm.PARSE, False),
            (sm.HYDRATE, True),
            (sm.TOKENIZE, False),
            (sm.POSTPROCESS, True),
            (sm.SERIALIZE, False),
        ):
            with ts.stage(sm.STAGE_OF[name], name, current=current) as span:
                span.set_attribute("example.size", sum(range(STAGE_WORK)))
        now = time.time_ns()
        ts.record_queue_wait(now, now, span_name=sm.QUEUE_WAIT, batch_size=4)
        ts.record_span("model_forward", sm.FORWARD, now, now, {"batch.size": 4})
        ts.record_span("postprocessing", sm.LOCK_WAIT, now, now, {"lock.name": "score_monitor"})
        root.set_attribute("http.response.status_code", 200)


def bench_spans(args, machine: str) -> None:
    """CPU per request of tracing alone, in each mode: SDK spans, then the BatchSpanProcessor and the
    file exporter (what the service pays), light mode, and sampling in front of either."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.trace import NoOpTracerProvider

    from reference_pipeline.tracing import make_provider, request_tracer
    from tailscope import instrument as ts

    print(f"tracing CPU per request (a steady request's stages), {args.requests} requests — {machine}\n")
    print("| what | CPU µs per request |")
    print("|---|---|")

    def per_request(provider, cheap: bool = False) -> float:
        """CPU µs per request, all threads (the processor's export thread too) until all exported;
        `cheap`: the root through the pipeline's tracer (light mode's request span without the SDK's)."""
        tracer = request_tracer(provider, "bench") if cheap else provider.get_tracer("bench")
        started = time.process_time()
        for _ in range(args.requests):
            _one_request_of_spans(tracer)
        getattr(provider, "shutdown", lambda: None)()
        return (time.process_time() - started) / args.requests * 1e6

    ts.use(off := NoOpTracerProvider())
    untraced = per_request(off)
    ts.use(bare_provider := TracerProvider())
    print(f"| no tracing (the stand-in work alone; not subtracted below) | {untraced:.0f} |")
    print(f"| SDK spans (10), no processor | {per_request(bare_provider):.0f} |")
    rows = [
        ("spans", 1.0, None, False, "10 SDK spans + BatchSpanProcessor + OTLP/JSON-lines file"),
        ("light", 1.0, None, False, "light, SDK request span with the stage times + processor + file"),
        ("light", 1.0, None, True, "light, the pipeline's request span (request_span) + processor + file"),
        ("spans", 0.1, 250.0, False, "spans, 10 % head-sampled (+ slow kept; none slow here)"),
        ("light", 0.1, 250.0, True, "light (pipeline's request span), 10 % head-sampled"),
    ]
    for mode, rate, slow, cheap, what in rows:
        with tempfile.TemporaryDirectory() as tmp:
            provider = make_provider(
                "bench", {}, Path(tmp) / "spans.jsonl", sample_rate=rate, keep_slower_than_ms=slow
            )
            ts.use(provider)
            ts.set_mode(mode)
            cost = per_request(provider, cheap)
        print(f"| {what} | {cost:.0f} |", flush=True)
    ts.set_mode("spans")


SECTIONS = {
    "spans": bench_spans,
    "modes": bench_modes,
    "frontends": bench_frontends,
    "handoff": bench_handoff,
}
