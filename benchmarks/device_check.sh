#!/usr/bin/env bash
# A device session (issue 19, item 5): the environment, then the steps named in $STEPS, each
# with its own time limit, writing under $OUT at once (a run cut short keeps what it measured).
#   env       nvidia-smi and jax's devices
#   forward   bench_mjqm_forward unchanged          sched     bench_sched unchanged
#   policies  bench_policies unchanged              scale     benchmarks/device_scale.py
#   tests     a GPU test subset                     ref       bench_honesty's hyperexp reference,
#                                                             4x longer replications (warm-up check)
# Usage: OUT=dir STEPS="forward sched scale" bash benchmarks/device_check.sh
# 2026-11-26: first session STEPS="forward sched scale policies tests" (BUDGET=8), second
# STEPS="ref scale sched forward" (BUDGET=25).
set -u
OUT=${OUT:-/tmp/device_out}
STEPS=${STEPS:-forward sched scale policies tests}
mkdir -p "$OUT"
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
PY=${PY:-python3}
step() {  # step NAME LIMIT_S COMMAND...: stdout to $OUT/NAME.md, stderr to $OUT/NAME.err
  local name=$1 limit=$2; shift 2
  local t0=$SECONDS
  timeout "$limit" "$@" >"$OUT/$name.md" 2>"$OUT/$name.err"
  echo "[device_check] $name: exit $? in $((SECONDS - t0)) s" | tee -a "$OUT/steps.txt"
}
bench() { $PY -m benchmarks.run --only "bench_$1" --out "$OUT/RESULTS_$1.md"; }
{ nvidia-smi -L; $PY -c "import jax; print('jax', jax.__version__, jax.devices())"; } \
  >"$OUT/env.txt" 2>&1
cat "$OUT/env.txt"
for s in $STEPS; do
  case $s in
    forward) step forward "${T_FORWARD:-110}" bench mjqm_forward ;;
    sched) step sched "${T_SCHED:-90}" bench sched ;;
    policies) step policies "${T_POLICIES:-90}" bench policies ;;
    scale) step scale "${T_SCALE:-170}" $PY -m benchmarks.device_scale --budget "${BUDGET:-8}" \
      --only ${SCALE_ONLY:-forward sched-m sched-random backward policy-fcfs policy-sf} ;;
    tests) step tests "${T_TESTS:-50}" $PY -m pytest -q -x -p no:cacheprovider \
      tests/mjqm/test_step.py tests/core/test_sharding_internal.py ;;
    ref) step ref "${T_REF:-100}" $PY -m benchmarks.bench_honesty --reference \
      five-class-hyperexp 4000000 8192 903 ;;
  esac
done
cat "$OUT"/scale.md "$OUT"/ref.md 2>/dev/null
