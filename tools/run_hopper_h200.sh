#!/usr/bin/env bash
# One H200 device call over the Hopper kernels (FA3 BF16 forward and backward, FA3 FP8 forward), step by step,
# each step under its own time limit so one hang costs that step only. The library is built beforehand on the CPU
# machine (python -m attention_conformance.kernels.build --out build/kernels) and travels zstd-compressed:
#   STEPS="fp8 fwd" LIB_ZST=.carry_lead/libattn_kernels.so.zst VENDOR=.vendor bash tools/run_hopper_h200.sh
# Steps (in the order given):
#   fp8      FP8 device check, the gpu profile's FP8 cases through cuda-fa3-fp8 and -vt, the FP8 bench with timing probes
#   fp8san   compute-sanitizer memcheck and racecheck on the FP8 sanitizer cases
#   table3   FA3 Table 3 through cuda-fa3-fp8 (conformance/reporting/fp8_accuracy.py) and the quantizer timings (quant_bench)
#   fwd      FA3 forward: correctness of the variant builds in $FWD_VARIANTS, the d = 64/128/256 table with those
#            builds beside torch-flash and cuDNN (and FA4 when installed), the ablation and probe table
#            (FWD_BENCH_ONLY=1: the table alone; FWD_NO_ABLATION=1: checks and the table)
#   bwd      FA3 backward: GPU tests, check and bench (atomics, deterministic, TMA reduce-add dQ)
#   bwdsan   compute-sanitizer memcheck and racecheck on the FA3 backward sanitizer cases (fwdsan: the forward's)
#   bench    what `tox -e bench` runs (pytest-benchmark: tests/kernels/test_cuda_bench.py and the oracle's), $BENCH_K
#            a -k selection; the JSON lands in $OUT/bench/pytest_bench.json
#   conf     the gpu profile through $CONF_IMPLS (default cuda-fa3 cuda-fa3-fp8), the cases matching $CONF_K if set
#   rerun    the gpu profile's cases matching $RERUN_K through $RERUN_IMPLS (a re-run to merge over a joined report)
#   ncu      Nsight Compute (--set full, clocks left alone) on one launch of each kernel in $NCU_KERNELS (default
#            "bwd fwd fp8"; KERNEL:D for one head dim) at each head dim in $NCU_D (default 128), non-causal
#            (fa3_profile_case.py): the details page, the per-SASS-instruction source page (stall samples, CSV)
#            and its summary (ncu_sass_stalls.py);
#            $NCU_VARIANT: the build to profile (fa3_profile_case's variant argument, e.g. vt for FP8 with V k-major);
#            kernels fa4 / fa4bwd: flash-attn-4's forward / backward (needs VENDOR_INSTALL=1), the same sections
# CUDNN_FE=WHEEL unpacks the (carried) nvidia-cudnn-frontend wheel, so the bench step times cuDNN's FP8 forward
# (cudnn-fp8) beside ours. VENDOR_INSTALL=1 installs flash-attn-4 from the vendored parts first (the parking protocol of run_fa4.sh), so the
# fwd and bwd steps time it beside ours; FWD_CURVES=1 adds the curves over N to the fwd step.
# Everything lands in $OUT/<step>/ and is packed into $OUT/<step>.tgz (the device returns at most eight files);
# nvidia-smi samples clocks and power every 200 ms into $OUT/smi.csv while the steps run.
set -u
export PYTHONUNBUFFERED=1 OPENBLAS_NUM_THREADS=4 OMP_NUM_THREADS=4
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT" build/kernels
if [ -n "${LIB_ZST:-}" ]; then
    LD_LIBRARY_PATH=${VENDOR:-.vendor}/bin "${VENDOR:-.vendor}/bin/zstd" -d -q -f "$LIB_ZST" -o build/kernels/libattn_kernels.so
fi
export ATTN_KERNELS_LIB=$PWD/build/kernels/libattn_kernels.so ATTN_KERNELS_NO_BUILD=1
[ -f "$ATTN_KERNELS_LIB" ] || { echo "no library at $ATTN_KERNELS_LIB"; exit 2; }
python3 -m pip install -q --no-deps --no-build-isolation -e . > "$OUT/pip.txt" 2>&1 || { echo "pip install failed"; tail -5 "$OUT/pip.txt"; }
rm -f "$OUT/pip.txt"
if [ -n "${VENDOR_INSTALL:-}" ]; then
    bash "${VENDOR:-.vendor}/install.sh" || echo "flash-attn-4 install failed: it is left out of the tables"
    export PYTHONPATH=/tmp/site_vendor/nvidia_cutlass_dsl/dsl_packages:/tmp/site_vendor:${PYTHONPATH:-}
    export FLASH_ATTENTION_CUTE_DSL_CACHE_ENABLED=1 FLASH_ATTENTION_CUTE_DSL_CACHE_DIR=/tmp/fa4_jit_cache
fi
if [ -n "${CUDNN_FE:-}" ]; then
    rm -rf /tmp/cudnn_fe && python3 -m zipfile -e "$CUDNN_FE" /tmp/cudnn_fe \
        && export PYTHONPATH=/tmp/cudnn_fe:${PYTHONPATH:-} || echo "cudnn-frontend unpack failed"
fi
date -u; nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.limit --format=csv,noheader
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu,utilization.gpu --format=csv,noheader -lms 200 \
    > "$OUT/smi.csv" 2>/dev/null &
SMI=$!
mark() { echo "$(date -u +%H:%M:%S.%N | cut -c1-12) $*" | tee -a "$OUT/marks.txt"; }
for step in ${STEPS:-fp8 fwd}; do
    D=$OUT/$step
    mkdir -p "$D"
    mark "begin $step"
    case $step in
    fp8)
        timeout "${CHECK_S:-120}" python3 tools/fa3_fp8_check_bench.py --check --out "$D/check" > "$D/check.txt" 2>&1
        echo "fp8 check rc=$?"; grep -E "^(OK|FAIL)" "$D/check.txt"
        timeout "${CONF_S:-120}" python3 -m attention_conformance run --profile gpu --device cuda \
            --impl cuda-fa3-fp8 cuda-fa3-fp8-vt -k fp8 --report-dir "$D/conf" --workers 4 --timeout 90 > "$D/conformance.txt" 2>&1
        echo "fp8 conformance rc=$?"; tail -2 "$D/conformance.txt"
        mark "fp8 bench"
        timeout "${FP8_BENCH_S:-200}" python3 tools/fa3_fp8_check_bench.py --bench --probes --out "$D/bench" > "$D/bench.txt" 2>&1
        echo "fp8 bench rc=$?"; grep -v "^{" "$D/bench.txt" | tail -3; cat "$D/bench/fa3_fp8.md" 2>/dev/null | tail -22 ;;
    fp8san|bwdsan|fwdsan)
        L="attn_fa3_fp8_fwd"; [ $step = bwdsan ] && L="attn_fa3_bwd attn_fa3_bwd_deterministic"
        [ $step = fwdsan ] && L="attn_fa3_fwd"
        for tool in memcheck racecheck; do
            # shellcheck disable=SC2086
            timeout "${SAN_S:-60}" compute-sanitizer --tool $tool --error-exitcode 1 \
                python3 -m attention_conformance.kernels.cuda.sanitize_cases $L > "$D/$tool.txt" 2>&1
            echo "$step $tool rc=$?"; grep -E "FAIL|SUMMARY|sanitize_cases:" "$D/$tool.txt" | tail -4
        done ;;
    table3)
        timeout "${TABLE3_S:-90}" python3 -m attention_conformance.reporting.fp8_accuracy --impl cuda-fa3-fp8 \
            --out "$D/fp8_accuracy_cuda-fa3-fp8.md" > "$D/table3.txt" 2>&1
        echo "table3 rc=$?"; tail -14 "$D/table3.txt"
        timeout "${QUANT_S:-60}" python3 tools/quant_bench.py --out "$D/quant" > "$D/quant.txt" 2>&1
        echo "quant rc=$?"; tail -12 "$D/quant.txt" ;;
    fwd)
        V=${FWD_VARIANTS:-skip_rescale}
        A="--ablation"; [ -n "${FWD_NO_ABLATION:-}" ] && A=""; [ -n "${FWD_BENCH_ONLY:-}" ] && A="--skip-check"
        # shellcheck disable=SC2086
        timeout "${FWD_S:-200}" python3 tools/fa3_check_bench.py --out "$D" --variants "$V" --bench-variants "$V" \
            $A ${FWD_CURVES:+--curves} > "$D/fwd.txt" 2>&1
        echo "fwd rc=$?"; grep -E "correctness|FAIL" "$D/fwd.txt" | head -12; sed -n '/^| B, H, N, d | causal | FA3/,$p' "$D/fwd.txt" ;;
    bwd)
        timeout "${BWD_TEST_S:-100}" python3 -m pytest -q -p no:cacheprovider --timeout 60 \
            tests/kernels/test_cuda_fa3_bwd_device.py > "$D/pytest.txt" 2>&1
        echo "bwd pytest rc=$?"; tail -3 "$D/pytest.txt"
        timeout "${BWD_S:-200}" python3 tools/fa3_bwd_check_bench.py --out "$D" > "$D/bench.txt" 2>&1
        echo "bwd bench rc=$?"; grep -v "^{" "$D/bench.txt" | grep -v -i warn | tail -24 ;;
    bench)
        timeout "${BENCH_S:-300}" python3 -m pytest -p no:cacheprovider -m benchmark_only --benchmark-enable \
            --benchmark-json="$D/pytest_bench.json" --benchmark-group-by=group --benchmark-columns=median,iqr,rounds \
            ${BENCH_K:+-k "$BENCH_K"} tests/kernels/test_cuda_bench.py > "$D/bench.txt" 2>&1
        echo "bench rc=$?"; grep -E "passed|failed|skipped|error" "$D/bench.txt" | tail -3 ;;
    conf|rerun)
        I=${CONF_IMPLS:-cuda-fa3 cuda-fa3-fp8}; K=${CONF_K:-}
        [ $step = rerun ] && { I=${RERUN_IMPLS:?}; K=${RERUN_K:?}; }
        # shellcheck disable=SC2086
        timeout "${CONF_S:-300}" python3 -m attention_conformance run --profile gpu --device cuda --impl $I \
            ${K:+-k "$K"} --report-dir "$D/report" --workers "${WORKERS:-6}" --timeout 120 > "$D/conformance.txt" 2>&1
        echo "$step rc=$?"; tail -3 "$D/conformance.txt" ;;
    ncu)
        for kd in ${NCU_KERNELS:-bwd fwd fp8}; do
          k=${kd%%:*}; ds=${NCU_D:-128}; [ "$kd" != "$k" ] && ds=${kd#*:}
          for dd in $ds; do
            kn=fa3_${k}_kernel; [ $k = fp8 ] && kn=fa3_fp8_fwd_kernel
            [ $k = fa4 ] && kn=ForwardSm90; [ $k = fa4bwd ] && kn=BackwardSm90
            R=$D/${k}_d$dd
            timeout "${NCU_S:-150}" ncu --clock-control none --set full --import-source no -k "regex:$kn" \
                --launch-skip 1 --launch-count 1 -f -o "$R" \
                python3 tools/fa3_profile_case.py --kernel $k --d "$dd" ${NCU_VARIANT:-} > "${R}_ncu.txt" 2>&1
            echo "ncu $k d=$dd rc=$?"; tail -1 "${R}_ncu.txt"
            ncu -i "$R.ncu-rep" --page details > "${R}_details.txt" 2>&1
            ncu -i "$R.ncu-rep" --page source --csv --print-source sass > "${R}_sass.csv" 2>&1
            grep -E "Duration|Compute \(SM\) Throughput|Issue Slots Busy|Warp Cycles Per Issued" "${R}_details.txt" | head -4
            python3 tools/ncu_sass_stalls.py "${R}_sass.csv" --top 12 --regions > "${R}_stalls.txt" 2>&1 && head -14 "${R}_stalls.txt"
          done
        done ;;
    *) echo "unknown step $step" ;;
    esac
    mark "end $step"
    tar czf "$OUT/$step.tgz" -C "$OUT" "$step" && rm -rf "$D"
done
kill $SMI 2>/dev/null
true
