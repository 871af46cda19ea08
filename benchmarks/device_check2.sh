#!/usr/bin/env bash
# Second device session of 2026-11-26: the kernels changed since the first (forward scan,
# scheduler, backward sampler, event engine) at growing batch sizes, bench_sched unchanged, and the
# warm-up check of bench_honesty's five-class-hyperexp reference (4x longer replications).
# Usage: OUT=dir bash benchmarks/device_check2.sh
set -u
OUT=${OUT:-/tmp/device_out}
mkdir -p "$OUT"
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
PY=${PY:-python3}
step() {  # step NAME LIMIT_S COMMAND...: stdout to $OUT/NAME.md, stderr to $OUT/NAME.err
  local name=$1 limit=$2; shift 2
  local t0=$SECONDS
  timeout "$limit" "$@" >"$OUT/$name.md" 2>"$OUT/$name.err"
  echo "[device_check2] $name: exit $? in $((SECONDS - t0)) s" | tee -a "$OUT/steps.txt"
}
nvidia-smi -L
step ref "${T_REF:-100}" $PY -m benchmarks.bench_honesty --reference five-class-hyperexp 4000000 8192 903
step scale "${T_SCALE:-160}" $PY -m benchmarks.device_scale --budget "${BUDGET:-25}" --only forward sched-m sched-random backward policy-fcfs policy-sf
step sched "${T_SCHED:-50}" $PY -m benchmarks.run --only bench_sched --out "$OUT/RESULTS_sched.md"
step forward "${T_FORWARD:-50}" $PY -m benchmarks.run --only bench_mjqm_forward --out "$OUT/RESULTS_forward.md"
cat "$OUT/ref.md" "$OUT/scale.md"; sed -n '/bench:bench_sched/,$p' "$OUT/RESULTS_sched.md"; sed -n '/bench:bench_mjqm_forward/,$p' "$OUT/RESULTS_forward.md" | head -14
