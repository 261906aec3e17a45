#!/usr/bin/env bash
# One H200 device call for the FA3 backward (kernels/cuda/fa3_bwd.cu): the GPU tests, the correctness check
# (NO_CHECK=1 skips it; BENCH_ONLY=1 skips its checks) and, unless NO_BENCH=1, the benchmark of
# reports/benchmarks/fa3_bwd_check_bench.py, then the conformance backward cases of cuda-fa3 (CONF_K, default
# "bwd"; CONF_K=all runs the whole gpu profile; NO_CONF=1 skips them). The library is built beforehand on the
# CPU machine (python -m attention_conformance.kernels.build --out build/kernels) and travels zstd-compressed as
# $LIB_ZST (the device has no zstd: ZSTD names a carried binary). Results under $OUT. Run 2's command, from the
# carried copy of the worktree (.carry_bwd, with .vendor/bin carried beside it):
#   LIB_ZST=lib.zst ZSTD=$PWD/../.vendor/bin/zstd BENCH_ONLY=1 NO_CONF=1 bash reports/benchmarks/run_fa3_bwd_h200.sh
set -u
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}
if [ -n "${LIB_ZST:-}" ]; then
    mkdir -p build/kernels
    LD_LIBRARY_PATH=$(dirname "$ZSTD") "$ZSTD" -d -q -f "$LIB_ZST" -o build/kernels/libattn_kernels.so
fi
export ATTN_KERNELS_LIB=$PWD/build/kernels/libattn_kernels.so ATTN_KERNELS_NO_BUILD=1
python3 -m pip install -q --no-deps --no-build-isolation -e . > "$OUT/pip.log" 2>&1 || echo "pip install -e failed"
date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
timeout "${TEST_S:-150}" python3 -m pytest -q -p no:cacheprovider --timeout 60 tests/kernels/test_cuda_fa3_bwd_device.py \
    > "$OUT/pytest.log" 2>&1
echo "pytest rc=$?"; tail -15 "$OUT/pytest.log"
if [ -z "${NO_CHECK:-}" ]; then
    timeout "${BENCH_S:-240}" python3 -m attention_conformance.reports.benchmarks.fa3_bwd_check_bench --out "$OUT" \
        ${NO_BENCH:+--no-bench} ${BENCH_ONLY:+--no-check} > "$OUT/bench.log" 2>&1
    echo "bench rc=$?"; grep -v "^{" "$OUT/bench.log" | grep -v -e Warning -e warn | tail -40
fi
if [ -z "${NO_CONF:-}" ]; then
K=${CONF_K:-bwd}
# shellcheck disable=SC2086
timeout "${CONF_S:-150}" python3 -m attention_conformance run --profile gpu --device cuda --impl cuda-fa3 \
    $([ "$K" = all ] || echo -k "$K") --workers 4 --timeout 90 --report-dir /tmp/conf > "$OUT/conformance.log" 2>&1
echo "conformance rc=$?"; tail -15 "$OUT/conformance.log"
tar czf "$OUT/conf.tgz" -C /tmp conf 2>/dev/null
fi
true
