#!/usr/bin/env bash
# Every performance measurement of cudump on a GPU machine, in one table per part:
# launch overhead against CUPTI and compute-sanitizer, memory over a million traced launches,
# snapshot speed, a training step, real workloads (ResNet-18, BERT, back-to-back snapshots),
# the goals of NaN/Inf detection meant to stay on,
# how costs grow, and cudump diff and planning (CPU).
# usage: bash bench/run.sh   (writes each part's output to $OUT or a temporary directory)
set -u
cd "$(dirname "$0")/.."
LOGS=${OUT:-$(mktemp -d)}
mkdir -p "$LOGS"
export PATH="$PATH:/usr/local/cuda/bin"
if ls .whl/*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site \
        .whl/*.whl && export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
python3 -m pip install -q --no-build-isolation --no-deps . || exit 1
make -C samples -j"$(nproc)" >"$LOGS/samples-build.log" 2>&1 || { tail -30 "$LOGS/samples-build.log"; exit 1; }

echo "machine: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1)," \
     "$(nproc) CPUs, $(date -u +%Y-%m-%d)"
status=0
part() {  # part NAME TIMEOUT COMMAND...
    local name=$1 limit=$2
    shift 2
    echo
    echo "== $name"
    timeout "$limit" "$@" >"$LOGS/$name.txt" 2>&1 || { echo "($name: status $?)"; status=1; }
    cat "$LOGS/$name.txt"
}
part launch-overhead 300 python3 bench/launch_overhead.py --reps 5
part trace-memory 240 python3 bench/trace_memory.py
part snapshot-speed 180 python3 bench/snapshot_speed.py
part graph-replay 200 python3 bench/graph_replay.py
part training-step 400 python3 bench/training_step.py --steps 300 --reps 3
part realworld 600 python3 bench/realworld.py
part stay-on 900 python3 bench/stay_on.py
part scaling 400 python3 bench/scaling.py
if [ -f bench/bench_diff.py ]; then
    part diff 300 python3 bench/bench_diff.py
fi
part plan-speed 120 python3 bench/plan_speed.py
exit $status
