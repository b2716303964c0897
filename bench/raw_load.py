"""A lean closed-loop HTTP/1.1 client for capacity measurements (bench_pipeline.py frontends-ab).

  python bench/raw_load.py --port P --concurrency 32 --duration 10 [--entities 5000] [--seed 1] [--rate R]

The pipeline's own load generator (httpx, a client span per request) spends 3-4 ms of CPU per
request, more than the service it measures: on 2 cores it, not the service, sets the throughput. This
one sends pre-built keep-alive requests from asyncio protocols (no spans, no header dicts, no JSON
decoding) and costs tens of µs per request, so the service's front end is what saturates. Bodies are
the load generator's own payloads (reference_pipeline.loadgen.make_payloads). Prints `GO` when its
connections are open and its clock starts, then one JSON line: completed, errors, wall_s, cpu_s (its
own), p50_ms, p99_ms, throughput_rps. With --rate R each connection sends at most every
concurrency / R seconds: a service that keeps up serves R requests/s whatever its mode, so the CPU
per request of two modes compares at the same throughput (on a shared machine a saturated run's
throughput is the scheduler's share, and CPU per request moves with it).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import re
import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


CONTENT_LENGTH = re.compile(rb"content-length:\s*(\d+)")


def request_bytes(body: bytes, port: int) -> bytes:
    head = (
        f"POST /v1/predict HTTP/1.1\r\nhost: 127.0.0.1:{port}\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


class ClosedLoopClient(asyncio.Protocol):
    """One keep-alive connection sending its next request as soon as the last response is complete."""

    def __init__(
        self, requests: list[bytes], offset: int, deadline: list[float], stats: dict, gap_s: float = 0.0
    ) -> None:
        self.requests, self.index, self.deadline, self.stats = requests, offset, deadline, stats
        self.gap_s = gap_s  # with --rate: at least this long from one send to the next
        self.buffer = b""
        self.sent_at = 0.0
        self.closed = asyncio.get_running_loop().create_future()

    def connection_made(self, transport) -> None:
        self.transport = transport

    def send(self) -> None:
        self.sent_at = time.perf_counter()
        self.transport.write(self.requests[self.index % len(self.requests)])
        self.index += 1

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        end = self.buffer.find(b"\r\n\r\n")
        if end < 0:
            return
        head = self.buffer[:end].lower()
        found = CONTENT_LENGTH.search(head)
        length = int(found.group(1)) if found else 0
        if len(self.buffer) < end + 4 + length:
            return
        self.buffer = self.buffer[end + 4 + length :]
        now = time.perf_counter()
        if self.deadline[0] and self.sent_at >= self.deadline[1]:  # booked only inside the window
            ok = head.startswith(b"http/1.1 200")
            self.stats["completed" if ok else "errors"] += 1
            self.stats["latencies"].append(now - self.sent_at)
        if now < self.deadline[2]:
            wait = self.sent_at + self.gap_s - now
            if wait > 0:
                asyncio.get_running_loop().call_later(wait, self.send)
            else:
                self.send()
        else:
            self.transport.close()

    def connection_lost(self, exc) -> None:
        if not self.closed.done():
            self.closed.set_result(exc)


async def drive(
    port: int, concurrency: int, warm_s: float, duration_s: float, bodies: list[bytes], rate: float = 0.0
) -> dict:
    loop = asyncio.get_running_loop()
    requests = [request_bytes(body, port) for body in bodies]
    stats: dict = {"completed": 0, "errors": 0, "latencies": []}
    deadline = [0.0, 0.0, float("inf")]  # booking on?, window start, window end
    clients = []
    gap = concurrency / rate if rate > 0 else 0.0
    for i in range(concurrency):
        _, client = await loop.create_connection(
            lambda i=i: ClosedLoopClient(requests, i * 97, deadline, stats, gap), "127.0.0.1", port
        )
        clients.append(client)
    for client in clients:
        client.send()
    await asyncio.sleep(warm_s)
    print("GO", flush=True)
    cpu0 = resource.getrusage(resource.RUSAGE_SELF)
    start = time.perf_counter()
    deadline[:] = [1.0, start, start + duration_s]
    await asyncio.sleep(duration_s)
    wall = time.perf_counter() - start
    cpu1 = resource.getrusage(resource.RUSAGE_SELF)
    deadline[0] = 0.0
    await asyncio.wait([c.closed for c in clients], timeout=30)
    latencies = sorted(stats["latencies"])
    pick = lambda q: round(1000 * latencies[min(len(latencies) - 1, int(q * len(latencies)))], 2)  # noqa: E731
    cpu = (cpu1.ru_utime + cpu1.ru_stime) - (cpu0.ru_utime + cpu0.ru_stime)
    return {
        "completed": stats["completed"],
        "errors": stats["errors"],
        "wall_s": round(wall, 3),
        "cpu_s": round(cpu, 3),
        "p50_ms": pick(0.5) if latencies else None,
        "p99_ms": pick(0.99) if latencies else None,
        "throughput_rps": round(stats["completed"] / wall, 1),
    }


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--warm", type=float, default=3.0, help="seconds of load before the window")
    parser.add_argument("--duration", type=float, default=10.0, help="seconds booked")
    parser.add_argument("--entities", type=int, default=5000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--rate", type=float, default=0.0, help="paced: at most this many requests/s in all (0: closed loop)"
    )
    args = parser.parse_args()
    from reference_pipeline.loadgen import make_payloads

    bodies = make_payloads(1024, random.Random(args.seed), args.entities)
    result = asyncio.run(drive(args.port, args.concurrency, args.warm, args.duration, bodies, args.rate))
    print(json.dumps(result), flush=True)
    return 0 if result["completed"] else 1


if __name__ == "__main__":
    sys.exit(main())
