#!/usr/bin/env bash
# One device session (issue 19, item 5): the environment, a GPU test subset, the benchmarks
# unchanged (bench_mjqm_forward, bench_sched, bench_policies) and the batch-size scan
# (benchmarks/device_scale.py). Each step has its own time limit and writes under $OUT at once,
# so a run cut short keeps what it measured. Usage: OUT=dir bash benchmarks/device_check.sh
set -u
OUT=${OUT:-/tmp/device_out}
mkdir -p "$OUT"
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
PY=${PY:-python3}
step() {  # step NAME LIMIT_S COMMAND...: stdout to $OUT/NAME.md, stderr to $OUT/NAME.err
  local name=$1 limit=$2; shift 2
  local t0=$SECONDS
  timeout "$limit" "$@" >"$OUT/$name.md" 2>"$OUT/$name.err"
  echo "[device_check] $name: exit $? in $((SECONDS - t0)) s" | tee -a "$OUT/steps.txt"
}
{ nvidia-smi -L; nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.max.sm --format=csv
  $PY -c "import jax, equinox, optax; print('jax', jax.__version__, jax.devices())"; } \
  >"$OUT/env.txt" 2>&1
cat "$OUT/env.txt"
step forward "${T_FORWARD:-110}" $PY -m benchmarks.run --only bench_mjqm_forward --out "$OUT/RESULTS_forward.md"
step sched "${T_SCHED:-90}" $PY -m benchmarks.run --only bench_sched --out "$OUT/RESULTS_sched.md"
step scale "${T_SCALE:-170}" $PY -m benchmarks.device_scale --budget "${BUDGET:-8}"
step policies "${T_POLICIES:-90}" $PY -m benchmarks.run --only bench_policies --out "$OUT/RESULTS_policies.md"
step tests "${T_TESTS:-50}" $PY -m pytest -q -x -p no:cacheprovider tests/test_mjqm_step.py tests/test_sharding.py
cat "$OUT/scale.md"; tail -3 "$OUT/tests.md"
