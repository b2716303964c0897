#!/usr/bin/env bash
# The reference pipeline's GPU figures for bench/RESULTS.md (issue 28), in one pass of about 5 minutes on
# one H100/H200 with 16 cores (each step has its own time limit; together they stay under 10 minutes):
#   1. the CUDA tests (CUDA graphs against eager, the sweep on CUDA);
#   2. model.forward p50 per executor, dtype and batch (fp32, bf16; eager, TorchScript, CUDA graphs);
#   3. saturation with the scaled-out front end (bench_pipeline.py saturation): throughput at batch 1 and
#      at each batch policy, tracing off, the load from bench/raw_load.py so that neither the client nor
#      its spans set the ceiling; dynamic batching's gain; then light-mode tracing against off at the best
#      policy, alternating pairs: the throughput lost and the CPU per request added at saturation;
#   4. `tailscope pipeline sweep` as users run it (bf16; eager, TorchScript, CUDA graphs; light tracing,
#      front ends auto, 4 load processes) with its table and cost per 1,000 inferences; then its files
#      ingested and two of its runs compared, as on a laptop at home.
# Run on a machine with a GPU and a CUDA build of torch, from the repository root:
#   bash bench/gpu_figures.sh [LOG]
# Optional: WHEELS=dir installs wheels there first (a machine without a package index); PRICE=USD/h the
# hourly price for the sweep's cost column (default 3.00); QUICK=1 shortens every step (a smoke run of the
# script itself); DEVICE=cpu runs it where there is no GPU (TorchScript instead of CUDA graphs, a 0-layer
# model: a check of the script, not figures); STEPS=tests,forward,saturation,sweep,home runs only the
# steps named (home ingests the *.jsonl already in RUNS_DIR when sweep is not among them); PAIRS=N the
# light/off pairs at saturation (default 2); POLICIES=1:0,32:5 the saturation's batch policies.
set -uo pipefail
log=${1:-gpu-figures.log}
export PYTHONUNBUFFERED=1
py=${PYTHON:-python3}
if [[ -n "${WHEELS:-}" ]]; then
    "$py" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
        "$WHEELS"/*.whl || exit 1
    export PYTHONPATH=/tmp/site:$PWD
else
    export PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}$PWD
fi
device=${DEVICE:-cuda}
price=${PRICE:-3.00}
runs=${RUNS_DIR:-gpu-sweep}
executors=eager,torchscript,cuda-graphs
if [[ $device == cpu ]]; then
    executor=torchscript; forward_executors=eager,torchscript; model=(--layers 0)
else
    executor=cuda-graphs; forward_executors=$executors; model=()
fi
dur=8; warm=2; budget=1.0; pairs=${PAIRS:-2}; sweep_dur=6; policies=${POLICIES:-1:0,8:2,32:5,64:5}; clients=256
steps=,${STEPS:-tests,forward,saturation,sweep,home},
want() { [[ $steps == *,$1,* ]]; }
if [[ -n "${QUICK:-}" ]]; then
    dur=2; warm=1; budget=0.1; pairs=1; sweep_dur=2; policies=1:0,8:2; clients=32
fi

# the CLI from this checkout (no console script needed); an array, so `timeout` can run it
tailscope=("$py" -c 'import sys; from tailscope.cli.main import entrypoint; sys.argv[0] = "tailscope"; entrypoint()')

step() {  # step SECONDS TITLE COMMAND...
    local limit=$1 title=$2; shift 2
    echo; echo "## $title"; echo "\$ $*"
    local t0=$SECONDS
    timeout -k 5 "$limit" "$@"
    echo "(exit $?, $((SECONDS - t0)) s)"
}

{
    date -u; nvidia-smi -L 2>&1; nproc; uptime
    "$py" -c 'import torch; print("torch", torch.__version__, "cuda", torch.cuda.is_available())'
    want tests && step 90 "CUDA tests" "$py" -m pytest -q -m gpu -p no:cacheprovider tests/test_pipeline_model.py \
        tests/test_pipeline_sweep.py
    want forward && step 75 "forward" "$py" bench/bench_pipeline.py forward --device "$device" "${model[@]}" \
        --dtypes fp32,bf16 --executors "$forward_executors" --budget "$budget" --seq 64
    want saturation && step 270 "saturation: batch policies, then light tracing against off (scaled-out front end)" \
        "$py" bench/bench_pipeline.py saturation --device "$device" --dtype bf16 --executor "$executor" \
        --frontends auto --policies "$policies" --concurrency "$clients" --duration "$dur" --warm "$warm" \
        --ab-repeats "$pairs" "${model[@]}"
    want sweep && rm -rf "$runs"
    want sweep && step 120 "pipeline sweep, as users run it" "${tailscope[@]}" pipeline sweep --devices "$device" --dtypes bf16 \
        --executors "$executors" --batch-policies 32:5 --concurrency 64 --load-processes 4 \
        --frontends auto --tracing-mode light --no-downstream --duration "$sweep_dur" "${model[@]}" \
        --price-per-hour "$price" --out-dir "$runs"
    # as on a laptop at home (needs the store's packages, duckdb and pandas, which the sweep does not)
    first=$device-bf16-eager-b32w5; best=$device-bf16-$executor-b32w5
    want home && step 45 "ingest its files and compare two runs, as at home" bash -c '
        ts=("${@:1:3}"); runs=$4; first=$5; best=$6
        for f in "$runs"/*.jsonl; do
            "${ts[@]}" ingest "$f" --run "$(basename "$f" .jsonl)" --db "$runs/home.duckdb" || exit 1
        done
        "${ts[@]}" compare "$first" "$best" --db "$runs/home.duckdb" --resamples 200' \
        _ "${tailscope[@]}" "$runs" "$first" "$best"
    date -u; uptime
} 2>&1 | tee "$log"
