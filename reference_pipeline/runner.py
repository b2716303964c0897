"""Run the pipeline end to end: downstream and service as child processes, load from this process.

`run_pipeline(opts)` starts the downstream (unless disabled) and the service, each on a free
127.0.0.1 port it binds itself and announces on stdout; drives the load; stops both with SIGTERM
(they drain and flush their spans), killing whatever has not exited after a grace period; and merges
the three processes' OTLP/JSON-lines files into `opts.out`. The children also get
PR_SET_PDEATHSIG, so they do not outlive a runner that is killed outright. reference_pipeline.sweep
runs a matrix of setups through it into separately labelled files.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from reference_pipeline import span_model as sm
from reference_pipeline.children import child_env
from reference_pipeline.loadgen_pool import drive_here, drive_in_processes
from reference_pipeline.scenarios import LoadShape, ServiceConfig, configure, size_bursts
from tailscope.cli.signals import die_with_parent


@dataclass
class RunOptions:
    scenario: str = "steady"
    device: str = "cpu"
    dtype: str = "fp32"
    duration_s: float = 10.0
    rps: float = 20.0
    concurrency: int = 0  # > 0: closed-loop load with this many clients instead of rps (throughput)
    load_processes: int = 1  # the load spread over this many processes (reference_pipeline.loadgen_pool)
    out: Path | None = None
    max_batch: int = 8
    max_wait_ms: float = 5.0
    workers: int = 1
    otlp_endpoint: str | None = None
    compile: bool = False
    cuda_graphs: bool = False
    eager: bool = False  # op-by-op forward on the CPU instead of TorchScript (ServiceConfig.executor)
    torchscript: bool = False  # TorchScript on CUDA too (the CPU's default)
    price_per_hour: float | None = None  # USD per hour of the hardware, recorded with the run
    weights: str = "random-init"  # or "pretrained" (ServiceConfig.weights)
    redis_url: str | None = None
    downstream: bool = True
    torch_threads: int = -1  # -1: half the cores (the event loop, load and downstream share the box)
    n_entities: int = 5000
    seed: int = 1
    ready_timeout_s: float = 600.0
    tracing: bool = True
    tracing_ab_period_s: float = 0.0  # > 0: swap tracing on/off in the service this often (benchmark)
    model_telemetry: str = "spans"  # or "triton" (ServiceConfig.model_telemetry)
    tracing_mode: str = "spans"  # or "light" (ServiceConfig.tracing_mode)
    sample_rate: float = 1.0
    keep_slower_than_ms: float | None = None
    frontends: int = 0  # front-end processes before one model process (0: one process)
    model_layers: int | None = None  # an encoder of this many layers (ServiceConfig.model_layers)
    gc_freeze: bool | None = None  # gc.freeze() once ready; None: as the scenario sets it
    gc_collect: bool = True  # False: gc.disable() once ready (ServiceConfig.gc_collect)


class ChildFailed(RuntimeError):
    pass


class Child:
    """A child process that prints `LISTENING <port>` when ready; stderr goes to a log file."""

    def __init__(self, name: str, args: list[str], log: Path) -> None:
        self.name, self.log = name, log
        self.announced: dict[str, str] = {}  # key=value facts from its LISTENING line
        env = child_env()
        with open(log, "wb") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", *args],
                stdout=subprocess.PIPE,
                stderr=err,
                stdin=subprocess.DEVNULL,
                env=env,
                preexec_fn=die_with_parent,
            )

    def wait_ready(self, timeout_s: float) -> int:
        """The port the child listens on; the key=value facts after it land in `self.announced`."""
        found: list[int] = []

        def read() -> None:
            for line in self.proc.stdout:
                if line.startswith(b"LISTENING "):
                    _, port, *facts = line.decode().split()
                    self.announced = dict(fact.partition("=")[::2] for fact in facts)
                    found.append(int(port))
                    return

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        reader.join(timeout_s)
        if not found:
            self.stop()
            raise ChildFailed(f"{self.name} did not start:\n{self.tail()}")
        return found[0]

    def tail(self, lines: int = 30) -> str:
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        return "\n".join(text.splitlines()[-lines:])

    def stop(self, grace_s: float = 30.0) -> int | None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(grace_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc.stdout:
            self.proc.stdout.close()
        return self.proc.returncode


def _torch_threads(requested: int) -> int:
    return max(1, (os.cpu_count() or 2) // 2) if requested < 0 else requested


def service_config(opts: RunOptions) -> tuple[ServiceConfig, LoadShape, str]:
    service = ServiceConfig(
        device=opts.device,
        dtype=opts.dtype,
        max_batch=opts.max_batch,
        max_wait_ms=opts.max_wait_ms,
        workers=opts.workers,
        compile=opts.compile,
        cuda_graphs=opts.cuda_graphs,
        eager=opts.eager,
        torchscript=opts.torchscript,
        price_per_hour=opts.price_per_hour,
        weights=opts.weights,
        redis_url=opts.redis_url,
        torch_threads=_torch_threads(opts.torch_threads),
        n_entities=opts.n_entities,
        tracing=opts.tracing,
        model_telemetry=opts.model_telemetry,
        tracing_mode=opts.tracing_mode,
        sample_rate=opts.sample_rate,
        keep_slower_than_ms=opts.keep_slower_than_ms,
        frontends=opts.frontends,
        model_layers=opts.model_layers,
    )
    load = LoadShape(rps=opts.rps, duration_s=opts.duration_s, concurrency=opts.concurrency)
    downstream = configure(opts.scenario, service, load)
    if opts.gc_freeze is not None:  # e.g. gc-pressure's work with its start-up heap frozen: no long pauses
        service.gc_freeze = opts.gc_freeze
    service.gc_collect = opts.gc_collect
    return service, load, downstream.delay


def run_pipeline(opts: RunOptions) -> dict:
    """Run one scenario; returns the client-side summary plus where the traces went."""
    service, load, delay = service_config(opts)
    otlp = ["--otlp-endpoint", opts.otlp_endpoint] if opts.otlp_endpoint else []
    children: list[Child] = []
    capacity = 0.0  # the model's requests/s as the warmed service measured it (0: not measured)
    with tempfile.TemporaryDirectory(prefix="tailscope-run-") as tmp_name:
        tmp = Path(tmp_name)
        parts = {name: tmp / f"{name}.jsonl" for name in ("loadgen", "service", "downstream")}
        if opts.tracing_ab_period_s > 0:
            service.tracing_ab_report = str(tmp / "tracing_ab.json")
        try:
            if opts.downstream:
                downstream = Child(
                    "downstream",
                    [
                        "reference_pipeline.downstream",
                        "--delay",
                        delay,
                        "--scenario",
                        opts.scenario,
                        "--trace-out",
                        str(parts["downstream"]),
                        "--sample-rate",
                        str(service.sample_rate),
                        *otlp,
                    ],
                    tmp / "downstream.log",
                )
                children.append(downstream)
                service.downstream_url = f"http://127.0.0.1:{downstream.wait_ready(60)}"
            server = Child(
                "service",
                [
                    "reference_pipeline.service",
                    "--config-json",
                    service.to_json(),
                    "--trace-out",
                    str(parts["service"]),
                    *otlp,
                ],
                tmp / "service.log",
            )
            children.append(server)
            port = server.wait_ready(opts.ready_timeout_s)
            capacity = float(server.announced.get("capacity_rps", 0))
            size_bursts(load, capacity)
            with _swapping(server.proc.pid, opts.tracing_ab_period_s, opts.duration_s):
                result = _drive(f"http://127.0.0.1:{port}{sm.ROUTE}", load, opts, service, parts["loadgen"])
        finally:
            for child in reversed(children):  # the service first: its in-flight calls need the downstream
                if child.stop() not in (0, -signal.SIGTERM):
                    print(
                        f"tailscope pipeline: {child.name} exited with {child.proc.returncode}:",
                        child.tail(),
                        sep="\n",
                        file=sys.stderr,
                    )
        summary = {"scenario": opts.scenario, **result.summary()}
        if capacity:
            summary["model_capacity_rps"] = round(capacity, 1)
        if load.bursts:
            summary["burst_rps"] = round(max(load.rps * m for _, _, m in load.bursts), 1)
        if service.tracing_ab_report and Path(service.tracing_ab_report).exists():
            summary["tracing_ab"] = json.loads(Path(service.tracing_ab_report).read_text())
        if opts.out is not None:
            opts.out.parent.mkdir(parents=True, exist_ok=True)
            with open(opts.out, "wb") as out:
                for part in parts.values():
                    if part.exists():
                        out.write(part.read_bytes())
            summary["out"] = str(opts.out)
    return summary


@contextlib.contextmanager
def _swapping(pid: int, period_s: float, duration_s: float):
    """While the load runs: SIGUSR1 to the service after a first period of warm-up and then every
    period_s (tracing swaps on and off, see reference_pipeline.tracing_switch), SIGUSR2 at the last
    whole window before the load ends (its ramp-down is not booked). Nothing when period_s <= 0."""
    if period_s <= 0:
        yield
        return
    done = threading.Event()
    deadline = time.monotonic() + duration_s

    def swap() -> None:
        while not done.wait(period_s):
            if time.monotonic() + period_s > deadline:
                os.kill(pid, signal.SIGUSR2)
                return
            os.kill(pid, signal.SIGUSR1)

    thread = threading.Thread(target=swap, daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()
        os.kill(pid, signal.SIGUSR2)


def _drive(url: str, load: LoadShape, opts: RunOptions, service: ServiceConfig, part: Path):
    # the run's setup, less what only the service knows (weights, GPU name, torch version)
    setup = service.resource_attributes(None, None, None)
    options = dict(setup=setup, part=part, otlp_endpoint=opts.otlp_endpoint, n_entities=service.n_entities)
    if opts.load_processes > 1:
        return drive_in_processes(url, load, opts.load_processes, seed=opts.seed, **options)
    return drive_here(url, load, seed=opts.seed, **options)
