"""bench_pipeline.py's model-side section: the model process's own CPU per request (issue 28).

  python bench/bench_pipeline.py model-side [--frontends 4] [--requests 20000] [--policies 1:0,32:5]

On a GPU the forward is ~0.4 ms a batch, so what bounds the scaled-out service is the one model
process's Python per request: reading each front end's hand-off, the batcher, and writing the answers
back (H100, saturation at batch 32: ~0.11 ms of model-process CPU per request, ~9,000 req/s at most).
This section runs exactly that code — handoff.FrontendConnection over a DynamicBatcher, one socketpair
per front end — with a forward that costs nothing (zeros of the output's shape), and `--frontends`
stand-in front-end processes that each keep 64 requests in flight (pre-built request frames, answers
counted). Booked: this process's CPU per request (the model side), requests/s, the mean batch size.
"""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import time

FRONT = r"""
import asyncio, socket, struct, sys, time
sys.path.insert(0, sys.argv[4])
from reference_pipeline.handoff import frame, read_frame
sock = socket.socket(fileno=int(sys.argv[1])); n = int(sys.argv[2]); window = int(sys.argv[3])
async def main():
    reader, writer = await asyncio.open_unix_connection(sock=sock)
    ids, feats = list(range(1000, 1064)), [0.25] * 16
    sent = done = 0
    def send():
        nonlocal sent
        writer.write(frame([0, sent, 2**63 + sent, 2**62, 2**61 + sent, 1, time.time_ns(), ids, feats]))
        sent += 1
    for _ in range(min(window, n)):
        send()
    while done < n:
        if await read_frame(reader) is None:
            break
        done += 1
        if sent < n:
            send()
    writer.close()
asyncio.run(main())
"""


async def _serve(
    fronts: int, requests: int, max_batch: int, wait_ms: float, gpu_waits: int = 3, gpu_wait_s: float = 0.0002
) -> dict:
    from reference_pipeline.batcher import DynamicBatcher
    from reference_pipeline.handoff import FrontendConnection
    from reference_pipeline.scenarios import ServiceConfig

    sizes: list[int] = []

    def run_batch(payloads: list, marks: dict) -> list:
        sizes.append(len(payloads))
        for _ in range(gpu_waits):  # the GPU's time: the copy in, the replay, the copy out, each
            time.sleep(gpu_wait_s)  # with the GIL released, as torch does around CUDA calls
        return [[0.0, 0.0] for _ in payloads]

    batcher = DynamicBatcher(run_batch, max_batch, wait_ms, 1)
    cfg = ServiceConfig(tracing=False)
    pairs = [socket.socketpair() for _ in range(fronts)]
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    procs = []
    for _mine, theirs in pairs:
        procs.append(
            subprocess.Popen(
                [sys.executable, "-c", FRONT, str(theirs.fileno()), str(requests // fronts), "64", root],
                pass_fds=(theirs.fileno(),),
            )
        )
        theirs.close()
    cpu0, wall0 = time.process_time(), time.perf_counter()
    conns = [FrontendConnection(i, batcher, cfg) for i in range(fronts)]
    await asyncio.gather(*(c.serve(mine) for c, (mine, _) in zip(conns, pairs, strict=True)))
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    for proc in procs:
        proc.wait(30)
    batcher.close()
    done = sum(sizes)
    return {"cpu_us": 1e6 * cpu / done, "rps": done / wall, "batch": done / max(len(sizes), 1), "n": done}


def bench_model_side(args, machine: str) -> None:
    fronts = args.frontends if str(args.frontends).isdigit() else 4
    fronts = int(fronts) or 4
    policies = [tuple(p.split(":")) for p in (args.policies or "1:0,32:5").split(",")]
    print(f"model side of the hand-off ({fronts} stand-in front ends x 64 in flight, {args.requests} "
          f"requests, a forward that costs nothing) — {machine}\n")  # fmt: skip
    print("| batch policy | model-process CPU µs per request | requests/s | mean batch |")
    print("|---|---|---|---|")
    for size, wait in policies:
        got = asyncio.run(_serve(fronts, args.requests, int(size), float(wait)))
        row = f"| {size} / {wait} ms | {got['cpu_us']:.1f} | {got['rps']:,.0f} | {got['batch']:.1f} |"
        print(row, flush=True)


SECTIONS = {"model-side": bench_model_side}
