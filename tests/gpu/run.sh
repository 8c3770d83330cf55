#!/usr/bin/env bash
# The GPU test suite and the launch benchmark, on a machine with an NVIDIA GPU
# and nvcc. Run from anywhere; writes gpu-tests.log and benchmark.txt to $OUT
# when it is set. Exits with pytest's status.
set -u
cd "$(dirname "$0")/../.."
LOGS=${OUT:-$(mktemp -d)}
mkdir -p "$LOGS"
export PATH="$PATH:/usr/local/cuda/bin"

# Wheels carried along for a machine without network (cxxfilt and the like).
if ls .whl/*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site \
        .whl/*.whl && export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
if ! python3 -m pip install -q --no-build-isolation --no-deps .; then
    echo "run.sh: pip install failed; using setup.py build_py" >&2
    python3 setup.py -q build_py --build-lib /tmp/cudump-build \
        && export PYTHONPATH=/tmp/cudump-build${PYTHONPATH:+:$PYTHONPATH}
fi

echo "== building samples"
if ! make -C samples -j"$(nproc)" >"$LOGS/samples-build.log" 2>&1; then
    tail -40 "$LOGS/samples-build.log"
    echo "run.sh: building the samples failed" >&2
    exit 1
fi

echo "== GPU tests"
# The real-world matrix runs below, on its own, with its table.
timeout 540 python3 -m pytest -m gpu tests/gpu -v -rs -p no:cacheprovider \
    --deselect tests/gpu/test_gpu_matrix.py >"$LOGS/gpu-tests.log" 2>&1
tests_status=$?
tail -60 "$LOGS/gpu-tests.log"

echo "== the real-world matrix (programs nobody on the team wrote, under every mode)"
(cd /tmp && timeout 600 python3 "$OLDPWD/tests/gpu/matrix/matrix.py" --jobs 10 \
    --json "$LOGS/matrix.json") >"$LOGS/matrix.log" 2>&1
matrix_status=$?

echo "== benchmark"
timeout 150 python3 bench/launch_overhead.py --reps 5 --quick >"$LOGS/benchmark.txt" 2>&1
bench_status=$?

echo "== memory over a million traced launches"
timeout 240 python3 bench/trace_memory.py >"$LOGS/trace-memory.txt" 2>&1
memory_status=$?

echo "== snapshot speed"
timeout 180 python3 bench/snapshot_speed.py >"$LOGS/snapshot-speed.txt" 2>&1
speed_status=$?

echo "== summary"
grep -E "^(FAILED|ERROR) " "$LOGS/gpu-tests.log" || true
grep -E "^=+ .*(passed|failed|error|skipped|no tests ran).* =+$" "$LOGS/gpu-tests.log" | tail -1 \
    || echo "pytest status $tests_status (timeout or crash: see gpu-tests.log)"
tail -16 "$LOGS/matrix.log"
[ "$matrix_status" -eq 0 ] || echo "matrix status $matrix_status (see matrix.log)"
cat "$LOGS/benchmark.txt"
[ "$bench_status" -eq 0 ] || echo "benchmark status $bench_status"
cat "$LOGS/trace-memory.txt"
cat "$LOGS/snapshot-speed.txt"
[ "$speed_status" -eq 0 ] || echo "snapshot speed status $speed_status"
[ "$memory_status" -eq 0 ] || echo "memory benchmark status $memory_status"
[ "$tests_status" -eq 0 ] || exit "$tests_status"
exit "$matrix_status"
