#!/usr/bin/env bash
# Installs tailscope with its pipeline, test and clickhouse extras into ./.venv, then runs the test suite
# (the clickhouse extra brings chdb, so the ClickHouse parity tests run in process).
# Extra arguments go to pytest, in both phases (e.g. ./test.sh -k ingest); --full adds the exhaustive tier.
# Browser tests need Debian's chromium: installed here when running as root, skipped with a reason otherwise.
set -euo pipefail
cd "$(dirname "$0")"
# Python may be told to write no bytecode (PYTHONDONTWRITEBYTECODE, set in some containers, this VM's
# included): then each pytest process rewrites every test module's asserts again (collection 13.2 s of CPU
# against 6.9 s with them cached) and each Python process a test starts compiles the project's modules
# again (~0.4 s of CPU each). The suite lets it write them, into the git-ignored __pycache__ folders.
unset PYTHONDONTWRITEBYTECODE
if ! command -v chromium >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "test.sh: installing chromium (browser tests)"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
fi
[ -x .venv/bin/python ] || python3 -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip "setuptools>=77" >/dev/null
# torch==2.13.0 is pinned so pip takes the CPU build where one is on offer instead of the CUDA one.
.venv/bin/python -c "import torch" 2>/dev/null || .venv/bin/python -m pip install -q "torch==2.13.0"
.venv/bin/python -m pip install -q -e '.[pipeline,dev,clickhouse]'
.venv/bin/python -m ruff check .
# the layers and the store seam (pyproject.toml [tool.importlinter]): no import circles, no engine
# named above the store, each driver only in its engine package
.venv/bin/lint-imports
# Two phases: every test but the timing-sensitive ones on all cores (pytest-xdist; a file's tests stay on
# one worker, so its module fixtures are built once), then the timing-sensitive ones alone (the `serial`
# marker, tests/conftest.py). A phase that selects no test (exit 5) is not a failure unless both do.
# TEST_WORKERS=1 runs the first phase in one process.
# The default leaves out the exhaustive tier (the `full` marker: variants of a behaviour a default test already
# checks, each naming that test, and the blind families' simulator-physics tests, each naming its family's
# contract test, tests/conftest.py); `./test.sh --full` runs it too (after editing a family's generator).
tier=" and not full"
args=()
for arg in "$@"; do
    if [ "$arg" = --full ]; then tier=""; else args+=("$arg"); fi
done
status=0
.venv/bin/python -m pytest -n "${TEST_WORKERS:-auto}" --dist loadfile -m "not serial$tier" ${args[@]+"${args[@]}"} || status=$?
serial=0
.venv/bin/python -m pytest -p no:xdist -m "serial$tier" ${args[@]+"${args[@]}"} || serial=$?
if [ "$status" = 5 ] && [ "$serial" != 5 ]; then status=0; fi
if [ "$serial" != 0 ] && [ "$serial" != 5 ]; then status=$serial; fi
exit "$status"
