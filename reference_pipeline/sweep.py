"""A hardware comparison: one saturated run per device × dtype × executor × batch policy.

`plan` expands the matrix and sets aside the cells the device cannot run, each with its reason
(CUDA graphs without CUDA, int8 off the CPU, torch.compile on a CPU with no C++ compiler, a CUDA
device torch does not see); `sweep` runs the rest one after another through `run_pipeline`, each into
out_dir/<label>.jsonl, and keeps going when one fails (its summary says why). Each run's resource
attributes name its device, dtype, executor, batch policy and, when given, the hourly price of the
hardware, so its trace file is self-describing wherever it is ingested.
"""

from __future__ import annotations

import importlib.util
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from reference_pipeline.runner import ChildFailed, RunOptions, run_pipeline

EXECUTORS = ("eager", "torchscript", "compile", "cuda-graphs")
CPU_ONLY_DTYPES = ("int8",)


@dataclass(frozen=True)
class Cell:
    device: str
    dtype: str
    executor: str
    max_batch: int
    max_wait_ms: float

    @property
    def label(self) -> str:
        return sweep_label(self.device, self.dtype, self.max_batch, self.max_wait_ms, self.executor)

    @property
    def policy(self) -> str:
        return f"{self.max_batch}:{self.max_wait_ms:g}"


def sweep_label(device: str, dtype: str, max_batch: int, max_wait_ms: float, executor: str) -> str:
    """The run label and file name of one cell, e.g. cpu-int8-torchscript-b8w5 (cuda:1 → cuda1)."""
    return f"{device.replace(':', '')}-{dtype}-{executor}-b{max_batch}w{max_wait_ms:g}"


def parse_batch_policies(text: str) -> list[tuple[int, float]]:
    """'1:0,8:5' → [(1, 0.0), (8, 5.0)] (max batch size : max wait ms)."""
    policies = []
    for item in filter(None, (part.strip() for part in text.split(","))):
        size, _, wait = item.partition(":")
        try:
            policy = (int(size), float(wait or 0))
        except ValueError:
            raise ValueError(f"batch policy {item!r}: expected max_batch:max_wait_ms, e.g. 8:5") from None
        if policy[0] < 1 or policy[1] < 0:
            raise ValueError(f"batch policy {item!r}: max batch ≥ 1 and max wait ≥ 0 ms")
        policies.append(policy)
    if not policies:
        raise ValueError("no batch policy given (expected e.g. 1:0,8:5)")
    return policies


def parse_prices(text: str | None, devices: list[str]) -> dict[str, float]:
    """--price-per-hour: '2.5' (every device) or 'cpu=0.17,cuda=3.9' (per device; 'cuda' also
    prices cuda:1) → {device: USD per hour} for the devices that have a price."""
    named: dict[str, float] = {}
    default: float | None = None
    for item in filter(None, (part.strip() for part in (text or "").split(","))):
        name, has_name, value = item.partition("=")
        if not has_name:
            name, value = "", item
        try:
            price = float(value)
        except ValueError:
            raise ValueError(f"--price-per-hour {item!r}: a price in USD per hour, or DEVICE=PRICE") from None
        if price < 0:
            raise ValueError(f"--price-per-hour {item!r}: a price cannot be negative")
        if name:
            named[name.strip()] = price
        else:
            default = price
    prices = {}
    for device in devices:
        price = named.get(device, named.get(device.partition(":")[0], default))
        if price is not None:
            prices[device] = price
    return prices


def _cuda_devices() -> int:
    if importlib.util.find_spec("torch") is None:
        return 0
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def _cpp_compiler() -> str | None:
    return next((path for name in ("c++", "g++", "clang++") if (path := shutil.which(name))), None)


def unsupported(device: str, dtype: str, executor: str) -> str | None:
    """Why this device cannot run (dtype, executor), or None when it can."""
    if executor not in EXECUTORS:
        return f"unknown executor {executor!r} (one of {', '.join(EXECUTORS)})"
    cuda = device.startswith("cuda")
    if not cuda and device != "cpu":
        return f"unknown device {device!r} (cpu, cuda or cuda:N)"
    if cuda:
        index = int(device.partition(":")[2] or 0)
        if index >= _cuda_devices():
            return f"torch sees no {device} device"
    if dtype in CPU_ONLY_DTYPES and cuda:
        return f"{dtype} is dynamic quantization, which PyTorch runs on the CPU only"
    if executor == "cuda-graphs" and not cuda:
        return "CUDA graphs need a CUDA device"
    if executor == "compile" and not cuda and _cpp_compiler() is None:
        return "torch.compile on the CPU needs a C++ compiler (none on PATH)"
    return None


def default_executors(device: str) -> list[str]:
    """The executors a device of this kind has: CUDA graphs only on CUDA (the others are tried
    everywhere, and set aside with their reason where they cannot run)."""
    return list(EXECUTORS) if device.startswith("cuda") else [e for e in EXECUTORS if e != "cuda-graphs"]


def plan(
    devices: list[str], dtypes: list[str], executors: list[str] | None, policies: list[tuple[int, float]]
) -> tuple[list[Cell], list[tuple[Cell, str]]]:
    """The cells to run, and those set aside with the reason; executors None: each device's own."""
    cells, skipped = [], []
    for device in devices:
        for dtype in dtypes:
            for executor in executors or default_executors(device):
                for max_batch, max_wait_ms in policies:
                    cell = Cell(device, dtype, executor, max_batch, max_wait_ms)
                    reason = unsupported(device, dtype, executor)
                    if reason is None:
                        cells.append(cell)
                    else:
                        skipped.append((cell, reason))
    return cells, skipped


def cell_options(base: RunOptions, cell: Cell, out_dir: Path, price_per_hour: float | None) -> RunOptions:
    return replace(
        base,
        device=cell.device,
        dtype=cell.dtype,
        max_batch=cell.max_batch,
        max_wait_ms=cell.max_wait_ms,
        eager=cell.executor == "eager",
        torchscript=cell.executor == "torchscript",
        compile=cell.executor == "compile",
        cuda_graphs=cell.executor == "cuda-graphs",
        price_per_hour=price_per_hour,
        out=out_dir / f"{cell.label}.jsonl",
    )


def cell_facts(cell: Cell, price_per_hour: float | None) -> dict:
    return {
        "label": cell.label,
        "device": cell.device,
        "dtype": cell.dtype,
        "executor": cell.executor,
        "batch_policy": cell.policy,
        "price_per_hour": price_per_hour,
    }


def sweep(
    base: RunOptions,
    cells: list[Cell],
    out_dir: Path,
    prices: dict[str, float] | None = None,
    on_done: Callable[[dict], None] | None = None,
) -> list[dict]:
    """Run each cell into out_dir/<label>.jsonl; a cell whose service fails to start is summarised
    with `failed` (the last line of its log) and the sweep goes on."""
    out_dir.mkdir(parents=True, exist_ok=True)
    summaries = []
    for cell in cells:
        price = (prices or {}).get(cell.device)
        started = time.monotonic()
        try:
            result = run_pipeline(cell_options(base, cell, out_dir, price))
        except ChildFailed as error:
            lines = [line for line in str(error).splitlines() if line.strip()]
            result = {"failed": lines[-1] if lines else "the service did not start", "detail": str(error)}
        summary = {**cell_facts(cell, price), **result, "wall_s": round(time.monotonic() - started, 1)}
        summaries.append(summary)
        if on_done is not None:
            on_done(summary)
    return summaries
