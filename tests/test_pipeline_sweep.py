"""`tailscope pipeline sweep`'s plan, prices, costs and table, without starting a service (the end-to-end
sweep on a tiny model: test_pipeline_sweep_e2e.py)."""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys

import pytest

from reference_pipeline import sweep as sweep_module
from reference_pipeline.runner import ChildFailed, RunOptions, service_config
from reference_pipeline.sweep import Cell, cell_options, parse_batch_policies, parse_prices, plan
from tailscope.cli.pipeline_sweep import sweep_table, with_costs
from tailscope.vocabulary import PRICE_ATTRIBUTE


@pytest.fixture
def no_gpu(monkeypatch):
    monkeypatch.setattr(sweep_module, "_cuda_devices", lambda: 0)
    monkeypatch.setattr(sweep_module, "_cpp_compiler", lambda: "/usr/bin/c++")


def test_a_cpu_plan_runs_what_the_cpu_has_and_says_why_not_the_rest(no_gpu) -> None:
    cells, skipped = plan(["cpu", "cuda"], ["fp32", "int8"], None, [(1, 0.0), (8, 5.0)])
    assert {(c.executor, c.dtype) for c in cells} == {
        (e, d) for e in ("eager", "torchscript", "compile") for d in ("fp32", "int8")
    }
    assert all(c.device == "cpu" for c in cells) and len(cells) == 12
    reasons = {(c.device, c.executor, c.dtype): why for c, why in skipped}
    assert reasons[("cuda", "cuda-graphs", "fp32")] == "torch sees no cuda device"
    assert len(reasons) == 8  # every cuda cell: 4 executors × 2 dtypes
    cells, skipped = plan(["cpu"], ["fp32"], ["torchscript", "cuda-graphs", "tensorrt"], [(8, 5.0)])
    assert [c.label for c in cells] == ["cpu-fp32-torchscript-b8w5"]
    assert [why for _, why in skipped] == [
        "CUDA graphs need a CUDA device",
        "unknown executor 'tensorrt' (one of eager, torchscript, compile, cuda-graphs)",
    ]


def test_compile_is_set_aside_on_a_cpu_without_a_compiler(monkeypatch) -> None:
    monkeypatch.setattr(sweep_module, "_cpp_compiler", lambda: None)
    cells, skipped = plan(["cpu"], ["fp32"], None, [(1, 0.0)])
    assert [c.executor for c in cells] == ["eager", "torchscript"]
    assert [(c.executor, why) for c, why in skipped] == [
        ("compile", "torch.compile on the CPU needs a C++ compiler (none on PATH)")
    ]


def test_a_gpu_plan_has_every_executor_and_no_int8(monkeypatch) -> None:
    monkeypatch.setattr(sweep_module, "_cuda_devices", lambda: 1)
    cells, skipped = plan(["cuda", "cuda:1"], ["bf16", "int8"], None, [(32, 5.0)])
    assert [c.label for c in cells] == [
        "cuda-bf16-eager-b32w5", "cuda-bf16-torchscript-b32w5", "cuda-bf16-compile-b32w5",
        "cuda-bf16-cuda-graphs-b32w5",
    ]  # fmt: skip
    assert {why for c, why in skipped if c.device == "cuda"} == {
        "int8 is dynamic quantization, which PyTorch runs on the CPU only"
    }
    assert {why for c, why in skipped if c.device == "cuda:1"} == {"torch sees no cuda:1 device"}


@pytest.mark.parametrize(
    ("device", "executor"),
    [("cpu", "eager"), ("cpu", "torchscript"), ("cpu", "compile"), ("cuda", "eager"),
     ("cuda", "torchscript"), ("cuda", "compile"), ("cuda", "cuda-graphs")],
)  # fmt: skip
def test_each_cell_runs_its_own_executor_and_records_its_price(tmp_path, device, executor) -> None:
    opts = cell_options(RunOptions(), Cell(device, "fp32", executor, 8, 5.0), tmp_path, 2.5)
    service, _, _ = service_config(opts)
    assert service.executor == executor
    attributes = service.resource_attributes(None, None, None)
    assert attributes["tailscope.model.executor"] == executor
    assert attributes[PRICE_ATTRIBUTE] == 2.5
    assert opts.out == tmp_path / f"{device}-fp32-{executor}-b8w5.jsonl"
    unpriced = cell_options(RunOptions(), Cell(device, "fp32", executor, 8, 5.0), tmp_path, None)
    assert PRICE_ATTRIBUTE not in service_config(unpriced)[0].resource_attributes(None, None, None)


def test_prices_per_device_or_for_all() -> None:
    assert parse_prices("2.5", ["cpu", "cuda"]) == {"cpu": 2.5, "cuda": 2.5}
    assert parse_prices("cpu=0.17, cuda=3.9", ["cpu", "cuda:1"]) == {"cpu": 0.17, "cuda:1": 3.9}
    assert parse_prices("1, cuda:1=4", ["cpu", "cuda:1"]) == {"cpu": 1.0, "cuda:1": 4.0}
    assert parse_prices("cuda=3.9", ["cpu"]) == {}
    assert parse_prices(None, ["cpu"]) == {}
    for bad in ("cheap", "cpu=-1", "cpu="):
        with pytest.raises(ValueError, match="--price-per-hour"):
            parse_prices(bad, ["cpu"])


def test_batch_policies_are_checked() -> None:
    assert parse_batch_policies("1:0, 8:5,32") == [(1, 0.0), (8, 5.0), (32, 0.0)]
    for bad in ("8:soon", "0:5", "8:-1", " , "):
        with pytest.raises(ValueError):
            parse_batch_policies(bad)


def _ran(label: str, throughput: float, price: float | None, loadgen_ms: float = 1.0, errors: int = 0):
    return {
        "label": label, "device": "cpu", "dtype": "fp32", "executor": "torchscript", "batch_policy": "8:5",
        "price_per_hour": price, "requests": 1000, "errors": errors, "p50_ms": 12.5, "p99_ms": 80.25,
        "throughput_rps": throughput, "loadgen_cpu_ms_per_request": loadgen_ms,
    }  # fmt: skip


def test_cost_per_thousand_and_the_load_generator_bound() -> None:
    rows = with_costs(
        [
            _ran("slow", 10.0, 3.6),
            _ran("fast", 400.0, 3.6, loadgen_ms=2.4),  # 0.96 cores of its one process: its own limit
            _ran("unpriced", 50.0, None, errors=3),
            {**_ran("broken", 0.0, 3.6), "failed": "RuntimeError: CUDA out of memory"},
            {**_ran("gpu", 0.0, None), "skipped": "CUDA graphs need a CUDA device"},
        ],
        load_processes=1,
    )
    by = {r["label"]: r for r in rows}
    assert by["slow"]["cost_per_1k"] == pytest.approx(0.1)  # 3.6 USD/h = 0.001 USD/s, / 10 req/s × 1000
    assert by["fast"]["cost_per_1k"] == pytest.approx(3.6 / 3600 / 400 * 1000)
    assert by["unpriced"]["cost_per_1k"] is None and by["broken"]["cost_per_1k"] is None
    assert by["fast"]["load_bound"] and not by["slow"]["load_bound"]
    assert not with_costs([_ran("fast", 400.0, 3.6, loadgen_ms=2.4)], load_processes=2)[0]["load_bound"]
    lines = sweep_table(rows).splitlines()
    assert [line.split()[0] for line in lines[2:]] == ["fast", "unpriced", "slow", "broken", "gpu"]
    assert "0.00250" in lines[2] and "0.10000" in lines[4] and "3.60" in lines[4]
    assert "load generator bound (0.96 cores)" in lines[2]
    assert lines[3].endswith("3 errors")
    assert lines[5].endswith("failed: RuntimeError: CUDA out of memory")
    assert lines[6].endswith("set aside: CUDA graphs need a CUDA device")


def test_a_failed_setup_does_not_stop_the_sweep(tmp_path, monkeypatch) -> None:
    def run_pipeline(opts: RunOptions) -> dict:
        if opts.compile:
            raise ChildFailed("service did not start:\nTraceback ...\nInductorError: no working compiler")
        return {"requests": 10, "errors": 0, "throughput_rps": 5.0, "out": str(opts.out)}

    monkeypatch.setattr(sweep_module, "run_pipeline", run_pipeline)
    cells = [Cell("cpu", "fp32", e, 1, 0.0) for e in ("compile", "torchscript")]
    done = []
    summaries = sweep_module.sweep(RunOptions(), cells, tmp_path, {"cpu": 1.0}, on_done=done.append)
    assert [s["label"] for s in done] == ["cpu-fp32-compile-b1w0", "cpu-fp32-torchscript-b1w0"]
    assert summaries[0]["failed"] == "InductorError: no working compiler"
    assert summaries[1]["requests"] == 10 and summaries[1]["price_per_hour"] == 1.0


def _parsed(argv: list[str]) -> argparse.Namespace:
    from tailscope.cli import pipeline_cmd

    parser = argparse.ArgumentParser()
    pipeline_cmd.add_arguments(parser)
    return parser.parse_args(argv)


def test_a_sweep_runs_at_saturation_unless_told_otherwise(tmp_path) -> None:
    from tailscope.cli.pipeline_cmd import _options

    saturated = _options(_parsed(["sweep", "--out-dir", str(tmp_path)]))
    assert saturated.concurrency == 32
    open_loop = _options(_parsed(["sweep", "--out-dir", str(tmp_path), "--rps", "8"]))
    assert (open_loop.concurrency, open_loop.rps) == (0, 8.0)
    clients = _options(_parsed(["sweep", "--out-dir", str(tmp_path), "--concurrency", "64", "--layers", "0"]))
    assert (clients.concurrency, clients.model_layers) == (64, 0)
    one_run = _options(_parsed(["run", "--out", str(tmp_path / "t.jsonl")]))
    assert (one_run.concurrency, one_run.rps) == (0, 20.0)  # `run` stays an open loop for tail studies


def _has_cuda() -> bool:
    if importlib.util.find_spec("torch") is None:
        return False
    if sys.platform == "linux" and not os.path.exists("/dev/nvidiactl"):
        return False  # CUDA needs the NVIDIA driver's device: no torch import (3-4 s of CPU) to learn it
    import torch

    return torch.cuda.is_available()


@pytest.mark.gpu
@pytest.mark.skipif("not _has_cuda()", reason="needs a CUDA device")  # at set-up: no torch to collect
def test_a_gpu_sweep_runs_each_executor_on_cuda(tmp_path, capsys) -> None:
    """On a GPU: TorchScript (new on CUDA) and CUDA graphs each serve at saturation through a front end,
    and each run records the executor it ran; int8 is set aside (CPU only)."""
    from tailscope.cli.main import main

    argv = ["pipeline", "sweep", "--devices", "cuda", "--dtypes", "bf16,int8", "--layers", "0"]
    argv += ["--executors", "torchscript,cuda-graphs", "--batch-policies", "8:2", "--frontends", "1"]
    argv += ["--duration", "2", "--no-downstream", "--price-per-hour", "3", "--json"]
    code = main([*argv, "--out-dir", str(tmp_path)])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    rows = {row["label"]: row for row in json.loads(captured.out)}
    for executor in ("torchscript", "cuda-graphs"):
        row = rows[f"cuda-bf16-{executor}-b8w2"]
        assert row["requests"] > 10 and row["errors"] == 0 and row["cost_per_1k"] > 0
        text = (tmp_path / f"cuda-bf16-{executor}-b8w2.jsonl").read_text()
        assert f'{{"key":"tailscope.model.executor","value":{{"stringValue":"{executor}"}}}}' in text
    assert rows["cuda-int8-torchscript-b8w2"]["skipped"].startswith("int8 is dynamic quantization")


def test_a_sweep_refuses_one_run_executor_flags(tmp_path, capsys) -> None:
    from tailscope.cli.main import main

    assert main(["pipeline", "sweep", "--out-dir", str(tmp_path), "--cuda-graphs", "--eager"]) == 2
    assert capsys.readouterr().err.strip() == (
        "tailscope pipeline: sweep: --eager, --cuda-graphs: a sweep's executors are chosen with --executors"
    )
    assert not list(tmp_path.iterdir())


def test_the_sweep_needs_no_pandas_or_store(tmp_path) -> None:
    """A GPU box has the pipeline extra only: the sweep's plan, runs and priced table import neither
    pandas nor a store driver (the --db option does, when asked for)."""
    import subprocess
    import sys

    code = (
        "import sys; import tailscope.cli.pipeline_cmd, reference_pipeline.sweep;"
        "from tailscope.cli.pipeline_sweep import sweep_table, with_costs;"
        "sweep_table(with_costs([], 1));"
        "print(sorted(m for m in ('pandas', 'duckdb', 'chdb', 'pyarrow') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
