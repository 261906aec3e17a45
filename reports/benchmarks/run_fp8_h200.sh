#!/usr/bin/env bash
# One H200 device call for the FA3 FP8 forward (kernels/cuda/fa3_fp8_fwd.cu): device checks against the NumPy
# FA3 FP8 reference, the gpu-marked FP8 tests, the conformance gpu profile's FP8 cases through cuda-fa3-fp8,
# compute-sanitizer memcheck / racecheck on the FP8 sanitizer cases, and the speed table beside our BF16 FA3 and
# torch._scaled_mm. The library is built beforehand on the CPU machine and travels zstd-compressed:
#   LIB_ZST=path/libattn_kernels.so.zst VENDOR=path/.vendor OUT=/tmp/out bash reports/benchmarks/run_fp8_h200.sh
# Knobs: SMOKE_S, CHECK_S, PYTEST_S, CONF_S, SAN_S, BENCH_S (seconds); SKIP_BENCH=1, SKIP_SAN=1, SKIP_CONF=1.
set -u
export PYTHONUNBUFFERED=1 OPENBLAS_NUM_THREADS=4 OMP_NUM_THREADS=4
OUT=${OUT:-/tmp/out}
R=$OUT/r
mkdir -p "$R" build/kernels
if [ -n "${LIB_ZST:-}" ]; then
    LD_LIBRARY_PATH=${VENDOR:-.vendor}/bin "${VENDOR:-.vendor}/bin/zstd" -d -q -f "$LIB_ZST" -o build/kernels/libattn_kernels.so
fi
export ATTN_KERNELS_LIB=$PWD/build/kernels/libattn_kernels.so ATTN_KERNELS_NO_BUILD=1
[ -f "$ATTN_KERNELS_LIB" ] || { echo "no library at $ATTN_KERNELS_LIB"; exit 2; }
python3 -m pip install -q --no-deps --no-build-isolation -e . > "$R/pip.txt" 2>&1 || { echo "pip install failed"; tail -5 "$R/pip.txt"; }
date -u; nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader
python3 -c "import torch; print('torch', torch.__version__, 'CUDA', torch.version.cuda)"
# Fail fast: one small case under a short limit first, so a hang costs seconds, not the whole call.
timeout "${SMOKE_S:-25}" python3 -c "
from attention_conformance.reports.benchmarks.fa3_fp8_check_bench import check_fp8_case
r = check_fp8_case(B=1, Hq=2, Hkv=1, Lq=130, Lk=260, d=128, granularity='per_tensor')
print('smoke', r['ok'], r['problems'], r.get('rel_err_vs_reference'))
raise SystemExit(0 if r['ok'] else 3)"
rc=$?; echo "smoke rc=$rc"; [ $rc -eq 0 ] || [ $rc -eq 3 ] || { echo "smoke case hung or crashed: stopping"; exit 1; }
timeout "${CHECK_S:-60}" python3 -m attention_conformance.reports.benchmarks.fa3_fp8_check_bench --check --out "$R/check" 2>&1 | tail -20
echo "check rc=${PIPESTATUS[0]}"
# A wrong smoke result: the check's diagnostics are what the next build needs; the rest would only repeat them.
[ $rc -eq 0 ] || { cp "$R/check/fa3_fp8.json" "$OUT/check.json" 2>/dev/null; echo "smoke case wrong: stopping after the check"; exit 1; }
timeout "${PYTEST_S:-60}" python3 -m pytest -q -p no:cacheprovider tests/kernels/test_cuda_fa3_fp8_device.py \
    tests/kernels/test_cuda_fp8_params.py tests/conformance/test_cuda_fa3_fp8_adapter.py > "$R/pytest.txt" 2>&1
echo "pytest rc=$?"; tail -3 "$R/pytest.txt"
if [ -z "${SKIP_CONF:-}" ]; then
    timeout "${CONF_S:-120}" python3 -m attention_conformance run --profile gpu --device cuda --impl cuda-fa3-fp8 -k fp8 \
        --report-dir "$R/conf" --workers 4 --timeout 90 > "$R/conformance_log.txt" 2>&1
    echo "conformance rc=$?"; tail -8 "$R/conformance_log.txt"
fi
if [ -z "${SKIP_SAN:-}" ]; then
    for tool in memcheck racecheck; do
        timeout "${SAN_S:-45}" compute-sanitizer --tool $tool --error-exitcode 1 \
            python3 -m attention_conformance.kernels.cuda.sanitize_cases attn_fa3_fp8_fwd > "$R/$tool.txt" 2>&1
        echo "$tool rc=$?"; grep -E "FAIL|SUMMARY|sanitize_cases:" "$R/$tool.txt" | tail -4
    done
fi
if [ -z "${SKIP_BENCH:-}" ]; then
    timeout "${BENCH_S:-90}" python3 -m attention_conformance.reports.benchmarks.fa3_fp8_check_bench --bench \
        --out "$R/bench" 2>&1 | tail -8
    echo "bench rc=${PIPESTATUS[0]}"
fi
# Three files come back (the device returns at most eight per call): the two JSON results and everything in one tarball.
cp "$R/bench/fa3_fp8.json" "$OUT/bench.json" 2>/dev/null; cp "$R/check/fa3_fp8.json" "$OUT/check.json" 2>/dev/null
tar czf "$OUT/all.tgz" -C "$OUT" r && rm -rf "$R"
