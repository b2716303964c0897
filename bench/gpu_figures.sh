#!/usr/bin/env bash
# The reference pipeline's GPU figures for bench/RESULTS.md, in one pass (about 5 minutes):
# forward p50 per executor/dtype/batch, dynamic batching's gain at saturation, bf16 vs fp32 (and fp16),
# tracing overhead inside one process, and the CUDA tests. Run on a machine with a GPU and a CUDA build
# of torch, from the repository root:
#   bash bench/gpu_figures.sh [LOG]
# Optional: WHEELS=dir installs wheels there first (a machine without a package index); QUICK=1 shortens
# every section (a smoke run of the script itself). DEVICE=cpu runs it where there is no GPU (the
# cuda-graphs cells then fail: they need CUDA).
set -uo pipefail
log=${1:-gpu-figures.log}
export PYTHONUNBUFFERED=1
py=${PYTHON:-python3}
if [[ -n "${WHEELS:-}" ]]; then
    "$py" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
        "$WHEELS"/*.whl || exit 1
    export PYTHONPATH=/tmp/site:$PWD
fi
device=${DEVICE:-cuda}
dur=15; budget=1.5; ab=30
if [[ -n "${QUICK:-}" ]]; then dur=3; budget=0.2; ab=12; fi

step() {  # step SECONDS TITLE COMMAND...
    local limit=$1 title=$2; shift 2
    echo; echo "## $title"; echo "\$ $*"
    local t0=$SECONDS
    timeout -k 5 "$limit" "$@"
    echo "(exit $?, $((SECONDS - t0)) s)"
}

{
    date -u; nvidia-smi -L 2>&1; nproc
    "$py" -c 'import torch; print("torch", torch.__version__, "cuda", torch.cuda.is_available())'
    step 120 "CUDA tests" "$py" -m pytest -q -m gpu -p no:cacheprovider tests/test_pipeline_model.py
    step 150 "forward" "$py" bench/bench_pipeline.py forward --device "$device" \
        --dtypes fp32,bf16,fp16 --executors eager,torchscript,cuda-graphs --budget "$budget" --seq 64
    # the load over 4 processes: one load-generator process saturates its core first on a GPU
    for service in "bf16 --cuda-graphs" "fp32 --cuda-graphs" "bf16"; do
        # shellcheck disable=SC2086  # dtype and executor flag, split on purpose
        step 120 "batching ($service)" "$py" bench/bench_pipeline.py batching --device "$device" \
            --dtype $service --concurrency 64 --load-processes 4 --duration "$dur"
    done
    step 150 "tracing (one process, tracer swapped every 4 s)" "$py" bench/bench_pipeline.py tracing-ab \
        --device "$device" --dtype bf16 --concurrency 64 --load-processes 4 --duration "$ab" --period 4 \
        --repeats 2
} 2>&1 | tee "$log"
