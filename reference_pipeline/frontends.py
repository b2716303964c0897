"""The scaled-out layout: this process is the model process; N front-end processes serve HTTP.

`run_model_process` loads the model (ModelHost: runner and dynamic batcher), binds the service's
port once per front end (SO_REUSEPORT: the kernel spreads connections over the sockets by a hash of
their addresses; serving.bind_port_group), starts N front ends (`python -m reference_pipeline.frontend`)
that each serve one of those sockets and hold one end of a
socketpair to this process (reference_pipeline.handoff), waits until every front end is serving,
then prints `LISTENING <port>` as the one-process service does. Requests from all front ends meet in
one batcher, so batches fill across them (vLLM's API-server / engine split, on one machine).

Stopping: SIGTERM (or SIGINT) here sends SIGTERM to every front end, which stops accepting, answers
what it has in flight (the model still serves it) and flushes its spans; once all have exited (30 s
grace, then SIGKILL) the batcher drains, this process flushes its spans and appends each front end's
trace file to its own (`--trace-out`), so a run's file holds every process's spans. Front ends get
PR_SET_PDEATHSIG: they do not outlive a model process that is killed outright.

A front end that exits while the service runs is reported on stderr (index, pid, exit status) and the
service goes on with the others; when none is left it stops. Either way the model process exits
with status 1, so the runner reports it: nothing waits on a dead front end.
"""

from __future__ import annotations

import asyncio
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch

from reference_pipeline.children import child_env
from reference_pipeline.handoff import FrontendConnection
from reference_pipeline.model_host import ModelHost
from reference_pipeline.scenarios import ServiceConfig
from reference_pipeline.serving import bind_port_group
from tailscope import instrument as ts
from tailscope.cli.signals import die_with_parent

GRACE_S = 30.0


class Frontend:
    """One front-end process and the model process's end of its hand-off."""

    def __init__(
        self, index: int, argv: list[str], listen: socket.socket, log: Path, trace_part: Path
    ) -> None:
        self.index, self.log, self.trace_part = index, log, trace_part
        self.mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        with open(log, "wb") as err:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "reference_pipeline.frontend",
                    *argv,
                    "--index",
                    str(index),
                    "--listen-fd",
                    str(listen.fileno()),
                    "--model-fd",
                    str(theirs.fileno()),
                    *(["--trace-out", str(trace_part)] if "--trace-out" in argv else []),
                ],
                stdout=subprocess.PIPE,
                stderr=err,
                stdin=subprocess.DEVNULL,
                pass_fds=(listen.fileno(), theirs.fileno()),
                env=child_env(),
                preexec_fn=die_with_parent,
            )
        theirs.close()

    def wait_serving(self, timeout_s: float) -> bool:
        """True once the front end printed its LISTENING line; False when it exited first or the
        time ran out."""
        answered, serving = threading.Event(), []

        def read() -> None:
            for line in self.proc.stdout:
                if line.startswith(b"LISTENING "):
                    serving.append(True)
                    break
            answered.set()

        threading.Thread(target=read, daemon=True).start()
        answered.wait(timeout_s)
        return bool(serving)

    def tail(self, lines: int = 20) -> str:
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        return "\n".join(text.splitlines()[-lines:])

    def describe_exit(self) -> str:
        code = self.proc.returncode
        how = f"signal {signal.Signals(-code).name}" if code is not None and code < 0 else f"code {code}"
        return f"front end {self.index} (pid {self.proc.pid}) exited with {how}"


def frontend_argv(cfg: ServiceConfig, args, weights: str, weights_dir: Path | None, gpu: str | None) -> list:
    argv = ["--config-json", cfg.to_json(), "--weights", weights, "--torch-version", torch.__version__]
    if weights_dir is not None:
        argv += ["--weights-dir", str(weights_dir)]
    if gpu:
        argv += ["--gpu-name", gpu]
    if args.trace_out is not None:
        argv += ["--trace-out", str(args.trace_out)]
    if args.otlp_endpoint:
        argv += ["--otlp-endpoint", args.otlp_endpoint]
    return argv


def run_model_process(cfg: ServiceConfig, args, gc_log, gpu: str | None) -> int:
    from reference_pipeline.tracing import sampler_of, traced_provider

    if cfg.tracing_ab_report:
        raise SystemExit("reference_pipeline.service: the tracing A/B switch needs one process (frontends 0)")
    with tempfile.TemporaryDirectory(prefix="tailscope-model-") as tmp_name:
        tmp = Path(tmp_name)
        provider = None
        host = ModelHost(cfg, tmp)
        try:
            if cfg.tracing:
                resource = cfg.resource_attributes(host.weights, gpu, torch.__version__)
                provider = traced_provider(cfg, resource, args)
            listens = bind_port_group(port=args.port, count=cfg.frontends)
            argv = frontend_argv(cfg, args, host.weights, host.weights_dir, gpu)
            fronts = [
                Frontend(i, argv, listen, tmp / f"frontend{i}.log", tmp / f"frontend{i}.jsonl")
                for i, listen in enumerate(listens)
            ]
            code = asyncio.run(_serve(cfg, host, fronts, listens, sampler_of(provider)))
        finally:
            host.close()
            ts.uninstall()
            if provider is not None:
                provider.shutdown()
        if args.trace_out is not None:
            with open(args.trace_out, "ab") as out:
                for front in fronts:
                    if front.trace_part.exists():
                        out.write(front.trace_part.read_bytes())
    return code


async def _serve(cfg: ServiceConfig, host: ModelHost, fronts: list[Frontend], listens, sampler) -> int:
    loop = asyncio.get_running_loop()
    waits = ThreadPoolExecutor(2 * len(fronts), thread_name_prefix="frontend-wait")
    stop = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    connections = [FrontendConnection(f.index, host.batcher, cfg, sampler) for f in fronts]
    serving = [asyncio.create_task(c.serve(f.mine)) for c, f in zip(connections, fronts, strict=True)]
    ready = await asyncio.gather(*(loop.run_in_executor(waits, f.wait_serving, 600.0) for f in fronts))
    if not all(ready):
        for front, ok in zip(fronts, ready, strict=True):
            if not ok:
                print(
                    f"tailscope service: front end {front.index} did not start:\n{front.tail()}",
                    file=sys.stderr,
                )
        stop.set()
    else:
        capacity = host.capacity_rps() if cfg.announce_capacity else 0.0
        announce = f" capacity_rps={capacity:.1f}" if capacity else ""
        print(f"LISTENING {listens[0].getsockname()[1]} frontends={len(fronts)}{announce}", flush=True)
    for listen in set(listens):
        listen.close()  # the front ends hold them
    died: list[Frontend] = []
    stopping = False

    async def watch(front: Frontend) -> None:
        await loop.run_in_executor(waits, front.proc.wait)
        if not stopping:
            died.append(front)
            print(
                f"tailscope service: {front.describe_exit()} while serving:\n{front.tail()}", file=sys.stderr
            )
            if len(died) == len(fronts):
                stop.set()

    watchers = [asyncio.create_task(watch(f)) for f in fronts]
    await stop.wait()
    stopping = True
    for front in fronts:
        if front.proc.poll() is None:
            front.proc.send_signal(signal.SIGTERM)
    await asyncio.wait(watchers, timeout=GRACE_S)
    for front in fronts:
        if front.proc.poll() is None:
            front.proc.kill()
    await asyncio.gather(*watchers, return_exceptions=True)
    await asyncio.wait(serving, timeout=5.0)
    for front in fronts:
        front.mine.close()
        if front.proc.stdout:
            front.proc.stdout.close()
    waits.shutdown(wait=False)
    return 1 if died or not all(ready) else 0
