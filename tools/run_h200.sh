#!/usr/bin/env bash
# One device call for the CUDA forward kernels (issue 6): correctness + benchmark table, compute-sanitizer
# memcheck and racecheck over kernels.cuda.sanitize_cases, and the conformance gpu profile for the
# cuda-* adapters. Needs the library built beforehand (python -m attention_conformance.kernels.build) and $OUT set.
#   OUT=/tmp/out bash tools/run_h200.sh
set -u
export PYTHONUNBUFFERED=1
. "$(dirname "${BASH_SOURCE[0]}")/checkout_env.sh"  # import attention_conformance from this checkout
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader
timeout 240 python3 tools/cuda_fwd_check_bench.py --out "$OUT" > "$OUT/bench_log.txt" 2>&1
echo "bench rc=$?"
grep -E "^BAD|^correctness" "$OUT/bench_log.txt"
for tool in memcheck racecheck; do
    timeout 150 compute-sanitizer --tool $tool --error-exitcode 1 python3 -m attention_conformance.kernels.cuda.sanitize_cases \
        > "$OUT/$tool.txt" 2>&1
    echo "$tool rc=$?"
    grep -E "FAIL|SUMMARY|sanitize_cases:" "$OUT/$tool.txt" | tail -4
done
timeout "${CONF_TIMEOUT:-240}" python3 -m attention_conformance run --profile gpu --device cuda \
    --impl cuda-fa2 cuda-splitkv cuda-fa1 --report-dir /tmp/conf --workers 4 --timeout 90 \
    > "$OUT/conformance_log.txt" 2>&1
echo "conformance rc=$?"
tail -12 "$OUT/conformance_log.txt"
tar czf "$OUT/conf.tgz" -C /tmp conf 2>/dev/null
sed -n '/^| kernel/,$p' "$OUT/cuda_fwd.md"
